#pragma once
// MPI-IO calls return errors (files use MPI_ERRORS_RETURN) that the io layer turns into agreed
// bmt::Errors rather than aborting the job: a full disk is a failed save, not a crashed run.
#include <mpi.h>

#include <string>

namespace bmt::io::detail {

inline std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

}  // namespace bmt::io::detail
