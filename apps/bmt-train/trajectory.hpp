#pragma once
// What a run's trajectory depends on beyond its checkpoint: the learning-rate schedule and its
// length, the optimizer's settings, the data (files, order, batch and sequence length) and the
// number of ranks. A checkpoint records it (training_state.json, 'extra.trajectory'); a run that
// resumes compares its own with it and says, one line per setting, what a changed one means: the
// run continues exactly only when nothing changed (and on the same number of ranks, bit for bit).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "options.hpp"

namespace bmt_train {

// The files a run reads its tokens from, with their token counts; empty for synthetic data.
using DataFiles = std::vector<std::pair<std::string, std::uint64_t>>;

// The options whose option_table row has an Effect (the peak rate as the run resolved it), the
// data files and the number of ranks.
nlohmann::json trajectory(const TrainOptions& options, float peak_lr, int world_size, const DataFiles& files);

// One line per setting that differs between the checkpoint's trajectory (`saved`: the state's
// 'extra.trajectory', null when it has none) and this run's (`now`), saying what it means for the
// steps after `step`. Empty when the run continues the checkpoint's exactly. A saved trajectory
// of the wrong shape is a bmt::Error naming the field.
std::vector<std::string> trajectory_changes(const nlohmann::json& saved, const nlohmann::json& now, std::int64_t step);

}  // namespace bmt_train
