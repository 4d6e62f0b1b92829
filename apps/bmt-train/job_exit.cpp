#include "job_exit.hpp"

#include <bmtrain/bmtrain.hpp>

#include <chrono>
#include <cstdio>
#include <thread>

namespace bmt_train {

JobExit::JobExit() { BMT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_)); }

int JobExit::leave(int code, const std::string& error, double patience_s) {
  int rank = 0, size = 1;
  BMT_MPI_CHECK(MPI_Comm_rank(comm_, &rank));
  BMT_MPI_CHECK(MPI_Comm_size(comm_, &size));
  int failed = code != 0 ? rank : size, first = size;
  MPI_Request request = MPI_REQUEST_NULL;
  BMT_MPI_CHECK(MPI_Iallreduce(&failed, &first, 1, MPI_INT, MPI_MIN, comm_, &request));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(patience_s);
  int done = 0;
  while (true) {
    BMT_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) break;
    // A rank that succeeded waits as long as it takes: the others are finishing, or will fail here.
    if (code != 0 && std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr,
                   "bmt-train: error on rank %d: %s\n"
                   "bmt-train: the other ranks did not stop within %.0f s (they are waiting for rank %d): ending the job\n",
                   rank, error.c_str(), patience_s, rank);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, code);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (rank == first && !error.empty()) {
    std::fprintf(stderr, "bmt-train: error: %s\n", error.c_str());
    std::fflush(stderr);
  }
  MPI_Comm_free(&comm_);
  return code;
}

}  // namespace bmt_train
