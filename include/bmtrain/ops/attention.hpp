#pragma once
// Differentiable scaled dot-product attention, fused: softmax(q k^T * scale [+ causal mask]) v
// without materializing the [T, T] scores, so memory grows with B * H * T * D only (forward saves
// one f32 logsumexp per query row; backward recomputes the probabilities from it).
//
//   Tensor o = bmt::attention(q, k, v);        // [B, H, T, D] -> [B, H, T, D]
//   Tensor o = bmt::attention_bthd(q, k, v);   // [B, T, H, D] -> [B, T, H, D] (= [B, T, C] by view)
//
// Two layouts, one kernel: the kernel reads q, k, v through their strides (unit stride along D
// needed; other inputs are copied once), so attention_bthd takes q, k, v in the layout a QKV
// projection produces, [B, T, H, D], with no transpose copy (strided views, e.g. of one fused
// [B, T, 3, H, D] projection, are read in place), and writes its output in that layout too, so the
// output projection follows with a reshape to [B, T, H * D] and no copy.
// k and v may have fewer heads than q (grouped-query attention: Hk key/value heads, Hk dividing H,
// query head h attending with key/value head h / (H / Hk); their gradients sum over the group), and
// a different length Tk from q's Tq; causal masking then aligns the last query with the last key
// (query i sees keys j <= i + Tk - Tq) and needs Tq <= Tk.
// scale defaults to 1 / sqrt(D). q, k, v share one floating dtype; statistics are f32.
#include <optional>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt {

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true,
                 std::optional<float> scale = std::nullopt);
Tensor attention_bthd(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true,
                      std::optional<float> scale = std::nullopt);

}  // namespace bmt
