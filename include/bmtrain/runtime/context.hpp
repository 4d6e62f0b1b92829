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
#include <vector>

#include "bmtrain/runtime/communicator.hpp"
#include "bmtrain/runtime/mesh.hpp"
#include "bmtrain/runtime/stream.hpp"

namespace bmt {

struct InitOptions {
  std::uint64_t seed = 0;
  // Device to use; -1 picks local_rank % (number of visible devices).
  int device = -1;
  // The process mesh (bmtrain/runtime/mesh.hpp): ranks per tensor-parallel group, and whether
  // ZeRO-3 shards over the whole data-parallel group or within each node (hybrid sharding).
  int tp_size = 1;
  ShardGroup shard_group = ShardGroup::world;
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
  const Mesh& mesh() const { return mesh_; }
  std::uint64_t seed() const { return seed_; }

  // Device-buffer communicators (NCCL on the CUDA build, MPI otherwise), each used on one stream.
  Communicator& world_comm() { return *world_comm_; }     // the world, on the compute stream
  Communicator& tp_comm() { return *tp_comm_; }           // the tensor-parallel group, on the compute stream
  Communicator& shard_comm() { return *shard_comm_; }     // the shard group, on the compute stream
  Communicator& gather_comm() { return *gather_comm_; }   // the shard group, on the gather stream
  Communicator& scatter_comm() { return *scatter_comm_; } // the shard group, on the scatter stream
  // The replica group (node sharding's copies of one shard), on the scatter stream; only with
  // mesh().shard_group == ShardGroup::node.
  Communicator& replica_comm();
  // Host-buffer communicator (always MPI) over the world, used from the calling thread.
  Communicator& host_comm() { return *host_comm_; }
  MPI_Comm mpi_comm() const { return mpi_world_; }
  // The mesh's groups as MPI communicators, for host-side agreement within a group.
  MPI_Comm mpi_tp_comm() const { return mpi_tp_; }
  MPI_Comm mpi_dp_comm() const { return mpi_dp_; }
  MPI_Comm mpi_shard_comm() const { return mpi_shard_; }

  Stream& compute_stream() { return *compute_; }
  Stream& gather_stream() { return *gather_; }
  Stream& scatter_stream() { return *scatter_; }

 private:
  friend const Context& init_distributed(int*, char***, const InitOptions&);
  friend void finalize();
  Topology topology_;
  Mesh mesh_;
  std::uint64_t seed_ = 0;
  MPI_Comm mpi_world_ = MPI_COMM_NULL;
  MPI_Comm mpi_tp_ = MPI_COMM_NULL, mpi_dp_ = MPI_COMM_NULL, mpi_shard_ = MPI_COMM_NULL,
           mpi_replica_ = MPI_COMM_NULL;
  bool owns_mpi_ = false;
  bool owns_kokkos_ = false;
  std::unique_ptr<Stream> compute_, gather_, scatter_;
  // Owned communicators; a group that is the whole world on the compute stream shares world_comm_.
  std::vector<std::unique_ptr<Communicator>> owned_comms_;
  Communicator *world_comm_ = nullptr, *tp_comm_ = nullptr, *shard_comm_ = nullptr, *gather_comm_ = nullptr,
               *scatter_comm_ = nullptr, *replica_comm_ = nullptr, *host_comm_ = nullptr;
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
// This rank's place in the mesh (context().mesh()).
int tp_rank();
int tp_size();
int dp_rank();
int dp_size();
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
