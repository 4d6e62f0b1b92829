// The offloaded AdamW's host update (bmt::optim::host_adamw_update) on a bmt::ThreadPool, in GB/s
// of the state it touches: per element the f32 gradient, master weight and two moments read, the
// master and moments written and the bf16 value written, 30 bytes. Beside it, the same threads
// copying the same number of bytes (15 read, 15 written an element) with memcpy: how close the
// update comes to what the memory gives. Each thread works on a contiguous part, as in the
// optimizer, and touched its part first.
//
//   bench_host_adamw [--elements=64M] [--threads=1,2,4,16] [benchmark flags]
//
// Rows: BM_HostAdamW/<elements>/<threads> and BM_Copy/<elements>/<threads>; "of_copy" is the
// update's GB/s over the copy's at the same threads (measured in the same program run).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bmtrain/optim/host_adamw.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/thread_pool.hpp"

namespace {

constexpr std::int64_t kAlign = 64;
constexpr double kBytesPerElement = 30.0;

struct Options {
  std::int64_t elements = std::int64_t{64} << 20;
  std::vector<int> threads;
};

std::int64_t parse_count(const std::string& text) {
  std::size_t used = 0;
  const long long v = std::stoll(text, &used);
  const std::string unit = text.substr(used);
  const long long scale = unit.empty() ? 1 : unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : unit == "G" ? 1 << 30 : 0;
  BMT_REQUIRE(scale > 0 && v > 0, "--elements: expected a count such as 4096, 16K or 64M, found '" << text << "'");
  return v * scale;
}

Options parse_options(int* argc, char** argv) {
  Options o;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--elements=", 0) == 0) {
      o.elements = parse_count(a.substr(11));
    } else if (a.rfind("--threads=", 0) == 0) {
      std::stringstream list(a.substr(10));
      for (std::string t; std::getline(list, t, ',');) {
        o.threads.push_back(std::atoi(t.c_str()));
        BMT_REQUIRE(o.threads.back() > 0, "--threads: expected counts > 0 separated by commas, found '" << a << "'");
      }
    } else {
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  if (o.threads.empty()) {  // 1, then doubling up to this rank's share of the cores
    const int most = bmt::host_threads();
    for (int t = 1; t < most; t *= 2) o.threads.push_back(t);
    o.threads.push_back(most);
  }
  return o;
}

struct FreeFloats {
  void operator()(float* p) const { std::free(p); }
};
using Floats = std::unique_ptr<float, FreeFloats>;
Floats floats(std::int64_t n) {
  void* p = std::aligned_alloc(64, (static_cast<std::size_t>(n) * sizeof(float) + 63) / 64 * 64);
  BMT_REQUIRE(p, "bench_host_adamw: expected " << n * 4 << " bytes of host memory, found the allocation refused");
  return Floats(static_cast<float*>(p));
}

// The update's arrays and a copy's two buffers of the same bytes, first touched by the thread that
// works on each part.
struct Arrays {
  Floats g, w, m, v, out, from, to;
  Arrays(std::int64_t n, bmt::ThreadPool& pool)
      : g(floats(n)), w(floats(n)), m(floats(n)), v(floats(n)), out(floats(n / 2 + 1)),
        from(floats(n * 15 / 4 + 1)), to(floats(n * 15 / 4 + 1)) {
    pool.run([&](int p) {
      const auto [b, e] = bmt::ThreadPool::part(n, pool.size(), p, kAlign);
      for (std::int64_t i = b; i < e; ++i) {
        g.get()[i] = 0.001f * static_cast<float>(i % 1000 - 500);
        w.get()[i] = 0.02f * static_cast<float>(i % 777) / 777.0f;
        m.get()[i] = 0.0f;
        v.get()[i] = 0.0f;
      }
      const auto [cb, ce] = bmt::ThreadPool::part(n * 15 / 4, pool.size(), p, kAlign);
      std::memset(from.get() + cb, 1, static_cast<std::size_t>(ce - cb) * sizeof(float));
      std::memset(to.get() + cb, 0, static_cast<std::size_t>(ce - cb) * sizeof(float));
    });
  }
};

std::map<std::pair<std::int64_t, int>, double> g_copy_rate;  // bytes/s of BM_Copy, by (elements, threads)

void BM_Copy(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  bmt::ThreadPool pool(static_cast<int>(state.range(1)));
  Arrays a(n, pool);
  const std::int64_t words = n * 15 / 4;  // 15 bytes an element, in 4-byte words
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    pool.run([&](int p) {
      const auto [b, e] = bmt::ThreadPool::part(words, pool.size(), p, kAlign);
      std::memcpy(a.to.get() + b, a.from.get() + b, static_cast<std::size_t>(e - b) * sizeof(float));
    });
    benchmark::ClobberMemory();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double bytes = static_cast<double>(state.iterations()) * kBytesPerElement * static_cast<double>(n);
  g_copy_rate[{n, static_cast<int>(state.range(1))}] = bytes / seconds;
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}

void BM_HostAdamW(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  bmt::ThreadPool pool(static_cast<int>(state.range(1)));
  Arrays a(n, pool);
  bmt::optim::HostAdamWStep step{1e-4f, 1.0f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.05f, 0.1f};
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    pool.run([&](int p) {
      const auto [b, e] = bmt::ThreadPool::part(n, pool.size(), p, kAlign);
      bmt::optim::host_adamw_update(a.g.get() + b, a.w.get() + b, a.m.get() + b, a.v.get() + b, bmt::DType::f32,
                                    reinterpret_cast<std::uint16_t*>(a.out.get()) + b, bmt::DType::bf16, e - b, step);
    });
    benchmark::ClobberMemory();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double bytes = static_cast<double>(state.iterations()) * kBytesPerElement * static_cast<double>(n);
  const auto copy = g_copy_rate.find({n, static_cast<int>(state.range(1))});
  if (copy != g_copy_rate.end()) state.counters["of_copy"] = bytes / seconds / copy->second;
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}

}  // namespace

int main(int argc, char** argv) {
  bmt::DistributedGuard runtime(&argc, &argv);
  const Options options = parse_options(&argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (int t : options.threads) {
    benchmark::RegisterBenchmark("BM_Copy", BM_Copy)->Args({options.elements, t})->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("BM_HostAdamW", BM_HostAdamW)
        ->Args({options.elements, t})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::AddCustomContext("bytes_per_element", "30 (g, w, m, v read; w, m, v written; bf16 value written)");
  benchmark::AddCustomContext("host_threads", std::to_string(bmt::host_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
