// Host build of Stream and Event: the compute stream runs work inline; a communication stream is
// an in-order worker thread, and an event is a completion flag set by that thread.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/stream.hpp"
#include "bmtrain/runtime/timeline.hpp"

namespace bmt {

struct Event::Impl {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;

  void complete() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
    }
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return done; });
  }
};

Event::Event() : impl_(std::make_shared<Impl>()) { impl_->done = true; }

bool Event::query() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->done;
}

void Event::synchronize() const { impl_->wait(); }

struct Stream::Impl {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  bool busy = false;
  std::thread worker;

  void run() {
    for (;;) {
      std::function<void()> work;
      {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;  // stopping and drained
        work = std::move(queue.front());
        queue.pop_front();
        busy = true;
      }
      try {
        work();
      } catch (const std::exception& e) {
        // A collective that failed half-way leaves the peers waiting: end the job.
        BMT_FATAL("work on a communication stream failed: " << e.what());
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        busy = false;
      }
      cv.notify_all();
    }
  }
};

Stream::Stream(Kind kind, std::string name) : kind_(kind), name_(std::move(name)) {
  if (kind_ == Kind::communication) {
    impl_ = std::make_unique<Impl>();
    impl_->worker = std::thread([impl = impl_.get()] { impl->run(); });
  }
  // The runtime creates one compute stream when it starts: BMT_TIMELINE is read then.
  if (kind_ == Kind::compute) timeline::detail::runtime_starting(*this);
}

Stream::~Stream() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->worker.join();
}

void Stream::launch(std::function<void()> work) {
  if (!impl_) {
    work();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->queue.push_back(std::move(work));
  }
  impl_->cv.notify_all();
}

void Stream::launch_host(std::function<void()> work) { launch(std::move(work)); }

Event Stream::record() {
  if (!impl_) return Event();
  auto state = std::make_shared<Event::Impl>();
  launch([state] { state->complete(); });
  return Event(state);
}

void Stream::wait(const Event& e) {
  if (e.query()) return;
  if (!impl_) {
    e.synchronize();  // inline stream: the host is the stream
    return;
  }
  launch([e] { e.synchronize(); });
}

void Stream::synchronize() {
  if (!impl_) return;
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->cv.wait(lock, [&] { return impl_->queue.empty() && !impl_->busy; });
}

Kokkos::DefaultExecutionSpace Stream::space() const { return Kokkos::DefaultExecutionSpace(); }

}  // namespace bmt
