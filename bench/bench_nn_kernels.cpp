// Throughput of the memory-bound kernels of a transformer step (LayerNorm, RMSNorm, softmax,
// cross-entropy, GELU, residual add, SwiGLU, embedding, AdamW), forward and backward separately,
// at GPT-2 shapes (16 x 1024 token rows, widths 768, 1600, 2048, vocabulary 50257), in f32 and
// bf16. (Attention: bench_attention.)
//
//   bench_nn_kernels [--benchmark_filter=...]
//
// Each kernel reports GB/s of its compulsory traffic and `of_copy`, that rate as a fraction of the
// device's copy bandwidth: memory::copy (cudaMemcpy device to device on CUDA, counting bytes read
// and written) of 1 GiB, measured once at startup and printed first. An iteration queues the
// kernel kReps times and then waits, so launch and synchronization costs do not hide the kernel.
//
// Traffic counted: norm/softmax forward read x and write y (2 row tensors), backward read x (or y)
// and dy and write dx (3; 4 for the LayerNorm backward as a block runs it, which also reads the dx
// it adds into); cross-entropy forward reads the logits (1), backward reads them and
// writes their gradient (2); GELU forward 2, backward 3; add 3; SwiGLU forward 3, backward 5;
// embedding forward reads and writes the looked-up rows (2 x tokens x width), backward reads the
// output gradient and writes the whole f32 table gradient (EmbeddingBackward groups the ids
// itself, EmbeddingBackwardIndexed is given the index made at the forward; EmbeddingIndex, making
// it, counts only the ids it reads: read its time); AdamW reads gradient, moments and
// master and writes moments, master and (bf16) parameters: 28 bytes per f32 parameter, 30 per
// bf16. Row statistics and per-column partial sums are small and not counted.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/cross_entropy.hpp"
#include "bmtrain/kernels/elementwise.hpp"
#include "bmtrain/kernels/embedding.hpp"
#include "bmtrain/kernels/norm.hpp"
#include "bmtrain/kernels/softmax.hpp"
#include "bmtrain/optim/adamw.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/tensor/memory.hpp"
#include "bmtrain/zero/distributed_module.hpp"
#include "bmtrain/nn/init.hpp"

#include "bench_common.hpp"

namespace {

using namespace bmt;
using namespace bmt::bench;
using Clock = std::chrono::steady_clock;

constexpr int kReps = memory::is_host() ? 1 : 20;
// Full GPT-2 batches on a GPU; a host build keeps the large tensors to a size a CPU finishes.
constexpr std::int64_t kRows = 16 * 1024;
constexpr std::int64_t kVocabRows = memory::is_host() ? 256 : 16 * 1024;

// Bytes per second of memory::copy over 1 GiB (256 MiB on the host), counting reads and writes.
double copy_bandwidth() {
  static const double bw = [] {
    const std::size_t bytes = memory::is_host() ? (std::size_t(256) << 20) : (std::size_t(1) << 30);
    const Tensor a = Tensor::zeros({static_cast<std::int64_t>(bytes)}, DType::u8);
    const Tensor b = Tensor::zeros({static_cast<std::int64_t>(bytes)}, DType::u8);
    memory::copy(b.data(), a.data(), bytes);
    sync();
    const int reps = memory::is_host() ? 3 : 20;
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) memory::copy(b.data(), a.data(), bytes);
    sync();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    return 2.0 * static_cast<double>(bytes) * reps / s;
  }();
  return bw;
}

// Times `step` (kReps launches, then a wait) per iteration; reports GB/s of `bytes` per step and
// its fraction of the copy bandwidth.
template <class Step>
void measure(benchmark::State& state, double bytes, const std::string& label, Step step) {
  step();  // warm-up: first touch, plan caches, lazily created buffers
  sync();
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (int r = 0; r < kReps; ++r) step();
    sync();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    state.SetIterationTime(s / kReps);
    seconds += s;
  }
  const double rate = bytes * kReps * static_cast<double>(state.iterations()) / seconds;
  state.counters["GB/s"] = rate * 1e-9;
  state.counters["of_copy"] = rate / copy_bandwidth();
  state.SetLabel(label);
}

void BM_Copy(benchmark::State& state) {
  const std::int64_t rows = state.range(0), cols = state.range(1);
  const DType dt = dtype_arg(state.range(2));
  const std::size_t bytes = static_cast<std::size_t>(rows * cols) * dtype_size(dt);
  const Tensor a = random_tensor({rows, cols}, dt, 1), b = Tensor::empty({rows, cols}, dt);
  measure(state, 2.0 * bytes, dtype_name(dt), [&] { memory::copy(b.data(), a.data(), bytes); });
}

