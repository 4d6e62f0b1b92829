// CUDA build of Stream and Event: a cudaStream_t with a Kokkos::Cuda instance over it; events are
// cudaEvents without timing, so waiting between streams never involves the host.
//
// A ZeRO step records several events per block, and cudaEventCreate/Destroy take a driver lock
// each (bench_streams' RecordEvent measures the cost of a record). So events come from a free
// list per stream instead of being created by every record() and destroyed with every Event: an Event handle shares ownership of its Impl, so when the last
// handle goes nobody can wait on that recording any more and the cudaEvent may be recorded again.
// (A cudaStreamWaitEvent already issued captured the recording it waits for; re-recording later
// does not change what it waits on.) Handles that outlive their stream destroy their event.
#include <memory>
#include <mutex>
#include <vector>

#include "bmtrain/runtime/cuda_check.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/stream.hpp"
#include "bmtrain/runtime/timeline.hpp"

namespace bmt {

namespace {

class EventPool {
 public:
  ~EventPool() {
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }
  cudaEvent_t take() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    BMT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void give(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(e);
  }

 private:
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

}  // namespace

struct Event::Impl {
  cudaEvent_t event = nullptr;
  std::weak_ptr<EventPool> pool;  // where the event goes back to; expired once its stream is gone
  ~Impl() {
    if (!event) return;
    if (auto p = pool.lock()) p->give(event);
    else cudaEventDestroy(event);
  }
};

namespace {
// Complete events carry no cudaEvent, so every default-constructed Event can share one Impl.
const std::shared_ptr<Event::Impl>& complete_event() {
  static const std::shared_ptr<Event::Impl> done = std::make_shared<Event::Impl>();
  return done;
}
}  // namespace

Event::Event() : impl_(complete_event()) {}

bool Event::query() const {
  if (!impl_->event) return true;
  const cudaError_t rc = cudaEventQuery(impl_->event);
  if (rc == cudaErrorNotReady) return false;
  BMT_CUDA_CHECK(rc);
  return true;
}

void Event::synchronize() const {
  if (impl_->event) BMT_CUDA_CHECK(cudaEventSynchronize(impl_->event));
}

struct Stream::Impl {
  cudaStream_t stream = nullptr;
  Kokkos::Cuda space;
  std::shared_ptr<EventPool> events = std::make_shared<EventPool>();
};

Stream::Stream(Kind kind, std::string name) : kind_(kind), name_(std::move(name)) {
  impl_ = std::make_unique<Impl>();
  BMT_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  impl_->space = Kokkos::Cuda(impl_->stream);
  // The runtime creates one compute stream when it starts: BMT_TIMELINE is read then.
  if (kind_ == Kind::compute) timeline::detail::runtime_starting(*this);
}

Stream::~Stream() {
  if (!impl_) return;
  cudaStreamSynchronize(impl_->stream);
  impl_->space = Kokkos::Cuda();  // release Kokkos' reference before the stream goes
  impl_->events.reset();          // every pooled event is complete after the synchronize
  cudaStreamDestroy(impl_->stream);
}

void Stream::launch(std::function<void()> work) { work(); }

void Stream::launch_host(std::function<void()> work) {
  auto* fn = new std::function<void()>(std::move(work));
  const cudaHostFn_t run = [](void* data) {
    std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(data));
    try {
      (*f)();
    } catch (const std::exception& e) {
      BMT_FATAL("host work on a stream failed: " << e.what());
    }
  };
  BMT_CUDA_CHECK(cudaLaunchHostFunc(impl_->stream, run, fn));
}

Event Stream::record() {
  auto impl = std::make_shared<Event::Impl>();
  impl->event = impl_->events->take();
  impl->pool = impl_->events;
  BMT_CUDA_CHECK(cudaEventRecord(impl->event, impl_->stream));
  return Event(impl);
}

void Stream::wait(const Event& e) {
  if (e.impl()->event) BMT_CUDA_CHECK(cudaStreamWaitEvent(impl_->stream, e.impl()->event, 0));
}

void Stream::synchronize() { BMT_CUDA_CHECK(cudaStreamSynchronize(impl_->stream)); }

Kokkos::DefaultExecutionSpace Stream::space() const { return impl_->space; }

cudaStream_t Stream::native() const { return impl_->stream; }

}  // namespace bmt
