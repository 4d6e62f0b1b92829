#include "bmtrain/models/model_config.hpp"

#include <algorithm>
#include <cmath>

#include "bmtrain/runtime/error.hpp"

namespace bmt::models {

std::int64_t ModelConfig::block_parameter_count(int tp) const {
  const std::int64_t C = dim, F = ffn, K = kv_head_count() * head_dim();
  if (arch == "gpt2")  // norms; QKV, the MLP's first projection: split; the output projections' biases: whole
    return 2 * 2 * C + (3 * C * C + 3 * C) / tp + (C * C / tp + C) + (F * C + F) / tp + (C * F / tp + C);
  // norms, q and o, k and v (whole when there are fewer key/value heads than ranks), the SwiGLU MLP
  const std::int64_t kv = splits_kv_heads(tp) ? 2 * K * C / tp : 2 * K * C;
  return 2 * C + 2 * C * C / tp + kv + 3 * C * F / tp;
}

std::int64_t ModelConfig::parameter_count(int tp) const {
  const std::int64_t C = dim;
  // wte (split by vocabulary rows), wpe and ln_f (whole); or the embedding and the final norm.
  std::int64_t outside = arch == "gpt2" ? vocab * C / tp + max_seq * C + 2 * C : vocab * C / tp + C;
  if (!tie_embeddings) outside += vocab * C / tp;  // a head of its own
  return layers * block_parameter_count(tp) + outside;
}

void ModelConfig::validate() const {
  BMT_REQUIRE(arch == "gpt2" || arch == "llama", "model arch: expected gpt2 or llama, found '" << arch << "'");
  BMT_REQUIRE(vocab > 0 && max_seq > 0 && layers > 0 && heads > 0 && dim > 0 && ffn > 0,
              "model dimensions: expected positive vocab, seq, layers, heads, dim and ffn, found vocab "
                  << vocab << ", seq " << max_seq << ", layers " << layers << ", heads " << heads << ", dim " << dim
                  << ", ffn " << ffn);
  // Token ids are int32 (and index tables of vocab rows).
  BMT_REQUIRE(vocab <= kMaxModelSize,
              "model vocabulary: expected at most " << kMaxModelSize << " tokens, found " << vocab);
  // The parameter count, a sum of products of three sizes, must fit in 64 bits with room to spare:
  // bounded above (in double, which cannot overflow) by 4 (dim + 2)(dim + ffn) a block and three
  // tables of dim columns (embedding, positions, head).
  const double parameters = static_cast<double>(layers) * 4.0 * (static_cast<double>(dim) + 2.0) *
                                (static_cast<double>(dim) + static_cast<double>(ffn)) +
                            3.0 * (static_cast<double>(vocab) + static_cast<double>(max_seq) + 1.0) *
                                static_cast<double>(dim);
  BMT_REQUIRE(parameters <= kMaxParameters, "model dimensions: expected at most 2^60 parameters, found up to "
                                                << parameters << " (" << layers << " layers of width " << dim
                                                << " and MLP " << ffn << ")");
  BMT_REQUIRE(dim % heads == 0,
              "model dimensions: expected dim divisible by heads, found dim " << dim << " and " << heads << " heads");
  BMT_REQUIRE(arch != "llama" || head_dim() % 2 == 0,
              "llama: expected an even head dimension for rotary embeddings, found " << head_dim());
  BMT_REQUIRE(kv_heads >= 0 && heads % kv_head_count() == 0,
              "model dimensions: expected key/value heads dividing the " << heads << " heads, found " << kv_heads);
  BMT_REQUIRE(arch == "llama" || kv_head_count() == heads,
              "gpt2: expected as many key/value heads as heads (grouped-query attention is Llama's), found "
                  << kv_heads << " and " << heads);
  BMT_REQUIRE(norm_eps > 0.0f && std::isfinite(norm_eps), "norm epsilon: expected a positive number, found " << norm_eps);
  BMT_REQUIRE(rope.theta > 0.0f && std::isfinite(rope.theta),
              "rope theta: expected a positive number, found " << rope.theta);
  BMT_REQUIRE(rope.factor == 0.0f || (rope.factor > 0.0f && rope.low_freq_factor > 0.0f &&
                                      rope.high_freq_factor > rope.low_freq_factor && rope.original_max_positions > 0.0f),
              "rope scaling: expected factor > 0, 0 < low_freq_factor < high_freq_factor and positive original "
              "positions, found factor "
                  << rope.factor << ", " << rope.low_freq_factor << ", " << rope.high_freq_factor << " and "
                  << rope.original_max_positions);
  BMT_REQUIRE(dropout >= 0.0f && dropout < 1.0f, "dropout: expected a probability in [0, 1), found " << dropout);
  BMT_REQUIRE(is_floating(dtype), "model dtype: expected f32, bf16 or f16, found " << dtype_name(dtype));
}

void ModelConfig::check_tensor_parallel(int tp) const {
  BMT_REQUIRE(tp >= 1, "tensor parallelism: expected tp >= 1, found " << tp);
  if (tp == 1) return;
  const std::int64_t kv = kv_head_count();
  const bool splits = heads % tp == 0 && (kv % tp == 0 || tp % kv == 0) && ffn % tp == 0 && vocab % tp == 0;
  BMT_REQUIRE(splits, "tensor parallelism: expected heads, ffn and vocab divisible by tp and kv_heads divisible by "
                      "or dividing tp, found heads "
                          << heads << ", kv_heads " << kv << ", ffn " << ffn << ", vocab " << vocab << ", tp " << tp);
}

init::Fn residual_projection_init(const ModelConfig& c) {
  return init::normal(c.init_std / std::sqrt(2.0f * static_cast<float>(c.layers)));
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names{"tiny",     "gpt2-124m",      "gpt2-350m", "gpt2-774m", "gpt2-1.5b",
                                              "llama-1b", "tinyllama-1.1b", "llama2-7b", "llama3-8b", "llama3.2-1b"};
  return names;
}

ModelConfig preset(const std::string& name) {
  ModelConfig c;
  // Llama shapes as released (config.json): vocabulary, width, blocks, heads, key/value heads,
  // context, SwiGLU width; RMSNorm epsilon 1e-5, an untied head.
  auto llama = [&](std::int64_t vocab, std::int64_t dim, std::int64_t layers, std::int64_t heads, std::int64_t kv_heads,
                   std::int64_t max_seq, std::int64_t ffn) {
    c.arch = "llama";
    c.vocab = vocab;
    c.dim = dim;
    c.layers = layers;
    c.heads = heads;
    c.kv_heads = kv_heads;
    c.max_seq = max_seq;
    c.ffn = ffn;
    c.norm_eps = 1e-5f;
    c.tie_embeddings = false;
    c.default_lr = 3e-4f;
  };
  auto gpt2 = [&](std::int64_t layers, std::int64_t heads, std::int64_t dim) {
    c.arch = "gpt2";
    c.vocab = 50304;  // GPT-2's 50257 padded to a multiple of 128
    c.max_seq = 1024;
    c.layers = layers;
    c.heads = heads;
    c.dim = dim;
    c.ffn = 4 * dim;
  };
  if (name == "tiny") {
    gpt2(2, 4, 64);
    c.vocab = 256;
    c.max_seq = 128;
    c.default_lr = 1e-2f;
  } else if (name == "gpt2-124m") {
    gpt2(12, 12, 768);
  } else if (name == "gpt2-350m") {
    gpt2(24, 16, 1024);
  } else if (name == "gpt2-774m") {
    gpt2(36, 20, 1280);
  } else if (name == "gpt2-1.5b") {
    gpt2(48, 25, 1600);
  } else if (name == "llama-1b") {
    llama(32000, 2048, 22, 16, 16, 2048, 5632);
  } else if (name == "tinyllama-1.1b") {  // TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T
    llama(32000, 2048, 22, 32, 4, 2048, 5632);
  } else if (name == "llama2-7b") {  // meta-llama/Llama-2-7b-hf
    llama(32000, 4096, 32, 32, 32, 4096, 11008);
  } else if (name == "llama3-8b") {  // meta-llama/Meta-Llama-3-8B
    llama(128256, 4096, 32, 32, 8, 8192, 14336);
    c.rope.theta = 500000.0f;
  } else if (name == "llama3.2-1b") {  // meta-llama/Llama-3.2-1B
    llama(128256, 2048, 16, 32, 8, 131072, 8192);
    c.rope = {500000.0f, 32.0f, 1.0f, 4.0f, 8192.0f};
    c.tie_embeddings = true;
  } else {
    std::string list;
    for (const auto& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
    BMT_REQUIRE(false, "unknown model preset '" << name << "': expected one of " << list);
  }
  return c;
}

nlohmann::json to_json(const ModelConfig& c) {
  return {{"arch", c.arch},
          {"layers", c.layers},
          {"heads", c.heads},
          {"kv_heads", c.kv_head_count()},
          {"dim", c.dim},
          {"ffn", c.ffn},
          {"vocab", c.vocab},
          {"max_seq", c.max_seq},
          {"norm_eps", c.norm_eps},
          {"rope", {c.rope.theta, c.rope.factor, c.rope.low_freq_factor, c.rope.high_freq_factor,
                    c.rope.original_max_positions}},
          {"tie_embeddings", c.tie_embeddings},
          {"init_std", c.init_std},
          {"dropout", c.dropout},
          {"default_lr", c.default_lr},
          {"dtype", dtype_name(c.dtype)}};
}

namespace {

// Reads the fields of a recorded model, each checked for its kind; a missing key takes the
// default of a model recorded before the key was (when `fallback` says there is one).
class Recorded {
 public:
  Recorded(const nlohmann::json& j, const std::string& where) : j_(j), where_(where) {}

  const nlohmann::json& at(const char* key, const char* kind, bool (nlohmann::json::*is)() const) const {
    const auto it = j_.find(key);
    BMT_REQUIRE(it != j_.end() && ((*it).*is)(), where_ << " '" << key << "': expected " << kind << ", found "
                                                        << (it == j_.end() ? std::string("none") : it->dump()));
    return *it;
  }
  std::int64_t size(const char* key) const {
    const auto v = at(key, "a positive whole number", &nlohmann::json::is_number_integer).get<std::int64_t>();
    BMT_REQUIRE(v > 0, where_ << " '" << key << "': expected a positive whole number, found " << v);
    return v;
  }
  float real(const char* key, float fallback) const {
    return j_.contains(key) ? at(key, "a number", &nlohmann::json::is_number).get<float>() : fallback;
  }
  bool flag(const char* key) const { return at(key, "true or false", &nlohmann::json::is_boolean).get<bool>(); }
  std::string text(const char* key) const { return at(key, "a string", &nlohmann::json::is_string).get<std::string>(); }

 private:
  const nlohmann::json& j_;
  std::string where_;
};

}  // namespace

ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& where) {
  BMT_REQUIRE(j.is_object(), where << ": expected a JSON object, found " << j.dump());
  const Recorded r(j, where);
  ModelConfig c;
  c.arch = r.text("arch");
  c.layers = r.size("layers");
  c.heads = r.size("heads");
  c.kv_heads = j.contains("kv_heads") ? r.size("kv_heads") : c.heads;
  c.dim = r.size("dim");
  c.ffn = r.size("ffn");
  c.vocab = r.size("vocab");
  c.max_seq = r.size("max_seq");
  c.tie_embeddings = r.flag("tie_embeddings");
  // Recorded since checkpoints take the model from the record: absent, the presets' values.
  c.norm_eps = r.real("norm_eps", 1e-5f);
  if (j.contains("rope")) {
    const auto& rope = r.at("rope", "five numbers", &nlohmann::json::is_array);
    BMT_REQUIRE(rope.size() == 5 && std::all_of(rope.begin(), rope.end(), [](const auto& v) { return v.is_number(); }),
                where << " 'rope': expected five numbers (theta, factor, low and high frequency factors, original "
                         "positions), found "
                      << rope.dump());
    c.rope = {rope[0].get<float>(), rope[1].get<float>(), rope[2].get<float>(), rope[3].get<float>(),
              rope[4].get<float>()};
  }
  c.init_std = r.real("init_std", c.init_std);
  c.dropout = r.real("dropout", 0.0f);
  const std::string dtype = r.text("dtype");
  BMT_REQUIRE(dtype == "f32" || dtype == "bf16" || dtype == "f16",
              where << " 'dtype': expected f32, bf16 or f16, found '" << dtype << "'");
  c.dtype = parse_dtype(dtype);
  c.default_lr = r.real("default_lr", c.arch == "gpt2" ? 6e-4f : 3e-4f);
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  return c;
}

}  // namespace bmt::models
