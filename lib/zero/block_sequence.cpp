// The ZeRO-3 block scheduler: one autograd Function that runs a sequence of CheckpointBlocks,
// overlapping parameter all-gathers (gather stream) and gradient reduce-scatters (scatter stream)
// with computation (compute stream), ordered by events only.
//
// Gather buffers come from gather_ring(): block j uses slot j % (depth + 1). Gathers for the first
// depth + 1 blocks are issued up front; when block i is done with its slot, the gather of block
// i + depth + 1 is issued into it, so the slot's free event is always recorded before it is reused.
// Backward walks the blocks in reverse with the same scheme, and each block's full-size f32
// gradient buffer (gradient_ring(), two slots) is reduce-scattered while the next block computes.
#include <algorithm>
#include <optional>
#include <string>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/autograd/kept_outputs.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/random.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/timeline.hpp"
#include "bmtrain/zero/buffer_ring.hpp"
#include "bmtrain/zero/checkpoint_block.hpp"

namespace bmt {

namespace {

// Set while a block body runs: a CheckpointBlock called from inside another's forward would take
// gather slots the outer schedule relies on.
thread_local bool t_in_block = false;

class InBlock {
 public:
  InBlock() {
    BMT_REQUIRE(!t_in_block, "CheckpointBlock: expected blocks to be called one after another, found a "
                             "CheckpointBlock called inside another block's forward");
    t_in_block = true;
  }
  ~InBlock() { t_in_block = false; }
};

// Leaves a block's parameters (and their gradient views) unbound when its scope ends, also when
// the block's forward or backward throws, so no parameter keeps pointing into a gather buffer.
class Binding {
 public:
  explicit Binding(ShardedStorage& s) : s_(s) {}
  ~Binding() {
    s_.unbind_grads();
    s_.unbind();
  }
  Binding(const Binding&) = delete;
  Binding& operator=(const Binding&) = delete;

 private:
  ShardedStorage& s_;
};

// The block binds its parameters to the shard itself: nothing to gather (one rank holding the
// values in their dtype, no weight gathered as float8 codes).
bool binds_shard(const ShardedStorage& s) { return s.shard_is_gathered() && !s.gathers_float8(); }

// A gathered copy of one block's parameters: a ring slot, or a buffer of its own when the block
// keeps its parameters from forward to backward.
struct Gathered {
  Tensor buffer;
  Event ready;
  int slot = -1;  // ring slot, or -1 for an own buffer
};

class BlockSequence final : public autograd::Function {
 public:
  BlockSequence(std::vector<CheckpointBlockBase*> blocks, std::vector<CheckpointBlockBase::Body> bodies,
                int depth)
      : blocks_(std::move(blocks)),
        bodies_(std::move(bodies)),
        depth_(effective_prefetch_depth(depth, blocks_.size())) {
    BMT_REQUIRE(!blocks_.empty() && blocks_.size() == bodies_.size(),
                "TransformerBlockList: expected at least one block, found " << blocks_.size());
    for (auto* b : blocks_) {
      b->storage();  // a block init_parameters did not reach is an error naming why
      const int level = b->options().zero_level;
      BMT_REQUIRE(level == 2 || level == 3, "CheckpointBlock: expected zero_level 2 or 3, found " << level);
    }
  }

  std::string name() const override { return "CheckpointBlock"; }

