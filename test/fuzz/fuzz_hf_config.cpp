// Fuzz target: a Hugging Face config.json as --init-from reads it (JSON text ->
// bmt::io::parse_hf_config). The input is the file's content. Invalid JSON is the JSON parser's
// business; valid JSON with missing, ill-typed, inconsistent or unsupported fields must be a
// bmt::Error, never another exception; an accepted config is consistent, written back it reads the
// same, and its tensor names are unique.
#include <bmtrain/io/hf_checkpoint.hpp>
#include <bmtrain/io/hf_config.hpp>
#include <bmtrain/runtime/error.hpp>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>

#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    const auto c = bmt::io::parse_hf_config(j, "config.json");
    BMT_FUZZ_CHECK(c.heads > 0 && c.kv_heads > 0 && c.hidden % c.heads == 0 && c.heads % c.kv_heads == 0);
    BMT_FUZZ_CHECK(c.arch == "gpt2" || c.arch == "llama");
    const auto again = bmt::io::parse_hf_config(bmt::io::hf_config_json(c), "written back");
    BMT_FUZZ_CHECK(again.arch == c.arch && again.vocab == c.vocab && again.hidden == c.hidden &&
                   again.layers == c.layers && again.heads == c.heads && again.kv_heads == c.kv_heads &&
                   again.intermediate == c.intermediate && again.max_positions == c.max_positions &&
                   again.rope_theta == c.rope_theta && again.rope_factor == c.rope_factor &&
                   again.tie_word_embeddings == c.tie_word_embeddings && again.dtype == c.dtype);
    if (c.layers <= 64) {  // names grow with the layers: enough to check uniqueness
      std::set<std::string> parameters, hub;
      for (const auto& t : bmt::io::hf_tensor_names(c)) {
        BMT_FUZZ_CHECK(parameters.insert(t.parameter).second && hub.insert(t.hub).second);
        BMT_FUZZ_CHECK(!bmt::io::hf_ignored_tensor(c, t.hub));
      }
    }
  } catch (const bmt::Error&) {
  }
  return 0;
}
