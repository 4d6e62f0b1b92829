#include "progress_bar.hpp"

#include <bmtrain/bmtrain.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace bmt_train {

namespace {

bool under_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(v)) return true;
  return false;
}

}  // namespace

ProgressBar::ProgressBar(bool asked, bool refused)
    : on_(bmt::rank() == 0 && !refused && (asked || (isatty(fileno(stdout)) && !under_launcher()))) {}

void ProgressBar::show(std::int64_t step, std::int64_t total, double seconds_per_step) {
  if (!on_) return;
  const int width = 30;
  const int done = total ? static_cast<int>(width * step / total) : width;
  const double eta = seconds_per_step * static_cast<double>(total - step);
  std::printf("\r[%s%s] %lld/%lld ETA %02d:%02d ", std::string(static_cast<std::size_t>(done), '=').c_str(),
              std::string(static_cast<std::size_t>(width - done), ' ').c_str(), static_cast<long long>(step),
              static_cast<long long>(total), static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
  std::fflush(stdout);
  shown_ = true;
}

void ProgressBar::clear() {
  if (!shown_) return;
  std::printf("\r%*s\r", 60, "");
  shown_ = false;
}

}  // namespace bmt_train
