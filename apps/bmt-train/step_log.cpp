#include "step_log.hpp"

#include <bmtrain/bmtrain.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "loss_plot.hpp"
#include "units.hpp"

namespace bmt_train {

namespace {

nlohmann::json number_or_null(std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

// --plot, or the metrics path with .jsonl replaced by (or else followed by) .svg.
std::string plot_path(const TrainOptions& o) {
  if (!o.plot.empty()) return o.plot;
  const std::string suffix = ".jsonl";
  if (o.metrics.size() > suffix.size() && o.metrics.compare(o.metrics.size() - suffix.size(), suffix.size(), suffix) == 0)
    return o.metrics.substr(0, o.metrics.size() - suffix.size()) + ".svg";
  return o.metrics + ".svg";
}

}  // namespace

StepLog::StepLog(const TrainOptions& options, std::int64_t start_step) : o_(options) {
  if (o_.metrics.empty() || bmt::rank() != 0) return;
  metrics_.open(o_.metrics, start_step > 0 ? std::ios::app : std::ios::trunc);
  BMT_REQUIRE(metrics_, "--metrics: cannot write '" << o_.metrics << "'");
}

bool StepLog::prints(const StepRecord& r) const {
  return r.step % o_.log_every == 0 || r.step == o_.steps || r.eval_loss;
}

void StepLog::add(const StepRecord& r) {
  if (metrics_.is_open()) {
    nlohmann::json j = {{"step", r.step},
                        {"loss", r.loss},
                        {"lr", r.lr},
                        {"grad_norm", r.grad_norm},
                        {"tokens_per_s", r.tokens_per_s},
                        {"mfu", number_or_null(r.mfu)},
                        {"mem_peak_bytes", r.mem_peak_bytes},
                        {"mem_bytes", r.mem_bytes},
                        {"step_ms", r.seconds * 1e3},
                        {"loss_scale", r.loss_scale},
                        {"skipped", !r.applied}};
    if (r.eval_loss) j["eval_loss"] = *r.eval_loss;
    metrics_ << j.dump() << '\n';
    metrics_.flush();
  }
  if (!prints(r)) return;
  char line[512];
  std::snprintf(line, sizeof line,
                "step %lld/%lld | loss %.4f | norm %.3f | lr %.2e | %.0f ms | %s MFU | %.0f tok/s | mem %s / peak %s%s",
                static_cast<long long>(r.step), static_cast<long long>(o_.steps), r.loss, r.grad_norm, r.lr,
                r.seconds * 1e3, r.mfu ? (std::to_string(*r.mfu * 100).substr(0, 4) + "%").c_str() : "-",
                r.tokens_per_s, bytes_text(static_cast<double>(r.mem_bytes)).c_str(),
                bytes_text(static_cast<double>(r.mem_peak_bytes)).c_str(), r.applied ? "" : " | step skipped");
  bmt::print_rank(line);
  if (r.eval_loss) bmt::print_rank("eval loss ", *r.eval_loss, " at step ", r.step);
}

void StepLog::finish(const std::string& title, double entropy_rate) {
  if (!metrics_.is_open()) return;
  metrics_.close();
  const std::string svg = plot_path(o_);
  plot_loss_curve(o_.metrics, svg, title, entropy_rate);
  bmt::print_rank("loss curve: ", svg);
}

}  // namespace bmt_train
