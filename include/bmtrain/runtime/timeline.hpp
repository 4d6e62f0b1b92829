#pragma once
// An opt-in per-stream timeline: how long each block's forward, backward and recompute ran on the
// compute stream, and each all-gather and reduce-scatter on the gather and scatter streams, written
// as a Chrome trace (open it in https://ui.perfetto.dev or chrome://tracing) so that overlap can be
// seen where no profiler runs.
//
//   BMT_TIMELINE=trace.json mpirun -np 2 ./train          // read when the runtime starts
//   bmt::timeline::enable("trace.json");                  // or from the program
//   { bmt::timeline::Span span(ctx.compute_stream(), "forward", "blocks.3"); ... queue work ... }
//   bmt::timeline::write();                               // trace.rank0.json, trace.rank1.json
//
// A span is measured on its stream, not on the host: on the CUDA build the begin and end are CUDA
// events with timing recorded on the stream (ts and dur are GPU times), on the host build they are
// wall-clock readings taken by the stream's own thread when the stream reaches them. Spans are
// resolved without waiting (completed ones are polled as new ones start) and at write(), which
// finalize() also calls. While the timeline is off a Span costs one branch.
//
// Memory is bounded: at most kMaxSpans spans are kept per process (24 bytes each once resolved,
// about 25 MB); later ones are counted, not recorded, and write() reports how many were dropped.
// A span still open when write() runs is left out.
//
// With Detail::ops (or BMT_TIMELINE_OPS=1 next to BMT_TIMELINE) every autograd op's forward and
// backward also gets a span on the compute stream, "op forward <op>" / "op backward <op>", so a
// block's time can be split by op; bench/timeline_summary.py adds them up per step.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace bmt {

class Stream;

namespace timeline {

constexpr std::size_t kMaxSpans = std::size_t{1} << 20;

namespace detail {
extern std::atomic<bool> g_on;
extern std::atomic<bool> g_ops;
std::int64_t begin(Stream& stream, const char* name, const std::string* subject);
void end(std::int64_t id, Stream& stream);
// Called by the compute stream's constructor, that is when the runtime starts: enables the
// timeline with BMT_TIMELINE as the path if that is set, with time 0 on `compute`.
void runtime_starting(Stream& compute);
}  // namespace detail

// How fine the spans are: blocks (each block's compute, gathers, reduce-scatters, the optimizer),
// or ops (those plus one span per autograd op's forward and backward).
enum class Detail { blocks, ops };

// Starts recording; the trace's time 0 is now (a base event on the compute stream). Needs the
// runtime. Enabling again with another path only changes where write() goes (and the detail).
void enable(const std::string& path, Detail detail = Detail::blocks);
inline bool enabled() { return detail::g_on.load(std::memory_order_relaxed); }
// True while recording at Detail::ops.
inline bool ops_enabled() { return enabled() && detail::g_ops.load(std::memory_order_relaxed); }
// Stops recording; spans already recorded are kept for write().
void disable();
// Resolves every recorded span (waiting for the streams to reach them) and writes this rank's
// trace to rank_path(path, rank). Safe to call more than once: each call writes every span so far.
// Throws bmt::Error when the file cannot be written (at finalize(), that is a warning).
void write();
// "trace.json" -> "trace.rank3.json"; "trace" -> "trace.rank3".
std::string rank_path(const std::string& path, int rank);
// Spans recorded so far (resolved or not), and spans left out because of kMaxSpans.
std::size_t span_count();
std::size_t dropped_spans();
// Forgets every span and turns the timeline off (tests).
void reset();

// Times the work queued on `stream` during the span's lifetime. The trace names it
// "<name> <subject>" (subject: a block's name, say) with `name` as its category.
class Span {
 public:
  Span(Stream& stream, const char* name) : stream_(stream) {
    if (enabled()) id_ = detail::begin(stream, name, nullptr);
  }
  Span(Stream& stream, const char* name, const std::string& subject) : stream_(stream) {
    if (enabled()) id_ = detail::begin(stream, name, &subject);
  }
  ~Span() {
    if (id_ >= 0) detail::end(id_, stream_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  Stream& stream_;
  std::int64_t id_ = -1;
};

}  // namespace timeline
}  // namespace bmt
