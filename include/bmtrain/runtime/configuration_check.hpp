#pragma once
// Ranks that disagree about what they run: one rank started with another model size, another
// option, or another build of the library. Left alone, such a job fails late and obscurely (a
// collective of the wrong size, a hang, silently different numbers). A program describes what every
// rank must share and checks it once at startup:
//
//   bmt::agree_on_configuration(bmt::build_description() + "; layers=" + std::to_string(layers));
//
// Descriptions are free text; written as `key=value` items separated by "; " or newlines, the error
// names the first item that differs.
#include <mpi.h>

#include <string>

namespace bmt {

// This process's library: version, backend, Kokkos and MPI library versions, compiler, build type
// and sanitizers, as `key=value` items separated by "; ".
std::string build_description();

// Collective over `comm` (MPI_COMM_NULL: the runtime's world). Returns if every rank passed the same
// description (one MPI_Allreduce); otherwise every rank throws the same bmt::Error (agreement.hpp)
// naming the first item that differs and, "(on rank N of M)", the lowest rank that differs from
// rank 0.
void agree_on_configuration(const std::string& description, MPI_Comm comm = MPI_COMM_NULL);

}  // namespace bmt
