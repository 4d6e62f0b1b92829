// bmt-train's models loaded from Hugging Face checkpoints (written here in the hub's names and
// layouts, GPT-2's Conv1D weights transposed) against the float64 reference of gpt_reference.hpp
// evaluated on the checkpoint's tensors as the test itself maps them: the loss of a batch, at 1
// and 2 ranks; GPT-2, Llama 2 (own head) and Llama 3 (grouped-query attention, tied head, rope
// scaling). And the presets against the released models' config.json.
#include <gtest/gtest.h>

#include <cmath>

#include "../models/hub_checkpoint.hpp"
#include "bmtrain/io/hf_checkpoint.hpp"
#include "gpt_reference.hpp"
#include "bmtrain/bmtrain.hpp"

namespace {

using namespace hub_checkpoint;
using bmt::test::SharedTempDir;

constexpr std::int64_t kBatch = 4, kSeq = 8;

// Token ids of the batch: [kBatch][kSeq + 1], the same on every rank.
std::vector<std::vector<std::int64_t>> sequences(std::int64_t vocab) {
  std::vector<std::vector<std::int64_t>> s(kBatch, std::vector<std::int64_t>(kSeq + 1));
  for (std::int64_t b = 0; b < kBatch; ++b)
    for (std::int64_t t = 0; t <= kSeq; ++t) s[b][t] = (b * 29 + t * t * 7 + 3) % vocab;
  return s;
}

// The reference's parameters, by bmt-train's names, from the checkpoint's tensors: the values the
// writer stored, Conv1D weights transposed back to [out, in].
gpt_reference::Params reference_parameters(const ModelConfig& c, DType dtype, float scale) {
  gpt_reference::Params p;
  for (const auto& t : stored_tensors(c)) {
    const std::int64_t n = numel(t.shape);
    std::vector<double> v(static_cast<std::size_t>(n));
    for (std::int64_t k = 0; k < n; ++k) {
      const std::int64_t at = t.transposed ? (k % t.shape[0]) * t.shape[1] + k / t.shape[0] : k;
      v[static_cast<std::size_t>(k)] = rounded(scale * value(t.hub, at), dtype);
    }
    p[t.parameter] = std::move(v);
  }
  return p;
}

gpt_reference::Shape reference_shape(const ModelConfig& c) {
  gpt_reference::Shape s{c.arch, c.vocab, c.dim, c.heads, c.ffn, c.layers, c.norm_eps, c.rope.theta};
  s.kv_heads = c.kv_head_count();
  s.llama_tied = c.arch == "llama" && c.tie_embeddings;
  s.rope_factor = c.rope.factor;
  s.rope_low_freq_factor = c.rope.low_freq_factor;
  s.rope_high_freq_factor = c.rope.high_freq_factor;
  s.rope_original_positions = static_cast<double>(c.rope.original_max_positions);
  return s;
}

// The model's mean loss over the batch (each rank its rows) and the reference's.
void check_loss(const ModelConfig& base, DType dtype, double tolerance) {
  SharedTempDir tmp;
  const std::string dir = tmp / "checkpoint";
  const float scale = 1.0f;
  write_checkpoint(dir, base, {dtype, 2, "transformer.", false, scale});
  ModelConfig cfg = bmt::models::read_hf_config(dir);
  cfg.dtype = dtype;
  bmt::models::CausalLM model(cfg);
  bmt::init_parameters(model);
  bmt::models::load_hf_checkpoint(model, dir);

  const auto all = sequences(cfg.vocab);
  const int n = bmt::world_size();
  ASSERT_EQ(kBatch % n, 0);
  const std::int64_t rows = kBatch / n, first = bmt::rank() * rows;
  std::vector<std::int64_t> tokens, targets;
  std::vector<std::vector<std::int64_t>> ref_tokens, ref_targets;
  for (std::int64_t b = 0; b < kBatch; ++b) {
    ref_tokens.emplace_back(all[b].begin(), all[b].end() - 1);
    ref_targets.emplace_back(all[b].begin() + 1, all[b].end());
    if (b < first || b >= first + rows) continue;
    tokens.insert(tokens.end(), all[b].begin(), all[b].end() - 1);
    targets.insert(targets.end(), all[b].begin() + 1, all[b].end());
  }
  bmt::NoGradGuard no_grad;
  float loss = model.loss(bmt::Tensor::from_ints(tokens, {rows, kSeq}), bmt::Tensor::from_ints(targets, {rows, kSeq}))
                   .to_host_floats()[0];
  bmt::context().host_comm().all_reduce(&loss, &loss, 1, DType::f32, bmt::ReduceOp::avg, bmt::context().compute_stream());
  const double want =
      gpt_reference::loss(reference_parameters(cfg, dtype, scale), reference_shape(cfg), ref_tokens, ref_targets);
  EXPECT_NEAR(loss, want, tolerance * want) << cfg.arch << " " << bmt::dtype_name(dtype);
  // Far from a uniform prediction's log(vocab): the weights shape the loss.
  EXPECT_GT(std::fabs(want - std::log(static_cast<double>(cfg.vocab))), 0.5) << want;
}

ModelConfig llama3_like() {
  ModelConfig c = llama_config(true);  // 4 heads over 2 key/value heads, a tied head
  c.dim = 32;                         // 8-wide heads: 4 rotary frequencies, in every band of the scaling
  return c;
}

TEST(HfImport, Gpt2LossMatchesTheReference) {
  check_loss(gpt2_config(), DType::f32, 1e-5);
  check_loss(gpt2_config(), DType::bf16, 2e-2);
}

TEST(HfImport, Llama2LossMatchesTheReference) {
  ModelConfig c = llama_config(false);
  c.kv_heads = c.heads;
  check_loss(c, DType::f32, 1e-5);
}

TEST(HfImport, Llama3LossMatchesTheReference) {
  const ModelConfig c = llama3_like();
  // The writer's config.json asks for rope_theta 500000 with rope_scaling llama3 factor 8 over 64
  // original positions: check that it arrives.
  SharedTempDir tmp;
  write_checkpoint(tmp / "c", c, {});
  const auto hf = bmt::models::read_hf_config(tmp / "c");
  ASSERT_DOUBLE_EQ(hf.rope.factor, 8.0);
  ASSERT_EQ(hf.rope.original_max_positions, 64.0f);
  check_loss(c, DType::f32, 1e-5);
  check_loss(c, DType::bf16, 2e-2);
}

// ---- Presets: the released shapes -------------------------------------------------------------

void expect_preset_is(const std::string& name, const std::string& config_json) {
  const ModelConfig want = bmt::models::parse_hf_config(Json::parse(config_json), name);
  const ModelConfig got = bmt::models::preset(name);
  EXPECT_EQ(got.arch, want.arch) << name;
  if (got.arch == "llama") EXPECT_EQ(got.vocab, want.vocab) << name;  // GPT-2's presets pad 50257 to 50304
  EXPECT_EQ(got.dim, want.dim) << name;
  EXPECT_EQ(got.layers, want.layers) << name;
  EXPECT_EQ(got.heads, want.heads) << name;
  EXPECT_EQ(got.kv_head_count(), want.kv_head_count()) << name;
  EXPECT_EQ(got.ffn, want.ffn) << name;
  EXPECT_EQ(got.max_seq, want.max_seq) << name;
  EXPECT_EQ(got.norm_eps, want.norm_eps) << name;
  EXPECT_EQ(got.tie_embeddings, want.tie_embeddings) << name;
  EXPECT_EQ(got.rope.theta, want.rope.theta) << name;
  EXPECT_EQ(got.rope.factor, want.rope.factor) << name;
  EXPECT_EQ(got.rope.low_freq_factor, want.rope.low_freq_factor) << name;
  EXPECT_EQ(got.rope.high_freq_factor, want.rope.high_freq_factor) << name;
  EXPECT_EQ(got.rope.original_max_positions, want.rope.original_max_positions) << name;
}

TEST(HfImport, PresetsHaveTheReleasedShapes) {
  // The released config.json files' model fields.
  expect_preset_is("tinyllama-1.1b", R"({"architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 2048, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 22, "num_key_value_heads": 4, "rms_norm_eps": 1e-05,
    "rope_scaling": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 32000})");
  expect_preset_is("llama2-7b", R"({"architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "rms_norm_eps": 1e-05,
    "rope_scaling": null, "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float16",
    "vocab_size": 32000})");
  expect_preset_is("llama3-8b", R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 500000.0, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "vocab_size": 128256})");
  expect_preset_is("llama3.2-1b", R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 32.0,
    "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192,
    "rope_type": "llama3"}, "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "vocab_size": 128256})");
  for (const auto& [name, sizes] : std::vector<std::pair<std::string, std::string>>{
           {"gpt2-124m", R"("n_embd": 768, "n_head": 12, "n_layer": 12)"},
           {"gpt2-350m", R"("n_embd": 1024, "n_head": 16, "n_layer": 24)"},
           {"gpt2-774m", R"("n_embd": 1280, "n_head": 20, "n_layer": 36)"},
           {"gpt2-1.5b", R"("n_embd": 1600, "n_head": 25, "n_layer": 48)"}})
    expect_preset_is(name, R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
      "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_positions": 1024, "vocab_size": 50257, )" +
                               sizes + "}");
}

}  // namespace
