// The recompute planner: its activation sizes against the caching allocator's counters for GPT-2
// and Llama in f32, bf16 and bf16 with FP8 linear layers (what a forward leaves allocated for its backward, per keep option,
// and a whole step's peak), its choices for given budgets, and a model built with a plan that keeps
// some blocks training to the same losses as one that recomputes every block.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/models/models.hpp>

namespace {

using bmt::models::CausalLM;
using bmt::models::CausalLMOptions;
using bmt::models::ModelConfig;

constexpr std::int64_t kBatch = 4, kSeq = 64, kLayers = 4, kTokens = kBatch * kSeq;

ModelConfig small(const std::string& arch, bmt::DType dtype) {
  ModelConfig c = bmt::models::preset("tiny");
  c.arch = arch;
  c.layers = kLayers;
  c.dim = 128;
  c.heads = 4;
  c.ffn = arch == "gpt2" ? 512 : 384;
  c.vocab = 512;
  c.max_seq = kSeq;
  if (arch == "llama") {
    c.kv_heads = 2;
    c.tie_embeddings = false;
  }
  c.dtype = dtype;
  return c;
}

// A model, its optimizer and one batch; step() trains on it.
struct Training {
  std::unique_ptr<CausalLM> model;
  std::unique_ptr<bmt::optim::AdamW> adamw;
  bmt::optim::OptimManager manager;
  bmt::Tensor tokens, targets;

