// Collective bandwidth: all_gather, reduce_scatter and all_reduce through bmt::Communicator, each
// next to the raw backend call at the same size over the same ranks (MPI on the host build, NCCL on
// the CUDA build), for each group of the process mesh that has more than one rank:
//   shard  the ZeRO-3 shard group's gather communicator on the gather stream (parameter gathers and
//          gradient reduce-scatters; the whole world unless --tp or --shard-group=node),
//   tp     the tensor-parallel group on the compute stream (with --tp=N): gather_tokens is its
//          all_gather, scatter_tokens its reduce_scatter, reduce_tp its all_reduce.
//
//   mpirun -np 4 bench_collectives [--tp=2] [--shard-group=world|node] [--max-bytes=64M]
//                                  [--min-bytes=1K] [--dtype=f32] [benchmark flags]
//
// Sizes go from --min-bytes to --max-bytes (or $BMT_BENCH_MAX_BYTES) by factors of 4; the default
// maximum is 64 MiB on the host build and 1 GiB on the CUDA build. Every rank runs the same
// sequence (every group of a kind at once); only rank 0 prints.
//
// Timing: each iteration starts at a world barrier and ends when the collective is complete on the
// rank; its time is the maximum over all ranks (MPI_Allreduce MAX), reported as manual time, so the
// numbers are those of the slowest group's slowest rank, and every rank's Google Benchmark sees the
// same times and so makes the same choice of iteration counts. Counters follow nccl-tests, with n the
// group's size: S is the whole array (the gathered output of all_gather, the input of
// reduce_scatter, the buffer of all_reduce),
//   algbw = S / time,   busbw = algbw * (n-1)/n (all_gather, reduce_scatter), algbw * 2(n-1)/n (all_reduce),
// and `wrong` counts result elements that differ from the expected values after the timed runs;
// the program exits with status 1 if any is wrong.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bmtrain/runtime/communicator.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/half.hpp"
#include "bmtrain/runtime/mesh.hpp"
#include "bmtrain/runtime/stream.hpp"

#ifdef BMT_ENABLE_CUDA
#include "bmtrain/runtime/cuda_check.hpp"
#endif

namespace {

enum class Collective { all_gather, reduce_scatter, all_reduce };
enum class Path { bmt, raw };

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_reduce: return "all_reduce";
  }
  return "?";
}

#ifdef BMT_ENABLE_CUDA
constexpr const char* kRawName = "nccl";
constexpr std::size_t kDefaultMaxBytes = std::size_t(1) << 30;
#else
constexpr const char* kRawName = "mpi";
constexpr std::size_t kDefaultMaxBytes = std::size_t(64) << 20;
#endif

struct Options {
  std::size_t min_bytes = 1024;
  std::size_t max_bytes = kDefaultMaxBytes;
  bmt::DType dtype = bmt::DType::f32;
  bmt::InitOptions mesh;  // tp_size and shard_group
};

// "4096", "4K", "64M", "1G" (binary multiples).
std::size_t parse_bytes(const std::string& text) {
  std::size_t end = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &end);
  } catch (const std::exception&) {
    end = std::string::npos;
  }
  BMT_REQUIRE(end != std::string::npos, "expected a size such as 4096, 64K, 16M or 1G, found '" << text << "'");
  const std::string unit = text.substr(end);
  if (unit.empty() || unit == "B") return v;
  if (unit == "K" || unit == "KiB") return v << 10;
  if (unit == "M" || unit == "MiB") return v << 20;
  if (unit == "G" || unit == "GiB") return v << 30;
  BMT_REQUIRE(false, "expected a size unit of K, M or G, found '" << unit << "' in '" << text << "'");
  return 0;
}

int parse_tp(const std::string& text) {
  std::size_t end = 0;
  int v = 0;
  try {
    v = std::stoi(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  BMT_REQUIRE(end == text.size() && v >= 1, "expected --tp=N with N a positive integer, found '" << text << "'");
  return v;
}

// Takes this program's own flags out of argv, leaving Google Benchmark's.
Options parse_options(int* argc, char** argv) {
  Options o;
  if (const char* env = std::getenv("BMT_BENCH_MAX_BYTES")) o.max_bytes = parse_bytes(env);
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) { return a.substr(std::strlen(flag)); };
    if (a.rfind("--max-bytes=", 0) == 0) o.max_bytes = parse_bytes(value("--max-bytes="));
    else if (a.rfind("--min-bytes=", 0) == 0) o.min_bytes = parse_bytes(value("--min-bytes="));
    else if (a.rfind("--dtype=", 0) == 0) o.dtype = bmt::parse_dtype(value("--dtype="));
    else if (a.rfind("--tp=", 0) == 0) o.mesh.tp_size = parse_tp(value("--tp="));
    else if (a.rfind("--shard-group=", 0) == 0)
      o.mesh.shard_group = bmt::parse_shard_group(value("--shard-group="), "--shard-group");
    else argv[kept++] = argv[i];
  }
  *argc = kept;
  BMT_REQUIRE(o.min_bytes > 0 && o.min_bytes <= o.max_bytes,
              "expected 0 < --min-bytes <= --max-bytes, found " << o.min_bytes << " and " << o.max_bytes);
  return o;
}

