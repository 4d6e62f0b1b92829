#pragma once
// Error policy. Misuse (wrong shapes, calls before init, bad files) throws bmt::Error with a message
// that names what was expected and what was found. A failure that leaves a rank unable to take part
// in collectives (an MPI, NCCL or CUDA error) ends the whole job through bmt::fatal, so that no rank
// is left waiting in a collective for a peer that is gone.
#include <sstream>
#include <stdexcept>
#include <string>

namespace bmt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "host:rank" of this process, or "host" before init.
std::string where();

// Prints the message with host, rank and source location, then aborts every rank of the job.
[[noreturn]] void fatal(const std::string& message, const char* file, int line);

namespace detail {
[[noreturn]] void mpi_failed(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_error(const std::string& message);
}  // namespace detail

}  // namespace bmt

// Throws bmt::Error when `cond` is false; `message` is a stream expression:
//   BMT_REQUIRE(n == m, "all_gather: expected " << n << " elements, found " << m);
#define BMT_REQUIRE(cond, message)                          \
  do {                                                      \
    if (!(cond)) {                                          \
      std::ostringstream bmt_require_os_;                   \
      bmt_require_os_ << message;                           \
      ::bmt::detail::throw_error(bmt_require_os_.str());    \
    }                                                       \
  } while (0)

#define BMT_FATAL(message)                                  \
  do {                                                      \
    std::ostringstream bmt_fatal_os_;                       \
    bmt_fatal_os_ << message;                               \
    ::bmt::fatal(bmt_fatal_os_.str(), __FILE__, __LINE__);  \
  } while (0)

#define BMT_MPI_CHECK(call)                                             \
  do {                                                                  \
    int bmt_mpi_rc_ = (call);                                           \
    if (bmt_mpi_rc_ != 0) ::bmt::detail::mpi_failed(bmt_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)
