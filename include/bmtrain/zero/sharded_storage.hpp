#pragma once
// ShardedStorage: the ZeRO-3 home of a group of parameters (one CheckpointBlock's, or one
// parameter outside blocks). The parameters are packed into one flat buffer, each at an offset
// aligned to kAllocationAlignment bytes, the total padded to a multiple of the shard group's size;
// rank r of the shard group owns the contiguous slice [r*S, (r+1)*S). The rank keeps only that slice
// of the values (in the parameters' dtype, or in f32 once an optimizer's master weights serve as the
// values) and of the gradient (in f32); full values exist only while gathered. Under node sharding
// every node holds a replica of the shards: rank r of each node's shard group holds the same slice,
// and the gradient is averaged over the replicas too (reduce_gradient).
#include <cstdint>
#include <functional>
#include <memory>
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
    // A whole storage's gradient shard holds no values here yet and stands for zeros (zero_grad):
    // the first gradient is written over it (bind_own_grads, accumulate_grad).
    bool grad_unwritten = false;
  };

  // Packs `parameters` (all of one dtype) and initializes this rank's shard with each parameter's
  // initializer, keyed by seed and dotted name, so the gathered values do not depend on the world
  // size. `rank` and `world_size` are the shard group's; `replicas` counts the shard groups holding
  // copies of these shards (the mesh's replica_count; 1 but under node sharding) and `replica_rank`
  // says which copy this rank's is.
  ShardedStorage(std::string name, const std::vector<std::pair<std::string, Tensor>>& parameters,
                 int rank, int world_size, std::uint64_t seed, int replicas = 1, int replica_rank = 0);
  ~ShardedStorage();
  ShardedStorage(const ShardedStorage&) = delete;
  ShardedStorage& operator=(const ShardedStorage&) = delete;

  const std::string& name() const { return name_; }
  // The parameters' dtype: what a gather delivers and what the model computes in.
  DType dtype() const { return dtype_; }
  // The shard's dtype: dtype(), or f32 once the values are held in f32 (hold_values_in_f32).
  DType shard_dtype() const { return shard_.dtype(); }
  std::int64_t total() const { return total_; }       // padded flat size, world_size * shard_size
  // The total() of a storage of parameters of these element counts, all in `dtype`, on
  // `world_size` ranks: known before any of it is allocated (memory planning).
  static std::int64_t planned_total(const std::vector<std::int64_t>& numels, DType dtype, int world_size);
  std::int64_t shard_size() const { return shard_size_; }
  std::int64_t shard_begin() const { return rank_ * shard_size_; }
  int replicas() const { return replicas_; }
  std::int64_t parameter_count() const;               // sum of numel over the entries
  const std::vector<Entry>& entries() const { return entries_; }
  bool has_trainable() const;

  // This rank's values (shard_dtype(), shard_size()), ready for work queued on the compute stream
  // (which waits for a write announced with values_written), and f32 gradient (shard_size(), zero
  // after zero_grad). zero_grad writes no zeros: the step's first gradients are written over the
  // shard (or the first reduction lands in it), and what none reached is zeroed here, when read.
  const Tensor& shard() const;
  const Tensor& grad_shard();
  // This rank's values in dtype(): the shard itself, or the f32 values rounded (a new tensor).
  Tensor values() const;

  // Holds this rank's values in f32 from now on, widened exactly from the shard: an optimizer's
  // f32 master weights then are the shard, and a gather rounds them to dtype() into its own buffer
  // (no copy of the values in dtype() is kept: 2 bytes a parameter fewer for bf16/f16). Nothing
  // changes for f32 parameters or when the values are held so already.
  void hold_values_in_f32();

  // One rank holds every parameter and no other holds a copy (a world of one): the shard is the
  // whole flat buffer, and a backward can put its gradients straight into the gradient shard
  // (bind_own_grads, accumulate_grad) with nothing to reduce. A shard group of one with replicas
  // is not whole: its gradients still go through reduce_gradient, for the replicas' average.
  bool whole() const { return world_size_ == 1 && replicas_ == 1; }
  // The shard is the gathered values as it is: a shard group of one, holding its values in dtype().
  // Otherwise a gather (all_gather_into) makes them, rounding from f32 where the values are held so.
  // (A block whose weights are gathered as float8 gathers even so: gather_into.)
  bool shard_is_gathered() const { return world_size_ == 1 && shard_.dtype() == dtype_; }
  // For a whole storage: points every trainable parameter's .grad at its place in the gradient
  // shard, in place of a buffer to reduce (parts that hold no values since zero_grad are bound so,
  // to be written over). The shard holds gradients from then on, as after reduce_gradient.
  void bind_own_grads();
  // For a whole storage: adds `grad` into entry `index`'s part of the gradient shard (writes it,
  // when the part holds no values since zero_grad).
  void accumulate_grad(std::size_t index, const Tensor& grad);

  // Gathers every rank's shard into `full` (total() elements of dtype()), queued on `stream`. Values
  // held in f32 are rounded to dtype() on `stream` into this rank's part of `full`, which is then
  // gathered in place.
  void all_gather_into(const Tensor& full, Communicator& comm, Stream& stream) const;
  // The gather a CheckpointBlock makes (gather_into): every parameter's values in dtype(), but a
  // weight marked ParameterInfo::gather_float8 (an FP8 linear layer's) as e4m3 codes, 1 byte an
  // element, under the scale of the whole weight: each rank takes the absolute maximum of its piece,
  // the shard group agrees on the maximum (all-reduce), and each rank quantizes its piece under it,
  // so the codes are those of the whole tensor quantized at once, at any world size. Codes and
  // values travel in one all-gather of each rank's pieces (a chunk of gather_wire_bytes()) through
  // a staging buffer, and are then moved to their places in `full`.
  bool gathers_float8() const;
  // Bytes of the buffer a gather_into fills: total() * dtype size without float8 weights.
  std::size_t gather_bytes() const;
  // Bytes of the staging buffer gather_into needs: the wire form of every rank's chunk, across
  // ranks with float8 weights; 0 otherwise (the gather lands in place).
  std::size_t gather_staging_bytes() const;
  // Bytes each rank contributes to a gather: its chunk with float8 weights, its shard in dtype()
  // otherwise.
  std::size_t gather_wire_bytes() const;
  // Gathers into `full` (gather_bytes()), queued on `stream`, through `staging`
  // (gather_staging_bytes(); undefined when that is 0). Without float8 weights, all_gather_into.
  void gather_into(const Tensor& full, const Tensor& staging, Communicator& comm, Stream& stream);
  // Points every parameter at its place in `full` (a gather_into's, or the shard where
  // shard_is_gathered() and no weight is gathered as float8; a float8 weight gets its codes and
  // scale in ParameterInfo, and no values) / back to nothing.
  void bind(const Tensor& full);
  void unbind();
  bool is_bound() const { return bound_; }
  // Points every trainable parameter's .grad at its place in `full_grad` (f32, total() elements),
  // a buffer that holds no values there yet: the backward writes the first gradient over it
  // (TensorImpl::grad_unwritten), and unbind_grads zeroes the places no gradient reached.
  void bind_grads(const Tensor& full_grad);
  void unbind_grads();
  // Where the trainable parameters lie in a gradient buffer: (offset, numel) pairs and total().
  // Backward writes nothing else, so a buffer zero outside them stays so for the same layout.
  const std::vector<std::int64_t>& grad_layout() const { return grad_layout_; }

  // Reduces `full_grad` (f32, total()) over ranks (average) into this rank's gradient shard,
  // adding to what is there, queued on `stream` after `ready`: a reduce-scatter over `comm` (the
  // shard group), then, with replicas, an all-reduce of the shard over the replica group, so the
  // shard holds the average over every data-parallel rank. The replica group's communicator is the
  // scatter stream's (Context::replica_comm), so with replicas `stream` must be the scatter stream.
  // Returns an event for when `full_grad` may be reused; the storage keeps it alive until then.
  // Call settle() before reading grad_shard().
  Event reduce_gradient(const Tensor& full_grad, Communicator& comm, Stream& stream, const Event& ready);
  // Makes the compute stream wait for reductions in flight and folds them into the gradient shard.
  void settle();
  void zero_grad();

  // Work outside the compute stream's order that writes the shard (an offloaded optimizer's copy
  // back from the host) ends at `done`: gathers and every later reader of shard() wait for it.
  void values_written(const Event& done);
  // Work outside the compute stream's order that reads the gradient shard (a copy to the host) ends
  // at `done`: the next gradient written into the shard (a reduction, a backward) waits for it.
  void gradient_read(const Event& done);

  // A CheckpointBlock's storage: the block scheduler gathers it ahead of each use (init_parameters
  // marks it so).
  bool belongs_to_block() const { return belongs_to_block_; }
  void set_belongs_to_block() { belongs_to_block_ = true; }

  // An update of this rank's values that an optimizer step has decided but leaves to run when the
  // values are next used (AdamWOptions::update_in_forward): `update(stream)` queues it on `stream`,
  // holding what it reads (the gradient, the step's scale) itself. The block scheduler runs a
  // block's on the gather stream just before gathering it, beside the compute of the blocks before
  // it; any other use of the values (shard(), values(), a gather) runs it first. It starts after the
  // work the compute stream had queued when it was deferred, and the values' readers wait for it.
  // What it holds goes back to the allocator once the compute stream's order is past it: when the
  // values are next bound or read on the compute stream, which waits for them then anyway.
  using DeferredUpdate = std::function<void(Stream& stream)>;
  void defer_update(DeferredUpdate update);
  bool has_deferred_update() const { return static_cast<bool>(deferred_update_); }
  void run_deferred_update(Stream& stream) const;

  // Told when this storage has every gradient of a backward queued (gradient_complete()): an
  // offloaded optimizer starts moving the gradient to the host then, while the backward goes on.
  using GradientListener = std::function<void(ShardedStorage&)>;
  void set_gradient_listener(GradientListener listener) { listener_ = std::move(listener); }
  // Called by the block scheduler once this block's backward and reduction are queued (for one
  // block at a time, one block later, so that folding an accumulated reduction in does not make the
  // compute stream wait for it); tells the listener, if any.
  void gradient_complete();
  // An event after which grad_shard() holds the gradients queued so far in full: a reduction's
  // own event where nothing is left to fold in, else the compute stream's after the fold (and the
  // zeros for parts no gradient reached).
  Event gradient_ready();
  // Gives the gradient shard's memory back once `after` (its last reader outside the compute
  // stream's order, if any: an offloaded optimizer's copy to the host) is done; the next gradient
  // written or read gets a new shard, which stands for zeros as after zero_grad. The compute stream
  // waits for `after` here, which orders the allocator's reuse of the memory after that read.
  // Optimizers give every shard back once their step has consumed it (Optimizer::release_gradients),
  // so that the forward runs without them.
  void release_gradient(const Event& after);
  // Counts the changes to the gradient shard (a reduction, a backward writing it, zero_grad): a
  // copy taken at one version is out of date at another.
  std::uint64_t gradient_version() const { return gradient_version_; }

  // The parts of `grad` (a gradient shard of this storage) that this rank counts in the global
  // gradient norm: all of it, but on tensor-parallel ranks other than 0 only the parameters split
  // over the tensor-parallel group: a replicated parameter's gradient is the same on every rank of
  // the group, and tensor-parallel rank 0 counts it once.
  std::vector<Tensor> norm_parts(const Tensor& grad) const;

  // Elements [first, first+count) of entry `e` that lie in this rank's shard, as a view of `t`
  // (a shard-sized tensor) and the index of its first element within the parameter.
  struct Slice {
    std::int64_t shard_offset = 0;  // where in the shard
    std::int64_t param_offset = 0;  // where in the flattened parameter
    std::int64_t count = 0;
  };
  Slice local_slice(const Entry& e) const;
  // The part of local_slice(e) this rank writes to a checkpoint: all of it on the first replica,
  // nothing on the others, which hold the same values, so that one rank writes each element.
  Slice checkpoint_slice(const Entry& e) const { return replica_rank_ == 0 ? local_slice(e) : Slice{}; }

 private:
  struct GatherLayout;  // lib/zero/block_gather.hpp
  // The layout for the entries' current gather_float8 marks (made again when they change).
  const GatherLayout& gather_layout() const;
  // grad_shard_ as it is; allocated on first use, standing for zeros (stale, or its parts unwritten)
  const Tensor& grad_shard_holder();
  // grad_shard_holder() for the compute stream to write: it waits for gradient_read() first.
  const Tensor& writable_grad_shard();
  // Lets go of an update run on another stream, the compute stream waiting for it first.
  void let_go_of_update() const;
  Tensor grad_part(const Tensor& full_grad, const Entry& e) const;
  bool zero_unwritten_parts();  // zeroes the gradient shard's unwritten parts; true if there were any
  std::string name_;
  DType dtype_ = DType::f32;
  int rank_ = 0;
  int world_size_ = 1;
  int replicas_ = 1;
  int replica_rank_ = 0;
  std::int64_t total_ = 0;
  std::int64_t shard_size_ = 0;
  std::vector<Entry> entries_;
  std::vector<std::int64_t> grad_layout_;  // fixed with the entries
  Tensor shard_;
  Tensor grad_shard_;
  Tensor incoming_;       // f32 shard a reduction lands in when grad_shard_ already holds gradients
  bool grad_dirty_ = false;    // grad_shard_ holds gradients (not known zero)
  bool grad_stale_ = false;    // across ranks: grad_shard_ stands for zeros it does not hold yet
  bool grads_own_ = false;     // the .grad bound are the gradient shard's (bind_own_grads)
  bool padding_written_ = false;  // one rank: a reduction wrote the shard between the parts too
  bool incoming_pending_ = false;
  Event reduced_;              // completion of the reduction in flight
  Tensor reducing_;            // its input, kept alive until then
  bool bound_ = false;
  mutable Event values_written_;  // values_written(): readers of the shard wait for it
  mutable DeferredUpdate deferred_update_;  // defer_update(), until run_deferred_update()
  mutable DeferredUpdate ran_update_;       // run on another stream, its memory held until let_go_of_update()
  Event deferred_after_;       // the compute stream when the update was deferred
  bool belongs_to_block_ = false;
  Event gradient_read_;        // gradient_read(): writers of the gradient shard wait for it
  GradientListener listener_;
  std::uint64_t gradient_version_ = 0;
  mutable std::unique_ptr<GatherLayout> gather_layout_;
  Tensor gather_amax_;  // f32, one a float8 weight: their absolute maxima, agreed over the group
};

}  // namespace bmt