// Ranks other than 0 run every benchmark but report nothing.
class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

std::uint16_t encode16(bmt::DType t, float v) {
  return t == bmt::DType::bf16 ? bmt::bf16_t::from_float(v) : bmt::f16_t::from_float(v);
}

// Writes the small integer v at element i (exact in every dtype, so sums of them are checkable).
void store(bmt::DType t, unsigned char* p, std::size_t i, int v) {
  switch (t) {
    case bmt::DType::f32: { float x = static_cast<float>(v); std::memcpy(p + 4 * i, &x, 4); break; }
    case bmt::DType::bf16: case bmt::DType::f16: { std::uint16_t x = encode16(t, static_cast<float>(v)); std::memcpy(p + 2 * i, &x, 2); break; }
    case bmt::DType::i32: { std::int32_t x = v; std::memcpy(p + 4 * i, &x, 4); break; }
    case bmt::DType::i64: { std::int64_t x = v; std::memcpy(p + 8 * i, &x, 8); break; }
    case bmt::DType::u16: { std::uint16_t x = static_cast<std::uint16_t>(v); std::memcpy(p + 2 * i, &x, 2); break; }
    case bmt::DType::u8: p[i] = static_cast<std::uint8_t>(v); break;
  }
}

// A buffer in the memory space the device communicators use, with its host mirror.
struct Buffer {
  Kokkos::View<unsigned char*, Kokkos::DefaultExecutionSpace::memory_space> device;
  std::vector<unsigned char> host;
  explicit Buffer(std::size_t bytes)
      : device(Kokkos::view_alloc(Kokkos::WithoutInitializing, "bench buffer"), bytes), host(bytes) {}
  void* data() { return device.data(); }
  using HostView = Kokkos::View<unsigned char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  HostView mirror() { return HostView(host.data(), host.size()); }
  void upload() { Kokkos::deep_copy(device, mirror()); }
  void download() { Kokkos::deep_copy(mirror(), device); }
};

#ifdef BMT_ENABLE_CUDA
ncclDataType_t nccl_type(bmt::DType t) {
  switch (t) {
    case bmt::DType::f32: return ncclFloat32;
    case bmt::DType::bf16: return ncclBfloat16;
    case bmt::DType::f16: return ncclFloat16;
    case bmt::DType::i32: return ncclInt32;
    case bmt::DType::i64: return ncclInt64;
    case bmt::DType::u8: return ncclUint8;
    default: break;
  }
  BMT_REQUIRE(false, "NCCL carries f32, bf16, f16, i32, i64 and u8; found " << bmt::dtype_name(t));
  return ncclFloat32;
}
#endif

// One group of the mesh as the benchmarks see it: the runtime's communicator and stream for it, and
// what the raw path needs, created once: an MPI communicator of its own over the same ranks (so its
// traffic never matches the runtime's) and, on the CUDA build, an NCCL communicator and stream.
struct Group {
  std::string name;
  int size = 1, rank = 0;
  bmt::Communicator* comm = nullptr;
  bmt::Stream* stream = nullptr;
  MPI_Comm mpi = MPI_COMM_NULL;
#ifdef BMT_ENABLE_CUDA
  ncclComm_t nccl = nullptr;
  cudaStream_t raw_stream = nullptr;
#endif
  Group(std::string group_name, MPI_Comm members, bmt::Communicator& runtime_comm, bmt::Stream& runtime_stream)
      : name(std::move(group_name)), comm(&runtime_comm), stream(&runtime_stream) {
    BMT_MPI_CHECK(MPI_Comm_dup(members, &mpi));
    BMT_MPI_CHECK(MPI_Comm_size(mpi, &size));
    BMT_MPI_CHECK(MPI_Comm_rank(mpi, &rank));
#ifdef BMT_ENABLE_CUDA
    ncclUniqueId id;
    if (rank == 0) BMT_NCCL_CHECK(ncclGetUniqueId(&id));
    BMT_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi));
    BMT_NCCL_CHECK(ncclCommInitRank(&nccl, size, id, rank));
    BMT_CUDA_CHECK(cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking));
#endif
  }
  ~Group() {
#ifdef BMT_ENABLE_CUDA
    ncclCommDestroy(nccl);
    cudaStreamDestroy(raw_stream);
#endif
    MPI_Comm_free(&mpi);
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
};

