#pragma once
// The kernel seam of AdamW's device update (docs/ARCHITECTURE.md, "Backend seams"): on the CUDA
// build (adamw_cuda.cpp) one multi-tensor kernel updates every range of every shard of a step,
// taking the ranges' pointers as kernel arguments (a few hundred per launch); on the host build
// (adamw_host.cpp) the call is declined and AdamW (lib/optim/adamw.cpp) runs its portable Kokkos
// kernel per range.
#include <cstdint>
#include <vector>

#include "bmtrain/runtime/dtype.hpp"
#include "bmtrain/runtime/stream.hpp"

namespace bmt::kernels::seam {

// One contiguous range of a shard that holds its values in f32 (the master weights): f32 master and
// gradient, moments in the step's moments dtype, all offset to the range's first element.
struct AdamWRange {
  float* master;
  const float* grad;
  void* exp_avg;
  void* exp_avg_sq;
  std::int64_t n;
  float weight_decay;
};

struct AdamWScalars {
  float lr, grad_scale, beta1, beta2, eps, bias1, bias2;
  const float* device_scale;  // when set, the gradient scale is read there; negative: no update
};

// Queues the update of every range (moments of dtype `moments`: f32 or bf16, read into f32 and
// rounded to nearest even when stored) on `stream`; false when the backend leaves it to the
// portable kernel.
bool adamw_step(DType moments, const std::vector<AdamWRange>& ranges, const AdamWScalars& s, Stream& stream);

}  // namespace bmt::kernels::seam
