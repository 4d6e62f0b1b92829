// CUDA side of the embedding lookup and its gradient (fast_path.hpp).
//
// Forward is a gather: a grid-stride loop over (token, 16-byte pack of its row).
//
// Backward is deterministic, with no float atomics: the token positions are sorted by id (a stable
// radix sort of (id, position) pairs, so each id's positions stay in token order), each id's run
// of positions is found by binary search, and one warp per vocabulary row adds the gradient rows
// of its positions in that order, in f32 registers, and writes the row once (zero for ids that do
// not occur). Runs longer than kLightRun (frequent tokens: a warp would add them one after the
// other) are listed instead and summed by a block of 16 warps each, every warp taking a fixed slice
// of the run and the slices added in warp order. The result is the same on every run, and every
// row of the gradient is written exactly once, so no separate zeroing pass is needed.
#include <cub/device/device_radix_sort.cuh>

#include "cuda_common.hpp"
#include "fast_path.hpp"

namespace bmt::kernels::fast {

namespace {

using namespace cuda;

template <class T, class I, int N>
__global__ void __launch_bounds__(256)
    embedding_forward_kernel(const I* __restrict__ ids, const T* __restrict__ weight, T* __restrict__ out,
                             BadIndexRecord bad, std::int64_t tokens, std::int64_t V, std::int64_t C) {
  const std::int64_t per_row = C / N;
  const std::int64_t total = tokens * per_row;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t n = i / per_row, p = i - n * per_row;
    const std::int64_t id = static_cast<std::int64_t>(ids[n]);
    const bool ok = id >= 0 && id < V;
    float v[N];
    if (ok) {
      load<N>(weight + id * C + p * N, v);
    } else {
      if (p == 0) bad.record(n, id);
#pragma unroll
      for (int k = 0; k < N; ++k) v[k] = 0.0f;
    }
    store<N>(out + n * C + p * N, v);
  }
}

// keys[i] = ids[i], or V (sorted after every real id) when out of range; positions[i] = i.
template <class I>
__global__ void sort_input_kernel(const I* __restrict__ ids, std::int32_t* __restrict__ keys,
                                  std::int32_t* __restrict__ positions, std::int64_t tokens, std::int64_t V) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < tokens;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t id = static_cast<std::int64_t>(ids[i]);
    keys[i] = static_cast<std::int32_t>(id >= 0 && id < V ? id : V);
    positions[i] = static_cast<std::int32_t>(i);
  }
}

// starts[v] = first index of the sorted keys holding a key >= v, for v in [0, V].
__global__ void run_starts_kernel(const std::int32_t* __restrict__ sorted_keys, std::int64_t tokens,
                                  std::int32_t* __restrict__ starts, std::int64_t V) {
  for (std::int64_t v = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v <= V;
       v += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t lo = 0, hi = tokens;
    while (lo < hi) {
      const std::int64_t mid = (lo + hi) / 2;
      if (sorted_keys[mid] < v)
        lo = mid + 1;
      else
        hi = mid;
    }
    starts[v] = static_cast<std::int32_t>(lo);
  }
}

constexpr int kWarpsPerBlock = 8;
constexpr int kPacksPerLane = 4;  // a warp adds up to 32 * 4 packs of a row per pass over its positions
constexpr int kLightRun = 64;     // longer runs go to the block-per-row kernel
constexpr int kHeavyWarps = 16;  // 512 threads: 128 registers each

// acc[k] += packs p0 + lane + 32 k of the grad_out rows at positions[q0 .. q1), in that order.
template <class G, int N>
__device__ __forceinline__ void add_rows(float (&acc)[kPacksPerLane][N], const G* __restrict__ grad_out,
                                         const std::int32_t* __restrict__ positions, std::int32_t q0,
                                         std::int32_t q1, std::int64_t p0, std::int64_t per_row, std::int64_t C,
                                         int lane) {
#pragma unroll
  for (int k = 0; k < kPacksPerLane; ++k)
#pragma unroll
    for (int j = 0; j < N; ++j) acc[k][j] = 0.0f;
#pragma unroll 4
  for (std::int32_t q = q0; q < q1; ++q) {
    const G* src = grad_out + static_cast<std::int64_t>(positions[q]) * C;
#pragma unroll
    for (int k = 0; k < kPacksPerLane; ++k) {
      const std::int64_t p = p0 + lane + 32 * k;
      if (p < per_row) {
        float g[N];
        load<N>(src + p * N, g);
#pragma unroll
        for (int j = 0; j < N; ++j) acc[k][j] += g[j];
      }
    }
  }
}

