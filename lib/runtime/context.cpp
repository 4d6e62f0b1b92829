#include "bmtrain/runtime/context.hpp"

#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/runtime/environment.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/logging.hpp"
#include "runtime_internal.hpp"

#ifdef BMT_ENABLE_CUDA
#include "bmtrain/runtime/cuda_check.hpp"
#endif

namespace bmt {

namespace {

std::unique_ptr<Context> g_context;
std::vector<std::function<void()>>& teardowns() {
  static std::vector<std::function<void()>> list;
  return list;
}
std::terminate_handler g_previous_terminate = nullptr;

// An exception that escapes on one rank must not leave the others waiting in a collective.
void terminate_job() {
  std::string what = "terminate called";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = std::string("uncaught exception: ") + ex.what();
    } catch (...) {
      what = "uncaught exception of unknown type";
    }
  }
  std::fprintf(stderr, "[bmtrain] fatal error on %s: %s; ending the job\n", where().c_str(), what.c_str());
  std::fflush(stderr);
  detail::abort_job(1);
}

std::string host_name() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return host;
}

// `test_node_size` > 0 (BMT_TEST_NODE_SIZE) makes consecutive groups of that many ranks the nodes.
void read_topology(MPI_Comm world, int test_node_size, Topology& t) {
  BMT_MPI_CHECK(MPI_Comm_rank(world, &t.rank));
  BMT_MPI_CHECK(MPI_Comm_size(world, &t.world_size));
  MPI_Comm local;
  if (test_node_size > 0)
    BMT_MPI_CHECK(MPI_Comm_split(world, t.rank / test_node_size, t.rank, &local));
  else
    BMT_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, t.rank, MPI_INFO_NULL, &local));
  BMT_MPI_CHECK(MPI_Comm_rank(local, &t.local_rank));
  BMT_MPI_CHECK(MPI_Comm_size(local, &t.local_size));
  // Node index: the rank of this node's leader among all leaders, shared with the node.
  MPI_Comm leaders;
  BMT_MPI_CHECK(MPI_Comm_split(world, t.local_rank == 0 ? 0 : MPI_UNDEFINED, t.rank, &leaders));
  int node_info[2] = {0, 1};
  if (leaders != MPI_COMM_NULL) {
    BMT_MPI_CHECK(MPI_Comm_rank(leaders, &node_info[0]));
    BMT_MPI_CHECK(MPI_Comm_size(leaders, &node_info[1]));
    BMT_MPI_CHECK(MPI_Comm_free(&leaders));
  }
  BMT_MPI_CHECK(MPI_Bcast(node_info, 2, MPI_INT, 0, local));
  BMT_MPI_CHECK(MPI_Comm_free(&local));
  t.node = node_info[0];
  t.node_count = node_info[1];
  t.hostname = host_name();
}

int choose_device(const Topology& t, int requested) {
#ifdef BMT_ENABLE_CUDA
  int count = 0;
  BMT_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count == 0) BMT_FATAL("the CUDA build found no visible GPU (CUDA_VISIBLE_DEVICES='"
                            << (std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "")
                            << "')");
  if (requested >= 0) {
    BMT_REQUIRE(requested < count, "InitOptions::device: expected a device in [0, " << count
                                       << "), found " << requested);
    return requested;
  }
  // With one GPU per rank visible (a scheduler's CUDA_VISIBLE_DEVICES) this is device 0.
  return t.local_rank % count;
#else
  (void)t;
  (void)requested;
  return -1;
#endif
}

#ifdef BMT_ENABLE_CUDA
// NCCL refuses a communicator with two ranks on one GPU ("invalid usage"). Every rank learns every
// rank's (node, GPU UUID), so each finds the same clash and names the ranks, the host and the fix.
void require_one_rank_per_gpu(MPI_Comm world, const Topology& t) {
  cudaDeviceProp prop{};
  BMT_CUDA_CHECK(cudaGetDeviceProperties(&prop, t.device));
  struct Seat {
    int node;
    char uuid[16];
  };
  Seat mine{};
  mine.node = t.node;
  std::memcpy(mine.uuid, prop.uuid.bytes, sizeof mine.uuid);
  std::vector<Seat> seats(static_cast<std::size_t>(t.world_size));
  BMT_MPI_CHECK(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, seats.data(), sizeof mine, MPI_BYTE, world));
  for (int other = 0; other < t.world_size; ++other) {
    const Seat& s = seats[static_cast<std::size_t>(other)];
    if (other == t.rank || s.node != mine.node || std::memcmp(s.uuid, mine.uuid, sizeof mine.uuid) != 0) continue;
    char bus[32];
    std::snprintf(bus, sizeof bus, "%04x:%02x:%02x", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    BMT_FATAL("ranks " << std::min(other, t.rank) << " and " << std::max(other, t.rank) << " on " << t.hostname
                       << " both use GPU " << bus << ": expected one GPU per rank (NCCL needs it), found "
                       << t.local_size << " ranks on this node sharing fewer GPUs; start at most one rank per GPU, "
                       << "or give each rank its own GPU with CUDA_VISIBLE_DEVICES");
  }
}
#endif

