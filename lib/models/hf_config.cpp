#include "bmtrain/models/hf_config.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "bmtrain/io/hf_checkpoint.hpp"
#include "bmtrain/io/json_file.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt::models {

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
    constexpr std::int64_t max_size = kMaxModelSize;
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

void parse_gpt2(const Fields& f, ModelConfig& c, const std::string& where) {
  c.vocab = f.positive("vocab_size");
  c.dim = f.positive("n_embd");
  c.layers = f.positive("n_layer");
  c.heads = f.positive("n_head");
  c.kv_heads = c.heads;
  c.ffn = f.positive("n_inner", 4 * c.dim);
  c.max_seq = f.positive("n_positions", f.positive("n_ctx", 1024));
  c.norm_eps = static_cast<float>(f.number("layer_norm_epsilon", 1e-5));
  c.tie_embeddings = f.flag("tie_word_embeddings", true);
  const std::string act = f.text("activation_function", "gelu_new");
  BMT_REQUIRE(act == "gelu_new" || act == "gelu_pytorch_tanh",
              where << ": expected activation_function gelu_new (GELU, tanh form), found '" << act << "'");
  f.require_flag("scale_attn_weights", true, "scores scaled by 1/sqrt(head size)");
  f.require_flag("scale_attn_by_inverse_layer_idx", false, "no per-layer score scaling");
  f.require_flag("add_cross_attention", false, "a decoder without cross-attention");
}

// A rope_scaling (or transformers 5's rope_parameters) object: rope_type default, or llama3 with
// its four parameters.
void parse_rope_scaling(const nlohmann::json& s, ModelConfig& c, const std::string& what) {
  BMT_REQUIRE(s.is_object(), what << ": expected an object or null, found " << s.dump());
  const Fields r(s, what);
  const std::string type = r.text("rope_type", r.text("type", "default"));
  BMT_REQUIRE(r.number("partial_rotary_factor", 1.0) == 1.0,
              what << ": expected partial_rotary_factor 1 (every dimension rotated), found "
                   << r.find("partial_rotary_factor")->dump());
  if (type == "default") return;
  BMT_REQUIRE(type == "llama3", what << ": expected rope_type llama3 or default, found '" << type << "'");
  c.rope.factor = static_cast<float>(r.number("factor"));
  c.rope.low_freq_factor = static_cast<float>(r.number("low_freq_factor"));
  c.rope.high_freq_factor = static_cast<float>(r.number("high_freq_factor"));
  c.rope.original_max_positions = static_cast<float>(r.positive("original_max_position_embeddings"));
  BMT_REQUIRE(c.rope.factor > 0.0f && c.rope.low_freq_factor > 0.0f && c.rope.high_freq_factor > c.rope.low_freq_factor,
              what << ": expected factor > 0 and 0 < low_freq_factor < high_freq_factor, found " << c.rope.factor << ", "
                   << c.rope.low_freq_factor << " and " << c.rope.high_freq_factor);
}

void parse_llama(const Fields& f, ModelConfig& c, const std::string& where) {
  c.vocab = f.positive("vocab_size");
  c.dim = f.positive("hidden_size");
  c.layers = f.positive("num_hidden_layers");
  c.heads = f.positive("num_attention_heads");
  c.kv_heads = f.positive("num_key_value_heads", c.heads);
  c.ffn = f.positive("intermediate_size");
  c.max_seq = f.positive("max_position_embeddings", 2048);
  c.norm_eps = static_cast<float>(f.number("rms_norm_eps", 1e-6));
  c.tie_embeddings = f.flag("tie_word_embeddings", false);
  const std::string act = f.text("hidden_act", "silu");
  BMT_REQUIRE(act == "silu", where << ": expected hidden_act silu (SwiGLU), found '" << act << "'");
  f.require_flag("attention_bias", false, "projections without biases");
  f.require_flag("mlp_bias", false, "projections without biases");
  if (f.find("head_dim"))
    BMT_REQUIRE(c.dim % c.heads == 0 && f.positive("head_dim") == c.dim / c.heads,
                where << ": expected head_dim hidden_size / num_attention_heads = " << c.dim / c.heads
                      << ", found " << f.positive("head_dim"));
  // transformers 5 keeps theta and the scaling together in rope_parameters; earlier versions write
  // rope_theta and rope_scaling.
  c.rope.theta = static_cast<float>(f.number("rope_theta", 10000.0));
  if (const nlohmann::json* p = f.find("rope_parameters")) {
    parse_rope_scaling(*p, c, where + " rope_parameters");
    c.rope.theta = static_cast<float>(Fields(*p, where + " rope_parameters").number("rope_theta", c.rope.theta));
  } else if (const nlohmann::json* s = f.find("rope_scaling")) {
    parse_rope_scaling(*s, c, where + " rope_scaling");
  }
}

