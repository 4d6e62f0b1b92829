// Fuzz target: a Hugging Face config.json as --init-from reads it (JSON text ->
// bmt::models::parse_hf_config). The input is the file's content. Invalid JSON is the JSON parser's
// business; valid JSON with missing, ill-typed, inconsistent or unsupported fields must be a
// bmt::Error, never another exception; an accepted config is consistent, written back it reads the
// same, and its tensor names are unique.
#include <bmtrain/io/hf_checkpoint.hpp>
#include <bmtrain/models/models.hpp>
#include <bmtrain/runtime/error.hpp>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>

#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    const auto c = bmt::models::parse_hf_config(j, "config.json");
    BMT_FUZZ_CHECK(c.heads > 0 && c.kv_heads > 0 && c.dim % c.heads == 0 && c.heads % c.kv_head_count() == 0);
    BMT_FUZZ_CHECK(c.arch == "gpt2" || c.arch == "llama");
    const auto again = bmt::models::parse_hf_config(bmt::models::hf_config_json(c), "written back");
    BMT_FUZZ_CHECK(again.arch == c.arch && again.vocab == c.vocab && again.dim == c.dim &&
                   again.layers == c.layers && again.heads == c.heads && again.kv_heads == c.kv_heads &&
                   again.ffn == c.ffn && again.max_seq == c.max_seq &&
                   again.rope.theta == c.rope.theta && again.rope.factor == c.rope.factor &&
                   again.tie_embeddings == c.tie_embeddings && again.dtype == c.dtype);
    if (c.layers <= 64) {  // names grow with the layers: enough to check uniqueness
      std::set<std::string> parameters, hub;
      const auto layout = bmt::models::hf_layout(c);
      for (const auto& t : layout.tensors) {
        BMT_FUZZ_CHECK(parameters.insert(t.parameter).second && hub.insert(t.hub).second);
        BMT_FUZZ_CHECK(!layout.ignored(t.hub));
      }
    }
  } catch (const bmt::Error&) {
  }
  return 0;
}
