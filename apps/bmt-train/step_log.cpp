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

// Whole records of steps up to `last_step` at the start of the file: the bytes before the first
// line that is not such a record (a later step, or a line cut short by a crash). Reads no further
// than that line, and gives up on a line longer than any record, so that a file of another kind,
// however large, costs one buffer. Sets `first_dropped` to the first later step, or -1.
std::uint64_t records_up_to(int fd, const std::string& path, std::int64_t last_step, std::int64_t& first_dropped) {
  constexpr std::size_t longest_record = 1 << 16;
  first_dropped = -1;
  std::string pending;  // read, not yet taken as whole lines
  std::uint64_t kept = 0, at = 0;
  char buffer[1 << 16];
  while (true) {
    std::size_t end;
    while ((end = pending.find('\n')) != std::string::npos) {
      const auto j = nlohmann::json::parse(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(end), nullptr,
                                           false);
      const auto step = j.is_object() ? j.find("step") : j.end();
      if (j.is_discarded() || !j.is_object() || step == j.end() || !step->is_number_integer()) return kept;
      if (step->get<std::int64_t>() > last_step) {
        first_dropped = step->get<std::int64_t>();
        return kept;
      }
      kept += end + 1;
      pending.erase(0, end + 1);
    }
    if (pending.size() > longest_record) return kept;
    const ssize_t n = ::pread(fd, buffer, sizeof buffer, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    BMT_REQUIRE(n >= 0, "--metrics: cannot read '" << path << "' to resume it: " << std::strerror(errno));
    if (n == 0) return kept;  // the rest has no newline: cut short
    pending.append(buffer, static_cast<std::size_t>(n));
    at += static_cast<std::uint64_t>(n);
  }
}

// A device or pipe takes the records as a stream: nothing is read back, cut or drawn from it. One
// that gives data back when read (/dev/zero, /dev/full, /dev/urandom) is no place for them; a
// terminal is not read (that would take its input).
void check_stream(int fd, const std::string& path, const struct stat& st) {
  if (!S_ISCHR(st.st_mode) || ::isatty(fd)) return;
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  char byte;
  const ssize_t n = ::read(fd, &byte, 1);
  ::fcntl(fd, F_SETFL, flags);
  BMT_REQUIRE(n <= 0, "--metrics '" << path << "': expected a regular file, or a device that takes records without "
                                    << "giving any back (such as /dev/null), found a device that reads back data");
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
    struct stat st {};
    BMT_REQUIRE(::fstat(fd_, &st) == 0, "--metrics: cannot examine '" << o_.metrics << "': " << std::strerror(errno));
    regular_ = S_ISREG(st.st_mode);
    if (!regular_) {
      check_stream(fd_, o_.metrics, st);
      BMT_REQUIRE(o_.plot.empty(), "--plot '" << o_.plot << "': expected --metrics to be a regular file to draw the "
                                              << "loss curve from, found '" << o_.metrics << "', which is not one");
      return;
    }
    check_output_file("--plot", plot_path(o_));
    // A fresh run replaces the file; a resumed one keeps the records up to its step.
    std::int64_t first_dropped = -1;
    size_ = start_step > 0 ? records_up_to(fd_, o_.metrics, start_step, first_dropped) : 0;
    cut_pending_ = size_ < static_cast<std::uint64_t>(st.st_size);
    // A resumed run replaces only what follows its records: a file that does not start with one
    // is something else, which it would replace whole.
    BMT_REQUIRE(start_step == 0 || !cut_pending_ || size_ > 0 || first_dropped > 0,
                "--metrics '" << o_.metrics << "': expected the metrics of the run resumed (JSON lines with a "
                              << "\"step\"), found a file of " << st.st_size << " bytes whose first line is not one: "
                              << "resuming would replace it; give another --metrics path, or remove the file");
    if (start_step > 0 && cut_pending_)
      bmt::print_rank("--metrics: the records in '", o_.metrics, "' after step ", start_step,
                      first_dropped > 0 ? " (from step " + std::to_string(first_dropped) + " on)" : std::string(),
                      " are replaced by this run's");
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    if (created) ::unlink(o_.metrics.c_str());
    throw;
  }
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
    const ssize_t n = regular_ ? ::pwrite(fd_, line.data() + done, line.size() - done, static_cast<off_t>(size_ + done))
                               : ::write(fd_, line.data() + done, line.size() - done);
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
  BMT_REQUIRE(regular_, "--metrics '" << o_.metrics << "': writing the record of step " << r.step << " failed: "
                                      << std::strerror(err));
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
  if (!regular_) {
    bmt::print_rank("loss curve: none (--metrics '", o_.metrics, "' is not a regular file to draw it from)");
    return;
  }
  const std::string svg = plot_path(o_);
  plot_loss_curve(o_.metrics, svg, title, entropy_rate);
  bmt::print_rank("loss curve: ", svg);
}

}  // namespace bmt_train
