#pragma once
// Persistent buffers handed out round-robin: gather buffers for parameters, full-size gradient
// buffers for blocks. They are allocated at warm-up and reused every step, so the hot path
// allocates nothing. Each slot carries the event after which its last user is done; whoever
// writes into a slot next makes its stream wait for that event first.
#include <vector>

#include "bmtrain/runtime/stream.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

class BufferRing {
 public:
  struct Slot {
    Tensor buffer;  // 1-D, at least as large as asked for
    Event free;     // the last user is done with `buffer` once this completes
    // Gradient ring: its last user's ShardedStorage::grad_layout(); `buffer` is zero outside the
    // parameters' parts it names (empty: nothing known).
    std::vector<std::int64_t> layout;
  };

  explicit BufferRing(DType dtype) : dtype_(dtype) {}
  // Makes sure there are at least `slots` slots of at least `numel` elements (warm-up only:
  // growing a slot makes the compute stream wait for its last user before the old buffer goes
  // back to the allocator; the host does not wait).
  void reserve(int slots, std::int64_t numel);
  Slot& slot(int i) { return slots_[static_cast<std::size_t>(i) % slots_.size()]; }
  int size() const { return static_cast<int>(slots_.size()); }
  void clear();

 private:
  DType dtype_;
  std::vector<Slot> slots_;
};

// The rings the ZeRO layer shares: gathered parameters (bytes), block gradients (f32), and the
// staging buffer (bytes, one slot) a gather of float8 weights across ranks lands in first.
BufferRing& gather_ring();
BufferRing& gradient_ring();
BufferRing& gather_staging_ring();

}  // namespace bmt