// grad_weight[v] = sum of grad_out rows at positions[starts[v] .. starts[v + 1]), in that order,
// for runs of at most kLightRun positions; longer runs are appended to heavy_ids.
template <class G, class W, int N>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    embedding_rows_kernel(const G* __restrict__ grad_out, const std::int32_t* __restrict__ positions,
                          const std::int32_t* __restrict__ starts, W* __restrict__ grad_weight, std::int64_t V,
                          std::int64_t C, int* __restrict__ heavy_count, std::int32_t* __restrict__ heavy_ids) {
  const int lane = threadIdx.x & 31;
  const std::int64_t per_row = C / N;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
  for (std::int64_t v = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); v < V;
       v += warps) {
    const std::int32_t b = starts[v], e = starts[v + 1];
    if (e - b > kLightRun) {
      // The list's order varies from run to run; each row's sum does not depend on it.
      if (lane == 0) heavy_ids[atomicAdd(heavy_count, 1)] = static_cast<std::int32_t>(v);
      continue;
    }
    W* dst = grad_weight + v * C;
    for (std::int64_t p0 = 0; p0 < per_row; p0 += 32 * kPacksPerLane) {
      float acc[kPacksPerLane][N];
      add_rows<G, N>(acc, grad_out, positions, b, e, p0, per_row, C, lane);
#pragma unroll
      for (int k = 0; k < kPacksPerLane; ++k) {
        const std::int64_t p = p0 + lane + 32 * k;
        if (p < per_row) store<N>(dst + p * N, acc[k]);
      }
    }
  }
}

// One block per listed row (blocks past the list's length return at once): warp w adds slice w of
// the run, and the warps' sums are added in warp order in shared memory.
template <class G, class W, int N>
__global__ void __launch_bounds__(32 * kHeavyWarps)
    embedding_heavy_rows_kernel(const G* __restrict__ grad_out, const std::int32_t* __restrict__ positions,
                                const std::int32_t* __restrict__ starts, W* __restrict__ grad_weight,
                                std::int64_t C, const int* __restrict__ heavy_count,
                                const std::int32_t* __restrict__ heavy_ids) {
  __shared__ float chunk[32 * kPacksPerLane * N];
  if (static_cast<int>(blockIdx.x) >= *heavy_count) return;
  const std::int64_t v = heavy_ids[blockIdx.x];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const std::int64_t b = starts[v], len = starts[v + 1] - b;
  const std::int32_t q0 = static_cast<std::int32_t>(b + len * warp / kHeavyWarps);
  const std::int32_t q1 = static_cast<std::int32_t>(b + len * (warp + 1) / kHeavyWarps);
  const std::int64_t per_row = C / N;
  W* dst = grad_weight + v * C;
  for (std::int64_t p0 = 0; p0 < per_row; p0 += 32 * kPacksPerLane) {
    float acc[kPacksPerLane][N];
    add_rows<G, N>(acc, grad_out, positions, q0, q1, p0, per_row, C, lane);
    for (int t = 0; t < kHeavyWarps; ++t) {
      if (warp == t) {
#pragma unroll
        for (int k = 0; k < kPacksPerLane; ++k)
#pragma unroll
          for (int j = 0; j < N; ++j) {
            float& c = chunk[(lane + 32 * k) * N + j];
            c = t == 0 ? acc[k][j] : c + acc[k][j];
          }
      }
      __syncthreads();
    }
    const std::int64_t packs = per_row - p0 < 32 * kPacksPerLane ? per_row - p0 : 32 * kPacksPerLane;
    for (std::int64_t pk = threadIdx.x; pk < packs; pk += blockDim.x) {
      float f[N];
#pragma unroll
      for (int j = 0; j < N; ++j) f[j] = chunk[pk * N + j];
      store<N>(dst + (p0 + pk) * N, f);
    }
    __syncthreads();  // the chunk is rewritten by the next pass
  }
}

template <class G, class W, int N>
void rows_launch(const Tensor& grad_out, const std::int32_t* positions, const std::int32_t* starts,
                 const Tensor& grad_weight, std::int64_t V, std::int64_t C, std::int64_t tokens) {
  // At most tokens / (kLightRun + 1) runs are longer than kLightRun.
  const std::int64_t max_heavy = tokens / (kLightRun + 1) + 1;
  Tensor heavy = Tensor::zeros({max_heavy + 1}, DType::i32);  // [count, ids...]
  int* heavy_count = heavy.data_as<int>();
  std::int32_t* heavy_ids = heavy.data_as<std::int32_t>() + 1;
  const std::int64_t blocks = std::min<std::int64_t>((V + kWarpsPerBlock - 1) / kWarpsPerBlock,
                                                     std::int64_t(sm_count()) * (2048 / (32 * kWarpsPerBlock)) * 4);
  embedding_rows_kernel<G, W, N><<<static_cast<int>(blocks), 32 * kWarpsPerBlock, 0, stream()>>>(
      static_cast<const G*>(grad_out.data()), positions, starts, static_cast<W*>(grad_weight.data()), V, C,
      heavy_count, heavy_ids);
  check_launch();
  embedding_heavy_rows_kernel<G, W, N><<<static_cast<int>(max_heavy), 32 * kHeavyWarps, 0, stream()>>>(
      static_cast<const G*>(grad_out.data()), positions, starts, static_cast<W*>(grad_weight.data()), C, heavy_count,
      heavy_ids);
  check_launch();
}

