#pragma once
// The two forms a model block takes its hidden states in. Between tensor-parallel blocks they are
// sequence-parallel rows: rank r of the tp group holds rows [r*N/tp, (r+1)*N/tp) of the [N = B*T, C]
// token matrix, and attention needs the batch B to see the sequences again. Without tensor
// parallelism a block also takes the plain [B, T, C], as a user's code calls it.
#include <cstdint>
#include <functional>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt::models {

// forward_rows(rows, batch) on x: x [B, T, C] is taken as rows [B*T, C] of a batch of B (tp 1
// only) and the result given back as [B, T, C]; rows [N/tp, C] are taken as they are, with `batch`
// sequences over the group. `block` names the caller in errors.
Tensor on_block_rows(const Tensor& x, std::int64_t batch, const char* block,
                     const std::function<Tensor(const Tensor& rows, std::int64_t batch)>& forward_rows);

}  // namespace bmt::models
