#include "bmtrain/models/recompute_plan.hpp"

#include "bmtrain/models/memory_plan.hpp"

#include <algorithm>
#include <sstream>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/dtype.hpp"

namespace bmt::models {

ActivationSizes activation_sizes(const ModelConfig& c, const CausalLMOptions& options, std::int64_t tokens) {
  const double N = static_cast<double>(tokens), e = static_cast<double>(dtype_size(c.dtype));
  const double C = static_cast<double>(c.dim), F = static_cast<double>(c.ffn), H = static_cast<double>(c.heads);
  const double tp = static_cast<double>(tp_size());
  // This rank's key/value width: its heads' share, or one head when they are fewer than the ranks.
  const double Kv = static_cast<double>(c.local_kv_heads(tp_size()) * c.head_dim());
  // What the ops save for backward, a token at a time: the block's input, and for GPT-2 ln_1's
  // output, the QKV projection's, attention's, the residual sum, ln_2's output and the MLP's hidden
  // activations before and after the GELU; for Llama the two norms' outputs, the rotated q and k, v,
  // attention's output, the residual sum, and the SwiGLU's gate, up and product. Attention keeps its
  // logsumexp (f32 a head) and each norm its row statistics. Under tensor parallelism the block's
  // input, the residual sum and the row statistics are sequence-parallel rows (1/tp of the tokens),
  // the norms' outputs are saved gathered (every token, whole width) by the projections that read
  // them, and the projections' outputs, attention and the MLP's hidden activations are this rank's
  // heads and columns (1/tp of the width).
  //
  // With fp8 each FP8 product saves its input's codes (1 byte an element) in place of the input:
  // the norms' outputs are kept only as codes, once (Llama's q, k and v share theirs, as gate and
  // up do: Float8SharedInputs), and the inputs of the attention output projection and of the MLP's
  // last product as codes beside what the ops before them keep (attention its output, GELU its
  // input, SwiGLU its gate and up).
  const double saved =
      !options.fp8 ? (c.arch == "gpt2" ? e * ((6 * C + 2 * F) / tp + 2 * C) : e * ((4 * C + 3 * F) / tp + 2 * C + 2 * Kv))
      : c.arch == "gpt2" ? e * (6 * C + F) / tp + 2 * C + (C + F) / tp
                         : e * ((4 * C + 2 * F) / tp + 2 * Kv) + 2 * C + (C + F) / tp;
  ActivationSizes s;
  s.kept_block = N * (saved + 4 * H / tp + 16 / tp);
  // And each FP8 product its input's inverse scale: one f32, in the allocator's smallest block.
  const double fp8_products = c.arch == "gpt2" ? 4 : 7;  // QKV, out, MLP in and out; q, k, v, o, gate, up, down
  if (options.fp8) s.kept_block += fp8_products * 512.0;
  s.recomputed_block = N * e * C / tp;  // the block's input, from which backward recomputes it
  s.kept_attention = N * (e * C + 4 * H) / tp;
  s.kept_residual = N * e * C / tp;
  // The head's logits (or a chunk of them; this rank's vocabulary columns), and the embedding's and
  // the final norm's outputs: at tp 1 three [N, C] tensors; at tp > 1 the embedding's rows and the
  // final norm's output gathered for the loss (every token). In backward, a recomputed block's
  // activations and their gradients beside the kept ones.
  const double logit_rows = options.loss_chunk_rows > 0 ? std::min<double>(N, options.loss_chunk_rows) : N;
  s.logits = logit_rows * static_cast<double>(c.vocab) / tp * e;
  const double outside = tp_size() == 1 ? 3 : 1 + 1 / tp;
  // An FP8 backward product's transients, the MLP's the largest: its output gradient's codes in
  // both layouts and its weight's codes transposed.
  s.backward_transient = options.fp8 ? (2 * N + C) * F / tp : 0.0;
  // The loss in chunks makes the head's gradients in its forward (in f32), beside its chunk of
  // logits, unless in f16 (ops/linear_cross_entropy.hpp).
  const bool chunked_loss = options.loss_chunk_rows > 0 || tp_size() > 1;
  if (chunked_loss && c.dtype != DType::f16) s.head_gradients = 4 * C * (static_cast<double>(c.vocab) / tp + N);
  s.fixed = s.logits + outside * N * e * C + 2 * s.kept_block + s.backward_transient + s.head_gradients;
  return s;
}

namespace {

// The step's peak: the forward leaves every block's activations (and a kept block's gathered
// parameters); the backward then walks the blocks from the last, freeing each one's and making its
// gradient shard (`gradients` bytes over the model, the blocks' share by their parameters), so the
// peak is the largest of those sums along the walk, plus what is always there (`fixed`).
double activations(const ActivationSizes& s, double kept_parameters, const CausalLMOptions& o, const ModelConfig& c,
                   double gradients) {
  const std::int64_t layers = c.layers;
  const double block_gradient = gradients * static_cast<double>(c.block_parameter_count(tp_size())) /
                                static_cast<double>(c.parameter_count(tp_size()));
  std::vector<double> held(static_cast<std::size_t>(layers));
  double all = 0;
  for (std::int64_t i = 0; i < layers; ++i) {
    const CheckpointOptions b = block_options(o, layers, i);
    held[static_cast<std::size_t>(i)] =
        !b.use_checkpoint ? s.kept_block + kept_parameters
                          : s.recomputed_block + (b.keep_attention ? s.kept_attention : 0) +
                                (b.keep_residual ? s.kept_residual : 0);
    all += held[static_cast<std::size_t>(i)];
  }
  double peak = all, now = all;
  for (std::int64_t i = layers - 1; i >= 0; --i) {
    now += block_gradient - held[static_cast<std::size_t>(i)];
    peak = std::max(peak, now);
  }
  // The embedding's and the head's gradients come last, beside what the walk left.
  peak = std::max(peak, now + gradients - block_gradient * static_cast<double>(layers));
  return s.fixed + peak;
}

// A kept block's gathered parameters: its weights gathered as float8 codes at 1 byte an element,
// the rest in the parameters' dtype (at one rank no copy of f32 values without float8 codes).
double kept_parameters(const ModelConfig& c, const CausalLMOptions& options, int world_size) {
  const std::int64_t float8 = block_float8_elements(c, options);
  if (world_size == 1 && c.dtype == DType::f32 && float8 == 0) return 0.0;  // the values themselves, no copy
  return static_cast<double>((c.block_parameter_count(tp_size()) - float8) *
                                 static_cast<std::int64_t>(dtype_size(c.dtype)) +
                             float8);
}

}  // namespace

double activation_peak(const ModelConfig& c, const CausalLMOptions& options, int world_size, std::int64_t tokens,
                       double gradient_bytes) {
  return activations(activation_sizes(c, options, tokens), kept_parameters(c, options, world_size), options, c, gradient_bytes);
}

RecomputePlan plan_recompute(const ModelConfig& c, const CausalLMOptions& options, int world_size,
                             std::int64_t tokens, double budget_bytes, double gradient_bytes) {
  const ActivationSizes s = activation_sizes(c, options, tokens);
  const double gathered = kept_parameters(c, options, world_size);
  RecomputePlan plan;
  plan.options = options;
  // Nothing to choose: every block keeps its activations, or ZeRO level 2 keeps every gathered block.
  const bool choose = options.checkpoint.use_checkpoint && options.checkpoint.zero_level == 3;
  if (choose) {
    CausalLMOptions o = options;
    o.keep_blocks = 0;
    o.checkpoint.keep_attention = o.checkpoint.keep_residual = false;
    // Each step keeps more; the last that fits is the plan.
    std::vector<CausalLMOptions> steps{o};
    o.checkpoint.keep_attention = true;
    steps.push_back(o);
    o.checkpoint.keep_residual = true;
    steps.push_back(o);
    for (std::int64_t k = 1; k <= c.layers; ++k) {
      o.keep_blocks = k;
      steps.push_back(o);
    }
    // activations() grows along the steps: the last that fits is found by bisection.
    std::size_t lo = 0, hi = steps.size();
    while (hi - lo > 1) {
      const std::size_t mid = (lo + hi) / 2;
      (activations(s, gathered, steps[mid], c, gradient_bytes) <= budget_bytes ? lo : hi) = mid;
    }
    plan.options = steps[lo];
  }
  plan.activation_bytes = activations(s, gathered, plan.options, c, gradient_bytes);
  plan.fits = plan.activation_bytes <= budget_bytes;
  plan.layers = c.layers;
  return plan;
}

std::string RecomputePlan::summary() const {
  std::ostringstream os;
  const auto& k = options.checkpoint;
  if (!k.use_checkpoint || options.keep_blocks >= layers) return "every block keeps its activations";
  if (k.zero_level == 2) return "every block recomputed, keeping its gathered parameters (ZeRO level 2)";
  os << options.keep_blocks << " of " << layers << " blocks kept whole";
  if (k.keep_attention || k.keep_residual)
    os << ", the others recomputed keeping their "
       << (k.keep_attention && k.keep_residual ? "attention outputs and residual sums"
                                                : k.keep_attention ? "attention outputs" : "residual sums");
  else
    os << ", the others recomputed";
  return os.str();
}

}  // namespace bmt::models