  bool holds_trainable_parameters() const override {
    return std::any_of(blocks_.begin(), blocks_.end(), [](auto* b) { return b->storage().has_trainable(); });
  }

  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override {
    Context& ctx = context();
    const std::size_t n = blocks_.size();
    inputs_ = detach_all(inputs);
    saved_.assign(n, {});
    kept_.assign(n, {});
    graphs_.assign(n, {});
    rng_.assign(n, 0);
    reserve_rings(depth_ + 1);
    training_graph_ = is_recording();
    kept_outputs_.clear();
    for (std::size_t i = 0; i < n; ++i) kept_outputs_.emplace_back(kept_ops(i));

    std::vector<Gathered> gathered(n);
    for (std::size_t j = 0; j < std::min(n, static_cast<std::size_t>(depth_) + 1); ++j) gathered[j] = gather(j, j);

    std::vector<Tensor> current = inputs_;
    for (std::size_t i = 0; i < n; ++i) {
      auto* block = blocks_[i];
      ShardedStorage& storage = block->storage();
      ctx.compute_stream().wait(gathered[i].ready);
      std::vector<Tensor> outputs;
      {
        Binding binding(storage);
        storage.bind(gathered[i].buffer);
        rng_[i] = random::key_counter();
        InBlock guard;
        timeline::Span span(ctx.compute_stream(), "forward", storage.name());
        if (keeps_activations(i)) {
          // Keep this block's graph for backward: inputs become leaves of a sub-graph.
          autograd::EnableGradGuard grad;
          graphs_[i].inputs = as_leaves(current);
          outputs = bodies_[i](graphs_[i].inputs);
          graphs_[i].outputs = outputs;
        } else {
          saved_[i] = current;
          std::optional<autograd::KeptOutputsScope> keep;
          if (kept_outputs_[i].keeps_any()) keep.emplace(kept_outputs_[i], autograd::KeptOutputsScope::Mode::record);
          outputs = bodies_[i](current);
        }
      }
      release_gathered(i, gathered[i], /*after_forward=*/true);
      if (i + depth_ + 1 < n) gathered[i + depth_ + 1] = gather(i + depth_ + 1, i + depth_ + 1);
      if (i == 0) {
        hidden_ = outputs.size();
        BMT_REQUIRE(hidden_ >= 1 && hidden_ <= inputs_.size() + (inputs_.empty() ? 1 : 0),
                    "CheckpointBlock: expected a block to return between 1 and " << inputs_.size()
                        << " hidden states (one per leading tensor argument), found " << outputs.size());
      } else {
        BMT_REQUIRE(outputs.size() == hidden_, "TransformerBlockList: expected every block to return "
                                                   << hidden_ << " hidden states, found " << outputs.size()
                                                   << " from block " << i);
      }
      current = next_inputs(outputs);
    }
    return std::vector<Tensor>(current.begin(), current.begin() + static_cast<std::ptrdiff_t>(hidden_));
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) override {
    Context& ctx = context();
    const std::size_t n = blocks_.size();
    reserve_rings(depth_ + 1);
    std::vector<Tensor> grads(grad_outputs.begin(), grad_outputs.end());
    std::vector<Tensor> extra_grads(inputs_.size() > hidden_ ? inputs_.size() - hidden_ : 0);

    // Backward order: block n-1 first. Position p in that order is block n-1-p.
    std::vector<Gathered> gathered(n);
    auto need_gather = [&](std::size_t b) { return !blocks_kept(b); };
    for (std::size_t p = 0; p < std::min(n, static_cast<std::size_t>(depth_) + 1); ++p)
      if (need_gather(n - 1 - p)) gathered[n - 1 - p] = gather(n - 1 - p, p);
    // A block's storage hears that its gradient is complete once the next block's backward is
    // queued too: a fold of accumulated micro-batches it may then queue on the compute stream waits
    // for a reduction that ran beside that backward, not for the one just issued. At one rank
    // nothing is reduced, and the storage hears it at once.
    ShardedStorage* completing = nullptr;

    for (std::size_t p = 0; p < n; ++p) {
      const std::size_t i = n - 1 - p;
      auto* block = blocks_[i];
      ShardedStorage& storage = block->storage();
      Gathered g = need_gather(i) ? gathered[i] : kept_[i];
      ctx.compute_stream().wait(g.ready);

      // Gradient buffer for this block's parameters: at one rank the gradient shard itself.
      Binding binding(storage);
      BufferRing::Slot* grad_slot = nullptr;
      if (storage.has_trainable() && storage.whole()) {
        storage.bind_own_grads();
      } else if (storage.has_trainable()) {
        grad_slot = &gradient_ring().slot(static_cast<int>(p));
        ctx.compute_stream().wait(grad_slot->free);
        // The parameters' parts are written over (or zeroed at unbind); the rest of the slot is
        // zero already when its last user was laid out the same way.
        if (grad_slot->layout != storage.grad_layout()) {
          grad_slot->buffer.zero_();
          grad_slot->layout = storage.grad_layout();
        }
        storage.bind_grads(grad_slot->buffer.slice(0, 0, storage.total()));
      }
      storage.bind(g.buffer);

      std::vector<Tensor> leaves, outputs;
      {
        InBlock guard;
        if (keeps_activations(i)) {
          leaves = graphs_[i].inputs;
          outputs = graphs_[i].outputs;
        } else {
          autograd::EnableGradGuard grad;
          const std::uint64_t counter = random::key_counter();
          random::set_key_counter(rng_[i]);  // replay the forward's random draws
          leaves = as_leaves(saved_[i]);
          {
            timeline::Span span(ctx.compute_stream(), "recompute", storage.name());
            // Backward needs the graph and what its ops saved, not the block's outputs: the work
            // that only produces them (the last GEMM and residual add) is left undone.
            autograd::OutputsOnDemandGuard on_demand;
            std::optional<autograd::KeptOutputsScope> replay;
            if (kept_outputs_[i].keeps_any())
              replay.emplace(kept_outputs_[i], autograd::KeptOutputsScope::Mode::replay);
            outputs = bodies_[i](leaves);
            if (replay) kept_outputs_[i].check_all_taken();
          }
          random::set_key_counter(counter);
        }
        timeline::Span span(ctx.compute_stream(), "backward", storage.name());
        run_backward(outputs, std::move(grads));
      }
      graphs_[i] = {};
      saved_[i].clear();
      kept_outputs_[i].clear();

      // Gradients for the previous block's hidden states, and for the extra inputs.
      std::vector<Tensor> next(hidden_);
      for (std::size_t k = 0; k < leaves.size(); ++k) {
        Tensor lg = leaves[k].requires_grad() ? leaves[k].grad() : Tensor();
        if (k < hidden_) {
          next[k] = lg;
        } else if (lg.defined()) {
          Tensor& acc = extra_grads[k - hidden_];
          if (!acc.defined()) acc = lg;
          else add_(acc, lg);
        }
      }
      grads = std::move(next);

      storage.unbind_grads();
      storage.unbind();
      release_gathered(i, g, /*after_forward=*/false);  // (the Binding above unbinds on an exception)
      if (grad_slot) {
        const Event grads_ready = ctx.compute_stream().record();
        grad_slot->free = storage.reduce_gradient(grad_slot->buffer, ctx.scatter_comm(), ctx.scatter_stream(),
                                                  grads_ready);
      }
      if (completing) completing->gradient_complete();
      completing = nullptr;
      if (storage.has_trainable() && storage.whole()) storage.gradient_complete();
      else if (storage.has_trainable()) completing = &storage;
      const std::size_t ahead = p + depth_ + 1;
      if (ahead < n && need_gather(n - 1 - ahead)) gathered[n - 1 - ahead] = gather(n - 1 - ahead, ahead);
    }

    if (completing) completing->gradient_complete();

    // Gradients of the sequence's inputs: hidden states of block 0, then the extra tensors.
    std::vector<Tensor> input_grads(inputs_.size());
    for (std::size_t k = 0; k < inputs_.size(); ++k)
      input_grads[k] = k < hidden_ ? (k < grads.size() ? grads[k] : Tensor()) : extra_grads[k - hidden_];
    return input_grads;
  }

