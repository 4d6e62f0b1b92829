#pragma once
// The startup table rank 0 prints: model, distribution, batch, data, schedule and memory.
#include "options.hpp"
#include "run_plan.hpp"

namespace bmt_train {

void print_banner(const TrainOptions& options, const ModelConfig& config, const RunPlan& plan);

}  // namespace bmt_train
