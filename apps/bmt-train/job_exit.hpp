#pragma once
// How bmt-train's ranks end after an error. Most errors are agreed: every rank throws the same
// bmt::Error at the same point (setup steps run through bmt::run_on_every_rank, the io layer agrees
// on file-system failures), so every rank can finalize MPI and exit 2 with one message. An error
// seen by one rank alone is different: its peers are blocked in the next collective, waiting for
// it, and would never reach MPI_Finalize. JobExit tells the two apart with a non-blocking reduction
// on a communicator of its own: if every rank arrives within the patience, the job ends in order;
// if not, the failing rank prints its error and ends the whole job with MPI_Abort.
#include <mpi.h>

#include <string>

namespace bmt_train {

class JobExit {
 public:
  // Collective over MPI's world: call once on every rank, after MPI_Init (bmt-train starts the
  // runtime later, once its options are read).
  JobExit();
  JobExit(const JobExit&) = delete;
  JobExit& operator=(const JobExit&) = delete;

  // Every rank calls this once, before bmt::finalize, with the exit code it would return and the
  // message of its error ("" if none). The lowest failing rank prints its message. Returns the code
  // to exit with, unless this rank failed and the others did not arrive within `patience_s`: then it
  // ends the job through MPI_Abort with `code`.
  int leave(int code, const std::string& error, double patience_s = 20.0);

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace bmt_train
