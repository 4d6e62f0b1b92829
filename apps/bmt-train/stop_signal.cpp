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
  MPI_Comm_free(&comm_);
}

bool StopSignal::agreed() {
  if (signal_ != 0) return true;
  // The signal's number, so that every rank can name it (the larger, if ranks got different ones).
  const int mine = received;
  BMT_MPI_CHECK(MPI_Allreduce(&mine, &signal_, 1, MPI_INT, MPI_MAX, comm_));
  return signal_ != 0;
}

const char* StopSignal::name() const { return signal_ == SIGUSR1 ? "SIGUSR1" : "SIGTERM"; }

}  // namespace bmt_train
