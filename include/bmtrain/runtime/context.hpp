#pragma once
// The distributed runtime: MPI bootstrap, topology, device choice, communicators and streams.
//
//   int main(int argc, char** argv) {
//     bmt::DistributedGuard guard(&argc, &argv);  // seed and device: bmt::InitOptions
//     bmt::print_rank("world size ", bmt::world_size());
//   }
//
// Works under mpirun/mpiexec, under Slurm's srun and as a plain process (world size 1): topology
// comes from MPI, never from launcher-specific environment variables.
#include <cstdint>
#include <functional>
#include <mpi.h>
#include <string>

#include "bmtrain/runtime/communicator.hpp"
#include "bmtrain/runtime/stream.hpp"

namespace bmt {

struct InitOptions {
  std::uint64_t seed = 0;
  // Device to use; -1 picks local_rank % (number of visible devices).
  int device = -1;
};

struct Topology {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // rank among the processes of this node
  int local_size = 1;
  int node = 0;        // index of this node
  int node_count = 1;
  int device = -1;     // CUDA device ordinal, -1 on the host build
  std::string hostname;
};

class Context {
 public:
  const Topology& topology() const { return topology_; }
  std::uint64_t seed() const { return seed_; }

  // Device-buffer communicators (NCCL on the CUDA build, MPI otherwise), one per stream.
  Communicator& world_comm() { return *world_comm_; }     // used on the compute stream
  Communicator& gather_comm() { return *gather_comm_; }   // used on the gather stream
  Communicator& scatter_comm() { return *scatter_comm_; } // used on the scatter stream
  // Host-buffer communicator (always MPI), used from the calling thread.
  Communicator& host_comm() { return *host_comm_; }
  MPI_Comm mpi_comm() const { return mpi_world_; }

  Stream& compute_stream() { return *compute_; }
  Stream& gather_stream() { return *gather_; }
  Stream& scatter_stream() { return *scatter_; }

 private:
  friend const Context& init_distributed(int*, char***, const InitOptions&);
  friend void finalize();
  Topology topology_;
  std::uint64_t seed_ = 0;
  MPI_Comm mpi_world_ = MPI_COMM_NULL;
  bool owns_mpi_ = false;
  bool owns_kokkos_ = false;
  std::unique_ptr<Stream> compute_, gather_, scatter_;
  std::unique_ptr<Communicator> world_comm_, gather_comm_, scatter_comm_, host_comm_;
};

// Initializes MPI (MPI_THREAD_MULTIPLE: communication streams call MPI from their own threads) if
// the program has not, Kokkos on the chosen device, the communicators and the streams.
const Context& init_distributed(int* argc, char*** argv, const InitOptions& options = {});
const Context& init_distributed(const InitOptions& options = {});
// Tears down in reverse order; finalizes MPI and Kokkos only if init_distributed started them.
void finalize();
// Registers teardown for a layer above the runtime (caches of device memory, say); these run,
// last registered first, at the start of finalize(), while Kokkos and the device are still up.
void at_finalize(std::function<void()> teardown);
bool is_initialized();
// The context; throws bmt::Error if init_distributed has not been called.
Context& context();
// `comm`, or the runtime's world (context().mpi_comm()) for MPI_COMM_NULL: the communicator of a
// collective call that takes an optional one.
MPI_Comm comm_or_world(MPI_Comm comm);

int rank();
int world_size();
int local_rank();
int node_count();
std::uint64_t seed();
// Waits until every stream of this rank is idle, then for every rank (a barrier).
void synchronize();

class DistributedGuard {
 public:
  DistributedGuard(int* argc, char*** argv, const InitOptions& options = {}) {
    init_distributed(argc, argv, options);
  }
  explicit DistributedGuard(const InitOptions& options = {}) { init_distributed(options); }
  ~DistributedGuard() { finalize(); }
  DistributedGuard(const DistributedGuard&) = delete;
  DistributedGuard& operator=(const DistributedGuard&) = delete;
};

}  // namespace bmt
