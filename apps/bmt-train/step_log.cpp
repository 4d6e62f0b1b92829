#include "step_log.hpp"

#include <bmtrain/bmtrain.hpp>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "loss_plot.hpp"
#include "output_files.hpp"
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

std::string whole_file(int fd, const std::string& path) {
  std::string text;
  char buffer[1 << 16];
  for (std::uint64_t at = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof buffer, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    BMT_REQUIRE(n >= 0, "--metrics: cannot read '" << path << "' to resume it: " << std::strerror(errno));
    if (n == 0) return text;
    text.append(buffer, static_cast<std::size_t>(n));
    at += static_cast<std::uint64_t>(n);
  }
}

// The bytes of `text` that hold whole records of steps up to `last_step`: everything before the
// first line that is not such a record (a later step, or a line cut short by a crash).
std::uint64_t records_up_to(const std::string& text, std::int64_t last_step, std::int64_t& first_dropped) {
  std::size_t at = 0;
  first_dropped = -1;
  while (at < text.size()) {
    const std::size_t end = text.find('\n', at);
    if (end == std::string::npos) break;  // no newline: cut short
    const auto j = nlohmann::json::parse(text.begin() + static_cast<std::ptrdiff_t>(at),
                                         text.begin() + static_cast<std::ptrdiff_t>(end), nullptr, false);
    const auto step = j.is_object() ? j.find("step") : j.end();
    if (j.is_discarded() || !j.is_object() || step == j.end() || !step->is_number_integer()) break;
    if (step->get<std::int64_t>() > last_step) {
      first_dropped = step->get<std::int64_t>();
      break;
    }
    at = end + 1;
  }
  return at;
}

}  // namespace

StepLog::StepLog(const TrainOptions& options, std::int64_t start_step) : o_(options) {
  if (o_.metrics.empty() || bmt::rank() != 0) return;
  // Nothing in the file changes before the first record: a run that fails to start leaves it as
  // it was (and none where there was none).
  fd_ = ::open(o_.metrics.c_str(), O_RDWR | O_CLOEXEC);
  const bool created = fd_ < 0 && errno == ENOENT;
  if (created) fd_ = ::open(o_.metrics.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  BMT_REQUIRE(fd_ >= 0, "--metrics: cannot write '" << o_.metrics << "': " << std::strerror(errno));
  try {
    check_output_file("--plot", plot_path(o_));
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    if (created) ::unlink(o_.metrics.c_str());
    throw;
  }
  const std::string text = whole_file(fd_, o_.metrics);
  std::int64_t first_dropped = -1;
  size_ = start_step > 0 ? records_up_to(text, start_step, first_dropped) : 0;
  cut_pending_ = size_ < text.size();
  if (start_step > 0 && cut_pending_)
    bmt::print_rank("--metrics: the records in '", o_.metrics, "' after step ", start_step,
                    first_dropped > 0 ? " (from step " + std::to_string(first_dropped) + " on)" : std::string(),
                    " are replaced by this run's");
}

StepLog::~StepLog() {
  if (fd_ >= 0) ::close(fd_);
}

bool StepLog::prints(const StepRecord& r) const {
  return r.step % o_.log_every == 0 || r.step == o_.steps || r.eval_loss;
}

void StepLog::record(const StepRecord& r) {
  if (fd_ < 0) return;
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
  const std::string line = j.dump() + '\n';
  std::size_t done = 0;
  int err = 0;
  while (done < line.size()) {
    const ssize_t n = ::pwrite(fd_, line.data() + done, line.size() - done, static_cast<off_t>(size_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  if (done == line.size()) {
    size_ += done;
    // What the file held beyond the records kept (a new run's predecessor, or the steps a resumed
    // run repeats) goes with the first record written.
    if (cut_pending_) {
      BMT_REQUIRE(::ftruncate(fd_, static_cast<off_t>(size_)) == 0,
                  "--metrics '" << o_.metrics << "': cannot cut the file after the record of step " << r.step << ": "
                                << std::strerror(errno));
      cut_pending_ = false;
    }
    return;
  }
  // Whatever part of the record went out is taken back (shrinking needs no space), so the file
  // keeps whole lines.
  const bool restored = ::ftruncate(fd_, static_cast<off_t>(size_)) == 0;
  cut_pending_ = !restored;
  BMT_REQUIRE(false, "--metrics '" << o_.metrics << "': writing the record of step " << r.step << " failed: "
                                   << std::strerror(err) << " (a full disk, or a file size limit?); "
                                   << (restored ? "the file keeps the whole records of the steps before it"
                                                : "the part of it written could not be taken back"));
}

void StepLog::print(const StepRecord& r) const {
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
  if (fd_ < 0) return;
  // close() can report a deferred write error (NFS): records that did not close are not trusted.
  const int closed = ::close(fd_);
  fd_ = -1;
  BMT_REQUIRE(closed == 0, "--metrics '" << o_.metrics << "': closing the file failed: " << std::strerror(errno));
  const std::string svg = plot_path(o_);
  plot_loss_curve(o_.metrics, svg, title, entropy_rate);
  bmt::print_rank("loss curve: ", svg);
}

}  // namespace bmt_train
