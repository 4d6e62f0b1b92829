// Host cost of the stream machinery a ZeRO step uses several times per block: recording an event
// (taken from the stream's free list on CUDA instead of created and destroyed each time), making
// one stream wait for another's event, and a timeline span while the timeline is off and on. The
// streams carry no other work, so this is what the host spends queueing; the device is idle.
//
//   bench_streams [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <string>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/timeline.hpp"

namespace {

using namespace bmt;

void BM_RecordEvent(benchmark::State& state) {
  Stream& compute = context().compute_stream();
  for (auto _ : state) {
    Event e = compute.record();  // dropped at once: its event goes back to the free list
    benchmark::DoNotOptimize(e);
  }
  compute.synchronize();
}

// What a gather does per block: the gather stream waits for the compute stream, records its own
// completion, and the compute stream waits for that.
void BM_CrossStreamWait(benchmark::State& state) {
  Stream& compute = context().compute_stream();
  Stream& gather = context().gather_stream();
  for (auto _ : state) {
    gather.wait(compute.record());
    compute.wait(gather.record());
  }
  compute.synchronize();
  gather.synchronize();
}

void BM_SpanOff(benchmark::State& state) {
  timeline::reset();
  Stream& compute = context().compute_stream();
  for (auto _ : state) timeline::Span span(compute, "off");
}

void BM_SpanOn(benchmark::State& state) {
  timeline::reset();
  const std::string path = "/tmp/bench_streams_" + std::to_string(getpid()) + ".json";  // never written
  timeline::enable(path);
  Stream& compute = context().compute_stream();
  std::int64_t n = 0;
  for (auto _ : state) {
    timeline::Span span(compute, "on");
    if (++n % 100000 == 0) {  // stay below the span cap, so every span is recorded
      state.PauseTiming();
      timeline::reset();
      timeline::enable(path);
      state.ResumeTiming();
    }
  }
  compute.synchronize();
  timeline::reset();
}

BENCHMARK(BM_RecordEvent);
BENCHMARK(BM_CrossStreamWait);
BENCHMARK(BM_SpanOff);
BENCHMARK(BM_SpanOn);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  DistributedGuard runtime(&argc, &argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