template <class G, class W>
void rows_typed(const Tensor& grad_out, const std::int32_t* positions, const std::int32_t* starts,
                const Tensor& grad_weight, std::int64_t V, std::int64_t C, std::int64_t tokens) {
  constexpr int N = static_cast<int>(16 / (sizeof(G) < sizeof(W) ? sizeof(G) : sizeof(W)));
  const bool vector = C % N == 0 && aligned(grad_out.data(), pack_align<N, G>()) &&
                      aligned(grad_weight.data(), pack_align<N, W>());
  if (vector)
    rows_launch<G, W, N>(grad_out, positions, starts, grad_weight, V, C, tokens);
  else
    rows_launch<G, W, 1>(grad_out, positions, starts, grad_weight, V, C, tokens);
}

}  // namespace

bool embedding_forward(const Tensor& ids, const Tensor& weight, const Tensor& out, BadIndexRecord bad) {
  if (!available() || !contiguous_or_absent({&ids, &weight, &out})) return false;
  const std::int64_t V = weight.size(0), C = weight.size(1), tokens = ids.numel();
  if (C == 0 || tokens == 0) return false;
  BMT_DISPATCH_FLOAT(weight.dtype(), "embedding", T, {
    BMT_DISPATCH_INDEX(ids.dtype(), "embedding", I, {
      constexpr int N = vec_of<T>();
      const bool vector = C % N == 0 && aligned(weight.data(), 16) && aligned(out.data(), 16);
      const std::int64_t items = tokens * (vector ? C / N : C);
      auto kernel = vector ? embedding_forward_kernel<T, I, N> : embedding_forward_kernel<T, I, 1>;
      kernel<<<grid_for(items, 256), 256, 0, stream()>>>(static_cast<const I*>(ids.data()),
                                                         static_cast<const T*>(weight.data()),
                                                         static_cast<T*>(out.data()), bad, tokens, V, C);
    });
  });
  check_launch();
  return true;
}

bool embedding_backward(const Tensor& ids, const Tensor& grad_out, const Tensor& grad_weight) {
  if (!available() || !contiguous_or_absent({&ids, &grad_out, &grad_weight})) return false;
  const std::int64_t V = grad_weight.size(0), C = grad_weight.size(1), tokens = ids.numel();
  // Keys and positions are 32-bit.
  if (C == 0 || tokens == 0 || tokens > 0x7fffffff || V >= 0x7fffffff) return false;
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::i64) return false;
  Tensor keys = Tensor::empty({2, tokens}, DType::i32), positions = Tensor::empty({2, tokens}, DType::i32);
  std::int32_t* keys_in = keys.data_as<std::int32_t>();
  std::int32_t* keys_out = keys_in + tokens;
  std::int32_t* pos_in = positions.data_as<std::int32_t>();
  std::int32_t* pos_out = pos_in + tokens;
  BMT_DISPATCH_INDEX(ids.dtype(), "embedding_backward", I, {
    sort_input_kernel<I><<<grid_for(tokens, 256), 256, 0, stream()>>>(static_cast<const I*>(ids.data()), keys_in,
                                                                      pos_in, tokens, V);
  });
  check_launch();
  int end_bit = 1;
  while (end_bit < 31 && (std::int64_t(1) << end_bit) <= V) ++end_bit;  // keys are in [0, V]
  std::size_t temp_bytes = 0;
  BMT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                 static_cast<int>(tokens), 0, end_bit, stream()));
  Tensor temp = Tensor::empty({static_cast<std::int64_t>(temp_bytes) + 1}, DType::u8);
  BMT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                 static_cast<int>(tokens), 0, end_bit, stream()));
  Tensor starts = Tensor::empty({V + 1}, DType::i32);
  run_starts_kernel<<<grid_for(V + 1, 256), 256, 0, stream()>>>(keys_out, tokens, starts.data_as<std::int32_t>(), V);
  check_launch();
  BMT_DISPATCH_FLOAT(grad_out.dtype(), "embedding_backward", G, {
    BMT_DISPATCH_FLOAT(grad_weight.dtype(), "embedding_backward", W, {
      rows_typed<G, W>(grad_out, pos_out, starts.data_as<std::int32_t>(), grad_weight, V, C, tokens);
    });
  });
  return true;
}

}  // namespace bmt::kernels::fast
