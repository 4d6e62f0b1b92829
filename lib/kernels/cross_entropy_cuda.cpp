// CUDA side of the fused softmax cross-entropy (memory_bound_seam.hpp). One block per row.
//
// Forward reads the row's logits once: each thread keeps a running (max, sum of exp(x - max)) over
// its elements, rescaling the sum when the max grows, and the pairs are merged across the block in
// a fixed order (team_merge); the row's logsumexp, loss and count go to small per-row arrays, and
// one block then folds the losses into the mean in row order (deterministic, no atomics, no host
// round trip).
// Backward reads the logits a second time and writes (exp(x - lse) - onehot) * grad / count: the
// logits are read twice in all and the probabilities are never stored.
//
// Rows of a vocabulary like GPT-2's (50257) start at any 2-byte boundary, so each row is split
// into a few leading elements up to the first 16-byte boundary, whole 16-byte packs, and a tail.
#include <cfloat>

#include "cuda_common.hpp"
#include "memory_bound_seam.hpp"

namespace bmt::kernels::seam {

namespace {

using namespace cuda;

constexpr int kThreads = 512;
constexpr int kUnroll = 2;  // forward: 16-byte packs a thread loads at a time

// A row split into [0, head) scalar, head + [0, packs * N) in packs of N, the rest scalar.
template <int N, class T>
struct RowSplit {
  std::int64_t head, packs;
  __device__ RowSplit(const T* row, std::int64_t n) {
    if (N == 1) {
      head = 0;
    } else {
      const auto mis = reinterpret_cast<std::uintptr_t>(row) % 16;
      head = mis == 0 ? 0 : static_cast<std::int64_t>((16 - mis) / sizeof(T));
      if (head > n) head = n;
    }
    packs = (n - head) / N;
  }
};

template <class T, class I, int N>
__global__ void __launch_bounds__(kThreads)
    ce_forward_kernel(const T* __restrict__ x, const I* __restrict__ targets, std::int64_t ignore,
                      float* __restrict__ lse, float* __restrict__ row_loss, float* __restrict__ row_count,
                      BadIndexRecord bad, std::int64_t V) {
  __shared__ float team_scratch[kTeamScratchFloats];  // team_merge's, for the block's one team
  TeamScratch scratch(team_scratch);
  const std::int64_t r = blockIdx.x;
  const T* xr = x + r * V;
  const RowSplit<N, T> split(xr, V);
  MaxSum acc{MaxOp::identity(), 0.0f};
  // exp by the hardware's ex2.approx (__expf): x - max <= 0 here, where it is within
  // 2 + |1.16 (x - max)| ulp; the accurate expf costs several instructions an element in a loop
  // that should be bound by memory.
  auto add = [&](float v) {
    if (v > acc.m) {
      acc.s = acc.s * __expf(acc.m - v) + 1.0f;
      acc.m = v;
    } else {
      acc.s += __expf(v - acc.m);
    }
  };
  for (std::int64_t j = threadIdx.x; j < split.head; j += blockDim.x) add(to_float(xr[j]));
  const T* body = xr + split.head;
  // kUnroll packs a thread at a time, loaded before any is reduced (more loads in flight), the
  // running max moved at most once for them.
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * kUnroll;
  for (std::int64_t p0 = threadIdx.x; p0 < split.packs; p0 += step) {
    float v[kUnroll][N];
    bool have[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int64_t p = p0 + static_cast<std::int64_t>(u) * blockDim.x;
      have[u] = p < split.packs;
      if (have[u]) load<N>(body + p * N, v[u]);
    }
    float pm = acc.m;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (have[u])
#pragma unroll
        for (int k = 0; k < N; ++k) pm = pm > v[u][k] ? pm : v[u][k];
    if (pm > acc.m) {
      acc.s *= __expf(acc.m - pm);
      acc.m = pm;
    }
    float s = 0.0f;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (have[u])
#pragma unroll
        for (int k = 0; k < N; ++k) s += __expf(v[u][k] - acc.m);
    acc.s += s;
  }
  for (std::int64_t j = split.head + split.packs * N + threadIdx.x; j < V; j += blockDim.x) add(to_float(xr[j]));

  acc = team_merge(acc, scratch);
  if (threadIdx.x != 0) return;
  const float log_sum = logf(acc.s);
  lse[r] = acc.m + log_sum;
  const std::int64_t t = static_cast<std::int64_t>(targets[r]);
  const bool in_range = t >= 0 && t < V;
  if (!in_range && t != ignore) bad.record(r, t);
  const bool counted = in_range && t != ignore;
  row_loss[r] = counted ? (acc.m - to_float(xr[t])) + log_sum : 0.0f;  // no cancellation of the max
  row_count[r] = counted ? 1.0f : 0.0f;
}

// loss = sum(row_loss) / sum(row_count) (0 with no counted row), summed in a fixed order.
__global__ void __launch_bounds__(1024) ce_mean_kernel(const float* __restrict__ row_loss,
                                                       const float* __restrict__ row_count, std::int64_t rows,
                                                       float* __restrict__ loss, float* __restrict__ count) {
  __shared__ float team_scratch[kTeamScratchFloats];  // team_reduce's, for the block's one team (32 warps)
  TeamScratch scratch(team_scratch);
  float a = 0.0f, n = 0.0f;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    a += row_loss[r];
    n += row_count[r];
  }
  a = team_reduce<SumOp>(a, scratch);
  n = team_reduce<SumOp>(n, scratch);
  if (threadIdx.x == 0) {
    count[0] = n;
    loss[0] = n > 0.0f ? a / n : 0.0f;
  }
}

template <class T, class I, int N>
__global__ void __launch_bounds__(kThreads)
    ce_backward_kernel(const T* x, const I* __restrict__ targets, std::int64_t ignore,
                       const float* __restrict__ lse, const float* __restrict__ count,
                       const float* __restrict__ grad_loss, T* dx, std::int64_t V) {  // dx may be x
  const std::int64_t r = blockIdx.x;
  const T* xr = x + r * V;
  T* dxr = dx + r * V;  // the same offset from a 16-byte boundary as xr (checked by the caller)
  const std::int64_t t = static_cast<std::int64_t>(targets[r]);
  const bool counted = t >= 0 && t < V && t != ignore;
  const float n = count[0];
  const float scale = counted && n > 0.0f ? grad_loss[0] / n : 0.0f;
  const float l = lse[r];
  const RowSplit<N, T> split(xr, V);
  auto one = [&](std::int64_t j) {
    dxr[j] = from_float<T>(scale * (expf(to_float(xr[j]) - l) - (j == t ? 1.0f : 0.0f)));
  };
  for (std::int64_t j = threadIdx.x; j < split.head; j += blockDim.x) one(j);
  for (std::int64_t p = threadIdx.x; p < split.packs; p += blockDim.x) {
    const std::int64_t j0 = split.head + p * N;
    float v[N];
    load<N>(xr + j0, v);
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = scale * (expf(v[k] - l) - (j0 + k == t ? 1.0f : 0.0f));
    store<N>(dxr + j0, v);
  }
  for (std::int64_t j = split.head + split.packs * N + threadIdx.x; j < V; j += blockDim.x) one(j);
}

}  // namespace

