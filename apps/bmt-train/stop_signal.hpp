#pragma once
// Preemption and time limits: a scheduler asks a job to stop with SIGUSR1 (Slurm's --signal, which
// mpirun and srun forward to every rank) or SIGTERM. The handler only sets a flag (all it may do
// safely); the training loop asks at each step boundary whether any rank saw the signal, in one
// small non-blocking all-reduce on a communicator of its own whose answer it reads at the next
// boundary, so that every rank stops after the same step (one after the signal is seen), saves
// there and exits with a status that says so.
#include <mpi.h>

#include <cstdint>

namespace bmt_train {

// Exit statuses of a run stopped by SIGUSR1 or SIGTERM (examples/slurm/train.sbatch requeues on
// kStoppedSaved): with a checkpoint of the step it stopped after (EX_TEMPFAIL of sysexits.h: try
// again), and without one (no --save: nothing to continue from).
constexpr int kStoppedSaved = 75;
constexpr int kStoppedUnsaved = 76;

class StopSignal {
 public:
  // Collective: call on every rank, after bmt::init_distributed. Installs the handlers of SIGUSR1
  // and SIGTERM; the destructor restores the ones before.
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // Collective, at a step boundary: whether any rank had received SIGUSR1 or SIGTERM by the
  // previous boundary. Once true, it stays true on every rank.
  bool agreed();
  // Once agreed() is true: the signal ("SIGUSR1" or "SIGTERM"), the same on every rank.
  const char* name() const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int signal_ = 0;  // agreed: the signal some rank received
  int mine_ = 0, answer_ = 0;  // the question in flight: this rank's signal, and the largest
  MPI_Request asked_ = MPI_REQUEST_NULL;
};

}  // namespace bmt_train
