#pragma once
// Runtime pieces shared between its own source files, not part of the public API.

namespace bmt::detail {

// Ends every rank: aborts device communicators (so no kernel waits on a dead peer), then MPI_Abort.
[[noreturn]] void abort_job(int code);
// Aborts the NCCL communicators that are alive (no-op on the host build).
void abort_device_communicators();
// Creates / frees the MPI reduction operators for 16-bit floats.
void create_mpi_ops();
void free_mpi_ops();

}  // namespace bmt::detail
