// DistributedParameter::gather(): the full value of a parameter outside CheckpointBlocks, as a
// differentiable op: forward all-gathers the shard on the compute stream's communicator (the value
// is needed at once); backward reduce-scatters the gradient into the shard's gradient on the
// scatter stream, as the block scheduler does, where the replica reduction of node sharding follows
// it. At one rank the shard is the value (or, held in f32, is rounded to it), and the gradient goes
// into the gradient shard.
#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/nn/parameter.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/zero/sharded_storage.hpp"

namespace bmt {

namespace {

class GatherParameter final : public autograd::Function {
 public:
  explicit GatherParameter(ShardedStorage& storage, Tensor param) : storage_(storage), param_(std::move(param)) {}
  std::string name() const override { return "GatherParameter"; }
  bool holds_trainable_parameters() const override { return storage_.has_trainable(); }

  std::vector<Tensor> forward(const std::vector<Tensor>&) override {
    const auto& e = entry();
    if (storage_.shard_is_gathered())
      return {storage_.shard().slice(0, e.offset, e.offset + e.numel).view(param_.shape())};
    Context& ctx = context();
    Tensor full = Tensor::empty({storage_.total()}, storage_.dtype());
    storage_.all_gather_into(full, ctx.shard_comm(), ctx.compute_stream());
    return {full.slice(0, e.offset, e.offset + e.numel).view(param_.shape())};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const auto& e = entry();
    if (!grads[0].defined() || !e.trainable) return {};
    if (storage_.whole()) {
      storage_.accumulate_grad(kEntry, grads[0]);
      return {};
    }
    Context& ctx = context();
    Tensor full = Tensor::zeros({storage_.total()}, DType::f32);
    copy_into(full.slice(0, e.offset, e.offset + e.numel).view(param_.shape()), grads[0]);
    // The storage keeps `full` alive until the reduction is done (settle() waits for it).
    storage_.reduce_gradient(full, ctx.scatter_comm(), ctx.scatter_stream(), ctx.compute_stream().record());
    return {};
  }

 private:
  // A parameter outside blocks has a storage of its own: its only entry.
  static constexpr std::size_t kEntry = 0;
  const ShardedStorage::Entry& entry() const { return storage_.entries()[kEntry]; }
  ShardedStorage& storage_;
  Tensor param_;
};

}  // namespace

Tensor DistributedParameter::gather() const {
  const auto& info = impl()->param;
  BMT_REQUIRE(info, "gather: expected a DistributedParameter, found a plain tensor");
  BMT_REQUIRE(info->sharded, "gather: parameter '" << name() << "' " << bmt::to_string(shape())
                                                   << " is not initialized: expected bmt::init_parameters(model) first");
  // Inside its CheckpointBlock the parameter is already gathered.
  if (info->sharded->is_bound()) return *this;
  BMT_REQUIRE(info->sharded->entries().size() == 1,
              "gather: parameter '" << name() << "' belongs to a CheckpointBlock; expected it to be used inside "
                                                 "that block's forward");
  return autograd::call<GatherParameter>({}, *info->sharded, *this)[0];
}

}  // namespace bmt
