#pragma once
// Setup steps whose outcome every rank must share.
#include <bmtrain/bmtrain.hpp>

#include <exception>
#include <stdexcept>
#include <string>

namespace bmt_train {

// Bad input found during setup, already agreed by every rank: exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs `setup` on every rank and agrees on the outcome: if any rank failed, every rank throws
// UsageError with the lowest failing rank's message, so no rank waits in a collective for a peer
// that gave up. Ranks may fail differently (MPMD launches give them different arguments; one rank
// may not see a file), which is why the message comes from one rank.
template <class F>
void agreed(F&& setup) {
  std::string error;
  try {
    setup();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "unknown error";
  }
  auto& ctx = bmt::context();
  const int world = ctx.topology().world_size, rank = ctx.topology().rank;
  int failed = error.empty() ? world : rank;
  int first = 0;
  BMT_MPI_CHECK(MPI_Allreduce(&failed, &first, 1, MPI_INT, MPI_MIN, ctx.mpi_comm()));
  if (first == world) return;
  int length = static_cast<int>(error.size());
  BMT_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, first, ctx.mpi_comm()));
  error.resize(static_cast<std::size_t>(length));
  BMT_MPI_CHECK(MPI_Bcast(error.data(), length, MPI_CHAR, first, ctx.mpi_comm()));
  // Errors the library already agreed on name their rank themselves.
  if (world > 1 && error.find(" (on rank ") == std::string::npos)
    error += " (on rank " + std::to_string(first) + " of " + std::to_string(world) + ")";
  throw UsageError(error);
}

}  // namespace bmt_train
