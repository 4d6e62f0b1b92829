// Fused attention at training shapes: forward, and backward (dQ, dK, dV from the saved logsumexp),
// causal, [B, H, T, D]; reports the FLOP rate of the matrix products a training step needs:
// forward 4 B H T^2 D / 2 (Q K^T and P V under the causal mask), backward 2.5 times that
// (dV, dP, dQ, dK and the recomputed scores), as FlashAttention counts them. Also says which
// kernel ran (tensor cores or the portable one). Grouped-query attention (fewer key/value heads)
// does the same products, so the count is the same.
//
//   bench_attention [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cmath>

#include "bmtrain/kernels/attention.hpp"
#include "bmtrain/runtime/context.hpp"

#include "bench_common.hpp"

namespace {

using namespace bmt;
using namespace bmt::bench;

struct Inputs {
  Tensor q, k, v, out, dout, lse, dq, dk, dv;
  float scale;
  Inputs(std::int64_t B, std::int64_t H, std::int64_t Hk, std::int64_t T, std::int64_t D, DType dt)
      : q(random_tensor({B, H, T, D}, dt, 1)),
        k(random_tensor({B, Hk, T, D}, dt, 2)),
        v(random_tensor({B, Hk, T, D}, dt, 3)),
        out(Tensor::empty({B, H, T, D}, dt)),
        dout(random_tensor({B, H, T, D}, dt, 4)),
        lse(Tensor::empty({B, H, T})),
        dq(Tensor::empty({B, H, T, D}, dt)),
        dk(Tensor::empty({B, Hk, T, D}, dt)),
        dv(Tensor::empty({B, Hk, T, D}, dt)),
        scale(1.0f / std::sqrt(static_cast<float>(D))) {}
  void forward() { kernels::attention_forward(q, k, v, true, scale, out, lse); }
  void backward() { kernels::attention_backward(q, k, v, out, dout, lse, true, scale, dq, dk, dv); }
};

// Arguments: B, H, T, D, dtype (0 f32, 1 bf16, 2 f16), pass (0 forward, 1 backward), key/value
// heads (0: H).
void BM_Attention(benchmark::State& state) {
  const std::int64_t B = state.range(0), H = state.range(1), T = state.range(2), D = state.range(3);
  const DType dt = dtype_arg(state.range(4));
  const bool backward = state.range(5) == 1;
  const std::int64_t Hk = state.range(6) ? state.range(6) : H;
  Inputs in(B, H, Hk, T, D, dt);
  in.forward();
  auto step = [&] { backward ? in.backward() : in.forward(); };
  step();  // first touch and one-time kernel setup stay out of the timing
  sync();
  for (auto _ : state) {
    step();
    sync();
  }
  const double forward_flops = 4.0 * B * H * static_cast<double>(T) * T * D / 2.0;
  const double flops = backward ? 2.5 * forward_flops : forward_flops;
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops * 1e-12 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(dtype_name(dt)) + (backward ? " backward" : " forward") +
                 ", " + kernels::attention_kernel_name(in.q, in.k, in.v));
}

// GPT-2 124M and XL at 16 sequences of 1024 (per GPU), a 128-wide head at 4 x 2048, Llama 3 8B
// (32 query heads over 8 key/value heads of 128) at one sequence of 8192, and f16.
void shapes(benchmark::internal::Benchmark* b) {
  for (std::int64_t pass : {0, 1}) {
    b->Args({16, 12, 1024, 64, 1, pass, 0});
    b->Args({16, 25, 1024, 64, 1, pass, 0});
    b->Args({4, 16, 2048, 128, 1, pass, 0});
    b->Args({1, 32, 8192, 128, 1, pass, 8});
    b->Args({16, 12, 1024, 64, 2, pass, 0});
  }
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_Attention)->Apply(shapes);

}  // namespace

int main(int argc, char** argv) {
  bmt::DistributedGuard guard(&argc, &argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
