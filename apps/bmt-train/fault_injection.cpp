#include "fault_injection.hpp"

#include <bmtrain/bmtrain.hpp>

#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <tuple>

namespace bmt_train {

namespace {

// A non-negative decimal number of at most 18 digits; false for anything else.
bool read_number(const std::string& text, std::int64_t& out) {
  if (text.empty() || text.size() > 18) return false;
  out = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    out = out * 10 + (c - '0');
  }
  return true;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

FaultInjection FaultInjection::from_environment() {
  const char* spec = std::getenv("BMT_TRAIN_FAULT");
  return spec && *spec ? parse(spec) : FaultInjection{};
}

FaultInjection FaultInjection::parse(const std::string& spec) {
  const auto colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  const auto second = rest.find(':');
  const std::string step_text = rest.substr(0, second), rank_text = second == std::string::npos ? "0" : rest.substr(second + 1);
  FaultInjection f;
  if (name == "kill-step") f.point_ = Point::after_backward;
  else if (name == "kill-save-begun") f.point_ = Point::save_begun;
  else if (name == "kill-save-model") f.point_ = Point::save_model_written;
  else if (name == "kill-save-files") f.point_ = Point::save_files_written;
  f.kind_ = f.point_ != Point::none ? Kind::kill : name == "nan-loss" ? Kind::nan_loss : name == "inf-loss" ? Kind::inf_loss : Kind::none;
  for (const auto& [fault, point, limit] : {std::tuple{"disk-full", Point::save_begun, 4096},
                                            std::tuple{"disk-full-metrics", Point::metrics_record, 4096},
                                            std::tuple{"disk-full-plot", Point::plot, 256},
                                            std::tuple{"disk-full-timeline", Point::timeline, 256},
                                            std::tuple{"disk-full-export", Point::export_hf, 4096}})
    if (name == fault) {
      f.kind_ = Kind::disk_full;
      f.point_ = point;
      f.file_size_limit_ = limit;
    }
  std::int64_t rank = 0;
  BMT_REQUIRE(f.kind_ != Kind::none && read_number(step_text, f.step_) && f.step_ > 0 && read_number(rank_text, rank) &&
                  rank < (1 << 30),
              "BMT_TRAIN_FAULT: expected <fault>:<step>[:<rank>] with fault kill-step, kill-save-begun, kill-save-model, "
              "kill-save-files, disk-full, disk-full-metrics, disk-full-plot, disk-full-timeline, "
              "disk-full-export, nan-loss or inf-loss and a step > 0, found '"
                  << spec << "'");
  f.rank_ = static_cast<int>(rank);
  return f;
}

bool FaultInjection::here(std::int64_t step) const { return step == step_ && bmt::rank() == rank_; }

void FaultInjection::at(Point point, std::int64_t step) const {
  if (point != point_ || !here(step)) return;
  if (kind_ == Kind::disk_full) {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit {};
    ::getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = static_cast<rlim_t>(file_size_limit_);
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::fprintf(stderr, "[rank %d] BMT_TRAIN_FAULT: file size limit now %lld bytes at step %lld (t=%.3f)\n", rank_,
                 static_cast<long long>(file_size_limit_), static_cast<long long>(step), wall_seconds());
    return;
  }
  if (kind_ != Kind::kill) return;
  // The wall-clock time lets a test measure how long the job takes to end after the kill.
  std::fprintf(stderr, "[rank %d] BMT_TRAIN_FAULT: killing this rank at step %lld (t=%.3f)\n", rank_,
               static_cast<long long>(step), wall_seconds());
  std::fflush(stderr);
  std::raise(SIGKILL);
}

float FaultInjection::loss_factor(std::int64_t step) const {
  if (!here(step)) return 1.0f;
  if (kind_ == Kind::nan_loss) return std::numeric_limits<float>::quiet_NaN();
  if (kind_ == Kind::inf_loss) return std::numeric_limits<float>::infinity();
  return 1.0f;
}

}  // namespace bmt_train
