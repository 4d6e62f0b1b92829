#pragma once
// What a run reports of each step: a JSON line in --metrics (rank 0), a console line every
// --log-every steps, and the loss curve drawn from the metrics at the end.
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include "options.hpp"

namespace bmt_train {

struct StepRecord {
  std::int64_t step = 0;  // 1-based: the optimizer steps taken
  float loss = 0;         // NaN when not read on this step
  float lr = 0;
  float grad_norm = 0;
  double seconds = 0;
  double tokens_per_s = 0;
  std::optional<double> mfu;
  std::size_t mem_bytes = 0, mem_peak_bytes = 0;
  float loss_scale = 1;
  bool applied = true;  // false: the step was skipped (non-finite gradients)
  std::optional<double> eval_loss;
};

class StepLog {
 public:
  // Opens --metrics on rank 0 (appending when resuming at start_step > 0); throws bmt::Error
  // when it cannot be written.
  StepLog(const TrainOptions& options, std::int64_t start_step);

  // Writes the step's metrics line, and prints its console line on the steps that print.
  void add(const StepRecord& record);
  // Whether add() prints this step's line (the progress bar is cleared first).
  bool prints(const StepRecord& record) const;
  // Closes the metrics and draws the loss curve next to them (or at --plot).
  void finish(const std::string& title, double entropy_rate);

 private:
  const TrainOptions& o_;
  std::ofstream metrics_;
};

}  // namespace bmt_train
