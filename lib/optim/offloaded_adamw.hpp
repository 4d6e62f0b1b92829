#pragma once
// The offloaded AdamW (AdamWOptions::offload), behind bmt::optim::AdamW. Per storage the host keeps
// f32 master weights, the moments (f32 or bf16: AdamWOptions::moments) and one pinned exchange
// buffer of 4 bytes an element; the device
// keeps the values in the parameters' dtype and the f32 gradient shard. Three streams carry a step:
//   to host    the gradient shard into the exchange buffer, as soon as the storage's gradient is
//              complete: during the last micro-batch's backward, told by ShardedStorage's gradient
//              listener as each block's reduction is queued (the storages outside blocks at its end)
//   updates    host functions, one per storage in the model's order: the update on the thread pool,
//              once the gradient is on the host and the step's gradient scale is known, writing the
//              values in the parameters' dtype back into the exchange buffer over the gradient
//   to device  those values into the shard; gathers and readers of the shard wait for that copy
//              (ShardedStorage::values_written), the next gradient written waits for the copy out
//              (ShardedStorage::gradient_read)
// The host queues all of it and waits for none of it in a step.
//
// Preparing the host state (touching every page of it, page-locking the exchange buffers) is most
// of what a large model's start waits for when done on one thread, so it is done after the
// constructor returns, on a thread of its own that hands each storage's parts to the pool's threads (each
// first touches the part it will update) and then locks the storage's exchange buffer. The
// constructor only checks that the memory is there, allocates it (untouched) and copies the
// device values into it (the moments' memory serves as their staging area); storages are
// prepared in the order the backward copies their gradients out, and every use of a storage's
// host state (its first gradient copy, state_of, load_state) waits for that storage alone.
//
// In the backward that OptimManager runs, a storage's gradient lives on the device only from its
// reduction to its copy out: its sum of squares (for the global norm) is taken on the device
// first, and once kGradientsInFlight later storages have been copied out too the shard goes back to
// the allocator (ShardedStorage::release_gradient), so the device holds a few blocks' gradients at
// a time instead of 4 bytes a parameter. With accumulated micro-batches the shards live until the
// last one, as they must.
//
// The gradient scale (loss scale, clipping factor, skipping a non-finite step) depends on the
// global gradient norm, which is known only once the whole backward is: Adam's update is not
// linear in the gradient, so no storage can be updated before that and scaled afterwards. So the
// copies to the host overlap the backward, and the updates run after it, storage by storage in the
// order the next forward needs them, each storage's values going back to the device as soon as its
// update is done: the next forward's first blocks run while later storages are still updating.
// With `delayed_update` a storage's update is copied back only during the next step's last
// backward, once that backward has read the storage (ZeRO-Offload's delayed parameter update):
// the host update then runs beside the whole next step, whose gradients are computed at values
// one update older than the master weights they are applied to.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bmtrain/optim/adamw.hpp"
#include "bmtrain/runtime/stream.hpp"
#include "bmtrain/runtime/thread_pool.hpp"
#include "bmtrain/tensor/memory.hpp"

namespace bmt::optim::detail {

// Frees OffloadedAdamW's host arrays.
struct FreeHost {
  bool pinned = false;  // page-locked by memory::pin: unlocked first
  void operator()(void* p) const;
};

class OffloadedAdamW {
 public:
  OffloadedAdamW(const std::vector<ShardedStorage*>& storages, const std::vector<std::vector<Optimizer::Range>>& ranges,
                 const AdamWOptions& options);
  ~OffloadedAdamW();
  OffloadedAdamW(const OffloadedAdamW&) = delete;
  OffloadedAdamW& operator=(const OffloadedAdamW&) = delete;

  // Storages copied out and not yet given back: how many the device holds beside the one in
  // backward (the oldest's copy has had that many blocks' backward to finish).
  static constexpr std::size_t kGradientsInFlight = 4;
  // Host bytes an element takes: f32 master weights, two moments of dtype `moments`, and the f32
  // exchange buffer.
  static std::size_t host_bytes_per_element(DType moments);

  void backward_begins(bool last_micro_batch) { armed_ = last_micro_batch; }
  void backward_ends(bool last_micro_batch);
  Tensor gradient_sum_squares(std::vector<Tensor>& tensors);
  void step(float lr, const GradScale& scale, float bias1, float bias2);
  void flush();
  std::vector<std::pair<std::string, Tensor>> state_of(std::size_t k);
  void load_state(std::size_t k, const std::string& name, const std::vector<float>& values);
  std::size_t host_bytes() const { return host_bytes_; }
  int threads() const { return pool_.size(); }

 private:
  using HostArray = std::unique_ptr<void, FreeHost>;
  struct Storage {
    ShardedStorage* s = nullptr;
    std::vector<Optimizer::Range> ranges;
    std::int64_t n = 0;
    HostArray master, m, v;  // f32 master weights; moments in AdamWOptions::moments
    float* w() const { return static_cast<float*>(master.get()); }
    HostArray exchange;  // pinned; f32 gradient in, values in dtype() out
    std::size_t exchange_bytes() const { return static_cast<std::size_t>(n) * sizeof(float); }
    bool prepared = false;  // under prepare_mutex_: the host state is ready for use
    std::uint64_t fetched_version = ~std::uint64_t{0};  // gradient version in the exchange buffer
    Event fetched, updated, written;                    // the copy in, the update, the copy out
    bool write_back_pending = false;                    // delayed: updated, not yet copied back
    Tensor sum_squares;  // of the gradient copied out, taken before it was given back (f32 scalar)
  };
  static HostArray host_array(std::size_t bytes);
  // Touches, fills and pins storage k's host state from the values staged in its moments' memory.
  void prepare(std::size_t k);
  void prepare_all();
  // Waits until storage k's host state is prepared; rethrows the preparation's error.
  void wait_prepared(std::size_t k);
  // Part p of storage k's elements, for the pool's thread p.
  std::pair<std::int64_t, std::int64_t> part(const Storage& st, int p) const;
  void gradient_complete(std::size_t k);
  // Queues the copy of storage k's gradient to the host; `release`: take its sum of squares and
  // give its device memory back once kGradientsInFlight later ones are copied too.
  void fetch(std::size_t k, bool release);
  void release(std::size_t k);
  void write_back(std::size_t k);
  void update(std::size_t k, float grad_scale, float lr, float bias1, float bias2);

  AdamWOptions options_;
  ThreadPool pool_;
  std::vector<Storage> storages_;
  Stream to_host_, updates_, to_device_;
  std::unique_ptr<memory::PinnedBuffer> scale_host_;  // a device gradient scale, copied for the updates
  std::vector<std::pair<Tensor, Event>> scales_in_flight_;  // kept until copied
  bool armed_ = false;  // in the last micro-batch's backward
  std::deque<std::size_t> in_flight_;  // copied out, their gradient not given back yet
  std::size_t host_bytes_ = 0;
  std::mutex prepare_mutex_;
  std::condition_variable prepared_;
  std::exception_ptr prepare_error_;
  std::atomic<bool> stop_preparing_{false};
  std::thread preparer_;
};

}  // namespace bmt::optim::detail
