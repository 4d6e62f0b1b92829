#pragma once
// The training loop of bmt-train: data, model, optimizer, logging, evaluation, checkpoints.
#include <stdexcept>

#include "options.hpp"

namespace bmt_train {

// Bad input found during setup, already agreed by every rank: exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs the training the options describe; returns the process exit code.
int train(const TrainOptions& options);

}  // namespace bmt_train
