#pragma once
// A fixed set of host threads that run one task on every thread at once, for host work that
// splits evenly (the offloaded optimizer's update). Written on std::thread: the Kokkos host space
// bmtrain may be built with is Serial.
//
//   bmt::ThreadPool pool(bmt::host_threads());
//   pool.run([&](int part) { auto [b, e] = bmt::ThreadPool::part(n, pool.size(), part, 16); work(b, e); });
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace bmt {

class ThreadPool {
 public:
  // `threads` >= 1 in all: the thread that calls run() is one of them.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls task(p) for every p in [0, size()), each on its own thread (p = 0 on the caller), and
  // returns once every call has returned; an exception thrown by one is rethrown here. Calls from
  // several threads at once take turns.
  void run(const std::function<void(int)>& task);

  // Part p of [0, n) split into `parts` contiguous parts whose bounds are multiples of `align`
  // (but the last): [begin, end), empty where there is too little to share.
  static std::pair<std::int64_t, std::int64_t> part(std::int64_t n, int parts, int p, std::int64_t align);

 private:
  void work(int index);
  std::mutex run_mutex_;  // one run() at a time
  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* task_ = nullptr;
  std::uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
};

// The threads a rank's host work should use: the cores this process may run on, shared with the
// other ranks of its node when every rank may run on all of them (mpirun --bind-to none), else all
// of its own (a rank bound to its cores). At least 1.
int host_threads();

}  // namespace bmt