void init_kokkos(int device, bool& owns) {
  if (Kokkos::is_initialized()) {
    owns = false;
    return;
  }
#if KOKKOS_VERSION >= 30700
  Kokkos::InitializationSettings settings;
  if (device >= 0) settings.set_device_id(device);
  settings.set_disable_warnings(true);
  Kokkos::initialize(settings);
#else
  Kokkos::InitArguments args;
  args.device_id = device;
  args.disable_warnings = true;
  Kokkos::initialize(args);
#endif
  owns = true;
}

}  // namespace

const Context& init_distributed(int* argc, char*** argv, const InitOptions& options) {
  BMT_REQUIRE(!g_context, "init_distributed: expected one call per process, found a second call "
                          "(call bmt::finalize() first to start again)");
  auto ctx = std::make_unique<Context>();
  int initialized = 0, finalized = 0;
  BMT_MPI_CHECK(MPI_Initialized(&initialized));
  BMT_MPI_CHECK(MPI_Finalized(&finalized));
  // MPI reports itself initialized after MPI_Finalize too, and cannot start again.
  BMT_REQUIRE(!finalized, "init_distributed: expected MPI to be usable, found it already finalized "
                          "(MPI cannot restart within one process; initialize the runtime once)");
  if (!initialized) {
    int provided = 0;
    BMT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    ctx->owns_mpi_ = true;
  }
  int provided = 0;
  BMT_MPI_CHECK(MPI_Query_thread(&provided));
  BMT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &ctx->mpi_world_));
  BMT_MPI_CHECK(MPI_Comm_set_errhandler(ctx->mpi_world_, MPI_ERRORS_RETURN));
  // The environment's options, read once here, and the mesh. A bad value or mesh size on any rank
  // stops every rank, which leave MPI as they found it, so that a program can report the error.
  const std::string environment_error = agreed_error(ctx->mpi_world_, error_of([] { environment(); }));
  std::string mesh_error = environment_error;
  if (environment_error.empty()) {
    read_topology(ctx->mpi_world_, environment().test_node_size, ctx->topology_);
    std::vector<int> node_of_rank(static_cast<std::size_t>(ctx->topology_.world_size));
    BMT_MPI_CHECK(MPI_Allgather(&ctx->topology_.node, 1, MPI_INT, node_of_rank.data(), 1, MPI_INT, ctx->mpi_world_));
    // Every rank plans the same mesh from the same facts, so every rank reaches the same verdict.
    mesh_error = error_of([&] {
      ctx->mesh_ = plan_mesh(ctx->topology_.rank, node_of_rank, options.tp_size, options.shard_group);
    });
  }
  if (!mesh_error.empty()) {
    MPI_Comm_free(&ctx->mpi_world_);
    if (ctx->owns_mpi_) MPI_Finalize();
    throw Error(mesh_error);
  }
  const Mesh& mesh = ctx->mesh_;
  const int rank = ctx->topology_.rank;
  BMT_MPI_CHECK(MPI_Comm_split(ctx->mpi_world_, mesh.tp_color, rank, &ctx->mpi_tp_));
  BMT_MPI_CHECK(MPI_Comm_split(ctx->mpi_world_, mesh.dp_color, rank, &ctx->mpi_dp_));
  BMT_MPI_CHECK(MPI_Comm_split(ctx->mpi_world_, mesh.shard_color, rank, &ctx->mpi_shard_));
  BMT_MPI_CHECK(MPI_Comm_split(ctx->mpi_world_, mesh.replica_color, rank, &ctx->mpi_replica_));
  if (provided < MPI_THREAD_MULTIPLE && ctx->topology_.rank == 0)
    warn("MPI provides thread level ", provided, " below MPI_THREAD_MULTIPLE; "
         "communication streams will take turns calling MPI (non-blocking calls, polled); "
         "call MPI directly only while the streams are idle");
  g_previous_terminate = std::set_terminate(terminate_job);

  ctx->topology_.device = choose_device(ctx->topology_, options.device);
