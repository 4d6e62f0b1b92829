#include "bmtrain/runtime/thread_pool.hpp"

#include <sched.h>

#include <algorithm>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt {

ThreadPool::ThreadPool(int threads) {
  BMT_REQUIRE(threads >= 1, "ThreadPool: expected at least 1 thread, found " << threads);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work(int index) {
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* task = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      task = task_;
    }
    std::exception_ptr error;
    try {
      (*task)(index);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error && !error_) error_ = error;
      if (--pending_ == 0) done_.notify_all();
    }
  }
}

void ThreadPool::run(const std::function<void(int)>& task) {
  std::lock_guard<std::mutex> turn(run_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    pending_ = static_cast<int>(workers_.size());
    error_ = nullptr;
    ++generation_;
  }
  start_.notify_all();
  std::exception_ptr error;
  try {
    task(0);
  } catch (...) {
    error = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  task_ = nullptr;
  if (!error) error = error_;
  if (error) std::rethrow_exception(error);
}

std::pair<std::int64_t, std::int64_t> ThreadPool::part(std::int64_t n, int parts, int p, std::int64_t align) {
  BMT_REQUIRE(parts >= 1 && p >= 0 && p < parts && align >= 1 && n >= 0,
              "ThreadPool::part: expected 0 <= p < parts, align >= 1 and n >= 0, found part " << p << " of " << parts
                                                                                              << ", align " << align
                                                                                              << ", n " << n);
  const std::int64_t units = (n + align - 1) / align;
  const std::int64_t lo = units * p / parts, hi = units * (p + 1) / parts;
  return {std::min(n, lo * align), std::min(n, hi * align)};
}

int host_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int mine = 1;
  if (sched_getaffinity(0, sizeof set, &set) == 0) mine = std::max(1, CPU_COUNT(&set));
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int ranks_here = is_initialized() ? std::max(1, context().topology().local_size) : 1;
  // Every rank may run anywhere: share the node's cores.
  if (mine >= machine) return std::max(1, mine / ranks_here);
  return mine;
}

}  // namespace bmt
