#include "bmtrain/zero/buffer_ring.hpp"

#include <memory>

#include "bmtrain/runtime/context.hpp"

namespace bmt {

void BufferRing::reserve(int slots, std::int64_t numel) {
  if (static_cast<int>(slots_.size()) < slots) slots_.resize(static_cast<std::size_t>(slots));
  for (auto& s : slots_) {
    if (s.buffer.defined() && s.buffer.numel() >= numel) continue;
    // The old block goes back to the caching allocator, whose reuse is ordered by the compute
    // stream: making that stream wait for the slot's last user (a gather or reduce-scatter on
    // another stream) orders any reuse after it, without the host waiting.
    if (is_initialized()) context().compute_stream().wait(s.free);
    else s.free.synchronize();
    s.buffer = Tensor();  // give the old block back before taking a larger one
    s.buffer = Tensor::empty({numel}, dtype_);
    s.free = Event();
    s.layout.clear();
  }
}

void BufferRing::clear() {
  for (auto& s : slots_) s.free.synchronize();
  slots_.clear();
}

namespace {
struct Rings {
  BufferRing gather{DType::u8};
  BufferRing gradient{DType::f32};
  BufferRing gather_staging{DType::u8};
};
Rings& rings() {
  static std::unique_ptr<Rings> r;
  if (!r) {
    r = std::make_unique<Rings>();
    // Buffers go back before the device does.
    at_finalize([] { r.reset(); });
  }
  return *r;
}
}  // namespace

BufferRing& gather_ring() { return rings().gather; }
BufferRing& gradient_ring() { return rings().gradient; }
BufferRing& gather_staging_ring() { return rings().gather_staging; }

}  // namespace bmt