// The world, for the barriers and the timing and checking reductions.
MPI_Comm g_timing = MPI_COMM_NULL;
// Set when any benchmark's result was wrong: the exit status says so.
bool g_any_wrong = false;

void raw_call(Group& g, Collective c, const void* send, void* recv, std::size_t count, bmt::DType t) {
#ifdef BMT_ENABLE_CUDA
  switch (c) {
    case Collective::all_gather:
      BMT_NCCL_CHECK(ncclAllGather(send, recv, count, nccl_type(t), g.nccl, g.raw_stream));
      break;
    case Collective::reduce_scatter:
      BMT_NCCL_CHECK(ncclReduceScatter(send, recv, count, nccl_type(t), ncclSum, g.nccl, g.raw_stream));
      break;
    case Collective::all_reduce:
      BMT_NCCL_CHECK(ncclAllReduce(send, recv, count, nccl_type(t), ncclSum, g.nccl, g.raw_stream));
      break;
  }
  BMT_CUDA_CHECK(cudaStreamSynchronize(g.raw_stream));
#else
  // The raw MPI path reduces 16-bit floats with the runtime's own operator, as any MPI user would
  // have to; bmt::Communicator is measured against exactly this call.
  const MPI_Datatype dt = bmt::mpi_datatype(t);
  const int n = static_cast<int>(count);
  switch (c) {
    case Collective::all_gather:
      BMT_MPI_CHECK(MPI_Allgather(send, n, dt, recv, n, dt, g.mpi));
      break;
    case Collective::reduce_scatter:
    case Collective::all_reduce: {
      BMT_REQUIRE(!bmt::is_floating(t) || t == bmt::DType::f32,
                  "the raw MPI path reduces f32 and integers; found " << bmt::dtype_name(t));
      if (c == Collective::reduce_scatter)
        BMT_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, n, dt, MPI_SUM, g.mpi));
      else
        BMT_MPI_CHECK(MPI_Allreduce(send, recv, n, dt, MPI_SUM, g.mpi));
      break;
    }
  }
#endif
}

void bmt_call(Group& g, Collective c, const void* send, void* recv, std::size_t count, bmt::DType t) {
  switch (c) {
    case Collective::all_gather: g.comm->all_gather(send, recv, count, t, *g.stream); break;
    case Collective::reduce_scatter: g.comm->reduce_scatter(send, recv, count, t, bmt::ReduceOp::sum, *g.stream); break;
    case Collective::all_reduce: g.comm->all_reduce(send, recv, count, t, bmt::ReduceOp::sum, *g.stream); break;
  }
  g.stream->synchronize();
}

double max_over_ranks(double seconds) {
  BMT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, g_timing));
  return seconds;
}

// Result elements that differ from the expected values: input element i of rank r is (r + i) % 5,
// so gathers hold (r + i) % 5 and sums the sum of that over ranks (r: the rank in the group).
double count_wrong(const Group& g, Collective c, Buffer& recv, std::size_t count, bmt::DType t) {
  const int n = g.size, me = g.rank;
  recv.download();
  Buffer expected(0);
  expected.host.resize(recv.host.size());
  const std::size_t out = c == Collective::all_gather ? n * count : count;
  for (std::size_t i = 0; i < out; ++i) {
    int v = 0;
    if (c == Collective::all_gather) {
      v = static_cast<int>((i / count + i % count) % 5);
    } else {
      const std::size_t j = c == Collective::reduce_scatter ? me * count + i : i;
      for (int r = 0; r < n; ++r) v += static_cast<int>((r + j) % 5);
    }
    store(t, expected.host.data(), i, v);
  }
  const std::size_t es = bmt::dtype_size(t);
  double wrong = 0;
  for (std::size_t i = 0; i < out; ++i)
    wrong += std::memcmp(recv.host.data() + i * es, expected.host.data() + i * es, es) != 0;
  BMT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_DOUBLE, MPI_MAX, g_timing));
  return wrong;
}

