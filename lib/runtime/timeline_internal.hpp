#pragma once
// The backend seam of the timeline (timeline_host.cpp / timeline_cuda.cpp): how a point in a
// stream is marked and turned into a time. timeline.cpp keeps the spans and writes the trace; it
// calls these with its lock held.
#include "bmtrain/runtime/stream.hpp"

namespace bmt::timeline::detail {

struct Mark {
#ifdef BMT_ENABLE_CUDA
  cudaEvent_t event = nullptr;  // timing event, from the backend's pool
  std::size_t anchor = 0;       // the time reference it is measured against
#else
  double us = -1;  // microseconds since the base, written by the stream's own thread
  Event reached;   // complete once `us` is written
#endif
};

// Time 0 of the trace: a point on `base`, now.
void clock_start(Stream& base);
// Frees everything the clock holds (marks must have been released).
void clock_stop();
// Marks the current point of `stream`.
void clock_mark(Stream& stream, Mark& m);
// Start (since time 0) and duration, in microseconds, of the span from `begin` to `end` (both
// marked on the same stream). Returns false when the stream has not reached `end` yet and `wait`
// is false; with `wait` the host blocks until it has.
bool clock_resolve(Mark& begin, Mark& end, bool wait, double& ts_us, double& dur_us);
// Waits until the stream has reached `m` (so nothing writes into it any more) and gives its
// resources back; for a mark that is not resolved (a span still open when the trace is written).
void clock_discard(Mark& m);
// Gives a resolved mark's resources back.
void clock_release(Mark& m);
// "cuda" or "host".
const char* clock_backend();

}  // namespace bmt::timeline::detail
