// The timeline's span store and its Chrome trace writer; the clock (host wall clock or CUDA timing
// events) is the backend seam in timeline_host.cpp / timeline_cuda.cpp.
//
// Spans live in two places: `pending` holds spans whose marks the streams may not have reached
// (a deque, so the host backend's stream threads can write into a mark while new spans are
// appended), `done` holds resolved ones, compactly. Spans resolve in the order they began; every
// kHarvestEvery new spans the oldest pending ones are polled (no waiting), so on CUDA the number of
// live timing events stays near the number of spans in flight.
#include "bmtrain/runtime/timeline.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/environment.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/logging.hpp"
#include "timeline_internal.hpp"

namespace bmt::timeline {

namespace detail {

std::atomic<bool> g_on{false};
std::atomic<bool> g_ops{false};

namespace {

constexpr std::size_t kHarvestEvery = 64;

struct Pending {
  std::uint32_t label = 0;
  std::uint32_t track = 0;
  bool ended = false;
  Mark begin, end;
};

struct Done {
  std::uint32_t label;
  std::uint32_t track;
  double ts_us;
  double dur_us;
};

struct State {
  std::mutex mutex;
  std::string path;
  bool clock_running = false;
  bool finalize_hook = false;
  double base_unix_us = 0;  // wall-clock time of time 0, to line up the ranks' files
  std::deque<Pending> pending;
  std::int64_t first_pending = 0;  // span id of pending.front()
  std::vector<Done> done;
  std::size_t dropped = 0;
  std::size_t since_harvest = 0;
  // Interned names: labels ("forward blocks.3" plus its category) and tracks (stream names).
  std::vector<std::pair<std::string, std::string>> labels;  // (name, category)
  std::unordered_map<std::string, std::uint32_t> label_ids;
  std::vector<std::string> tracks;
};

State& state() {
  static State* s = new State();  // never destroyed: spans may end during static destruction
  return *s;
}

std::uint32_t intern_label(State& s, const char* name, const std::string* subject) {
  std::string full = subject ? std::string(name) + " " + *subject : std::string(name);
  auto it = s.label_ids.find(full);
  if (it != s.label_ids.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(s.labels.size());
  s.labels.emplace_back(full, name);
  s.label_ids.emplace(std::move(full), id);
  return id;
}

std::uint32_t intern_track(State& s, const std::string& stream_name) {
  for (std::size_t k = 0; k < s.tracks.size(); ++k)
    if (s.tracks[k] == stream_name) return static_cast<std::uint32_t>(k);
  s.tracks.push_back(stream_name);
  return static_cast<std::uint32_t>(s.tracks.size() - 1);
}

// Moves resolved spans from the front of `pending` to `done`; with `wait`, all of them.
void harvest(State& s, bool wait) {
  while (!s.pending.empty()) {
    Pending& p = s.pending.front();
    if (!p.ended) {
      // A span still open (an outer "step" span) holds back the spans behind it until it ends;
      // write() (`wait`) cannot wait for it, so it is left out and the rest are reported.
      if (!wait) return;
      clock_discard(p.begin);
    } else {
      double ts = 0, dur = 0;
      if (!clock_resolve(p.begin, p.end, wait, ts, dur)) return;
      s.done.push_back({p.label, p.track, ts, dur < 0 ? 0 : dur});
      clock_release(p.begin);
      clock_release(p.end);
    }
    s.pending.pop_front();
    ++s.first_pending;
  }
}

void start_clock(State& s, Stream& base) {
  clock_start(base);
  s.clock_running = true;
  s.base_unix_us = std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch()).count();
  // Compute, gather and scatter first, so every rank's trace shows them in that order.
  for (const char* t : {"compute", "gather", "scatter"}) intern_track(s, t);
}

// Drops open spans, resolves the rest and stops the clock (finalize: the device goes next).
void shutdown(State& s) {
  harvest(s, /*wait=*/true);
  if (s.clock_running) clock_stop();
  s.clock_running = false;
  g_on.store(false, std::memory_order_relaxed);
}

}  // namespace

std::int64_t begin(Stream& stream, const char* name, const std::string* subject) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.clock_running) return -1;
  if (++s.since_harvest >= kHarvestEvery) {
    s.since_harvest = 0;
    harvest(s, /*wait=*/false);
  }
  if (s.done.size() + s.pending.size() >= kMaxSpans) {
    ++s.dropped;
    return -1;
  }
  s.pending.emplace_back();
  Pending& p = s.pending.back();
  p.label = intern_label(s, name, subject);
  p.track = intern_track(s, stream.name());
  clock_mark(stream, p.begin);
  return s.first_pending + static_cast<std::int64_t>(s.pending.size()) - 1;
}