  void release_saved() override {
    saved_.clear();
    kept_.clear();
    kept_outputs_.clear();
    graphs_.clear();
    inputs_.clear();
  }

 private:
  struct Graph {
    std::vector<Tensor> inputs, outputs;
  };

  // A block keeps its activations when it does not recompute (and the call records a graph).
  bool keeps_activations(std::size_t i) const { return training_graph_ && !blocks_[i]->options().use_checkpoint; }
  // The ops whose outputs a recomputing block keeps from forward for its recompute.
  std::vector<std::string> kept_ops(std::size_t i) const {
    const CheckpointOptions& o = blocks_[i]->options();
    std::vector<std::string> ops;
    if (!training_graph_ || !o.use_checkpoint) return ops;
    if (o.keep_attention) ops.push_back("attention");
    if (o.keep_residual) ops.push_back("residual_add");
    return ops;
  }
  // A block keeps its gathered parameters from forward to backward.
  bool blocks_kept(std::size_t i) const {
    return training_graph_ && keeps_gathered_parameters(blocks_[i]->options());
  }

  void reserve_rings(int slots) {
    std::size_t bytes = 0, staging = 0;
    std::int64_t grad = 0;
    for (auto* b : blocks_) {
      // One rank reduces nothing, and gathers nothing where the shard is the gathered values.
      if (!binds_shard(b->storage())) bytes = std::max(bytes, b->storage().gather_bytes());
      staging = std::max(staging, b->storage().gather_staging_bytes());
      if (!b->storage().whole() && b->storage().has_trainable()) grad = std::max(grad, b->storage().total());
    }
    if (bytes > 0) gather_ring().reserve(slots, static_cast<std::int64_t>(bytes));
    // Gathers run one after another on the gather stream: one staging buffer serves them all.
    if (staging > 0) gather_staging_ring().reserve(1, static_cast<std::int64_t>(staging));
    if (grad > 0) gradient_ring().reserve(2, grad);
  }

  // Issues the all-gather of block b's parameters, as the k-th gather of this pass. At one rank the
  // shard is the gathered buffer where it holds the values in the parameters' dtype, and nothing is
  // copied; values held in f32 are rounded into a buffer as by a gather.
  Gathered gather(std::size_t b, std::size_t k) {
    Context& ctx = context();
    ShardedStorage& storage = blocks_[b]->storage();
    // An optimizer update left to this use runs here, on the gather stream, beside the compute of
    // the blocks before this one (ShardedStorage::defer_update).
    storage.run_deferred_update(ctx.gather_stream());
    Gathered g;
    if (binds_shard(storage)) {
      g.buffer = storage.shard();
      return g;
    }
    if (blocks_kept(b)) {
      g.buffer = Tensor::empty({static_cast<std::int64_t>(storage.gather_bytes())}, DType::u8);
    } else {
      g.slot = static_cast<int>(k % static_cast<std::size_t>(depth_ + 1));
      BufferRing::Slot& slot = gather_ring().slot(g.slot);
      ctx.gather_stream().wait(slot.free);
      g.buffer = slot.buffer;
    }
    // The shard may just have been written by the optimizer on the compute stream.
    ctx.gather_stream().wait(ctx.compute_stream().record());
    BufferRing::Slot* staging = storage.gather_staging_bytes() > 0 ? &gather_staging_ring().slot(0) : nullptr;
    storage.gather_into(g.buffer, staging ? staging->buffer : Tensor(), ctx.gather_comm(), ctx.gather_stream());
    g.ready = ctx.gather_stream().record();
    if (staging) staging->free = g.ready;  // its next user is the next gather, on the same stream
    return g;
  }