struct NormCase {
  Tensor x, w, b, dy, y, dx, dw, db, mean, rstd;
  NormCase(std::int64_t rows, std::int64_t C, DType dt)
      : x(random_tensor({rows, C}, dt, 1)), w(random_tensor({C}, dt, 2)), b(random_tensor({C}, dt, 3)),
        dy(random_tensor({rows, C}, dt, 4)), y(Tensor::empty({rows, C}, dt)), dx(Tensor::empty({rows, C}, dt)),
        dw(Tensor::empty({C}, dt)), db(Tensor::empty({C}, dt)), mean(Tensor::empty({rows})),
        rstd(Tensor::empty({rows})) {}
};

void BM_LayerNormForward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  NormCase c(state.range(0), state.range(1), dt);
  measure(state, 2.0 * c.x.nbytes(), dtype_name(dt),
          [&] { kernels::layer_norm_forward(c.x, c.w, c.b, 1e-5f, c.y, c.mean, c.rstd); });
}

void BM_LayerNormBackward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  NormCase c(state.range(0), state.range(1), dt);
  kernels::layer_norm_forward(c.x, c.w, c.b, 1e-5f, c.y, c.mean, c.rstd);
  measure(state, 3.0 * c.x.nbytes(), dtype_name(dt),
          [&] { kernels::layer_norm_backward(c.dy, c.x, c.w, c.mean, c.rstd, c.dx, c.dw, c.db); });
}

// As a transformer block runs it: dx added into the gradient the residual branch already gave x
// (read and written), dW and db added into f32 gradient buffers.
void BM_LayerNormBackwardInBlock(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  NormCase c(state.range(0), state.range(1), dt);
  kernels::layer_norm_forward(c.x, c.w, c.b, 1e-5f, c.y, c.mean, c.rstd);
  const Tensor dw = Tensor::zeros({state.range(1)}), db = Tensor::zeros({state.range(1)});
  c.dx.zero_();
  measure(state, 4.0 * c.x.nbytes(), dtype_name(dt), [&] {
    kernels::layer_norm_backward(c.dy, c.x, c.w, c.mean, c.rstd, c.dx, dw, db, /*accumulate=*/true,
                                 /*add_into_dx=*/true);
  });
}

void BM_RmsNormForward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  NormCase c(state.range(0), state.range(1), dt);
  measure(state, 2.0 * c.x.nbytes(), dtype_name(dt),
          [&] { kernels::rms_norm_forward(c.x, c.w, 1e-6f, c.y, c.rstd); });
}

void BM_RmsNormBackward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  NormCase c(state.range(0), state.range(1), dt);
  kernels::rms_norm_forward(c.x, c.w, 1e-6f, c.y, c.rstd);
  measure(state, 3.0 * c.x.nbytes(), dtype_name(dt),
          [&] { kernels::rms_norm_backward(c.dy, c.x, c.w, c.rstd, c.dx, c.dw); });
}

void BM_SoftmaxForward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  NormCase c(state.range(0), state.range(1), dt);
  measure(state, 2.0 * c.x.nbytes(), dtype_name(dt), [&] { kernels::softmax_forward(c.x, c.y); });
}

void BM_SoftmaxBackward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  NormCase c(state.range(0), state.range(1), dt);
  kernels::softmax_forward(c.x, c.y);
  measure(state, 3.0 * c.x.nbytes(), dtype_name(dt), [&] { kernels::softmax_backward(c.y, c.dy, c.dx); });
}

struct CrossEntropyCase {
  Tensor logits, targets, lse, loss, count, one, dlogits;
  CrossEntropyCase(std::int64_t N, std::int64_t V, DType dt)
      : logits(random_tensor({N, V}, dt, 1)), lse(Tensor::empty({N})), loss(Tensor::empty({})),
        count(Tensor::empty({})), one(full({}, 1.0f)), dlogits(Tensor::empty({N, V}, dt)) {
    std::vector<std::int64_t> t(static_cast<std::size_t>(N));
    for (std::int64_t i = 0; i < N; ++i) t[i] = (i * 7919) % V;
    targets = Tensor::from_ints(t, {N});
  }
};

void BM_CrossEntropyForward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  CrossEntropyCase c(state.range(0), state.range(1), dt);
  measure(state, 1.0 * c.logits.nbytes(), dtype_name(dt),
          [&] { kernels::cross_entropy_forward(c.logits, c.targets, -100, c.lse, c.loss, c.count); });
}

