#pragma once
// The training loop of bmt-train: data, model, optimizer, logging, evaluation, checkpoints.
#include "agreed.hpp"
#include "options.hpp"

namespace bmt_train {

// Runs the training the options describe; returns the process exit code.
int train(const TrainOptions& options);

}  // namespace bmt_train
