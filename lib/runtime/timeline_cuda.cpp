// CUDA build of the timeline clock: a mark is a CUDA event with timing recorded on the stream, so
// spans are GPU times. cudaEventElapsedTime returns float milliseconds, whose resolution decays
// with the distance between the two events (0.5 us at 4 s, 60 us at 10 min), so every mark is
// measured against a recent anchor: a timing event recorded at most one second (host time) before
// it, whose own offset from the base is the sum of anchor-to-anchor intervals, kept in double.
#include <chrono>
#include <vector>

#include "bmtrain/runtime/cuda_check.hpp"
#include "timeline_internal.hpp"

namespace bmt::timeline::detail {

namespace {

using HostClock = std::chrono::steady_clock;

struct Anchor {
  cudaEvent_t event = nullptr;
  HostClock::time_point host;  // when it was recorded, to know when the next one is due
  double offset_us = 0;        // from the base (anchor 0); valid for anchors below g_resolved
};

std::vector<Anchor> g_anchors;
std::size_t g_resolved = 0;           // anchors [0, g_resolved) have their offset
std::vector<cudaEvent_t> g_free;      // timing events to record again

cudaEvent_t take() {
  if (!g_free.empty()) {
    cudaEvent_t e = g_free.back();
    g_free.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  BMT_CUDA_CHECK(cudaEventCreate(&e));  // default flags: with timing
  return e;
}

void add_anchor(Stream& stream) {
  Anchor a;
  a.event = take();
  a.host = HostClock::now();
  BMT_CUDA_CHECK(cudaEventRecord(a.event, stream.native()));
  g_anchors.push_back(a);
}

bool reached(cudaEvent_t e, bool wait) {
  if (wait) {
    BMT_CUDA_CHECK(cudaEventSynchronize(e));
    return true;
  }
  const cudaError_t rc = cudaEventQuery(e);
  if (rc == cudaErrorNotReady) return false;
  BMT_CUDA_CHECK(rc);
  return true;
}

float elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  BMT_CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
  return ms;
}

// Gives anchors up to `k` their offsets; false if one of them is not complete yet.
bool resolve_anchors(std::size_t k, bool wait) {
  while (g_resolved <= k) {
    Anchor& a = g_anchors[g_resolved];
    if (!reached(a.event, wait)) return false;
    if (g_resolved > 0) {
      const Anchor& prev = g_anchors[g_resolved - 1];
      a.offset_us = prev.offset_us + 1e3 * static_cast<double>(elapsed_ms(prev.event, a.event));
    }
    ++g_resolved;
  }
  return true;
}

}  // namespace

void clock_start(Stream& base) {
  clock_stop();
  add_anchor(base);
  g_anchors.front().offset_us = 0;
}

void clock_stop() {
  for (auto& a : g_anchors) cudaEventDestroy(a.event);
  for (cudaEvent_t e : g_free) cudaEventDestroy(e);
  g_anchors.clear();
  g_free.clear();
  g_resolved = 0;
}

void clock_mark(Stream& stream, Mark& m) {
  if (g_anchors.empty() || HostClock::now() - g_anchors.back().host > std::chrono::seconds(1)) add_anchor(stream);
  m.anchor = g_anchors.size() - 1;
  m.event = take();
  BMT_CUDA_CHECK(cudaEventRecord(m.event, stream.native()));
}

bool clock_resolve(Mark& begin, Mark& end, bool wait, double& ts_us, double& dur_us) {
  if (!reached(end.event, wait)) return false;  // begin precedes end on the same stream
  if (!resolve_anchors(begin.anchor, wait)) return false;
  const Anchor& a = g_anchors[begin.anchor];
  ts_us = a.offset_us + 1e3 * static_cast<double>(elapsed_ms(a.event, begin.event));
  dur_us = 1e3 * static_cast<double>(elapsed_ms(begin.event, end.event));
  return true;
}

// Recording an event again supersedes a recording the stream has not reached: no wait needed.
void clock_discard(Mark& m) { clock_release(m); }

void clock_release(Mark& m) {
  if (m.event) g_free.push_back(m.event);
  m.event = nullptr;
}

const char* clock_backend() { return "cuda"; }

}  // namespace bmt::timeline::detail
