#include "token_staging.hpp"

#include <cstring>

namespace bmt_train {

TokenStaging::TokenStaging(std::size_t uploads_per_step, std::size_t bytes) : slots_(2 * uploads_per_step) {
  for (auto& slot : slots_) slot.buffer = std::make_unique<bmt::memory::PinnedBuffer>(bytes);
}

bmt::Tensor TokenStaging::upload(const std::vector<std::int32_t>& ids, std::int64_t rows, std::int64_t seq) {
  Slot& slot = slots_[next_++ % slots_.size()];
  const std::size_t bytes = ids.size() * sizeof(std::int32_t);
  BMT_REQUIRE(bytes <= slot.buffer->bytes() && static_cast<std::int64_t>(ids.size()) == rows * seq,
              "token upload: expected " << rows << " x " << seq << " ids, found " << ids.size());
  slot.copied.synchronize();
  std::memcpy(slot.buffer->data(), ids.data(), bytes);
  bmt::Tensor t = bmt::Tensor::empty({rows, seq}, bmt::DType::i32);
  auto& compute = bmt::context().compute_stream();
  bmt::memory::copy_from_host_async(t.data(), slot.buffer->data(), bytes, compute);
  slot.copied = compute.record();
  return t;
}

}  // namespace bmt_train
