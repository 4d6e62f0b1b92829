#pragma once
// CheckpointBlock: wraps any module (a transformer block) so that ZeRO-3 manages it.
//
//   bmt::CheckpointBlock<SomeTransformerBlock> block(/* SomeTransformerBlock's constructor args */);
//   bmt::Tensor y = block(x, 1, 2, 3);   // calls SomeTransformerBlock::forward(x, 1, 2, 3)
//
// Its parameters live sharded in one flat buffer (bmt::init_parameters creates it). A call gathers
// them, runs the block's forward without keeping activations (only the block's inputs), and frees
// the gathered values; backward gathers again, recomputes the forward with the tape on,
// backpropagates, and reduce-scatters the parameter gradients into each rank's gradient shard.
//
// Tensor arguments are the block's autograd inputs; other arguments are kept by value for the
// recompute. forward may return a Tensor or a std::vector<Tensor>. Names are transparent: the
// wrapped block's parameters keep their own names ("attn.qkv.weight"), as in BMTrain.
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "bmtrain/nn/module.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/zero/sharded_storage.hpp"

namespace bmt {

struct CheckpointOptions {
  // Recompute the block in backward (true) or keep its activations from forward (false).
  bool use_checkpoint = true;
  // 3: gather parameters in forward and again in backward; 2: keep them gathered in between.
  int zero_level = 3;
  // With use_checkpoint: keep each attention call's output and logsumexp from forward to backward
  // (B * T * C elements and B * H * T floats a call), so that the recompute skips the attention
  // kernel, the slowest of a transformer block's recompute per byte it would keep.
  bool keep_attention = false;
  // With use_checkpoint: keep each residual_add call's output from forward to backward (B * T * C
  // elements a call; a block's last one is its output, which the next block holds anyway), so that
  // the recompute skips the add and the GEMM whose output it adds (the attention projection).
  bool keep_residual = false;
};

// The block scheduler's rules, for planning memory before a model exists:
// the prefetch depth a sequence of `blocks` blocks runs at (its gather ring has depth + 1 slots):
// prefetching past the last block gathers nothing more, so the depth is at most blocks - 1;
int effective_prefetch_depth(int prefetch_depth, std::size_t blocks);
// and whether a block with these options keeps its gathered parameters from a training forward to
// its backward (ZeRO level 2, or a block that keeps its activations), in a buffer of its own.
bool keeps_gathered_parameters(const CheckpointOptions& options);

class CheckpointBlockBase : public Module {
 public:
  // The block's forward over its tensor arguments (in argument order), returning its outputs.
  using Body = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

  explicit CheckpointBlockBase(CheckpointOptions options) : options_(options) {}
  Sharding sharding() const override { return Sharding::block; }

  CheckpointOptions& options() { return options_; }
  const CheckpointOptions& options() const { return options_; }
  // The block's sharded parameters (after bmt::init_parameters).
  ShardedStorage& storage();
  bool has_storage() const { return static_cast<bool>(storage_); }
  void set_storage(std::unique_ptr<ShardedStorage> storage) { storage_ = std::move(storage); }

 public:
  // Runs the blocks in sequence as one autograd Function: the scheduler behind both a single
  // CheckpointBlock call and a TransformerBlockList call. Block 0 gets `inputs`; if it returns k
  // tensors (the hidden states), block i > 0 gets block i-1's k outputs followed by inputs[k:].
  // Parameters of blocks i+1 .. i+prefetch_depth are gathered while block i computes.
  static std::vector<Tensor> run_sequence(const std::vector<CheckpointBlockBase*>& blocks,
                                          const std::vector<Body>& bodies, const std::vector<Tensor>& inputs,
                                          int prefetch_depth);