void run_collective(benchmark::State& state, Group& g, Collective c, Path path, std::size_t bytes, bmt::DType t) {
  const int n = g.size;
  const std::size_t es = bmt::dtype_size(t);
  // count is what the backends take: per rank for gather/scatter, the whole buffer for all_reduce.
  const std::size_t count = c == Collective::all_reduce ? bytes / es : bytes / (es * n);
  const std::size_t whole = c == Collective::all_reduce ? count : count * n;  // elements of S
  const std::size_t send_elems = c == Collective::all_gather ? count : whole;
  const std::size_t recv_elems = c == Collective::reduce_scatter ? count : whole;
  Buffer send(send_elems * es), recv(recv_elems * es);
  for (std::size_t i = 0; i < send_elems; ++i) store(t, send.host.data(), i, static_cast<int>((g.rank + i) % 5));
  send.upload();
  auto call = [&] {
    if (path == Path::bmt) bmt_call(g, c, send.data(), recv.data(), count, t);
    else raw_call(g, c, send.data(), recv.data(), count, t);
  };
  call();  // warm-up: connections, buffers registered, caches
  BMT_MPI_CHECK(MPI_Barrier(g_timing));

  double total = 0;
  for (auto _ : state) {
    BMT_MPI_CHECK(MPI_Barrier(g_timing));
    const double start = MPI_Wtime();
    call();
    const double elapsed = max_over_ranks(MPI_Wtime() - start);
    state.SetIterationTime(elapsed);
    total += elapsed;
  }
  const double seconds = total / static_cast<double>(state.iterations());
  const double s_bytes = static_cast<double>(whole * es);
  const double algbw = s_bytes / seconds / 1e9;
  const double factor = c == Collective::all_reduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
  state.counters["bytes"] = s_bytes;
  state.counters["time_us"] = seconds * 1e6;
  state.counters["algbw_GBps"] = algbw;
  state.counters["busbw_GBps"] = algbw * factor;
  const double wrong = count_wrong(g, c, recv, count, t);
  g_any_wrong = g_any_wrong || wrong > 0;
  state.counters["wrong"] = wrong;
  state.SetLabel(std::string(bmt::dtype_name(t)) + " sum, " + g.name + " group of " + std::to_string(n));
}

void register_benchmarks(const Options& o, const std::vector<Group*>& groups) {
  const char* dt = bmt::dtype_name(o.dtype);
#ifndef BMT_ENABLE_CUDA
  const bool raw_reduces = !bmt::is_floating(o.dtype) || o.dtype == bmt::DType::f32;
#else
  const bool raw_reduces = true;
#endif
  for (Group* g : groups) {
    // The shard group's names stay those of a world-only run (the shard group is the world there).
    const std::string prefix = g->name == "shard" ? "" : g->name + "_";
    for (Collective c : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce}) {
      for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
        for (Path p : {Path::bmt, Path::raw}) {
          if (p == Path::raw && c != Collective::all_gather && !raw_reduces) continue;
          const std::string name = prefix + collective_name(c) + "/" + (p == Path::bmt ? "bmt" : kRawName) + "/" +
                                   dt + "/" + std::to_string(bytes);
          benchmark::RegisterBenchmark(name.c_str(), [g, c, p, bytes, t = o.dtype](benchmark::State& s) {
            run_collective(s, *g, c, p, bytes, t);
          })
              ->UseManualTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // This program's flags are read first: the mesh they give is made when the runtime starts.
  const Options options = parse_options(&argc, argv);
  bmt::DistributedGuard guard(&argc, &argv, options.mesh);
  // Only rank 0 writes a --benchmark_out file: the others would truncate it under rank 0's feet.
  if (bmt::rank() != 0) {
    int kept = 1;
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]).rfind("--benchmark_out", 0) != 0) argv[kept++] = argv[i];
    argc = kept;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  BMT_MPI_CHECK(MPI_Comm_dup(bmt::context().mpi_comm(), &g_timing));
  bmt::Context& ctx = bmt::context();
  // Every rank takes part in every benchmark, each group of a kind running its collective at once;
  // a group of one rank has nothing to measure.
  Group shard("shard", ctx.mpi_shard_comm(), ctx.gather_comm(), ctx.gather_stream());
  std::vector<Group*> groups;
  if (shard.size > 1) groups.push_back(&shard);
  std::unique_ptr<Group> tp;
  if (bmt::tp_size() > 1) {
    tp = std::make_unique<Group>("tp", ctx.mpi_tp_comm(), ctx.tp_comm(), ctx.compute_stream());
    groups.push_back(tp.get());
  }
  register_benchmarks(options, groups);
  if (bmt::rank() == 0) {
    // In the run's context (the console header, and "context" in JSON), so that JSON on stdout stays JSON.
    benchmark::AddCustomContext("ranks", std::to_string(bmt::world_size()));
    benchmark::AddCustomContext("mesh", "tp " + std::to_string(bmt::tp_size()) + " x shard group of " +
                                            std::to_string(shard.size));
    benchmark::AddCustomContext("dtype", bmt::dtype_name(options.dtype));
    benchmark::AddCustomContext("compared", std::string("bmt = bmt::Communicator (shard: gather stream, tp: ") +
                                                "compute stream), " + kRawName + " = raw call");
    benchmark::RunSpecifiedBenchmarks();
  } else {
    SilentReporter silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  bmt::synchronize();
  MPI_Comm_free(&g_timing);
  return g_any_wrong ? 1 : 0;
}
