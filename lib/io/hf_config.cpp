#include "bmtrain/io/hf_config.hpp"

#include <cmath>
#include <optional>

#include "bmtrain/io/json_file.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt::io {

namespace {

// Field readers: a missing key takes `fallback` when there is one; a key of the wrong kind is an
// error naming it. JSON null counts as missing (transformers writes "n_inner": null).
class Fields {
 public:
  Fields(const nlohmann::json& j, const std::string& where) : j_(j), where_(where) {}

  const nlohmann::json* find(const char* key) const {
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  std::int64_t positive(const char* key, std::optional<std::int64_t> fallback = std::nullopt) const {
    const nlohmann::json* v = find(key);
    if (!v) {
      BMT_REQUIRE(fallback, where_ << ": expected a positive integer '" << key << "', found none");
      return *fallback;
    }
    // Far beyond any model, and small enough that products of a few sizes cannot overflow.
    constexpr std::int64_t max_size = std::int64_t{1} << 31;
    BMT_REQUIRE(v->is_number_integer() && v->get<std::int64_t>() > 0 && v->get<std::int64_t>() <= max_size,
                where_ << ": expected a positive integer '" << key << "' of at most " << max_size << ", found "
                       << v->dump());
    return v->get<std::int64_t>();
  }

  double number(const char* key, std::optional<double> fallback = std::nullopt) const {
    const nlohmann::json* v = find(key);
    if (!v) {
      BMT_REQUIRE(fallback, where_ << ": expected a number '" << key << "', found none");
      return *fallback;
    }
    BMT_REQUIRE(v->is_number() && std::isfinite(v->get<double>()),
                where_ << ": expected a number '" << key << "', found " << v->dump());
    return v->get<double>();
  }

  bool flag(const char* key, bool fallback) const {
    const nlohmann::json* v = find(key);
    if (!v) return fallback;
    BMT_REQUIRE(v->is_boolean(), where_ << ": expected true or false for '" << key << "', found " << v->dump());
    return v->get<bool>();
  }

  std::string text(const char* key, const std::string& fallback) const {
    const nlohmann::json* v = find(key);
    if (!v) return fallback;
    BMT_REQUIRE(v->is_string(), where_ << ": expected a string '" << key << "', found " << v->dump());
    return v->get<std::string>();
  }

  // A key whose value changes the model: it must be absent or `wanted`.
  void require_flag(const char* key, bool wanted, const char* why) const {
    BMT_REQUIRE(flag(key, wanted) == wanted, where_ << ": expected '" << key << "' " << (wanted ? "true" : "false")
                                                    << " (" << why << "), found " << find(key)->dump());
  }

 private:
  const nlohmann::json& j_;
  std::string where_;
};

DType dtype_of_torch(const std::string& name, const std::string& where) {
  if (name == "float32") return DType::f32;
  if (name == "bfloat16") return DType::bf16;
  if (name == "float16") return DType::f16;
  BMT_REQUIRE(false, where << ": expected torch_dtype float32, bfloat16 or float16, found '" << name << "'");
}

// The architecture a config describes, from model_type or, failing that, architectures.
std::string arch_of(const nlohmann::json& j, const std::string& where) {
  const Fields f(j, where);
  std::string type = f.text("model_type", "");
  if (type.empty()) {
    const auto* archs = f.find("architectures");
    if (archs && archs->is_array() && !archs->empty() && (*archs)[0].is_string()) {
      const std::string a = (*archs)[0].get<std::string>();
      if (a == "GPT2LMHeadModel") type = "gpt2";
      if (a == "LlamaForCausalLM") type = "llama";
    }
  }
  BMT_REQUIRE(type == "gpt2" || type == "llama",
              where << ": expected model_type gpt2 or llama (GPT2LMHeadModel, LlamaForCausalLM), found '"
                    << (type.empty() ? f.text("model_type", "") : type) << "'");
  return type;
}

void parse_gpt2(const Fields& f, HfModelConfig& c, const std::string& where) {
  c.vocab = f.positive("vocab_size");
  c.hidden = f.positive("n_embd");
  c.layers = f.positive("n_layer");
  c.heads = f.positive("n_head");
  c.kv_heads = c.heads;
  c.intermediate = f.positive("n_inner", 4 * c.hidden);
  c.max_positions = f.positive("n_positions", f.positive("n_ctx", 1024));
  c.norm_eps = f.number("layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = f.flag("tie_word_embeddings", true);
  const std::string act = f.text("activation_function", "gelu_new");
  BMT_REQUIRE(act == "gelu_new" || act == "gelu_pytorch_tanh",
              where << ": expected activation_function gelu_new (GELU, tanh form), found '" << act << "'");
  f.require_flag("scale_attn_weights", true, "scores scaled by 1/sqrt(head size)");
  f.require_flag("scale_attn_by_inverse_layer_idx", false, "no per-layer score scaling");
  f.require_flag("add_cross_attention", false, "a decoder without cross-attention");
}

// A rope_scaling (or transformers 5's rope_parameters) object: rope_type default, or llama3 with
// its four parameters.
void parse_rope_scaling(const nlohmann::json& s, HfModelConfig& c, const std::string& what) {
  BMT_REQUIRE(s.is_object(), what << ": expected an object or null, found " << s.dump());
  const Fields r(s, what);
  const std::string type = r.text("rope_type", r.text("type", "default"));
  BMT_REQUIRE(r.number("partial_rotary_factor", 1.0) == 1.0,
              what << ": expected partial_rotary_factor 1 (every dimension rotated), found "
                   << r.find("partial_rotary_factor")->dump());
  if (type == "default") return;
  BMT_REQUIRE(type == "llama3", what << ": expected rope_type llama3 or default, found '" << type << "'");
  c.rope_factor = r.number("factor");
  c.rope_low_freq_factor = r.number("low_freq_factor");
  c.rope_high_freq_factor = r.number("high_freq_factor");
  c.rope_original_max_positions = r.positive("original_max_position_embeddings");
  BMT_REQUIRE(c.rope_factor > 0.0 && c.rope_low_freq_factor > 0.0 && c.rope_high_freq_factor > c.rope_low_freq_factor,
              what << ": expected factor > 0 and 0 < low_freq_factor < high_freq_factor, found " << c.rope_factor << ", "
                   << c.rope_low_freq_factor << " and " << c.rope_high_freq_factor);
}

void parse_llama(const Fields& f, HfModelConfig& c, const std::string& where) {
  c.vocab = f.positive("vocab_size");
  c.hidden = f.positive("hidden_size");
  c.layers = f.positive("num_hidden_layers");
  c.heads = f.positive("num_attention_heads");
  c.kv_heads = f.positive("num_key_value_heads", c.heads);
  c.intermediate = f.positive("intermediate_size");
  c.max_positions = f.positive("max_position_embeddings", 2048);
  c.norm_eps = f.number("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = f.flag("tie_word_embeddings", false);
  const std::string act = f.text("hidden_act", "silu");
  BMT_REQUIRE(act == "silu", where << ": expected hidden_act silu (SwiGLU), found '" << act << "'");
  f.require_flag("attention_bias", false, "projections without biases");
  f.require_flag("mlp_bias", false, "projections without biases");
  if (f.find("head_dim"))
    BMT_REQUIRE(c.hidden % c.heads == 0 && f.positive("head_dim") == c.hidden / c.heads,
                where << ": expected head_dim hidden_size / num_attention_heads = " << c.hidden / c.heads
                      << ", found " << f.positive("head_dim"));
  // transformers 5 keeps theta and the scaling together in rope_parameters; earlier versions write
  // rope_theta and rope_scaling.
  c.rope_theta = f.number("rope_theta", 10000.0);
  if (const nlohmann::json* p = f.find("rope_parameters")) {
    parse_rope_scaling(*p, c, where + " rope_parameters");
    c.rope_theta = Fields(*p, where + " rope_parameters").number("rope_theta", c.rope_theta);
  } else if (const nlohmann::json* s = f.find("rope_scaling")) {
    parse_rope_scaling(*s, c, where + " rope_scaling");
  }
}

}  // namespace

void HfModelConfig::validate() const {
  BMT_REQUIRE(arch == "gpt2" || arch == "llama", "Hugging Face config: expected arch gpt2 or llama, found '" << arch << "'");
  BMT_REQUIRE(vocab > 0 && hidden > 0 && layers > 0 && heads > 0 && kv_heads > 0 && intermediate > 0 && max_positions > 0,
              "Hugging Face config: expected positive sizes, found vocab " << vocab << ", hidden " << hidden << ", layers "
                                                                           << layers << ", heads " << heads << ", kv heads "
                                                                           << kv_heads << ", intermediate " << intermediate
                                                                           << ", positions " << max_positions);
  BMT_REQUIRE(hidden % heads == 0, "Hugging Face config: expected a width divisible by the heads, found width "
                                       << hidden << " and " << heads << " heads");
  BMT_REQUIRE(heads % kv_heads == 0, "Hugging Face config: expected key/value heads dividing the " << heads
                                         << " heads, found " << kv_heads);
  BMT_REQUIRE(arch == "llama" || kv_heads == heads, "Hugging Face config: GPT-2 expected as many key/value heads as "
                                                    "heads, found " << kv_heads << " and " << heads);
  BMT_REQUIRE(arch != "llama" || head_dim() % 2 == 0,
              "Hugging Face config: expected an even head size for rotary embeddings, found " << head_dim());
  BMT_REQUIRE(norm_eps > 0.0, "Hugging Face config: expected a positive norm epsilon, found " << norm_eps);
  BMT_REQUIRE(rope_theta > 0.0, "Hugging Face config: expected a positive rope_theta, found " << rope_theta);
}

HfModelConfig parse_hf_config(const nlohmann::json& j, const std::string& where) {
  BMT_REQUIRE(j.is_object(), where << ": expected a JSON object, found " << j.type_name());
  HfModelConfig c;
  c.arch = arch_of(j, where);
  const Fields f(j, where);
  if (c.arch == "gpt2")
    parse_gpt2(f, c, where);
  else
    parse_llama(f, c, where);
  // transformers 4.56 and later write "dtype", earlier ones "torch_dtype".
  c.dtype = dtype_of_torch(f.text("dtype", f.text("torch_dtype", "float32")), where);
  c.source = j;
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  return c;
}

HfModelConfig read_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  return parse_hf_config(read_json(path), "config.json '" + path + "'");
}

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    default: break;
  }
  BMT_REQUIRE(false, "torch_dtype_name: expected f32, bf16 or f16, found " << dtype_name(dtype));
}

