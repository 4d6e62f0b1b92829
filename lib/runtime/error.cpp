#include "bmtrain/runtime/error.hpp"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "bmtrain/runtime/context.hpp"
#include "runtime_internal.hpp"

namespace bmt {

std::string where() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string w = host;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    w += ":rank " + std::to_string(r);
  }
  return w;
}

void fatal(const std::string& message, const char* file, int line) {
  std::fprintf(stderr, "[bmtrain] fatal error on %s at %s:%d: %s\n", where().c_str(), file, line,
               message.c_str());
  std::fflush(stderr);
  detail::abort_job(1);
}

namespace detail {

void mpi_failed(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(code, text, &len);
  fatal(std::string(call) + " failed: " + text, file, line);
}

void throw_error(const std::string& message) { throw Error(message); }

void abort_job(int code) {
  abort_device_communicators();
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace detail
}  // namespace bmt