void BM_CrossEntropyBackward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  CrossEntropyCase c(state.range(0), state.range(1), dt);
  kernels::cross_entropy_forward(c.logits, c.targets, -100, c.lse, c.loss, c.count);
  measure(state, 2.0 * c.logits.nbytes(), dtype_name(dt), [&] {
    kernels::cross_entropy_backward(c.logits, c.targets, -100, c.lse, c.count, c.one, c.dlogits);
  });
}

// The MLP's activation runs on 4x the model width.
void BM_GeluForward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  const Tensor x = random_tensor({state.range(0), 4 * state.range(1)}, dt, 1);
  measure(state, 2.0 * x.nbytes(), dtype_name(dt), [&] { kernels::activation_forward(kernels::Activation::gelu, x); });
}

void BM_GeluBackward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  const Tensor x = random_tensor({state.range(0), 4 * state.range(1)}, dt, 1);
  const Tensor g = random_tensor({state.range(0), 4 * state.range(1)}, dt, 2);
  measure(state, 3.0 * x.nbytes(), dtype_name(dt),
          [&] { kernels::activation_backward(kernels::Activation::gelu, x, g); });
}

void BM_ResidualAdd(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  const Tensor a = random_tensor({state.range(0), state.range(1)}, dt, 1);
  const Tensor b = random_tensor({state.range(0), state.range(1)}, dt, 2);
  measure(state, 3.0 * a.nbytes(), dtype_name(dt), [&] { kernels::binary(kernels::BinaryOp::add, a, b); });
}

void BM_SwigluForward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  const Tensor g = random_tensor({state.range(0), state.range(1)}, dt, 1);
  const Tensor u = random_tensor({state.range(0), state.range(1)}, dt, 2);
  measure(state, 3.0 * g.nbytes(), dtype_name(dt), [&] { kernels::swiglu_forward(g, u); });
}

void BM_SwigluBackward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  const Tensor g = random_tensor({state.range(0), state.range(1)}, dt, 1);
  const Tensor u = random_tensor({state.range(0), state.range(1)}, dt, 2);
  const Tensor gr = random_tensor({state.range(0), state.range(1)}, dt, 3);
  measure(state, 5.0 * g.nbytes(), dtype_name(dt), [&] {
    Tensor dg, du;
    kernels::swiglu_backward(g, u, gr, &dg, &du);
  });
}

// Zipf-like ids: a few frequent tokens, as in text.
Tensor zipf_ids(std::int64_t tokens, std::int64_t V) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(tokens));
  std::uint64_t s = 7;
  for (auto& id : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(s >> 11) / 9007199254740992.0;
    id = static_cast<std::int64_t>(std::pow(static_cast<double>(V), u)) - 1;
  }
  return Tensor::from_ints(v, {tokens}, DType::i32);
}

struct EmbeddingCase {
  Tensor ids, weight, out, grad_out, grad_weight;
  EmbeddingCase(std::int64_t tokens, std::int64_t V, std::int64_t C, DType dt)
      : ids(zipf_ids(tokens, V)), weight(random_tensor({V, C}, dt, 1)), out(Tensor::empty({tokens, C}, dt)),
        grad_out(random_tensor({tokens, C}, dt, 2)), grad_weight(Tensor::empty({V, C}, DType::f32)) {}
};

void BM_EmbeddingForward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  EmbeddingCase c(state.range(0), 50257, state.range(1), dt);
  measure(state, 2.0 * c.out.nbytes(), dtype_name(dt), [&] { kernels::embedding_forward(c.ids, c.weight, c.out); });
}

// The backward on its own: it groups the ids first.
void BM_EmbeddingBackward(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  EmbeddingCase c(state.range(0), 50257, state.range(1), dt);
  measure(state, static_cast<double>(c.grad_out.nbytes() + c.grad_weight.nbytes()), dtype_name(dt),
          [&] { kernels::embedding_backward(c.ids, c.grad_out, c.grad_weight); });
}

// The backward given the index the op made at the forward, as in a training step.
void BM_EmbeddingBackwardIndexed(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(2));
  EmbeddingCase c(state.range(0), 50257, state.range(1), dt);
  const kernels::EmbeddingIndex index = kernels::embedding_index(c.ids, 50257);
  measure(state, static_cast<double>(c.grad_out.nbytes() + c.grad_weight.nbytes()), dtype_name(dt),
          [&] { kernels::embedding_backward(c.ids, c.grad_out, c.grad_weight, index); });
}

// Making the index (the sort; on CUDA it runs on a side stream beside the forward). Latency-bound:
// its traffic (the ids, the pairs) is small, so read its time, not its rate.
void BM_EmbeddingIndex(benchmark::State& state) {
  const Tensor ids = zipf_ids(state.range(0), 50257);
  measure(state, static_cast<double>(ids.nbytes()), "i32",
          [&] { const kernels::EmbeddingIndex index = kernels::embedding_index(ids, 50257); });
}