// The shortest decimal that reads back as `f` (1e-5f -> 1e-05, not 9.99999975e-06), as a double:
// what a config.json should say of a float.
double shortest(float f) {
  char text[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, static_cast<double>(f));
    if (std::strtof(text, nullptr) == f) break;
  }
  return std::strtod(text, nullptr);
}

}  // namespace

const char* hf_model_class(const ModelConfig& c) { return c.arch == "gpt2" ? "GPT2LMHeadModel" : "LlamaForCausalLM"; }

ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& where) {
  BMT_REQUIRE(j.is_object(), where << ": expected a JSON object, found " << j.type_name());
  ModelConfig c;
  c.arch = arch_of(j, where);
  const Fields f(j, where);
  if (c.arch == "gpt2")
    parse_gpt2(f, c, where);
  else
    parse_llama(f, c, where);
  c.default_lr = c.arch == "gpt2" ? 6e-4f : 3e-4f;
  // transformers 4.56 and later write "dtype", earlier ones "torch_dtype".
  c.dtype = io::parse_torch_dtype(f.text("dtype", f.text("torch_dtype", "float32")), where);
  c.hf_source = j;
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
  return c;
}

ModelConfig read_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  return parse_hf_config(io::read_json(path), "config.json '" + path + "'");
}

nlohmann::json hf_config_json(const ModelConfig& c) {
  c.validate();
  nlohmann::json j = c.hf_source.is_object() ? c.hf_source : nlohmann::json::object();
  io::set_torch_dtype(j, c.dtype);
  j["vocab_size"] = c.vocab;
  j["tie_word_embeddings"] = c.tie_embeddings;
  if (c.arch == "gpt2") {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["n_embd"] = c.dim;
    j["n_layer"] = c.layers;
    j["n_head"] = c.heads;
    j["n_inner"] = c.ffn;
    j["n_positions"] = c.max_seq;
    if (j.contains("n_ctx")) j["n_ctx"] = c.max_seq;
    j["layer_norm_epsilon"] = shortest(c.norm_eps);
    j["activation_function"] = "gelu_new";
    j["scale_attn_weights"] = true;
    j["scale_attn_by_inverse_layer_idx"] = false;
    if (!j.contains("initializer_range")) j["initializer_range"] = 0.02;
    for (const char* p : {"resid_pdrop", "embd_pdrop", "attn_pdrop"})
      if (!j.contains(p)) j[p] = 0.0;
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["hidden_size"] = c.dim;
    j["num_hidden_layers"] = c.layers;
    j["num_attention_heads"] = c.heads;
    j["num_key_value_heads"] = c.kv_head_count();
    j["head_dim"] = c.head_dim();
    j["intermediate_size"] = c.ffn;
    j["max_position_embeddings"] = c.max_seq;
    j["rms_norm_eps"] = shortest(c.norm_eps);
    nlohmann::json scaling = nullptr;
    if (c.rope.factor > 0.0f)
      scaling = {{"rope_type", "llama3"},
                 {"factor", shortest(c.rope.factor)},
                 {"low_freq_factor", shortest(c.rope.low_freq_factor)},
                 {"high_freq_factor", shortest(c.rope.high_freq_factor)},
                 {"original_max_position_embeddings", static_cast<std::int64_t>(c.rope.original_max_positions)}};
    if (j.contains("rope_parameters")) {  // transformers 5's form, kept
      nlohmann::json parameters = scaling.is_null() ? nlohmann::json{{"rope_type", "default"}} : scaling;
      parameters["rope_theta"] = shortest(c.rope.theta);
      j["rope_parameters"] = parameters;
      if (j.contains("rope_theta")) j["rope_theta"] = shortest(c.rope.theta);
      if (j.contains("rope_scaling")) j["rope_scaling"] = scaling;
    } else {  // the form every version reads
      j["rope_theta"] = shortest(c.rope.theta);
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

}  // namespace bmt::models
