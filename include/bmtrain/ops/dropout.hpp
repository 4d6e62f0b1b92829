#pragma once
// Differentiable dropout with a replayable mask.
//
//   Tensor h = bmt::dropout(x, 0.1f, bmt::random::next_key(), module.training());
//
// Element i of x (row-major order) is kept when random::uniform(key, i) >= p and then scaled by
// 1 / (1 - p); the others become 0. The mask depends only on (key, i): nothing is stored for
// backward (which applies the same mask to the gradient), and a recompute with the same key, as
// CheckpointBlock does in backward, drops the same elements. The caller chooses the key;
// random::next_key() hands out a fresh one per call from a counter that CheckpointBlock saves
// before a block's forward and restores for its recompute.
// With training == false or p == 0 dropout is the identity and returns x itself. p must be in
// [0, 1]; p == 1 returns zeros. `first` offsets the index: element i of x takes the mask's element
// first + i, so that a rank holding rows of a larger tensor (sequence-parallel rows) draws that
// tensor's mask for them, the same as one rank holding it whole.
#include <cstdint>

#include "bmtrain/kernels/random.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

Tensor dropout(const Tensor& x, float p, std::uint64_t key, bool training = true, std::uint64_t first = 0);

}  // namespace bmt
