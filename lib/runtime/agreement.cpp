#include "bmtrain/runtime/agreement.hpp"

#include <exception>
#include <limits>
#include <new>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt {

int lowest_rank_where(MPI_Comm comm, bool mine) {
  comm = comm_or_world(comm);
  int rank = 0, size = 1;
  BMT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  BMT_MPI_CHECK(MPI_Comm_size(comm, &size));
  const int candidate = mine ? rank : size;
  int lowest = size;
  BMT_MPI_CHECK(MPI_Allreduce(&candidate, &lowest, 1, MPI_INT, MPI_MIN, comm));
  return lowest;
}

void broadcast_text(MPI_Comm comm, std::string& text, int root) {
  comm = comm_or_world(comm);
  long long length = static_cast<long long>(text.size());
  BMT_MPI_CHECK(MPI_Bcast(&length, 1, MPI_LONG_LONG, root, comm));
  BMT_REQUIRE(length <= std::numeric_limits<int>::max(),
              "broadcast_text: expected at most 2^31 - 1 bytes (one MPI call), found " << length);
  text.resize(static_cast<std::size_t>(length));
  if (length > 0) BMT_MPI_CHECK(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, root, comm));
}

std::string agreed_error(MPI_Comm comm, const std::string& error) {
  comm = comm_or_world(comm);
  int size = 1;
  BMT_MPI_CHECK(MPI_Comm_size(comm, &size));
  const int first = lowest_rank_where(comm, !error.empty());
  if (first == size) return {};
  // The failing rank's message, so that every rank reports the actual cause.
  std::string message = error;
  broadcast_text(comm, message, first);
  if (message.find(" (on rank ") == std::string::npos)
    message += " (on rank " + std::to_string(first) + " of " + std::to_string(size) + ")";
  return message;
}

void agree_on_errors(MPI_Comm comm, const std::string& error) {
  const std::string message = agreed_error(comm, error);
  if (!message.empty()) throw Error(message);
}

void run_on_every_rank(MPI_Comm comm, const std::function<void()>& step) { agree_on_errors(comm, error_of(step)); }

void run_on_root(MPI_Comm comm, const std::function<void()>& step, int root) {
  comm = comm_or_world(comm);
  int rank = 0;
  BMT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  agree_on_errors(comm, rank == root ? error_of(step) : std::string());
}

std::string error_of(const std::function<void()>& step) {
  try {
    step();
  } catch (const std::bad_alloc&) {
    return kOutOfHostMemory;
  } catch (const std::exception& e) {
    std::string what = e.what();
    return what.empty() ? "unknown error" : what;
  } catch (...) {
    return "unknown error (exception of unknown type)";
  }
  return {};
}

}  // namespace bmt
