#pragma once
// Debugging helpers over a distributed model (BMTrain's inspect and sum_loss).
#include <string>

#include "bmtrain/nn/module.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

// Collective. A table of every parameter below `model`: name, shape, min, max, mean, std of the
// gathered values, and mean and std of the gathered f32 gradient (after reduction). Statistics are
// computed in float64 from each rank's shard and combined with one all-reduce per storage, so no
// rank holds a whole parameter. Every rank returns the same text.
std::string inspect(Module& model);

// Collective. The mean of a scalar loss over ranks, as an f32 host value (for logging).
float sum_loss(const Tensor& loss);

}  // namespace bmt