nlohmann::json hf_config_json(const HfModelConfig& c) {
  c.validate();
  nlohmann::json j = c.source.is_object() ? c.source : nlohmann::json::object();
  j["torch_dtype"] = torch_dtype_name(c.dtype);
  if (j.contains("dtype")) j["dtype"] = torch_dtype_name(c.dtype);
  j["vocab_size"] = c.vocab;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.arch == "gpt2") {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["n_embd"] = c.hidden;
    j["n_layer"] = c.layers;
    j["n_head"] = c.heads;
    j["n_inner"] = c.intermediate;
    j["n_positions"] = c.max_positions;
    if (j.contains("n_ctx")) j["n_ctx"] = c.max_positions;
    j["layer_norm_epsilon"] = c.norm_eps;
    j["activation_function"] = "gelu_new";
    j["scale_attn_weights"] = true;
    j["scale_attn_by_inverse_layer_idx"] = false;
    if (!j.contains("initializer_range")) j["initializer_range"] = 0.02;
    for (const char* p : {"resid_pdrop", "embd_pdrop", "attn_pdrop"})
      if (!j.contains(p)) j[p] = 0.0;
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["hidden_size"] = c.hidden;
    j["num_hidden_layers"] = c.layers;
    j["num_attention_heads"] = c.heads;
    j["num_key_value_heads"] = c.kv_heads;
    j["head_dim"] = c.head_dim();
    j["intermediate_size"] = c.intermediate;
    j["max_position_embeddings"] = c.max_positions;
    j["rms_norm_eps"] = c.norm_eps;
    nlohmann::json scaling = nullptr;
    if (c.rope_factor > 0.0)
      scaling = {{"rope_type", "llama3"},
                 {"factor", c.rope_factor},
                 {"low_freq_factor", c.rope_low_freq_factor},
                 {"high_freq_factor", c.rope_high_freq_factor},
                 {"original_max_position_embeddings", c.rope_original_max_positions}};
    if (j.contains("rope_parameters")) {  // transformers 5's form, kept
      nlohmann::json parameters = scaling.is_null() ? nlohmann::json{{"rope_type", "default"}} : scaling;
      parameters["rope_theta"] = c.rope_theta;
      j["rope_parameters"] = parameters;
      if (j.contains("rope_theta")) j["rope_theta"] = c.rope_theta;
      if (j.contains("rope_scaling")) j["rope_scaling"] = scaling;
    } else {  // the form every version reads
      j["rope_theta"] = c.rope_theta;
      j["rope_scaling"] = scaling;
    }
    j["hidden_act"] = "silu";
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    if (!j.contains("initializer_range")) j["initializer_range"] = 0.02;
    if (!j.contains("attention_dropout")) j["attention_dropout"] = 0.0;
  }
  return j;
}

}  // namespace bmt::io