 private:
  CheckpointOptions options_;
  std::unique_ptr<ShardedStorage> storage_;
};

namespace detail {

template <class T>
constexpr bool is_tensor_v = std::is_base_of_v<Tensor, std::decay_t<T>>;

// What a call keeps of each argument for the recompute: nothing for tensors (they are autograd
// inputs, given again at call time), a copy of anything else.
template <class T>
using Kept = std::conditional_t<is_tensor_v<T>, std::monostate, std::decay_t<T>>;

template <class T>
Kept<T> keep(const T& arg) {
  if constexpr (is_tensor_v<T>) {
    return {};
  } else {
    return arg;
  }
}

// Position of argument I among the tensor arguments of Args.
template <std::size_t I, class... Args>
constexpr std::size_t tensor_position() {
  constexpr bool flags[] = {is_tensor_v<Args>..., false};
  std::size_t n = 0;
  for (std::size_t j = 0; j != I; ++j) n += flags[j] ? 1 : 0;  // (j < I warns under nvcc when I is 0)
  return n;
}

template <std::size_t I, class... Args>
decltype(auto) argument(const std::tuple<Kept<Args>...>& kept, const std::vector<Tensor>& tensors) {
  using T = std::tuple_element_t<I, std::tuple<Args...>>;
  if constexpr (is_tensor_v<T>) {
    return static_cast<const Tensor&>(tensors[tensor_position<I, Args...>()]);
  } else {
    return static_cast<const Kept<T>&>(std::get<I>(kept));
  }
}

inline std::vector<Tensor> as_outputs(Tensor t) { return {std::move(t)}; }
inline std::vector<Tensor> as_outputs(std::vector<Tensor> t) { return t; }

template <class Block, class... Args, std::size_t... I>
std::vector<Tensor> call_forward(Block& block, const std::tuple<Kept<Args>...>& kept,
                                 const std::vector<Tensor>& tensors, std::index_sequence<I...>) {
  return as_outputs(block.forward(argument<I, Args...>(kept, tensors)...));
}

template <class... Args>
std::vector<Tensor> tensor_arguments(const Args&... args) {
  std::vector<Tensor> out;
  auto add = [&](const auto& a) {
    if constexpr (is_tensor_v<decltype(a)>) out.push_back(static_cast<const Tensor&>(a));
  };
  (add(args), ...);
  return out;
}

// The Body that calls block.forward with the tensors given at call time in place of the tensor
// arguments, and with copies of the other arguments.
template <class Block, class... Args>
std::function<std::vector<Tensor>(const std::vector<Tensor>&)> make_body(Block& block, const Args&... args) {
  std::tuple<Kept<Args>...> kept(keep(args)...);
  return [&block, kept = std::move(kept)](const std::vector<Tensor>& tensors) {
    return call_forward<Block, Args...>(block, kept, tensors, std::index_sequence_for<Args...>{});
  };
}

}  // namespace detail

template <class Block>
class CheckpointBlock : public CheckpointBlockBase {
 public:
  template <class... A>
  explicit CheckpointBlock(A&&... args)
      : CheckpointBlockBase(CheckpointOptions{}), block_(std::forward<A>(args)...) {
    adopt();
  }
  template <class... A>
  explicit CheckpointBlock(CheckpointOptions options, A&&... args)
      : CheckpointBlockBase(options), block_(std::forward<A>(args)...) {
    adopt();
  }

  Block& block() { return block_; }
  const Block& block() const { return block_; }

  template <class... Args>
  auto operator()(const Args&... args) {
    using Result = decltype(block_.forward(args...));
    // Both lists spelled out: nvcc does not brace-convert `this` or one Body into a vector.
    const std::vector<CheckpointBlockBase*> self{static_cast<CheckpointBlockBase*>(this)};
    std::vector<Body> bodies;
    bodies.push_back(body(args...));
    auto outputs = run_sequence(self, bodies, detail::tensor_arguments(args...), 0);
    if constexpr (std::is_same_v<std::decay_t<Result>, std::vector<Tensor>>) {
      return outputs;
    } else {
      return outputs.at(0);
    }
  }

  template <class... Args>
  Body body(const Args&... args) {
    return detail::make_body(block_, args...);
  }

 private:
  // Transparent names: the wrapped block's parameters and sub-modules become this module's.
  void adopt() {
    for (const auto& [n, p] : block_.parameters_here()) register_parameter(n, p);
    for (const auto& [n, m] : block_.children()) register_module(n, *m);
  }
  Block block_;
};

}  // namespace bmt
