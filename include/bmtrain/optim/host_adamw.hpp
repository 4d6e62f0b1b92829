#pragma once
// AdamW's update on the host, for the offloaded AdamW (and its benchmark): one pass over
// contiguous f32 arrays that updates the moments and the master weights and writes the values in
// the parameters' dtype, rounded in the same pass. Written for the compiler to vectorize: no branch
// per element, the same float expressions as the device kernel.
#include <cstdint>

#include "bmtrain/runtime/dtype.hpp"

namespace bmt::optim {

struct HostAdamWStep {
  float lr, grad_scale, beta1, beta2, eps, bias1, bias2, weight_decay;
};

// For i in [0, n): reads g[i] (f32 gradient), updates m[i], v[i] (moments, of dtype `moments`:
// f32, or bf16, widened for the update and rounded to nearest even when stored) and w[i] (master
// weights), and writes w[i] in `out_dtype` (f32, bf16 or f16) to out[i]. `out` may be the same
// address as `g` (the values go back in the gradient's buffer, over gradients already read);
// otherwise the arrays must not overlap.
void host_adamw_update(const float* g, float* w, void* m, void* v, DType moments, void* out, DType out_dtype,
                       std::int64_t n, const HostAdamWStep& step);

// For i in [0, n): writes w[i] in `out_dtype` to out[i] (what host_adamw_update writes for elements
// it does not update). `out` must not overlap `w`.
void host_round(const float* w, void* out, DType out_dtype, std::int64_t n);

}  // namespace bmt::optim
