#pragma once
// ShardedStorage: the ZeRO-3 home of a group of parameters (one CheckpointBlock's, or one
// parameter outside blocks). The parameters are packed into one flat buffer, each at an offset
// aligned to kAllocationAlignment bytes, the total padded to a multiple of the world size; rank r
// owns the contiguous slice [r*S, (r+1)*S). The rank keeps only that slice of the values (in the
// parameters' dtype) and of the gradient (in f32); full values exist only while gathered.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bmtrain/runtime/communicator.hpp"
#include "bmtrain/runtime/stream.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

class ShardedStorage {
 public:
  struct Entry {
    std::string name;    // dotted name from the model root
    Tensor parameter;    // the user's handle; its storage is re-pointed while gathered
    std::int64_t offset; // first element in the flat buffer
    std::int64_t numel;
    bool trainable;
  };

  // Packs `parameters` (all of one dtype) and initializes this rank's shard with each parameter's
  // initializer, keyed by seed and dotted name, so the gathered values do not depend on the world
  // size.
  ShardedStorage(std::string name, const std::vector<std::pair<std::string, Tensor>>& parameters,
                 int rank, int world_size, std::uint64_t seed);
  ~ShardedStorage();
  ShardedStorage(const ShardedStorage&) = delete;
  ShardedStorage& operator=(const ShardedStorage&) = delete;

  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  std::int64_t total() const { return total_; }       // padded flat size, world_size * shard_size
  std::int64_t shard_size() const { return shard_size_; }
  std::int64_t shard_begin() const { return rank_ * shard_size_; }
  std::int64_t parameter_count() const;               // sum of numel over the entries
  const std::vector<Entry>& entries() const { return entries_; }
  bool has_trainable() const;

  // This rank's values (dtype(), shard_size()) and f32 gradient (shard_size(), zero after zero_grad).
  const Tensor& shard() const { return shard_; }
  const Tensor& grad_shard();

  // One rank holds every parameter (a world of one): the shard is the whole flat buffer, usable
  // as the gathered values as it is, and a backward can add its gradients straight into the
  // gradient shard (accumulate_grads) with nothing to reduce.
  bool whole() const { return world_size_ == 1; }
  // For a whole storage: the gradient shard, for bind_grads, in place of a buffer to reduce. It
  // holds gradients from then on, as after reduce_gradient.
  const Tensor& accumulate_grads();

  // Gathers every rank's shard into `full` (total() elements of dtype()), queued on `stream`.
  void all_gather_into(const Tensor& full, Communicator& comm, Stream& stream) const;
  // Points every parameter at its place in `full` (gathered values) / back to nothing.
  void bind(const Tensor& full);
  void unbind();
  bool is_bound() const { return bound_; }
  // Points every trainable parameter's .grad at its place in `full_grad` (f32, total() elements).
  void bind_grads(const Tensor& full_grad);
  void unbind_grads();

  // Reduces `full_grad` (f32, total()) over ranks (average) into this rank's gradient shard,
  // adding to what is there, queued on `stream` after `ready`. Returns an event for when
  // `full_grad` may be reused; the storage keeps it alive until then. Call settle() before
  // reading grad_shard().
  Event reduce_gradient(const Tensor& full_grad, Communicator& comm, Stream& stream, const Event& ready);
  // Makes the compute stream wait for reductions in flight and folds them into the gradient shard.
  void settle();
  void zero_grad();

  // Elements [first, first+count) of entry `e` that lie in this rank's shard, as a view of `t`
  // (a shard-sized tensor) and the index of its first element within the parameter.
  struct Slice {
    std::int64_t shard_offset = 0;  // where in the shard
    std::int64_t param_offset = 0;  // where in the flattened parameter
    std::int64_t count = 0;
  };
  Slice local_slice(const Entry& e) const;

 private:
  const Tensor& grad_shard_holder();  // grad_shard_, allocated (zeros) on first use, stale or not
  void await_zeros();                 // the compute stream waits for zero_grad's zeros, once
  std::string name_;
  DType dtype_ = DType::f32;
  int rank_ = 0;
  int world_size_ = 1;
  std::int64_t total_ = 0;
  std::int64_t shard_size_ = 0;
  std::vector<Entry> entries_;
  Tensor shard_;
  Tensor grad_shard_;
  Tensor incoming_;       // f32 shard a reduction lands in when grad_shard_ already holds gradients
  bool grad_dirty_ = false;    // grad_shard_ holds gradients (not known zero)
  bool grad_stale_ = false;    // grad_shard_ stands for zeros it does not hold yet (see zero_grad)
  Event zeroed_;               // one rank: the zeros zero_grad queued on the scatter stream are written
  bool zeroing_ = false;       // the compute stream has not waited for zeroed_ yet
  bool incoming_pending_ = false;
  Event reduced_;              // completion of the reduction in flight
  Tensor reducing_;            // its input, kept alive until then
  bool bound_ = false;
};

}  // namespace bmt
