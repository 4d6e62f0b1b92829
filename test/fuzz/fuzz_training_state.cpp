// Fuzz target: a checkpoint's training_state.json as bmt-train reads it to resume (JSON text ->
// bmt::io::TrainingState -> bmt_train::resume_point, checked against the step of the checkpoint's
// COMPLETE marker and the run's --steps, the model and trajectory it records against the run's,
// and the data position restored into a loader over a small source). The input is the file's content. Invalid
// JSON is the JSON parser's business; valid JSON with missing, ill-typed, out-of-range or
// inconsistent fields must be a bmt::Error, never another exception.
#include <bmtrain/data/token_loader.hpp>
#include <bmtrain/io/training_state.hpp>
#include <bmtrain/runtime/error.hpp>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>

#include "fuzz_check.hpp"
#include "resume_state.hpp"
#include "trajectory.hpp"

namespace {

// 100 sequences of any length, every token 1.
class Constant final : public bmt::data::SequenceSource {
 public:
  std::uint64_t sequence_count(std::size_t) const override { return 100; }
  void sequence(std::uint64_t, std::size_t seq_len, std::int32_t* out) const override {
    for (std::size_t t = 0; t <= seq_len; ++t) out[t] = 1;
  }
};

void check(const bmt::io::TrainingState& state, std::int64_t marked_step, std::int64_t run_steps) {
  bmt_train::ResumeContext context;
  context.state_path = "training_state.json";
  context.marked_step = marked_step;
  context.run_steps = run_steps;
  try {
    const auto point = bmt_train::resume_point(state, context);
    BMT_FUZZ_CHECK(point.step == state.step && point.step == marked_step && point.step <= run_steps);
    BMT_FUZZ_CHECK(point.scheduler_step >= 0 && point.scheduler_step <= point.step);
    BMT_FUZZ_CHECK(point.clean_steps >= 0 && point.clean_steps <= point.step);
    BMT_FUZZ_CHECK(!point.loss_scale || *point.loss_scale > 0);
    bmt_train::TrainOptions options;
    bmt_train::check_checkpoint_model(state, bmt_train::checkpoint_model(options.model_name(), options.model_config()),
                                      context);
    // The model a run resuming it without model flags trains: the record's, which agrees with itself.
    const auto resumed = bmt_train::resumed_model(options, state, "/nonexistent-checkpoint");
    bmt_train::check_checkpoint_model(state, bmt_train::checkpoint_model(resumed.name, resumed.config), context);
    // The trajectory it records against a run's: one line per difference, each naming a setting.
    const auto saved = state.extra.find("trajectory");
    const auto now = bmt_train::trajectory(options, 1e-2f, 2, {{"data/a.bin", 5000}});
    const auto notes = bmt_train::trajectory_changes(saved == state.extra.end() ? nlohmann::json() : *saved, now,
                                                     point.step);
    for (const auto& note : notes) BMT_FUZZ_CHECK(!note.empty() && note.find('\n') == std::string::npos);
    if (saved != state.extra.end()) BMT_FUZZ_CHECK(bmt_train::trajectory_changes(now, now, point.step).empty());
    bmt::data::LoaderOptions lo;
    lo.global_batch = 4;
    lo.seq_len = 8;
    lo.rank = 0;
    lo.world_size = 1;
    bmt::data::TokenLoader loader(std::make_shared<Constant>(), lo);
    loader.restore(point.data);
    BMT_FUZZ_CHECK(loader.state().position <= loader.sequences_per_epoch());
    BMT_FUZZ_CHECK(loader.next().rows == 4);  // an accepted position yields the next batch
  } catch (const bmt::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  bmt::io::TrainingState state;
  try {
    state = j.get<bmt::io::TrainingState>();
  } catch (const bmt::Error&) {
    return 0;
  }
  BMT_FUZZ_CHECK(state.step >= 0);
  // What a resumed run writes back reads the same.
  const nlohmann::json again = state;
  BMT_FUZZ_CHECK(again.get<bmt::io::TrainingState>().step == state.step);
  // A checkpoint whose marker agrees with the state, resumed to a later step; then the cases the
  // corpus's damaged checkpoints stand for: a marker of another step, and --steps below the step.
  check(state, state.step, state.step + 8);
  check(state, 8, 16);
  check(state, state.step, state.step > 0 ? state.step - 1 : 0);
  return 0;
}
