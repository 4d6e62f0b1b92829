#pragma once
// What the single-process benchmarks share: a dtype from a benchmark argument, deterministic
// inputs, and a wait for the compute stream (every timed iteration ends with one).
#include <benchmark/benchmark.h>

#include <cstdint>

#include "bmtrain/kernels/random.hpp"
#include "bmtrain/nn/init.hpp"
#include "bmtrain/nn/part_map.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::bench {

// 0: f32, 1: bf16, 2: f16.
inline DType dtype_arg(std::int64_t a) { return a == 0 ? DType::f32 : a == 1 ? DType::bf16 : DType::f16; }

inline void sync() { context().compute_stream().synchronize(); }

// Values uniform in [-1, 1), drawn on the device from the counter-based generator that
// initializes parameters: the same tensor for the same seed on every build, and no host loop or
// host-to-device copy, so setting up a benchmark of a large tensor takes milliseconds.
inline Tensor random_tensor(const Shape& shape, DType dtype, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  init::uniform(-1.0f, 1.0f)(t, 0, PartMap{}, random::key(seed, "bench"));  // a whole tensor
  return t;
}

// The body of a benchmark program's main: Google Benchmark's flags, the runtime (MPI, Kokkos,
// streams) around the run.
inline int run_benchmarks(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  DistributedGuard runtime(&argc, &argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace bmt::bench
