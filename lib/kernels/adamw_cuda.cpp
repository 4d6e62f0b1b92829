// CUDA side of the AdamW seam (adamw_seam.hpp): one multi-tensor launch updates up to kMaxRanges
// ranges. The ranges travel as a kernel argument (a __grid_constant__ table of pointers, sizes and
// each range's first block), so a step needs no host-to-device copy and no table kept on the
// device. Each block updates 4096 consecutive elements of one range, found by a binary search over
// the table's first-block column; f32 arrays move as float4, bf16 moments as 4-element packs (8
// bytes), widened to f32 for the update and rounded to nearest even (cvt.rn.bf16x2) when stored.
#include <cuda_runtime.h>

#include "cuda_common.hpp"
#include "adamw_seam.hpp"

namespace bmt::kernels::seam {

namespace {

using namespace cuda;

constexpr int kThreads = 256;
constexpr int kSteps = 4;                              // float4 steps per thread
constexpr int kBlockElements = kThreads * 4 * kSteps;  // 4096
#if CUDART_VERSION >= 12010
constexpr int kMaxRanges = 256;  // about 13 KB of kernel parameters (the limit is 32 KB since CUDA 12.1)
#else
constexpr int kMaxRanges = 48;  // within the older 4 KB limit
#endif

struct Table {
  AdamWRange range[kMaxRanges];
  std::int32_t first_block[kMaxRanges + 1];
  int count;
};

template <class Mo, int M>
__device__ __forceinline__ void update(const AdamWRange& r, const AdamWScalars& s, float grad_scale, std::int64_t i) {
  float g[M], m[M], v[M], w[M];
  Mo* const exp_avg = static_cast<Mo*>(r.exp_avg);
  Mo* const exp_avg_sq = static_cast<Mo*>(r.exp_avg_sq);
  load<M>(r.grad + i, g);
  load<M>(exp_avg + i, m);
  load<M>(exp_avg_sq + i, v);
  load<M>(r.master + i, w);
#pragma unroll
  for (int k = 0; k < M; ++k) {
    // The same expressions as the portable kernel in adamw.cpp.
    const float gi = g[k] * grad_scale;
    const float mi = s.beta1 * m[k] + (1.0f - s.beta1) * gi;
    const float vi = s.beta2 * v[k] + (1.0f - s.beta2) * gi * gi;
    m[k] = mi;
    v[k] = vi;
    const float step = (mi / s.bias1) / (sqrtf(vi / s.bias2) + s.eps);
    w[k] = w[k] * (1.0f - s.lr * r.weight_decay) - s.lr * step;
  }
  store<M>(exp_avg + i, m);
  store<M>(exp_avg_sq + i, v);
  store<M>(r.master + i, w);
}

template <class Mo>
__global__ void __launch_bounds__(kThreads) adamw_kernel(const __grid_constant__ Table t, const AdamWScalars s) {
  const float grad_scale = s.device_scale ? *s.device_scale : s.grad_scale;
  if (grad_scale < 0.0f) return;  // non-finite gradients: the step is skipped (uniform over the grid)
  const std::int32_t b = static_cast<std::int32_t>(blockIdx.x);
  int lo = 0, hi = t.count - 1;  // the last range whose first block is <= b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.first_block[mid] <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  const AdamWRange& r = t.range[lo];
  const std::int64_t begin = static_cast<std::int64_t>(b - t.first_block[lo]) * kBlockElements;
  const std::int64_t end = begin + kBlockElements < r.n ? begin + kBlockElements : r.n;
  const bool packs = aligned16(r.grad) && aligned16(r.master) &&
                     reinterpret_cast<std::uintptr_t>(r.exp_avg) % (4 * sizeof(Mo)) == 0 &&
                     reinterpret_cast<std::uintptr_t>(r.exp_avg_sq) % (4 * sizeof(Mo)) == 0;
#pragma unroll
  for (int st = 0; st < kSteps; ++st) {
    const std::int64_t i = begin + (static_cast<std::int64_t>(st) * kThreads + threadIdx.x) * 4;
    if (i >= end) break;
    if (packs && i + 4 <= end) {
      update<Mo, 4>(r, s, grad_scale, i);
    } else {
      for (std::int64_t j = i; j < end && j < i + 4; ++j) update<Mo, 1>(r, s, grad_scale, j);
    }
  }
}

template <class Mo>
void launch_all(const std::vector<AdamWRange>& ranges, const AdamWScalars& s, cudaStream_t stream) {
  Table t;  // ~13 KB: one table reused for every launch
  t.count = 0;
  std::int64_t blocks = 0;
  auto flush = [&] {
    if (t.count == 0) return;
    t.first_block[t.count] = static_cast<std::int32_t>(blocks);
    adamw_kernel<Mo><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(t, s);
    check_launch();
    t.count = 0;
    blocks = 0;
  };
  for (const AdamWRange& r : ranges) {
    if (r.n <= 0) continue;
    const std::int64_t need = (r.n + kBlockElements - 1) / kBlockElements;
    if (t.count == kMaxRanges || blocks + need > 0x7fffffff) flush();
    t.range[t.count] = r;
    t.first_block[t.count] = static_cast<std::int32_t>(blocks);
    blocks += need;
    ++t.count;
  }
  flush();
}

}  // namespace

bool adamw_step(DType moments, const std::vector<AdamWRange>& ranges, const AdamWScalars& s, Stream& stream) {
  if (!available()) return false;
  switch (moments) {
    case DType::f32: launch_all<float>(ranges, s, stream.native()); return true;
    case DType::bf16: launch_all<bf16_t>(ranges, s, stream.native()); return true;
    default: return false;
  }
}

}  // namespace bmt::kernels::seam
