#pragma once
// Copies token ids to the device without a host wait.
//
// Tensor::from_host returns only once the compute stream has drained (on CUDA it synchronizes the
// stream after the copy), so each upload would hold the host until the previous step's optimizer
// had run, and the device would idle while the host queued the next step. Ids are staged in pinned
// buffers and copied on the compute stream instead; a buffer is refilled only once the copy that
// read it has completed. The ring holds two steps of uploads, and every step reads the gradient
// norm (which waits for that step's backward), so that wait is for a copy long finished.
#include <bmtrain/bmtrain.hpp>
#include <bmtrain/tensor/memory.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace bmt_train {

class TokenStaging {
 public:
  // uploads_per_step: tensors uploaded a step; bytes: the largest of them.
  TokenStaging(std::size_t uploads_per_step, std::size_t bytes);
  // A [rows, seq] i32 device tensor holding `ids`, copied on the compute stream.
  bmt::Tensor upload(const std::vector<std::int32_t>& ids, std::int64_t rows, std::int64_t seq);

 private:
  struct Slot {
    std::unique_ptr<bmt::memory::PinnedBuffer> buffer;
    bmt::Event copied;
  };
  std::vector<Slot> slots_;
  std::size_t next_ = 0;
};

}  // namespace bmt_train
