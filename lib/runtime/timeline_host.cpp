// Host build of the timeline clock: a mark is a wall-clock reading taken by the stream's own
// thread when the stream reaches it (inline on the compute stream, on the worker thread of a
// communication stream), so a span covers when the stream ran the work, not when it was queued.
#include <chrono>

#include "timeline_internal.hpp"

namespace bmt::timeline::detail {

namespace {
using Clock = std::chrono::steady_clock;
// Written by clock_start before any mark is queued; the streams' queue locks order the reads after.
Clock::time_point g_base;

double since_base_us() { return std::chrono::duration<double, std::micro>(Clock::now() - g_base).count(); }
}  // namespace

void clock_start(Stream&) { g_base = Clock::now(); }

void clock_stop() {}

void clock_mark(Stream& stream, Mark& m) {
  double* out = &m.us;  // the span store keeps marks at fixed addresses until they are released
  stream.launch([out] { *out = since_base_us(); });
  m.reached = stream.record();
}

bool clock_resolve(Mark& begin, Mark& end, bool wait, double& ts_us, double& dur_us) {
  if (!wait && !end.reached.query()) return false;
  end.reached.synchronize();  // the stream wrote begin.us before end.us, both before this completes
  ts_us = begin.us;
  dur_us = end.us - begin.us;
  return true;
}

void clock_discard(Mark& m) {
  m.reached.synchronize();
  m.reached = Event();
}

void clock_release(Mark& m) { m.reached = Event(); }

const char* clock_backend() { return "host"; }

}  // namespace bmt::timeline::detail
