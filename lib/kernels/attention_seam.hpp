#pragma once
// The kernel seam of attention (docs/ARCHITECTURE.md, "Backend seams"): attention_cuda.cpp runs
// tensor-core kernels for the inputs they take; attention_host.cpp takes none. Each returns false,
// having done nothing, when the inputs are not its own, and the portable kernel of attention.cpp
// runs instead. Inputs arrive validated.
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels::seam {

bool tensor_core_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float scale,
                                   const Tensor& out, const Tensor& lse);
bool tensor_core_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& dout, const Tensor& lse, bool causal, float scale, const Tensor& dq,
                                    const Tensor& dk, const Tensor& dv);

}  // namespace bmt::kernels::seam
