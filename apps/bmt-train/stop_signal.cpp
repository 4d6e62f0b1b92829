#include "stop_signal.hpp"

#include <bmtrain/bmtrain.hpp>

#include <csignal>

namespace bmt_train {

namespace {

// Written by the handler, read by the loop: the one type a handler may write safely.
volatile std::sig_atomic_t received = 0;

extern "C" void note_stop_signal(int signal) { received = signal; }

struct sigaction previous_usr1, previous_term;

}  // namespace

StopSignal::StopSignal() {
  BMT_MPI_CHECK(MPI_Comm_dup(bmt::context().mpi_comm(), &comm_));
  received = 0;
  struct sigaction action {};
  action.sa_handler = note_stop_signal;
  sigemptyset(&action.sa_mask);
  // Interrupted system calls resume: the signal is acted on at the next step boundary, not in the
  // middle of a read or a collective.
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &action, &previous_usr1);
  ::sigaction(SIGTERM, &action, &previous_term);
}

StopSignal::~StopSignal() {
  ::sigaction(SIGUSR1, &previous_usr1, nullptr);
  ::sigaction(SIGTERM, &previous_term, nullptr);
  // Every rank started the last question, so it completes.
  if (asked_ != MPI_REQUEST_NULL) MPI_Wait(&asked_, MPI_STATUS_IGNORE);
  MPI_Comm_free(&comm_);
}

bool StopSignal::agreed() {
  if (signal_ != 0) return true;
  // The answer to the question asked at the last boundary: a step long since done everywhere, so
  // the wait is not a rendezvous of the ranks' hosts in the middle of the training loop.
  if (asked_ != MPI_REQUEST_NULL) {
    BMT_MPI_CHECK(MPI_Wait(&asked_, MPI_STATUS_IGNORE));
    if (answer_ != 0) {
      signal_ = answer_;
      return true;
    }
  }
  // The signal's number, so that every rank can name it (the larger, if ranks got different ones).
  mine_ = received;
  BMT_MPI_CHECK(MPI_Iallreduce(&mine_, &answer_, 1, MPI_INT, MPI_MAX, comm_, &asked_));
  return false;
}

const char* StopSignal::name() const { return signal_ == SIGUSR1 ? "SIGUSR1" : "SIGTERM"; }

}  // namespace bmt_train
