#pragma once
// What bmt-train takes from a checkpoint's training_state.json to continue a run. The file may come
// from another program or be damaged: every field is checked, and a bad one is a bmt::Error naming
// what was expected and what was found (never a JSON library exception escaping the trainer).
#include <bmtrain/io/token_loader.hpp>
#include <bmtrain/io/training_state.hpp>

#include <cstdint>
#include <optional>

namespace bmt_train {

struct ResumePoint {
  std::int64_t step = 0;                 // optimizer steps already taken
  std::int64_t scheduler_step = 0;       // the LR schedule's position (the step if absent)
  std::optional<float> loss_scale;       // absent: keep the configured initial scale
  int clean_steps = 0;                   // steps since the loss scale last changed
  std::uint64_t key_counter = 0;         // the dropout RNG's position
  bmt::io::LoaderState data;             // the data loader's position
};

ResumePoint resume_point(const bmt::io::TrainingState& state);

}  // namespace bmt_train