// GPT-2 124M's parameter tensors (12 blocks and the embeddings), one storage each.
struct Gpt2Parameters : DistributedModule {
  std::vector<std::unique_ptr<DistributedParameter>> params;
  explicit Gpt2Parameters(DType dt) {
    auto add = [&](const std::string& name, const Shape& shape) {
      params.push_back(std::make_unique<DistributedParameter>(shape, dt, init::normal(0.02f)));
      register_parameter(name, *params.back());
    };
    add("wte", {50257, 768});
    add("wpe", {1024, 768});
    for (int i = 0; i < 12; ++i) {
      const std::string p = "h" + std::to_string(i) + "_";
      for (const char* n : {"ln1_w", "ln1_b", "ln2_w", "ln2_b", "proj_b", "fc2_b"}) add(p + n, {768});
      add(p + "qkv_w", {2304, 768});
      add(p + "qkv_b", {2304});
      add(p + "proj_w", {768, 768});
      add(p + "fc_w", {3072, 768});
      add(p + "fc_b", {3072});
      add(p + "fc2_w", {768, 3072});
    }
    add("lnf_w", {768});
    add("lnf_b", {768});
  }
};

void BM_AdamW(benchmark::State& state) {
  const DType dt = dtype_arg(state.range(0));
  Gpt2Parameters model(dt);
  init_parameters(model);
  optim::AdamW adamw(model);
  std::int64_t n = 0;
  for (auto* s : adamw.storages()) n += s->shard_size();
  const double per_element = dt == DType::f32 ? 28.0 : 30.0;
  measure(state, per_element * static_cast<double>(n), dtype_name(dt), [&] { adamw.step(1e-4f, 1.0f); });
  state.counters["params"] = static_cast<double>(n);
}

// rows, width, dtype (0 = f32, 1 = bf16): GPT-2 small, XL and a 2048 width.
void row_sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t dt : {0, 1})
    for (std::int64_t C : {768, 1600, 2048}) b->Args({kRows, C, dt});
  b->Unit(benchmark::kMicrosecond)->UseManualTime();
}

void vocab_sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t dt : {0, 1}) b->Args({kVocabRows, 50257, dt});
  b->Unit(benchmark::kMicrosecond)->UseManualTime();
}

void token_sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t dt : {0, 1})
    for (std::int64_t C : {768, 1600}) b->Args({kRows, C, dt});
  b->Unit(benchmark::kMicrosecond)->UseManualTime();
}

BENCHMARK(BM_Copy)->Apply(row_sizes);
BENCHMARK(BM_LayerNormForward)->Apply(row_sizes);
BENCHMARK(BM_LayerNormBackward)->Apply(row_sizes);
BENCHMARK(BM_LayerNormBackwardInBlock)->Apply(row_sizes);
BENCHMARK(BM_RmsNormForward)->Apply(row_sizes);
BENCHMARK(BM_RmsNormBackward)->Apply(row_sizes);
BENCHMARK(BM_SoftmaxForward)->Apply(row_sizes);
BENCHMARK(BM_SoftmaxBackward)->Apply(row_sizes);
BENCHMARK(BM_GeluForward)->Apply(row_sizes);
BENCHMARK(BM_GeluBackward)->Apply(row_sizes);
BENCHMARK(BM_ResidualAdd)->Apply(row_sizes);
BENCHMARK(BM_SwigluForward)->Apply(row_sizes);
BENCHMARK(BM_SwigluBackward)->Apply(row_sizes);
BENCHMARK(BM_CrossEntropyForward)->Apply(vocab_sizes);
BENCHMARK(BM_CrossEntropyBackward)->Apply(vocab_sizes);
BENCHMARK(BM_EmbeddingForward)->Apply(token_sizes);
BENCHMARK(BM_EmbeddingBackward)->Apply(token_sizes);
BENCHMARK(BM_EmbeddingBackwardIndexed)->Apply(token_sizes);
BENCHMARK(BM_EmbeddingIndex)->Arg(kRows)->Unit(benchmark::kMicrosecond)->UseManualTime();
BENCHMARK(BM_AdamW)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseManualTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  bmt::DistributedGuard runtime(&argc, &argv);
  // In the run's context (the console header, and "context" in JSON) rather than on stdout, where it
  // would come before the JSON of --benchmark_format=json.
  char copy[96];
  std::snprintf(copy, sizeof copy, "%.1f GB/s (memory::copy, read + write)", copy_bandwidth() * 1e-9);
  benchmark::AddCustomContext("copy_bandwidth", copy);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
