#include "bmtrain/io/checkpoint_dir.hpp"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/io/json_file.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/logging.hpp"
#include "../runtime/posix_file.hpp"

namespace bmt::io {

namespace fs = std::filesystem;

namespace {

constexpr int kMarkerFormat = 1;

// "step-<digits>" (with ".tmp" when `temp`) -> the step; nullopt for any other name.
std::optional<std::int64_t> step_of(const std::string& name, bool temp) {
  const std::string prefix = "step-", suffix = temp ? ".tmp" : "";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  return std::stoll(digits);
}

std::string utc_now() {
  const time_t now = ::time(nullptr);
  struct tm tm {};
  ::gmtime_r(&now, &tm);
  char text[32];
  ::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// A step directory's marker, or nullopt if it has none or one that does not name `step`.
std::optional<nlohmann::json> marker_of(const std::string& dir, std::int64_t step) {
  std::error_code ec;
  const std::string path = dir + "/" + CheckpointDir::kMarker;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  try {
    nlohmann::json m = read_json(path);
    if (m.is_object() && m.contains("step") && m.at("step").is_number_integer() && m.at("step").get<std::int64_t>() == step)
      return m;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

void fsync_tree(const std::string& dir) {
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file() || entry.is_directory()) bmt::detail::fsync_path(entry.path().string());
  bmt::detail::fsync_path(dir);
}

// Removes a step directory so that no crash during the removal leaves it looking complete: the
// marker goes first, and is flushed, before the files.
void remove_step_dir(const std::string& dir) {
  const std::string marker = dir + "/" + CheckpointDir::kMarker;
  if (::unlink(marker.c_str()) == 0) bmt::detail::fsync_path(dir);
  std::error_code ec;
  fs::remove_all(dir, ec);
  BMT_REQUIRE(!ec, "cannot remove '" << dir << "': " << ec.message());
}

}  // namespace

CheckpointDir::CheckpointDir(std::string root, int keep_last, MPI_Comm comm)
    : root_(std::move(root)), keep_last_(keep_last), comm_(comm_or_world(comm)) {
  BMT_REQUIRE(!root_.empty(), "CheckpointDir: expected a root directory, found an empty path");
  BMT_REQUIRE(keep_last >= 0, "CheckpointDir: expected keep_last >= 0 (0 keeps all), found " << keep_last);
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::string CheckpointDir::step_path(std::int64_t step) const { return root_ + "/step-" + std::to_string(step); }
std::string CheckpointDir::temp_path(std::int64_t step) const { return step_path(step) + ".tmp"; }

std::string CheckpointDir::begin_save(std::int64_t step) {
  BMT_REQUIRE(step >= 0, "CheckpointDir::begin_save: expected a step >= 0, found " << step);
  const std::string temp = temp_path(step);
  run_on_root(comm_, [&] {
    std::error_code ec;
    fs::create_directories(root_, ec);
    BMT_REQUIRE(!ec, "checkpoint root '" << root_ << "': cannot create it: " << ec.message());
    BMT_REQUIRE(fs::is_directory(root_, ec), "checkpoint root '" << root_ << "': expected a directory, found "
                                                                 << (fs::exists(root_, ec) ? "another kind of file" : "nothing"));
    fs::remove_all(temp, ec);
    BMT_REQUIRE(!ec, "checkpoint '" << temp << "': cannot remove the leftover of an interrupted save: " << ec.message());
    fs::create_directory(temp, ec);
    BMT_REQUIRE(!ec, "checkpoint '" << temp << "': cannot create it: " << ec.message());
    bmt::detail::fsync_path(root_);
  });
  return temp;
}

std::string CheckpointDir::commit_save(std::int64_t step) {
  const std::string temp = temp_path(step), final_path = step_path(step);
  int size = 1;
  BMT_MPI_CHECK(MPI_Comm_size(comm_, &size));
  // Every rank has finished writing its files before rank 0 publishes them.
  BMT_MPI_CHECK(MPI_Barrier(comm_));
  run_on_root(comm_, [&] {
    std::error_code ec;
    BMT_REQUIRE(fs::is_directory(temp, ec), "CheckpointDir::commit_save(" << step << "): expected the directory '" << temp
                                                                           << "' of begin_save(" << step << "), found none");
    fsync_tree(temp);
    if (fs::exists(final_path, ec)) remove_step_dir(final_path);
    if (::rename(temp.c_str(), final_path.c_str()) != 0)
      BMT_REQUIRE(false, "checkpoint: renaming '" << temp << "' to '" << final_path
                                                  << "' failed: " << bmt::detail::errno_text(errno));
    bmt::detail::fsync_path(root_);
    write_json_atomic(final_path + "/" + kMarker,
                      {{"format", kMarkerFormat}, {"step", step}, {"world_size", size}, {"time", utc_now()}});
  });
  // Deleting old checkpoints is housekeeping: a failure is a warning, the new checkpoint stands.
  int rank = 0;
  BMT_MPI_CHECK(MPI_Comm_rank(comm_, &rank));
  if (rank == 0) {
    const std::string problem = error_of([&] { prune(step); });
    if (!problem.empty()) warn("checkpoint: removing old checkpoints under '", root_, "' failed: ", problem);
  }
  // Every rank returns with the directory in its final state.
  BMT_MPI_CHECK(MPI_Barrier(comm_));
  return final_path;
}

void CheckpointDir::prune(std::int64_t just_saved) const {
  // Leftovers of interrupted saves: step-<M>.tmp/ and step-<M>/ without a marker.
  std::vector<std::string> stale;
  for (const auto& entry : fs::directory_iterator(root_)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    if (step_of(name, true)) stale.push_back(entry.path().string());
    else if (auto s = step_of(name, false); s && *s != just_saved && !marker_of(entry.path().string(), *s))
      stale.push_back(entry.path().string());
  }
  for (const auto& dir : stale) remove_step_dir(dir);
  if (keep_last_ == 0) return;
  const auto complete = complete_steps(root_);
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep_last_) < complete.size(); ++i)
    remove_step_dir(step_path(complete[i]));
  bmt::detail::fsync_path(root_);
}

std::optional<std::int64_t> CheckpointDir::latest() const {
  int rank = 0;
  BMT_MPI_CHECK(MPI_Comm_rank(comm_, &rank));
  long long found = -1;
  if (rank == 0) {
    std::optional<std::int64_t> s;
    const std::string error = error_of([&] { s = latest_complete(root_); });
    agree_on_errors(comm_, error);
    found = s ? *s : -1;
  } else {
    agree_on_errors(comm_, "");
  }
  BMT_MPI_CHECK(MPI_Bcast(&found, 1, MPI_LONG_LONG, 0, comm_));
  return found < 0 ? std::nullopt : std::optional<std::int64_t>(found);
}

std::vector<std::int64_t> CheckpointDir::complete_steps(const std::string& root) {
  std::vector<std::int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return steps;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    std::error_code kind;
    if (!entry.is_directory(kind)) continue;
    const auto s = step_of(entry.path().filename().string(), false);
    if (s && marker_of(entry.path().string(), *s)) steps.push_back(*s);
  }
  BMT_REQUIRE(!ec, "checkpoint root '" << root << "': cannot list it: " << ec.message());
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<std::int64_t> CheckpointDir::latest_complete(const std::string& root) {
  const auto steps = complete_steps(root);
  if (steps.empty()) return std::nullopt;
  return steps.back();
}

nlohmann::json CheckpointDir::completion(const std::string& root, std::int64_t step) {
  const std::string dir = root + "/step-" + std::to_string(step);
  auto m = marker_of(dir, step);
  BMT_REQUIRE(m.has_value(), "checkpoint '" << dir << "': expected a complete checkpoint (a " << kMarker
                                            << " marker naming step " << step << "), found none");
  return *m;
}

std::int64_t CheckpointDir::marked_step(const std::string& step_dir) {
  std::string dir = step_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string path = dir + "/" + kMarker;
  std::error_code ec;
  BMT_REQUIRE(fs::is_regular_file(path, ec), "checkpoint '" << dir << "': expected a complete checkpoint (a " << kMarker
                                                            << " marker), found none");
  const std::string expected = "expected a JSON object {\"format\": 1, \"step\": N, ...}";
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  BMT_REQUIRE(in.good() || in.eof(), "checkpoint marker '" << path << "': cannot read it");
  const nlohmann::json m = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!m.is_object()) {
    std::string shown = m.is_discarded() ? text.substr(0, 40) : m.dump().substr(0, 40);
    for (char& c : shown)
      if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    while (!shown.empty() && shown.back() == ' ') shown.pop_back();
    BMT_REQUIRE(false, "checkpoint marker '" << path << "': " << expected << ", found "
                                             << (m.is_discarded() ? "text that is not JSON: '" : "") << shown
                                             << (m.is_discarded() ? "'" : ""));
  }
  const auto format = m.find("format");
  BMT_REQUIRE(format != m.end() && format->is_number_integer() && format->get<std::int64_t>() == kMarkerFormat,
              "checkpoint marker '" << path << "': expected format " << kMarkerFormat << ", found "
                                    << (format == m.end() ? std::string("none") : format->dump()));
  const auto step = m.find("step");
  BMT_REQUIRE(step != m.end() && step->is_number_integer() && step->get<std::int64_t>() >= 0,
              "checkpoint marker '" << path << "': expected a whole number 'step', found "
                                    << (step == m.end() ? std::string("none") : step->dump()));
  const std::int64_t marked = step->get<std::int64_t>();
  const auto named = step_of(fs::path(dir).filename().string(), false);
  BMT_REQUIRE(!named || *named == marked, "checkpoint marker '" << path << "': expected step " << *named
                                                                << " (the directory's), found " << marked);
  return marked;
}

}  // namespace bmt::io