bool cross_entropy_forward(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index, const Tensor& lse,
                           const Tensor& loss, const Tensor& count, BadIndexRecord bad) {
  if (!available() || !contiguous_or_absent({&logits, &targets, &lse, &loss, &count})) return false;
  if (lse.dtype() != DType::f32) return false;
  const std::int64_t V = logits.size(-1);
  const std::int64_t rows = logits.numel() / V;
  if (rows <= 0 || rows > 0x7fffffff) return false;
  Tensor per_row = Tensor::empty({2, rows}, DType::f32);  // loss and 1/0 "counts" per row
  float* row_loss = per_row.data_as<float>();
  float* row_count = row_loss + rows;
  BMT_DISPATCH_FLOAT(logits.dtype(), "cross_entropy", T, {
    BMT_DISPATCH_INDEX(targets.dtype(), "cross_entropy", I, {
      ce_forward_kernel<T, I, vec_of<T>()><<<static_cast<int>(rows), kThreads, 0, stream()>>>(
          static_cast<const T*>(logits.data()), static_cast<const I*>(targets.data()), ignore_index,
          lse.data_as<float>(), row_loss, row_count, bad, V);
    });
  });
  check_launch();
  ce_mean_kernel<<<1, 1024, 0, stream()>>>(row_loss, row_count, rows, loss.data_as<float>(), count.data_as<float>());
  check_launch();
  return true;
}

bool cross_entropy_backward(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                            const Tensor& lse, const Tensor& count, const Tensor& grad_loss, const Tensor& dlogits) {
  if (!available() || !contiguous_or_absent({&logits, &targets, &lse, &count, &grad_loss, &dlogits})) return false;
  if (lse.dtype() != DType::f32) return false;
  const std::int64_t V = logits.size(-1);
  const std::int64_t rows = logits.numel() / V;
  if (rows <= 0 || rows > 0x7fffffff) return false;
  // Packs need the logits and their gradient at the same offset from a 16-byte boundary.
  const bool packs = (reinterpret_cast<std::uintptr_t>(logits.data()) - reinterpret_cast<std::uintptr_t>(dlogits.data())) % 16 == 0;
  BMT_DISPATCH_FLOAT(logits.dtype(), "cross_entropy_backward", T, {
    BMT_DISPATCH_INDEX(targets.dtype(), "cross_entropy_backward", I, {
      auto kernel = packs ? ce_backward_kernel<T, I, vec_of<T>()> : ce_backward_kernel<T, I, 1>;
      kernel<<<static_cast<int>(rows), kThreads, 0, stream()>>>(
          static_cast<const T*>(logits.data()), static_cast<const I*>(targets.data()), ignore_index,
          lse.data_as<float>(), count.data_as<float>(), grad_loss.data_as<float>(),
          static_cast<T*>(dlogits.data()), V);
    });
  });
  check_launch();
  return true;
}

}  // namespace bmt::kernels::seam
