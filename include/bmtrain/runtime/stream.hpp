#pragma once
// Streams and events. A Stream is an in-order queue of work; an Event marks a point in it that
// other streams or the host can wait for. On the CUDA build a Stream owns a cudaStream_t (and the
// Kokkos::Cuda instance over it) and an Event is a cudaEvent_t. On the host build the compute
// stream runs work inline on the calling thread, and every other stream is an in-order worker
// thread, so communication really overlaps computation on a CPU cluster too and the scheduler's
// ordering logic is exercised by the CPU test suite.
#include <Kokkos_Core.hpp>
#include <functional>
#include <memory>
#include <string>

#ifdef BMT_ENABLE_CUDA
#include <cuda_runtime.h>
#endif

namespace bmt {

class Event {
 public:
  Event();  // an event that is already complete
  bool query() const;        // true once the work before it has finished
  void synchronize() const;  // blocks the host until then

  struct Impl;
  explicit Event(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

class Stream {
 public:
  enum class Kind { compute, communication };

  Stream(Kind kind, std::string name);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Runs `work` in this stream's order. On the CUDA build `work` runs now on the calling thread and
  // is expected to enqueue device work on native(); on the host build it runs inline (compute) or on
  // the worker thread (communication), after everything launched earlier.
  void launch(std::function<void()> work);
  // Runs host function `work` in this stream's order: once the work queued before it has finished,
  // and work queued after it waits for it to return, so that the device can wait for host work by
  // an event without the host waiting. On the CUDA build it runs on the driver's host-function
  // thread (cudaLaunchHostFunc) and must not call CUDA; on the host build it is launch(). An
  // exception from it ends the job.
  void launch_host(std::function<void()> work);
  Event record();
  // Work launched on this stream after the call starts only once `e` is complete.
  void wait(const Event& e);
  void synchronize();

  Kind kind() const { return kind_; }
  const std::string& name() const { return name_; }
  // The Kokkos execution space instance kernels on this stream use.
  Kokkos::DefaultExecutionSpace space() const;
#ifdef BMT_ENABLE_CUDA
  cudaStream_t native() const;
#endif

  struct Impl;

 private:
  Kind kind_;
  std::string name_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bmt
