// Fuzz target: a checkpoint's training_state.json as bmt-train reads it to resume (JSON text ->
// bmt::io::TrainingState -> the loader position and counters of bmt_train::resume_point). The
// input is the file's content. Invalid JSON is the JSON parser's business; valid JSON with missing,
// ill-typed or out-of-range fields must be a bmt::Error, never another exception.
#include <bmtrain/io/training_state.hpp>
#include <bmtrain/runtime/error.hpp>

#include <cstdint>
#include <nlohmann/json.hpp>

#include "fuzz_check.hpp"
#include "resume_state.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  try {
    const auto state = j.get<bmt::io::TrainingState>();
    BMT_FUZZ_CHECK(state.step >= 0);
    const auto point = bmt_train::resume_point(state);
    BMT_FUZZ_CHECK(point.step == state.step && point.scheduler_step >= 0 && point.clean_steps >= 0);
    BMT_FUZZ_CHECK(!point.loss_scale || *point.loss_scale > 0);
    // What a resumed run writes back reads the same.
    const nlohmann::json again = state;
    BMT_FUZZ_CHECK(again.get<bmt::io::TrainingState>().step == state.step);
  } catch (const bmt::Error&) {
  }
  return 0;
}
