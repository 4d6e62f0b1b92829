#pragma once
// Fused scaled dot-product attention, forward and backward, with memory linear in the sequence
// length: no [T, T] score matrix is ever stored.
//
// Forward: each query row streams over its keys with an online softmax (running max and sum,
// rescaling the partial output when the max grows) and writes its output row and its logsumexp.
// Backward (FlashAttention-2 math): with P = exp(S - lse) recomputed from q, k and the saved lse,
//   D_i = rowsum(dO_i * O_i),  dP = dO V^T,  dS = P * (dP - D),  dQ = scale dS K,  dK = scale dS^T Q,
//   dV = P^T dO,
// one pass over query rows for dQ (which also writes D) and one over key rows for dK and dV, so
// every output row has a single writer: no atomics, deterministic results.
//
// Grouped-query attention: k and v may have fewer heads Hk than q's H, Hk dividing H; query head h
// reads key/value head h / (H / Hk), and dK, dV sum over the H / Hk query heads of a group (in a
// fixed order: deterministic). Hk = H is multi-head attention, Hk = 1 multi-query attention.
//
// Layout: q is [B, H, Tq, D], k and v are [B, Hk, Tk, D], out/dout/dq [B, H, Tq, D], dk/dv
// [B, Hk, Tk, D]: logical shapes with any strides in the first three dimensions and unit stride
// along D. A [B, T, H, D] tensor passes as its transpose(1, 2) with no copy (see
// bmt::attention_bthd). lse: contiguous f32 [B, H, Tq]. All of q, k, v, out, dout, dq, dk, dv share
// one floating dtype; scores, softmax statistics and accumulators are f32.
// Causal masking aligns the last query with the last key: query i sees keys j <= i + (Tk - Tq);
// causal needs Tq <= Tk. D is at most kMaxHeadDim.
//
// Two implementations: the portable kernel (one thread per query or key row, any dtype and head
// size), and in the CUDA build tensor-core kernels for bf16/f16 with D = 64 or 128 and 16-byte
// aligned rows (every row stride a multiple of 8 elements), the shapes of transformer training.
// On Hopper (a build targeting Hopper, on a device that runs its sm_90a code) the tensor-core
// shapes take warpgroup-MMA (wgmma) kernels, elsewhere mma.sync kernels. The entry points pick
// one; attention_uses_tensor_cores and attention_kernel_name say which.
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels {

constexpr int kMaxHeadDim = 256;

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float scale, const Tensor& out,
                       const Tensor& lse);
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                        const Tensor& lse, bool causal, float scale, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv);

// Whether q, k, v ([B, H, T, D] views) take the tensor-core kernels (always false in the host build).
bool attention_uses_tensor_cores(const Tensor& q, const Tensor& k, const Tensor& v);

// The kernel family q, k, v take at a positive scale: "wgmma", "mma.sync" or "portable".
const char* attention_kernel_name(const Tensor& q, const Tensor& k, const Tensor& v);

}  // namespace bmt::kernels
