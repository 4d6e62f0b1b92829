// CUDA build of Stream and Event: a cudaStream_t with a Kokkos::Cuda instance over it; events are
// cudaEvents without timing, so waiting between streams never involves the host.
#include "bmtrain/runtime/cuda_check.hpp"
#include "bmtrain/runtime/stream.hpp"

namespace bmt {

struct Event::Impl {
  cudaEvent_t event = nullptr;
  ~Impl() {
    if (event) cudaEventDestroy(event);
  }
};

Event::Event() : impl_(std::make_shared<Impl>()) {}

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
};

Stream::Stream(Kind kind, std::string name) : kind_(kind), name_(std::move(name)) {
  impl_ = std::make_unique<Impl>();
  BMT_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  impl_->space = Kokkos::Cuda(impl_->stream);
}

Stream::~Stream() {
  if (!impl_) return;
  cudaStreamSynchronize(impl_->stream);
  impl_->space = Kokkos::Cuda();  // release Kokkos' reference before the stream goes
  cudaStreamDestroy(impl_->stream);
}

void Stream::launch(std::function<void()> work) { work(); }

Event Stream::record() {
  auto impl = std::make_shared<Event::Impl>();
  BMT_CUDA_CHECK(cudaEventCreateWithFlags(&impl->event, cudaEventDisableTiming));
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
