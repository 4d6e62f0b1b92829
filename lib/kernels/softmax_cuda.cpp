// CUDA side of softmax over the last dimension (memory_bound_seam.hpp): a team of threads per row (as in
// norm_cuda.cpp), the row held in registers between the max, the sum of exponentials and the
// normalized write, so x is read once and y written once; backward reads y and dy once each. A
// block per resident slot walks its rows, and with 16-byte packs each thread loads the team's next
// row while it reduces this one (load_row_packs).
#include "cuda_common.hpp"
#include "memory_bound_seam.hpp"

namespace bmt::kernels::seam {

namespace {

using namespace cuda;

constexpr int kForwardValues = 32;   // floats of x a thread keeps in registers
constexpr int kBackwardValues = 16;  // ... of y and of dy

template <class T, int kVec, int kPacks>
__global__ void __launch_bounds__(kMaxTeamThreads)
    softmax_forward_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t rows, int C) {
  constexpr bool kPrefetch = kVec > 1;
  __shared__ float team_scratch[kMaxTeamsPerBlock * kTeamScratchFloats];
  TeamScratch scratch(team_scratch);
  const int packs = C / kVec;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.y;
  Raw<kVec, T> next[kPacks] = {};  // kPrefetch: the team's next row
  std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * blockDim.y;
  if (kPrefetch) load_row_packs(x, base + threadIdx.y, rows, C, next);
  for (; base < rows; base += stride) {  // uniform trip count: team_reduce synchronizes the team
    const std::int64_t r = base + threadIdx.y;
    const bool active = r < rows;
    Raw<kVec, T> row[kPacks];
    take_row_packs<kPrefetch>(x, r, stride, rows, C, row, next);
    float v[kPacks][kVec];
    float m = MaxOp::identity();
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = threadIdx.x + k * blockDim.x;
      if (active && p < packs) {
        unpack(row[k], v[k]);
#pragma unroll
        for (int j = 0; j < kVec; ++j) m = MaxOp::apply(m, v[k][j]);
      }
    }
    m = team_reduce<MaxOp>(m, scratch);
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      if (active && threadIdx.x + k * blockDim.x < packs) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          v[k][j] = __expf(v[k][j] - m);  // ex2.approx: v - m <= 0, within 2 + |1.16 (v - m)| ulp
          sum += v[k][j];
        }
      }
    }
    const float inv = 1.0f / team_reduce<SumOp>(sum, scratch);
    if (!active) continue;
    T* yr = y + r * C;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = threadIdx.x + k * blockDim.x;
      if (p >= packs) continue;
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[k][j] *= inv;
      store<kVec>(yr + p * kVec, v[k]);
    }
  }
}

// dx = y * (dy - sum(dy * y)) per row.
template <class T, int kVec, int kPacks>
__global__ void __launch_bounds__(kMaxTeamThreads) softmax_backward_kernel(const T* __restrict__ y,
                                                                           const T* __restrict__ dy,
                                                                           T* __restrict__ dx, std::int64_t rows,
                                                                           int C) {
  constexpr bool kPrefetch = kVec > 1;
  __shared__ float team_scratch[kMaxTeamsPerBlock * kTeamScratchFloats];
  TeamScratch scratch(team_scratch);
  const int packs = C / kVec;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.y;
  Raw<kVec, T> next_y[kPacks] = {}, next_dy[kPacks] = {};  // kPrefetch: the team's next row
  std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * blockDim.y;
  if (kPrefetch) {
    load_row_packs(y, base + threadIdx.y, rows, C, next_y);
    load_row_packs(dy, base + threadIdx.y, rows, C, next_dy);
  }
  for (; base < rows; base += stride) {
    const std::int64_t r = base + threadIdx.y;
    const bool active = r < rows;
    Raw<kVec, T> yr[kPacks], gr[kPacks];
    take_row_packs<kPrefetch>(y, r, stride, rows, C, yr, next_y);
    take_row_packs<kPrefetch>(dy, r, stride, rows, C, gr, next_dy);
    float yv[kPacks][kVec], gv[kPacks][kVec];
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = threadIdx.x + k * blockDim.x;
      if (active && p < packs) {
        unpack(yr[k], yv[k]);
        unpack(gr[k], gv[k]);
#pragma unroll
        for (int j = 0; j < kVec; ++j) dot += gv[k][j] * yv[k][j];
      }
    }
    dot = team_reduce<SumOp>(dot, scratch);
    if (!active) continue;
    T* dxr = dx + r * C;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = threadIdx.x + k * blockDim.x;
      if (p >= packs) continue;
      float o[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) o[j] = yv[k][j] * (gv[k][j] - dot);
      store<kVec>(dxr + p * kVec, o);
    }
  }
}

template <class T, int kVec>
bool forward_launch(const Tensor& x, const Tensor& y, std::int64_t rows, int C) {
  return launch_row<kForwardValues / kVec, (kVec > 1)>(C / kVec, [&](auto packs, const RowGeometry& g) {
    auto kernel = softmax_forward_kernel<T, kVec, decltype(packs)::value>;
    kernel<<<row_blocks(kernel, rows, g), dim3(g.threads, g.teams), 0, stream()>>>(
        static_cast<const T*>(x.data()), static_cast<T*>(y.data()), rows, C);
    check_launch();
    return true;
  });
}

template <class T, int kVec>
bool backward_launch(const Tensor& y, const Tensor& dy, const Tensor& dx, std::int64_t rows, int C) {
  return launch_row<kBackwardValues / kVec, (kVec > 1)>(C / kVec, [&](auto packs, const RowGeometry& g) {
    auto kernel = softmax_backward_kernel<T, kVec, decltype(packs)::value>;
    kernel<<<row_blocks(kernel, rows, g), dim3(g.threads, g.teams), 0, stream()>>>(
            static_cast<const T*>(y.data()), static_cast<const T*>(dy.data()), static_cast<T*>(dx.data()), rows, C);
    check_launch();
    return true;
  });
}

}  // namespace

bool softmax_forward(const Tensor& x, const Tensor& y) {
  if (!available() || !contiguous_or_absent({&x, &y})) return false;
  const std::int64_t C = x.size(-1);
  if (C <= 0 || C > (1 << 20)) return false;
  const std::int64_t rows = x.numel() / C;
  bool done = false;
  BMT_DISPATCH_FLOAT(x.dtype(), "softmax", T, {
    constexpr int kVec = vec_of<T>();
    done = C % kVec == 0 && aligned_or_absent({&x, &y}) ? forward_launch<T, kVec>(x, y, rows, static_cast<int>(C))
                                                        : forward_launch<T, 1>(x, y, rows, static_cast<int>(C));
  });
  return done;
}

bool softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  if (!available() || !contiguous_or_absent({&y, &dy, &dx})) return false;
  const std::int64_t C = y.size(-1);
  if (C <= 0 || C > (1 << 20)) return false;
  const std::int64_t rows = y.numel() / C;
  bool done = false;
  BMT_DISPATCH_FLOAT(y.dtype(), "softmax_backward", T, {
    constexpr int kVec = vec_of<T>();
    done = C % kVec == 0 && aligned_or_absent({&y, &dy, &dx})
               ? backward_launch<T, kVec>(y, dy, dx, rows, static_cast<int>(C))
               : backward_launch<T, 1>(y, dy, dx, rows, static_cast<int>(C));
  });
  return done;
}

}  // namespace bmt::kernels::seam
