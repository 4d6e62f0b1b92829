// CUDA side of softmax over the last dimension (fast_path.hpp): a team of threads per row (as in
// norm_cuda.cpp), the row held in registers between the max, the sum of exponentials and the
// normalized write, so x is read once and y written once; backward reads y and dy once each.
#include "cuda_common.hpp"
#include "fast_path.hpp"

namespace bmt::kernels::fast {

namespace {

using namespace cuda;

constexpr int kForwardValues = 32;   // floats of x a thread keeps in registers
constexpr int kBackwardValues = 16;  // ... of y and of dy

template <class T, int kVec, int kPacks>
__global__ void __launch_bounds__(kMaxTeamThreads)
    softmax_forward_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t rows, int C) {
  __shared__ float buf[kMaxTeamsPerBlock * 32];
  const int packs = C / kVec;
  for (std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * blockDim.y; base < rows;
       base += static_cast<std::int64_t>(gridDim.x) * blockDim.y) {
    const std::int64_t r = base + threadIdx.y;
    const bool active = r < rows;
    const std::int64_t off = (active ? r : 0) * C;
    float v[kPacks][kVec];
    float m = MaxOp::identity();
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = threadIdx.x + k * blockDim.x;
      if (active && p < packs) {
        load<kVec>(x + off + p * kVec, v[k]);
#pragma unroll
        for (int j = 0; j < kVec; ++j) m = MaxOp::apply(m, v[k][j]);
      }
    }
    m = team_reduce<MaxOp>(m, buf);
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
    const float inv = 1.0f / team_reduce<SumOp>(sum, buf);
    if (!active) continue;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = threadIdx.x + k * blockDim.x;
      if (p >= packs) continue;
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[k][j] *= inv;
      store<kVec>(y + off + p * kVec, v[k]);
    }
  }
}

// dx = y * (dy - sum(dy * y)) per row.
template <class T, int kVec, int kPacks>
__global__ void __launch_bounds__(kMaxTeamThreads) softmax_backward_kernel(const T* __restrict__ y,
                                                                           const T* __restrict__ dy,
                                                                           T* __restrict__ dx, std::int64_t rows,
                                                                           int C) {
  __shared__ float buf[kMaxTeamsPerBlock * 32];
  const int packs = C / kVec;
  for (std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * blockDim.y; base < rows;
       base += static_cast<std::int64_t>(gridDim.x) * blockDim.y) {
    const std::int64_t r = base + threadIdx.y;
    const bool active = r < rows;
    const std::int64_t off = (active ? r : 0) * C;
    float yv[kPacks][kVec], gv[kPacks][kVec];
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = threadIdx.x + k * blockDim.x;
      if (active && p < packs) {
        load<kVec>(y + off + p * kVec, yv[k]);
        load<kVec>(dy + off + p * kVec, gv[k]);
#pragma unroll
        for (int j = 0; j < kVec; ++j) dot += gv[k][j] * yv[k][j];
      }
    }
    dot = team_reduce<SumOp>(dot, buf);
    if (!active) continue;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = threadIdx.x + k * blockDim.x;
      if (p >= packs) continue;
      float o[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) o[j] = yv[k][j] * (gv[k][j] - dot);
      store<kVec>(dx + off + p * kVec, o);
    }
  }
}

int row_blocks(std::int64_t rows, const RowGeometry& g) {
  return static_cast<int>(std::min<std::int64_t>((rows + g.teams - 1) / g.teams, std::int64_t(sm_count()) * 64));
}

template <class T, int kVec>
bool forward_launch(const Tensor& x, const Tensor& y, std::int64_t rows, int C) {
  return launch_row<kForwardValues / kVec, (kVec > 1)>(C / kVec, [&](auto packs, const RowGeometry& g) {
    softmax_forward_kernel<T, kVec, decltype(packs)::value>
        <<<row_blocks(rows, g), dim3(g.threads, g.teams), 0, stream()>>>(static_cast<const T*>(x.data()),
                                                                        static_cast<T*>(y.data()), rows, C);
    check_launch();
    return true;
  });
}

template <class T, int kVec>
bool backward_launch(const Tensor& y, const Tensor& dy, const Tensor& dx, std::int64_t rows, int C) {
  return launch_row<kBackwardValues / kVec, (kVec > 1)>(C / kVec, [&](auto packs, const RowGeometry& g) {
    softmax_backward_kernel<T, kVec, decltype(packs)::value>
        <<<row_blocks(rows, g), dim3(g.threads, g.teams), 0, stream()>>>(
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

}  // namespace bmt::kernels::fast
