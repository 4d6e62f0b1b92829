#pragma once
// What a run reports of each step: a JSON line in --metrics (rank 0), a console line every
// --log-every steps, and the loss curve drawn from the metrics at the end.
#include <cstdint>
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
  // Opens --metrics on rank 0: a new run writes it from the start; a run resuming at start_step > 0
  // keeps the records of steps up to start_step and replaces those after it (a run that went on
  // past its last checkpoint wrote them), so no step is recorded twice. What the file held beyond
  // the records kept is cut when the first record is written, not before; only the records kept
  // are read. A device or pipe (/dev/null) is written as a stream, with no loss curve; one that
  // reads back data (/dev/zero) is refused. Checks that the loss curve's path can be written.
  // Throws bmt::Error when either cannot be written.
  StepLog(const TrainOptions& options, std::int64_t start_step);
  ~StepLog();
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;

  // Whether this rank writes the metrics.
  bool records() const { return fd_ >= 0; }
  // Appends the step's metrics line in one write. A failed write (a full disk) leaves the file
  // holding whole lines, as it was before, and throws bmt::Error naming the file and the step.
  void record(const StepRecord& record);
  // Prints the step's console line on the steps that print.
  void print(const StepRecord& record) const;
  // Whether print() prints this step's line (the progress bar is cleared first).
  bool prints(const StepRecord& record) const;
  // Closes the metrics and draws the loss curve next to them (or at --plot); throws bmt::Error when
  // the picture cannot be written, leaving no partial picture behind.
  void finish(const std::string& title, double entropy_rate);

 private:
  const TrainOptions& o_;
  int fd_ = -1;
  bool regular_ = true;        // false: a device or pipe, written as a stream (never read, cut or drawn)
  std::uint64_t size_ = 0;     // bytes of whole records in the file
  bool cut_pending_ = false;    // the file holds more than those, to be cut
};

}  // namespace bmt_train
