#pragma once
// TransformerBlockList: a stack of CheckpointBlocks run by one call, so that the parameters of
// block i+1 are gathered while block i computes, and in backward block i-1 is gathered and block
// i+1's gradients are reduce-scattered while block i recomputes and backpropagates.
//
//   bmt::TransformerBlockList<SomeTransformerBlock> blocks;
//   for (int i = 0; i < 3; ++i) blocks.append(/* SomeTransformerBlock's constructor args */);
//   bmt::Tensor y = blocks(x, 1, 2, 3);   // same as looping block(x, 1, 2, 3) over the blocks
//
// The block's forward may take several hidden states (leading tensor arguments) and return them
// as a std::vector<Tensor>; they flow from one block to the next. Other arguments are the same
// for every block.
#include <memory>
#include <string>
#include <vector>

#include "bmtrain/zero/checkpoint_block.hpp"

namespace bmt {

template <class Block>
class TransformerBlockList : public Module {
 public:
  // How many blocks ahead parameters are gathered (0: no overlap).
  explicit TransformerBlockList(int prefetch_depth = 1) : depth_(prefetch_depth) {
    BMT_REQUIRE(prefetch_depth >= 0, "TransformerBlockList: expected prefetch_depth >= 0, found " << prefetch_depth);
  }

  template <class... A>
  CheckpointBlock<Block>& append(A&&... args) {
    blocks_.push_back(std::make_unique<CheckpointBlock<Block>>(std::forward<A>(args)...));
    register_module(std::to_string(blocks_.size() - 1), *blocks_.back());
    return *blocks_.back();
  }

  std::size_t size() const { return blocks_.size(); }
  CheckpointBlock<Block>& operator[](std::size_t i) { return *blocks_.at(i); }
  int prefetch_depth() const { return depth_; }

  template <class... Args>
  auto operator()(const Args&... args) {
    BMT_REQUIRE(!blocks_.empty(), "TransformerBlockList: expected at least one block, found none");
    using Result = decltype(blocks_.front()->block().forward(args...));
    std::vector<CheckpointBlockBase*> blocks;
    std::vector<CheckpointBlockBase::Body> bodies;
    for (auto& b : blocks_) {
      blocks.push_back(b.get());
      bodies.push_back(b->body(args...));
    }
    auto outputs = CheckpointBlockBase::run_sequence(blocks, bodies, detail::tensor_arguments(args...), depth_);
    if constexpr (std::is_same_v<std::decay_t<Result>, std::vector<Tensor>>) {
      return outputs;
    } else {
      return outputs.at(0);
    }
  }

 private:
  int depth_;
  std::vector<std::unique_ptr<CheckpointBlock<Block>>> blocks_;
};

}  // namespace bmt
