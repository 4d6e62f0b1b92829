#pragma once
// Agreement on failures across ranks. File-system work often fails on some ranks only (one rank's
// write hits a full disk; only rank 0 renames a directory). If that rank threw on its own, the
// others would wait forever in the next collective. Every collective io call therefore passes each
// rank's outcome through agree_on_errors before going on, so all ranks throw the same bmt::Error at
// the same point, or none does.
#include <mpi.h>

#include <functional>
#include <string>

namespace bmt::io {

// The communicator io calls use when given MPI_COMM_NULL: the runtime's world (bmt::context()).
MPI_Comm io_comm(MPI_Comm comm);

// Collective over `comm`. Returns if every rank passes an empty `error`; otherwise every rank throws
// bmt::Error carrying the message of the lowest failing rank and naming that rank.
void agree_on_errors(MPI_Comm comm, const std::string& error);

// Runs `step`, returning the message of a bmt::Error or std::exception it throws ("" if none).
std::string error_of(const std::function<void()>& step);

// Collective: runs `step` on rank `root` only, then agrees on its outcome.
void run_on_root(MPI_Comm comm, const std::function<void()>& step, int root = 0);

}  // namespace bmt::io