void end(std::int64_t id, Stream& stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.clock_running || id < s.first_pending) return;  // dropped by reset() or shutdown
  const auto k = static_cast<std::size_t>(id - s.first_pending);
  if (k >= s.pending.size()) return;
  Pending& p = s.pending[k];
  clock_mark(stream, p.end);
  p.ended = true;
}

}  // namespace detail

using detail::state;

namespace {

void enable_on(const std::string& path, Detail level, Stream& base) {
  auto& s = state();
  bool hook = false;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.path = path;
    if (!s.clock_running) detail::start_clock(s, base);
    hook = !s.finalize_hook;
    s.finalize_hook = true;
  }
  if (hook) {
    // Written while the device and the rank are still there; then the clock's events go.
    at_finalize([] {
      // Finalizing cannot fail: a trace that cannot be written is a warning here.
      try {
        write();
      } catch (const Error& e) {
        warn(e.what());
      }
      auto& st = state();
      std::lock_guard<std::mutex> lock(st.mutex);
      detail::shutdown(st);
      st.finalize_hook = false;
    });
  }
  detail::g_ops.store(level == Detail::ops, std::memory_order_relaxed);
  detail::g_on.store(true, std::memory_order_relaxed);
}

}  // namespace

void enable(const std::string& path, Detail level) {
  BMT_REQUIRE(!path.empty(), "timeline::enable: expected a file path, found an empty one");
  BMT_REQUIRE(is_initialized(), "timeline::enable: expected the runtime to be initialized (bmt::init_distributed) "
                                "first: the trace's time 0 is an event on the compute stream");
  enable_on(path, level, context().compute_stream());
}

void detail::runtime_starting(Stream& compute) {
  const auto& env = environment();
  if (!env.timeline.empty()) enable_on(env.timeline, env.timeline_ops ? Detail::ops : Detail::blocks, compute);
}

void disable() { detail::g_on.store(false, std::memory_order_relaxed); }

std::string rank_path(const std::string& path, int rank) {
  const std::string tag = ".rank" + std::to_string(rank);
  const std::size_t slash = path.find_last_of('/');
  const std::size_t dot = path.find_last_of('.');
  const bool has_extension = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  if (!has_extension) return path + tag;
  return path.substr(0, dot) + tag + path.substr(dot);
}

void write() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.path.empty() || !s.clock_running) return;
  detail::harvest(s, /*wait=*/true);
  const int r = rank();
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", r}, {"tid", 0}, {"args", {{"name", "rank " + std::to_string(r)}}}});
  for (std::size_t t = 0; t < s.tracks.size(); ++t) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", r}, {"tid", t}, {"args", {{"name", s.tracks[t]}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", r}, {"tid", t}, {"args", {{"sort_index", t}}}});
  }
  for (const auto& d : s.done) {
    const auto& [name, category] = s.labels[d.label];
    events.push_back({{"name", name}, {"cat", category}, {"ph", "X"}, {"ts", d.ts_us}, {"dur", d.dur_us},
                      {"pid", r}, {"tid", d.track}});
  }
  nlohmann::json trace = {{"traceEvents", std::move(events)},
                          {"displayTimeUnit", "ms"},
                          {"otherData",
                           {{"rank", r},
                            {"world_size", world_size()},
                            {"clock", detail::clock_backend()},
                            {"base_unix_us", s.base_unix_us},
                            {"spans", s.done.size()},
                            {"dropped_spans", s.dropped},
                            {"max_spans", kMaxSpans}}}};
  const std::string out = rank_path(s.path, r);
  const auto dir = std::filesystem::path(out).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);  // an error shows when opening
  // Written beside its path and renamed over it once whole: a failed write (a full disk) leaves no
  // trace cut short, which a viewer would reject as a whole.
  const std::string temp = out + ".tmp";
  std::ofstream f(temp, std::ios::trunc);
  f << trace.dump() << '\n';
  f.close();
  const int err = errno;
  if (!f) {
    std::remove(temp.c_str());
    BMT_REQUIRE(false, "timeline: cannot write '" << out << "': " << std::strerror(err)
                                                  << " (a missing directory, no permission, a full disk?)");
  }
  BMT_REQUIRE(std::rename(temp.c_str(), out.c_str()) == 0,
              "timeline: cannot rename '" << temp << "' to '" << out << "': " << std::strerror(errno));
  if (s.dropped > 0)
    warn("timeline: ", s.dropped, " spans after the first ", kMaxSpans, " were not recorded (", out, ")");
}

std::size_t span_count() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.done.size() + s.pending.size();
}

std::size_t dropped_spans() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.dropped;
}

void reset() {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  detail::shutdown(s);
  s.first_pending += static_cast<std::int64_t>(s.pending.size());
  s.pending.clear();
  s.done.clear();
  s.dropped = 0;
  s.since_harvest = 0;
  s.labels.clear();
  s.label_ids.clear();
  s.tracks.clear();
  s.path.clear();
  detail::g_ops.store(false, std::memory_order_relaxed);
}

}  // namespace bmt::timeline
