#pragma once
// What bmt-train takes from a checkpoint to continue a run, checked before any of it is used. The
// files may come from another program or be damaged: every field is checked, on its own and against
// the others (the step in training_state.json against the COMPLETE marker's, the schedule's and the
// loss scaler's counts against the step, the model against the run's), and a bad one is a
// bmt::Error naming the file, the field, what was expected and what was found (never a JSON library
// exception escaping the trainer).
#include <bmtrain/data/token_loader.hpp>
#include <bmtrain/io/training_state.hpp>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "options.hpp"

namespace bmt_train {

struct ResumePoint {
  std::int64_t step = 0;                 // optimizer steps already taken
  std::int64_t scheduler_step = 0;       // the LR schedule's position (the step if absent)
  std::optional<float> loss_scale;       // absent: keep the configured initial scale
  int clean_steps = 0;                   // steps since the loss scale last changed
  std::uint64_t key_counter = 0;         // the dropout RNG's position
  bmt::data::LoaderState data;             // the data loader's position
  std::optional<std::int64_t> optimizer_steps;  // the updates applied ('extra.optimizer_steps'; absent: unchecked)
};

// Where a checkpoint was found and the run that continues it.
struct ResumeContext {
  std::string state_path;           // its training_state.json, for messages
  std::int64_t marked_step = 0;     // the step its COMPLETE marker (and directory name) give
  std::int64_t run_steps = 0;       // --steps: where the resumed run ends
};

ResumePoint resume_point(const bmt::io::TrainingState& state, const ResumeContext& context);

// The model a resumed run trains and its name. From the checkpoint's record (`extra.model`, and the
// config.json beside it for the keys an --export-hf writes back), with this run's --dropout and,
// where given, --dtype and the shape flags, which check_checkpoint_model then holds to the record.
// With --model or --init-from, or a checkpoint without a record (another program's), the model
// the options describe.
struct ResumedModel {
  ModelConfig config;
  std::string name;  // the preset's, or what the model came from
};
ResumedModel resumed_model(const TrainOptions& options, const bmt::io::TrainingState& state,
                           const std::string& checkpoint_dir);

// The model as a checkpoint records it (training_state.json's 'extra.model', model.safetensors'
// metadata): the configuration and, as "preset", the model's name.
nlohmann::json checkpoint_model(const std::string& name, const ModelConfig& config);
// The checkpoint's model (`extra.model`, when the state has one) against the run's, before any
// tensor is read: a different dtype or shape is one line naming both and the flags that match it.
void check_checkpoint_model(const bmt::io::TrainingState& state, const nlohmann::json& model,
                            const ResumeContext& context);

}  // namespace bmt_train
