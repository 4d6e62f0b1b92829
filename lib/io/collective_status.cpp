#include "bmtrain/io/collective_status.hpp"

#include <climits>
#include <exception>
#include <vector>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt::io {

MPI_Comm io_comm(MPI_Comm comm) { return comm == MPI_COMM_NULL ? context().mpi_comm() : comm; }

void agree_on_errors(MPI_Comm comm, const std::string& error) {
  comm = io_comm(comm);
  int rank = 0, size = 1;
  BMT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  BMT_MPI_CHECK(MPI_Comm_size(comm, &size));
  const int mine = error.empty() ? INT_MAX : rank;
  int first_failed = INT_MAX;
  BMT_MPI_CHECK(MPI_Allreduce(&mine, &first_failed, 1, MPI_INT, MPI_MIN, comm));
  if (first_failed == INT_MAX) return;
  // The failing rank's message, so that every rank reports the actual cause.
  int length = rank == first_failed ? static_cast<int>(error.size()) : 0;
  BMT_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, first_failed, comm));
  std::vector<char> text(error.begin(), error.end());
  text.resize(static_cast<std::size_t>(length));
  if (length > 0) BMT_MPI_CHECK(MPI_Bcast(text.data(), length, MPI_CHAR, first_failed, comm));
  throw Error(std::string(text.begin(), text.end()) + " (on rank " + std::to_string(first_failed) + " of " +
              std::to_string(size) + ")");
}

std::string error_of(const std::function<void()>& step) {
  try {
    step();
  } catch (const std::exception& e) {
    std::string what = e.what();
    return what.empty() ? "unknown error" : what;
  } catch (...) {
    return "unknown error (exception of unknown type)";
  }
  return {};
}

void run_on_root(MPI_Comm comm, const std::function<void()>& step, int root) {
  comm = io_comm(comm);
  int rank = 0;
  BMT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  agree_on_errors(comm, rank == root ? error_of(step) : std::string());
}

}  // namespace bmt::io
