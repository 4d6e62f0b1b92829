// Collective bandwidth: all_gather, reduce_scatter and all_reduce through bmt::Communicator (the
// gather communicator on the gather stream, as ZeRO-3 uses them), each next to the raw backend call
// at the same size (MPI on the host build, NCCL on the CUDA build).
//
//   mpirun -np 4 bench_collectives [--max-bytes=64M] [--min-bytes=1K] [--dtype=f32] [benchmark flags]
//
// Sizes go from --min-bytes to --max-bytes (or $BMT_BENCH_MAX_BYTES) by factors of 4; the default
// maximum is 64 MiB on the host build and 1 GiB on the CUDA build. Every rank runs the same
// sequence; only rank 0 prints.
//
// Timing: each iteration starts at a barrier and ends when the collective is complete on the rank;
// its time is the maximum over ranks (MPI_Allreduce MAX), reported as manual time, so the numbers
// are those of the slowest rank, and every rank's Google Benchmark sees the same times and so makes
// the same choice of iteration counts. Counters follow nccl-tests: S is the whole array (the gathered
// output of all_gather, the input of reduce_scatter, the buffer of all_reduce),
//   algbw = S / time,   busbw = algbw * (n-1)/n (all_gather, reduce_scatter), algbw * 2(n-1)/n (all_reduce),
// and `wrong` counts result elements that differ from the expected values after the timed runs.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bmtrain/runtime/communicator.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/half.hpp"
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

// What the raw path needs, created once: its own communicator (so its traffic never matches the
// runtime's) and, on the CUDA build, an NCCL communicator and stream of its own.
struct RawBackend {
  MPI_Comm mpi = MPI_COMM_NULL;
  MPI_Comm timing = MPI_COMM_NULL;
#ifdef BMT_ENABLE_CUDA
  ncclComm_t nccl = nullptr;
  cudaStream_t stream = nullptr;
#endif
  RawBackend() {
    BMT_MPI_CHECK(MPI_Comm_dup(bmt::context().mpi_comm(), &mpi));
    BMT_MPI_CHECK(MPI_Comm_dup(bmt::context().mpi_comm(), &timing));
#ifdef BMT_ENABLE_CUDA
    ncclUniqueId id;
    if (bmt::rank() == 0) BMT_NCCL_CHECK(ncclGetUniqueId(&id));
    BMT_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi));
    BMT_NCCL_CHECK(ncclCommInitRank(&nccl, bmt::world_size(), id, bmt::rank()));
    BMT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
#endif
  }
  ~RawBackend() {
#ifdef BMT_ENABLE_CUDA
    ncclCommDestroy(nccl);
    cudaStreamDestroy(stream);
#endif
    MPI_Comm_free(&timing);
    MPI_Comm_free(&mpi);
  }
};

RawBackend* g_raw = nullptr;

void raw_call(Collective c, const void* send, void* recv, std::size_t count, bmt::DType t) {
#ifdef BMT_ENABLE_CUDA
  switch (c) {
    case Collective::all_gather:
      BMT_NCCL_CHECK(ncclAllGather(send, recv, count, nccl_type(t), g_raw->nccl, g_raw->stream));
      break;
    case Collective::reduce_scatter:
      BMT_NCCL_CHECK(ncclReduceScatter(send, recv, count, nccl_type(t), ncclSum, g_raw->nccl, g_raw->stream));
      break;
    case Collective::all_reduce:
      BMT_NCCL_CHECK(ncclAllReduce(send, recv, count, nccl_type(t), ncclSum, g_raw->nccl, g_raw->stream));
      break;
  }
  BMT_CUDA_CHECK(cudaStreamSynchronize(g_raw->stream));
#else
  // The raw MPI path reduces 16-bit floats with the runtime's own operator, as any MPI user would
  // have to; bmt::Communicator on the gather stream is measured against exactly this call.
  const MPI_Datatype dt = bmt::mpi_datatype(t);
  const int n = static_cast<int>(count);
  switch (c) {
    case Collective::all_gather:
      BMT_MPI_CHECK(MPI_Allgather(send, n, dt, recv, n, dt, g_raw->mpi));
      break;
    case Collective::reduce_scatter:
    case Collective::all_reduce: {
      BMT_REQUIRE(!bmt::is_floating(t) || t == bmt::DType::f32,
                  "the raw MPI path reduces f32 and integers; found " << bmt::dtype_name(t));
      if (c == Collective::reduce_scatter)
        BMT_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, n, dt, MPI_SUM, g_raw->mpi));
      else
        BMT_MPI_CHECK(MPI_Allreduce(send, recv, n, dt, MPI_SUM, g_raw->mpi));
      break;
    }
  }