  Training(const ModelConfig& c, const CausalLMOptions& o) {
    model = std::make_unique<CausalLM>(c, o);
    bmt::init_parameters(*model);
    adamw = std::make_unique<bmt::optim::AdamW>(*model);
    manager.add_optimizer(*adamw);
    std::vector<std::int64_t> ids(kTokens), next(kTokens);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((i * 7 + i / 5) % c.vocab);
    for (std::size_t i = 0; i < ids.size(); ++i) next[i] = ids[(i + 1) % ids.size()];
    tokens = bmt::Tensor::from_ints(ids, {kBatch, kSeq}, bmt::DType::i32);
    targets = bmt::Tensor::from_ints(next, {kBatch, kSeq}, bmt::DType::i32);
  }
  float step() {
    manager.zero_grad();
    bmt::Tensor loss = model->loss(tokens, targets);
    const float value = loss.to_host_floats()[0];
    manager.backward(loss);
    manager.step();
    return value;
  }
  // Bytes a forward leaves allocated (its graph alive), after a step has made every lasting buffer.
  double forward_bytes() {
    step();
    const auto before = bmt::memory_stats().allocated_bytes;
    bmt::Tensor loss = model->loss(tokens, targets);
    return static_cast<double>(bmt::memory_stats().allocated_bytes) - static_cast<double>(before);
  }
};

// (At kSeq 64 no tensor crosses the caching allocator's 1 MiB class boundary, above which sizes
// round up to 2 MiB and a small model's figures would be off by the rounding.)

// A kept block also keeps its gathered parameters (at one rank a copy only where f32 values are
// rounded to the parameters' dtype; under tensor parallelism this rank's parts): the memory plan's
// buffers, not activations.
// With fp8 the weights its linear layers read in FP8 are gathered as float8 codes, 1 byte each.
double kept_parameters(const ModelConfig& c, const CausalLMOptions& o = {}) {
  const std::int64_t float8 = bmt::models::block_float8_elements(c, o);
  if (c.dtype == bmt::DType::f32 && float8 == 0) return 0.0;
  return static_cast<double>((c.block_parameter_count(bmt::tp_size()) - float8) *
                                 static_cast<std::int64_t>(bmt::dtype_size(c.dtype)) +
                             float8);
}

// The dtypes and number formats the sizes are held to: f32, bf16, and bf16 with FP8 linear layers.
struct Format {
  bmt::DType dtype;
  bool fp8;
};
constexpr Format kFormats[] = {{bmt::DType::f32, false}, {bmt::DType::bf16, false}, {bmt::DType::bf16, true}};

TEST(ActivationSizes, AreWhatAForwardKeeps) {
  for (const char* arch : {"gpt2", "llama"})
    for (const Format& format : kFormats) {
      const bmt::DType dtype = format.dtype;
      const ModelConfig c = small(arch, dtype);
      const std::string what = std::string(arch) + " " + bmt::dtype_name(dtype) + (format.fp8 ? " fp8" : "");
      CausalLMOptions o;
      o.fp8 = format.fp8;
      const auto s = bmt::models::activation_sizes(c, o, kTokens);
      const double none = Training(c, o).forward_bytes();
      o.keep_blocks = kLayers;
      const double all = Training(c, o).forward_bytes();
      o.keep_blocks = 0;
      o.checkpoint.keep_attention = true;
      const double attention = Training(c, o).forward_bytes();
      o.checkpoint.keep_attention = false;
      o.checkpoint.keep_residual = true;
      const double residual = Training(c, o).forward_bytes();
      const double kept = (all - none) / kLayers - kept_parameters(c, o) + s.recomputed_block;
      EXPECT_NEAR(kept, s.kept_block, 0.05 * s.kept_block) << what;
      EXPECT_NEAR((attention - none) / kLayers, s.kept_attention, 0.05 * s.kept_attention) << what;
      EXPECT_NEAR((residual - none) / kLayers, s.kept_residual, 0.05 * s.kept_residual) << what;
      // Everything but the backward's transient: the logits (whole at tp 1, where the loss is not
      // in chunks), the embedding's and final norm's outputs and each recomputed block's input. At
      // tp 1 the loss holds the head's table as gathered beside them: at one rank of the shard group
      // a copy only where f32 values are rounded (a parameter, not an activation: the memory
      // plan's). At tp > 1 the loss is in chunks: it holds the head's gradients instead, neither the
      // table nor the final norm's output gathered for it.
      const bool chunked = bmt::tp_size() > 1;
      EXPECT_EQ(s.head_gradients > 0, chunked) << what;
      const double logits = chunked ? 0.0 : s.logits;
      const double head = dtype == bmt::DType::f32 || chunked
                              ? 0.0
                              : static_cast<double>(c.vocab * c.dim * static_cast<std::int64_t>(bmt::dtype_size(dtype)));
      const double gathered_h = chunked ? static_cast<double>(kTokens * c.dim * static_cast<std::int64_t>(bmt::dtype_size(dtype))) : 0.0;
      const double forward = s.fixed - s.logits - s.backward_transient + logits + head - gathered_h -
                             2 * s.kept_block + kLayers * s.recomputed_block;
      EXPECT_NEAR(none, forward, 0.15 * forward) << what;
    }
}

TEST(ActivationSizes, BoundAStepsPeak) {
  for (const char* arch : {"gpt2", "llama"})
    for (bool fp8 : {false, true})
      for (std::int64_t keep : {std::int64_t{0}, kLayers}) {
        const ModelConfig c = small(arch, bmt::DType::bf16);
        const std::string what = std::string(arch) + (fp8 ? " fp8" : "") + " keeping " + std::to_string(keep);
        CausalLMOptions o;
        o.keep_blocks = keep;
        o.fp8 = fp8;
        Training run(c, o);
        run.step();
        const auto before = bmt::memory_stats().allocated_bytes;
        bmt::CachingAllocator::instance().reset_peak();
        run.step();
        // The step makes the gradient shards as well (4 bytes a parameter this rank holds, at one
        // rank of the shard group).
        const double peak = static_cast<double>(bmt::memory_stats().peak_allocated_bytes - before);
        const double gradients = 4.0 * static_cast<double>(c.parameter_count(bmt::tp_size()));
        const double planned = bmt::models::activation_peak(c, o, 1, kTokens, gradients);
        EXPECT_LE(peak, 1.02 * planned) << what;
        EXPECT_GE(peak, 0.75 * planned) << what;
      }
}

TEST(RecomputePlan, KeepsWhatFits) {
  const ModelConfig c = small("llama", bmt::DType::bf16);
  const auto s = bmt::models::activation_sizes(c, {}, kTokens);
  const double recompute_all = s.fixed + kLayers * s.recomputed_block;
  const auto plan = [&](double budget) { return bmt::models::plan_recompute(c, {}, 1, kTokens, budget); };
  // Too little: nothing kept, and it does not fit, by the figure it gives.
  auto p = plan(recompute_all - 1);
  EXPECT_FALSE(p.fits);
  EXPECT_EQ(p.options.keep_blocks, 0);
  EXPECT_FALSE(p.options.checkpoint.keep_attention);
  EXPECT_DOUBLE_EQ(p.activation_bytes, recompute_all);
  // Just enough to recompute: that.
  p = plan(recompute_all);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.options.keep_blocks, 0);
  EXPECT_FALSE(p.options.checkpoint.keep_attention);
  // Attention first, then residual sums, then whole blocks from the last.
  const double with_attention = recompute_all + kLayers * s.kept_attention;
  p = plan(with_attention);
  EXPECT_TRUE(p.options.checkpoint.keep_attention);
  EXPECT_FALSE(p.options.checkpoint.keep_residual);
  const double with_both = with_attention + kLayers * s.kept_residual;
  const double per_block =
      s.kept_block + kept_parameters(c) - s.recomputed_block - s.kept_attention - s.kept_residual;
  p = plan(with_both + 2 * per_block + 1);
  EXPECT_TRUE(p.options.checkpoint.keep_residual);
  EXPECT_EQ(p.options.keep_blocks, 2);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.summary(), "2 of 4 blocks kept whole, the others recomputed keeping their attention outputs and "
                         "residual sums");
  p = plan(1e30);
  EXPECT_EQ(p.options.keep_blocks, kLayers);
  EXPECT_EQ(p.summary(), "every block keeps its activations");
  // Gradient shards made beside the activations not yet freed take from the same budget.
  EXPECT_LT(bmt::models::plan_recompute(c, {}, 1, kTokens, with_both + 2 * per_block + 1, 4.0 * c.parameter_count())
                .options.keep_blocks,
            2);
  // ZeRO level 2 has nothing to choose.
  CausalLMOptions level2;
  level2.checkpoint.zero_level = 2;
  EXPECT_EQ(bmt::models::plan_recompute(c, level2, 1, kTokens, 1e30).options.keep_blocks, 0);
}

TEST(RecomputePlan, KeepingBlocksTrainsTheSameModel) {
  const ModelConfig c = small("gpt2", bmt::DType::f32);
  const auto s = bmt::models::activation_sizes(c, {}, kTokens);
  const double budget = s.fixed + kLayers * (s.recomputed_block + s.kept_attention + s.kept_residual) +
                        2 * (s.kept_block - s.recomputed_block - s.kept_attention - s.kept_residual) + 1;
  const auto plan = bmt::models::plan_recompute(c, {}, 1, kTokens, budget);
  ASSERT_EQ(plan.options.keep_blocks, 2);
  Training planned(c, plan.options), recomputed(c, {});
  for (int step = 0; step < 3; ++step) {
    const float a = planned.step(), b = recomputed.step();
    EXPECT_NEAR(a, b, 1e-6 * std::fabs(b)) << "step " << step;
  }
}

}  // namespace