#ifdef BMT_ENABLE_CUDA
  BMT_CUDA_CHECK(cudaSetDevice(ctx->topology_.device));
  require_one_rank_per_gpu(ctx->mpi_world_, ctx->topology_);
#endif
  init_kokkos(ctx->topology_.device, ctx->owns_kokkos_);
  ctx->seed_ = options.seed;
  detail::create_mpi_ops();

  ctx->compute_ = std::make_unique<Stream>(Stream::Kind::compute, "compute");
  ctx->gather_ = std::make_unique<Stream>(Stream::Kind::communication, "gather");
  ctx->scatter_ = std::make_unique<Stream>(Stream::Kind::communication, "scatter");
  const auto device_comm = [&](MPI_Comm group) {
#ifdef BMT_ENABLE_CUDA
    ctx->owned_comms_.push_back(make_nccl_communicator(group));
#else
    ctx->owned_comms_.push_back(make_mpi_communicator(group));
#endif
    return ctx->owned_comms_.back().get();
  };
  const int world = ctx->topology_.world_size;
  ctx->world_comm_ = device_comm(ctx->mpi_world_);
  // Groups the size of the world are the world: on the compute stream they share its communicator.
  ctx->tp_comm_ = mesh.tp_size == world ? ctx->world_comm_ : device_comm(ctx->mpi_tp_);
  ctx->shard_comm_ = mesh.shard_size == world ? ctx->world_comm_ : device_comm(ctx->mpi_shard_);
  ctx->gather_comm_ = device_comm(ctx->mpi_shard_);
  ctx->scatter_comm_ = device_comm(ctx->mpi_shard_);
  if (mesh.shard_group == ShardGroup::node) ctx->replica_comm_ = device_comm(ctx->mpi_replica_);
  ctx->owned_comms_.push_back(make_mpi_communicator(ctx->mpi_world_));
  ctx->host_comm_ = ctx->owned_comms_.back().get();
  g_context = std::move(ctx);
  return *g_context;
}

const Context& init_distributed(const InitOptions& options) {
  return init_distributed(nullptr, nullptr, options);
}

void finalize() {
  if (!g_context) return;
  g_context->compute_->synchronize();
  g_context->gather_->synchronize();
  g_context->scatter_->synchronize();
  auto& list = teardowns();
  while (!list.empty()) {
    auto teardown = std::move(list.back());
    list.pop_back();
    teardown();
  }
  auto ctx = std::move(g_context);
  while (!ctx->owned_comms_.empty()) ctx->owned_comms_.pop_back();
  ctx->scatter_.reset();
  ctx->gather_.reset();
  ctx->compute_.reset();
  detail::free_mpi_ops();
  std::set_terminate(g_previous_terminate);
  if (ctx->owns_kokkos_) Kokkos::finalize();
  for (MPI_Comm* group : {&ctx->mpi_tp_, &ctx->mpi_dp_, &ctx->mpi_shard_, &ctx->mpi_replica_}) MPI_Comm_free(group);
  MPI_Comm_free(&ctx->mpi_world_);
  if (ctx->owns_mpi_) MPI_Finalize();
}

void at_finalize(std::function<void()> teardown) { teardowns().push_back(std::move(teardown)); }

bool is_initialized() { return static_cast<bool>(g_context); }

Context& context() {
  BMT_REQUIRE(g_context, "the bmtrain runtime is not initialized: call bmt::init_distributed() first");
  return *g_context;
}

MPI_Comm comm_or_world(MPI_Comm comm) { return comm == MPI_COMM_NULL ? context().mpi_comm() : comm; }

Communicator& Context::replica_comm() {
  BMT_REQUIRE(replica_comm_, "replica_comm: expected a runtime started with shard_group node, found shard_group "
                                 << shard_group_name(mesh_.shard_group));
  return *replica_comm_;
}

int rank() { return context().topology().rank; }
int tp_rank() { return context().mesh().tp_rank; }
int tp_size() { return context().mesh().tp_size; }
int dp_rank() { return context().mesh().dp_rank; }
int dp_size() { return context().mesh().dp_size; }
int world_size() { return context().topology().world_size; }
int local_rank() { return context().topology().local_rank; }
int node_count() { return context().topology().node_count; }
std::uint64_t seed() { return context().seed(); }

void synchronize() {
  Context& c = context();
  c.compute_stream().synchronize();
  c.gather_stream().synchronize();
  c.scatter_stream().synchronize();
  BMT_MPI_CHECK(MPI_Barrier(c.mpi_comm()));
}

}  // namespace bmt