#endif
}

void bmt_call(Collective c, const void* send, void* recv, std::size_t count, bmt::DType t) {
  bmt::Communicator& comm = bmt::context().gather_comm();
  bmt::Stream& stream = bmt::context().gather_stream();
  switch (c) {
    case Collective::all_gather: comm.all_gather(send, recv, count, t, stream); break;
    case Collective::reduce_scatter: comm.reduce_scatter(send, recv, count, t, bmt::ReduceOp::sum, stream); break;
    case Collective::all_reduce: comm.all_reduce(send, recv, count, t, bmt::ReduceOp::sum, stream); break;
  }
  stream.synchronize();
}

double max_over_ranks(double seconds) {
  BMT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, g_raw->timing));
  return seconds;
}

// Result elements that differ from the expected values: input element i of rank r is (r + i) % 5,
// so gathers hold (r + i) % 5 and sums the sum of that over ranks.
double count_wrong(Collective c, Buffer& recv, std::size_t count, bmt::DType t) {
  const int n = bmt::world_size(), me = bmt::rank();
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
  BMT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_DOUBLE, MPI_MAX, g_raw->timing));
  return wrong;
}

void run_collective(benchmark::State& state, Collective c, Path path, std::size_t bytes, bmt::DType t) {
  const int n = bmt::world_size();
  const std::size_t es = bmt::dtype_size(t);
  // count is what the backends take: per rank for gather/scatter, the whole buffer for all_reduce.
  const std::size_t count = c == Collective::all_reduce ? bytes / es : bytes / (es * n);
  const std::size_t whole = c == Collective::all_reduce ? count : count * n;  // elements of S
  const std::size_t send_elems = c == Collective::all_gather ? count : whole;
  const std::size_t recv_elems = c == Collective::reduce_scatter ? count : whole;
  Buffer send(send_elems * es), recv(recv_elems * es);
  for (std::size_t i = 0; i < send_elems; ++i) store(t, send.host.data(), i, static_cast<int>((bmt::rank() + i) % 5));
  send.upload();
  auto call = [&] {
    if (path == Path::bmt) bmt_call(c, send.data(), recv.data(), count, t);
    else raw_call(c, send.data(), recv.data(), count, t);
  };
  call();  // warm-up: connections, buffers registered, caches
  BMT_MPI_CHECK(MPI_Barrier(g_raw->timing));

  double total = 0;
  for (auto _ : state) {
    BMT_MPI_CHECK(MPI_Barrier(g_raw->timing));
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
  state.counters["wrong"] = count_wrong(c, recv, count, t);
  state.SetLabel(std::string(bmt::dtype_name(t)) + " sum np" + std::to_string(n));
}

void register_benchmarks(const Options& o) {
  const char* dt = bmt::dtype_name(o.dtype);
#ifndef BMT_ENABLE_CUDA
  const bool raw_reduces = !bmt::is_floating(o.dtype) || o.dtype == bmt::DType::f32;
#else
  const bool raw_reduces = true;
#endif
  for (Collective c : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce}) {
    for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
      for (Path p : {Path::bmt, Path::raw}) {
        if (p == Path::raw && c != Collective::all_gather && !raw_reduces) continue;
        const std::string name = std::string(collective_name(c)) + "/" + (p == Path::bmt ? "bmt" : kRawName) + "/" +
                                 dt + "/" + std::to_string(bytes);
        benchmark::RegisterBenchmark(name.c_str(), [c, p, bytes, t = o.dtype](benchmark::State& s) {
          run_collective(s, c, p, bytes, t);
        })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bmt::DistributedGuard guard(&argc, &argv);
  const Options options = parse_options(&argc, argv);
  // Only rank 0 writes a --benchmark_out file: the others would truncate it under rank 0's feet.
  if (bmt::rank() != 0) {
    int kept = 1;
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]).rfind("--benchmark_out", 0) != 0) argv[kept++] = argv[i];
    argc = kept;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RawBackend raw;
  g_raw = &raw;
  register_benchmarks(options);
  if (bmt::rank() == 0) {
    // In the run's context (the console header, and "context" in JSON), so that JSON on stdout stays JSON.
    benchmark::AddCustomContext("ranks", std::to_string(bmt::world_size()));
    benchmark::AddCustomContext("dtype", bmt::dtype_name(options.dtype));
    benchmark::AddCustomContext("compared", std::string("bmt = bmt::Communicator (gather stream), ") + kRawName +
                                                " = raw call");
    benchmark::RunSpecifiedBenchmarks();
  } else {
    SilentReporter silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  bmt::synchronize();
  g_raw = nullptr;
  return 0;
}
