#pragma once
// A live progress bar with ETA on rank 0.
#include <cstdint>

namespace bmt_train {

class ProgressBar {
 public:
  // Under an MPI launcher stdout is often a forwarded pseudo-terminal that ends up in a log, so
  // there the bar is shown only when asked for; elsewhere it is shown on an interactive terminal.
  ProgressBar(bool asked, bool refused);
  void show(std::int64_t step, std::int64_t total, double seconds_per_step);
  // Erases the bar so that a log line can be printed where it was.
  void clear();

 private:
  bool on_;
  bool shown_ = false;
};

}  // namespace bmt_train
