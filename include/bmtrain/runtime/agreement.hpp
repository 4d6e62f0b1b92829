#pragma once
// Agreement across ranks on an outcome. A step often fails on some ranks only: one rank's write
// hits a full disk, only rank 0 renames a directory, one rank of an MPMD launch was given a bad
// flag or a different environment. If that rank threw on its own, the others would wait forever in
// the next collective. Such a step passes each rank's outcome through agree_on_errors before going
// on, so that every rank throws the same bmt::Error at the same point, or none does:
//
//   bmt::run_on_every_rank(MPI_COMM_NULL, [&] { options = parse(argv); });
//
// Ranks may fail differently (different arguments, one rank cannot see a file), so the message is
// that of the lowest failing rank, followed by " (on rank N of M)".
//
// Every call here is collective over `comm`; MPI_COMM_NULL stands for the runtime's world
// (bmt::comm_or_world).
#include <mpi.h>

#include <functional>
#include <string>

namespace bmt {

// The lowest rank of `comm` that passes true, or the size of `comm` when none does.
int lowest_rank_where(MPI_Comm comm, bool mine);

// `text` as rank `root` holds it, on every rank.
void broadcast_text(MPI_Comm comm, std::string& text, int root);

// "" when every rank passes an empty `error`; otherwise the lowest failing rank's message followed by
// " (on rank N of M)", the same on every rank. A message that already names its rank that way (an
// agreement nested inside another) is passed on as it is.
std::string agreed_error(MPI_Comm comm, const std::string& error);

// Returns when every rank passes an empty `error`; otherwise every rank throws bmt::Error carrying
// agreed_error's message.
void agree_on_errors(MPI_Comm comm, const std::string& error);

// Runs `step` on every rank, then agrees on its outcome.
void run_on_every_rank(MPI_Comm comm, const std::function<void()>& step);

// Runs `step` on rank `root` only, then agrees on its outcome.
void run_on_root(MPI_Comm comm, const std::function<void()>& step, int root = 0);

// What error_of says of a std::bad_alloc, whose own what() says nothing a user can act on.
inline constexpr const char* kOutOfHostMemory =
    "out of memory: a host allocation failed (std::bad_alloc): expected the process's memory (or its "
    "limit, ulimit -v) to hold what it allocates, found it exhausted";

// Not collective: runs `step`, returning the message of the exception it throws ("" if none).
std::string error_of(const std::function<void()>& step);

}  // namespace bmt
