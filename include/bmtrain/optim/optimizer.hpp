#pragma once
// Optimizers update each rank's shard of every ShardedStorage from its f32 gradient shard: the
// optimizer state (fp32 master weights, moments) is sharded exactly like the parameters, so each
// rank holds 1/N of it. After an update the compute-dtype shard is rewritten from the master.
#include <cstdint>
#include <string>
#include <vector>

#include "bmtrain/nn/module.hpp"
#include "bmtrain/tensor/tensor.hpp"
#include "bmtrain/zero/sharded_storage.hpp"

namespace bmt::optim {

// What every gradient is multiplied by in an update: 1 / loss scale, times the clipping factor.
// Either `value`, known on the host, or, when `device` is defined, the f32 scalar it holds, written
// on the device from the step's gradient norm so that the host need not wait for the norm; a
// negative scalar there marks non-finite gradients, and the update then leaves every parameter and
// every optimizer state as it was.
struct GradScale {
  float value = 1.0f;
  Tensor device;
};

class Optimizer {
 public:
  explicit Optimizer(Module& model);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update with learning rate `lr`, each gradient multiplied by `scale` first. The step count
  // advances either way; a step found skipped afterwards (a device scale marking non-finite
  // gradients) is taken back with set_step_count. The step consumes the gradients: their shards go
  // back to the allocator (release_gradients) and read as zeros until the next backward writes them.
  virtual void step(float lr, const GradScale& scale) = 0;
  void step(float lr, float grad_scale) { step(lr, GradScale{grad_scale, Tensor()}); }
  virtual std::string name() const = 0;
  // The learning rate of its options, which OptimManager uses for an optimizer added without a scheduler.
  virtual float learning_rate() const = 0;

  // The tensors that make up the optimizer's state for storage `s` (this rank's shards), by
  // name ("master", "exp_avg", ...), for checkpoints.
  virtual std::vector<std::pair<std::string, Tensor>> state_of(const ShardedStorage& s) const = 0;
  // Replaces state tensor `name` of storage `s` with `values` (f32, this rank's shard); loading
  // "master" also rewrites the compute-dtype parameter shard from it.
  virtual void load_state(const ShardedStorage& s, const std::string& name, const std::vector<float>& values);

  // OptimManager::backward says when a backward begins and ends, and whether it is the last
  // micro-batch before step(): an optimizer that starts its update while the backward runs (the
  // offloaded AdamW, as each block's gradient is complete) takes the gradients then.
  virtual void backward_begins(bool /*last_micro_batch*/) {}
  virtual void backward_ends(bool /*last_micro_batch*/) {}
  // Brings the model's values up to date with the optimizer's state and waits for the optimizer's
  // work in flight (an offloaded AdamW with a delayed update copies its last update back; an AdamW
  // that updates in the forward runs the updates still pending): before saving a checkpoint, say.
  // Nothing to do for an optimizer that updates on the device at its step.
  virtual void flush() {}

  void zero_grad();
  // Waits for gradient reductions in flight and folds accumulated ones in.
  void settle();
  const std::vector<ShardedStorage*>& storages() const { return storages_; }
  // What this rank's gradients contribute to the squared global norm: the tensors whose squares
  // are still to be summed go into `tensors` (by default every gradient shard's norm_parts), and a sum of squares
  // taken already (an f32 scalar on the device, from gradients no longer on the device: the
  // offloaded AdamW's) is returned, or an undefined tensor.
  virtual Tensor gradient_sum_squares(std::vector<Tensor>& tensors);
  std::int64_t step_count() const { return steps_; }
  void set_step_count(std::int64_t steps) { steps_ = steps; }

  // Shard element ranges of trainable parameters, with the weight decay each range gets.
  struct Range {
    std::int64_t begin, end;
    float weight_decay;
  };
  const std::vector<Range>& ranges(std::size_t storage) const { return ranges_[storage]; }

 protected:
  // Index of `s` in storages(); throws if this optimizer does not update it.
  std::size_t index_of(const ShardedStorage& s) const;
  // Gives every gradient shard back to the allocator once the work queued on the compute stream (an
  // update reading them) is done: the forward that follows a step then holds no gradients, which
  // are made again as the next backward's reductions arrive (4 bytes a parameter / N fewer).
  void release_gradients();
  // Splits each shard into ranges of trainable parameters; decay(name, shape) says whether a
  // parameter gets weight decay.
  void plan_ranges(float weight_decay, bool (*decay)(const std::string&, const Shape&));
  std::vector<ShardedStorage*> storages_;
  std::vector<std::vector<Range>> ranges_;
  std::int64_t steps_ = 0;
};

// The usual rule: decay matrices (2 or more dimensions), not biases, norms or gains.
bool decay_matrices(const std::string& name, const Shape& shape);

}  // namespace bmt::optim