  void release_gathered(std::size_t i, const Gathered& g, bool after_forward) {
    if (after_forward && blocks_kept(i)) {
      kept_[i] = g;
      kept_[i].ready = Event();  // already waited for by the compute stream
      return;
    }
    if (g.slot >= 0) gather_ring().slot(g.slot).free = context().compute_stream().record();
  }

  std::vector<Tensor> next_inputs(const std::vector<Tensor>& outputs) const {
    std::vector<Tensor> next = outputs;
    for (std::size_t k = outputs.size(); k < inputs_.size(); ++k) next.push_back(inputs_[k]);
    return next;
  }

  static std::vector<Tensor> detach_all(const std::vector<Tensor>& ts) {
    std::vector<Tensor> out;
    for (const auto& t : ts) out.push_back(t.defined() ? t.detach() : t);
    return out;
  }

  // Fresh leaves over the same data, recording gradients for floating tensors.
  static std::vector<Tensor> as_leaves(const std::vector<Tensor>& ts) {
    std::vector<Tensor> out;
    for (const auto& t : ts) {
      Tensor leaf = t.defined() ? t.detach() : t;
      if (leaf.defined() && is_floating(leaf.dtype())) leaf.set_requires_grad(true);
      out.push_back(leaf);
    }
    return out;
  }

  // The block's output gradients are handed over: the backward may sum into them in place.
  static void run_backward(const std::vector<Tensor>& outputs, std::vector<Tensor> grads) {
    std::vector<Tensor> roots, root_grads;
    for (std::size_t k = 0; k < outputs.size() && k < grads.size(); ++k) {
      if (!grads[k].defined() || !outputs[k].requires_grad()) continue;
      roots.push_back(outputs[k]);
      root_grads.push_back(std::move(grads[k]));
    }
    grads.clear();
    if (!roots.empty()) autograd::backward(roots, std::move(root_grads));
  }

  std::vector<CheckpointBlockBase*> blocks_;
  std::vector<CheckpointBlockBase::Body> bodies_;
  int depth_;
  bool training_graph_ = false;
  std::size_t hidden_ = 1;
  std::vector<Tensor> inputs_;
  std::vector<std::vector<Tensor>> saved_;
  std::vector<Gathered> kept_;
  std::vector<autograd::KeptOutputs> kept_outputs_;
  std::vector<Graph> graphs_;
  std::vector<std::uint64_t> rng_;
};

}  // namespace

ShardedStorage& CheckpointBlockBase::storage() {
  if (storage_) return *storage_;
  // A block list (or block) the model forgot to register is invisible to init_parameters: say so,
  // rather than asking for the init_parameters call the program probably makes.
  const Module* top = this;
  while (top->parent()) top = top->parent();
  BMT_REQUIRE(top->sharding() == Sharding::module_parameters,
              "CheckpointBlock: parameters are not initialized: expected the block (or the TransformerBlockList or "
              "ModuleList holding it) registered in its model with register_module(name, ...), found it outside any "
              "bmt::DistributedModule, where bmt::init_parameters(model) does not reach it");
  BMT_REQUIRE(false, "CheckpointBlock: parameters are not initialized: expected bmt::init_parameters(model) before "
                     "the first call");
  return *storage_;
}

std::vector<Tensor> CheckpointBlockBase::run_sequence(const std::vector<CheckpointBlockBase*>& blocks,
                                                      const std::vector<Body>& bodies,
                                                      const std::vector<Tensor>& inputs, int prefetch_depth) {
  return autograd::call<BlockSequence>(inputs, blocks, bodies, prefetch_depth);
}

int effective_prefetch_depth(int depth, std::size_t blocks) {
  // One ring slot each: a depth in the billions would not fit in memory.
  const std::size_t most = blocks > 1 ? blocks - 1 : 0;
  return static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(std::max(depth, 0)), most));
}

bool keeps_gathered_parameters(const CheckpointOptions& o) { return o.zero_level == 2 || !o.use_checkpoint; }

}  // namespace bmt
