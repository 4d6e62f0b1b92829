#pragma once
// What the two files of the CUDA attention share: attention_cuda.cpp (the mma.sync kernels, the
// dispatch and the seam's entry points) and attention_wgmma_cuda.cpp (the warpgroup-MMA kernels of
// a 64- or 128-wide head, the only code compiled for sm_90a: see lib/CMakeLists.txt). The problem's
// description, the cp.async copies and the tile walk, the per-warp accumulator layout and the
// masks, and the wgmma kernels' entry points. Only CUDA translation units include it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/cuda_check.hpp"

namespace bmt::kernels::attention_tiles {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr float kLog2e = 1.4426950408889634f;

// Rows of a [B, H, T, D] tensor: element strides of the first three dimensions.
struct Rows {
  const void* data;
  long long sb, sh, st;
};

// Grouped-query attention: q has h heads, k and v h / group. Kernels over query rows (bh indexes
// [B, h]) read key/value head (bh % h) / group; the dK/dV kernels run over [B, h / group] and walk
// the queries of the group's heads one after another.
struct Problem {
  int h, tq, tk;
  int group;          // query heads per key/value head
  int shift;          // tk - tq: query i sees keys j <= i + shift when causal
  bool causal;
  float scale;        // softmax scale
  float scale_log2;   // scale * log2(e)
  __host__ __device__ int kv_heads() const { return h / group; }
};

// Row 0 of head bh % h of batch bh / h.
template <class E>
__device__ inline const E* rows_of(const Rows& r, int bh, int h) {
  return static_cast<const E*>(r.data) + (bh / h) * r.sb + (bh % h) * r.sh;
}

// Row 0 of the key/value head that query head bh (of [B, h]) reads.
template <class E>
__device__ inline const E* kv_rows_of(const Rows& r, int bh, const Problem& p) {
  return static_cast<const E*>(r.data) + (bh / p.h) * r.sb + ((bh % p.h) / p.group) * r.sh;
}

// The g-th query head (of [B, h]) that reads key/value head bhk (of [B, h / group]).
__device__ inline int query_head(int bhk, int g, const Problem& p) {
  const int hk = p.kv_heads();
  return (bhk / hk) * p.h + (bhk % hk) * p.group + g;
}

// ---- PTX building blocks --------------------------------------------------------------------

template <class E>
__device__ inline std::uint32_t pack(float lo, float hi);
template <>
__device__ inline std::uint32_t pack<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}
template <>
__device__ inline std::uint32_t pack<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

// 2^x on the special-function unit (2^-inf = 0).
__device__ inline float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Asynchronous 16-byte copy to shared memory (cp.async, sm_80+); an invalid source fills zeros.
__device__ inline void copy16_async(void* dst, const void* src, bool valid) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(valid ? 16 : 0));
}
// The same for 4 bytes (cp.async.ca: .cg takes 16 only).
__device__ inline void copy4_async(void* dst, const void* src, bool valid) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(to), "l"(src), "r"(valid ? 4 : 0));
}
__device__ inline void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ inline void wait_copies() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// ---- Tiles --------------------------------------------------------------------------------

// Rows of its own side (queries, or keys for dK/dV) a block owns when each warp owns M m-tiles.
template <int M>
__host__ __device__ constexpr int block_rows() { return 16 * M * kWarps; }

// The walk over tiles t = first, ..., tiles - 1 with two buffers: tile t + 1 is copied while tile
// t is used. issue(t, buffer) starts the copies of tile t; use(t, buffer) runs once it has landed.
// With ASYNC_READS the landed tiles are read by wgmma, through the async proxy: each thread
// fences its own copies into that proxy before the barrier.
template <bool ASYNC_READS = false, class Issue, class Use>
__device__ inline void walk_tiles(int first, int tiles, Issue&& issue, Use&& use) {
  if (first >= tiles) return;
  issue(first, 0);
  commit_copies();
  for (int t = first; t < tiles; ++t) {
    const int buffer = (t - first) & 1;
    if (t + 1 < tiles) {
      issue(t + 1, buffer ^ 1);
      commit_copies();
      wait_copies<1>();
    } else {
      wait_copies<0>();
    }
    if constexpr (ASYNC_READS) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();  // tile t is visible to every thread
    use(t, buffer);
    __syncthreads();  // every warp is done with this buffer before tile t + 2 goes into it
  }
}

// A warp's accumulator for 16 M rows and N columns in the mma layout: acc[m][n][e] is row
// 16 m + lane / 4 + 8 (e / 2), column 8 n + 2 (lane % 4) + e % 2.
template <int M, int N>
using Acc = float[M][N / 8][4];

__device__ inline int acc_row(int lane, int m, int e) { return 16 * m + lane / 4 + (e >= 2 ? 8 : 0); }
__device__ inline int acc_col(int lane, int n, int e) { return 8 * n + 2 * (lane % 4) + (e & 1); }

// Calls f(m, n, e) for each element of a warp's 16 M x N accumulator tile, fully unrolled.
template <int M, int N, class F>
__device__ __forceinline__ void for_each_element(F&& f) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int n = 0; n < N / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) f(m, n, e);
}

template <int M, int N>
__device__ inline void clear(float (&acc)[M][N][4]) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.0f;
}

// Writes a warp's 16 M x D accumulator times `factor` to rows row0.. of a tensor (rows < `rows`).
template <class E, int D, int M>
__device__ inline void store_rows(const Acc<M, D>& acc, E* base, long long st, int row0, int rows, float factor,
                                  int lane) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + 16 * m + lane / 4 + 8 * half;
      if (row >= rows) continue;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<std::uint32_t*>(base + row * st + 8 * n + 2 * (lane % 4)) =
            pack<E>(acc[m][n][2 * half] * factor, acc[m][n][2 * half + 1] * factor);
    }
}

// Number of N-key tiles the query rows [q0, q0 + block_rows<M>()) see.
template <int M, int N>
__device__ inline int key_tiles(const Problem& p, int q0) {
  const int last = p.causal ? min(p.tk, q0 + block_rows<M>() + p.shift) : p.tk;  // exclusive
  return (last + N - 1) / N;
}

// The 16 M query rows of one warp under the mask: the last key its last row sees (beyond it a
// key tile is skipped), and the last key its first row sees (up to it no element needs a mask).
template <int M, int N>
struct QueryWarp {
  int w0, last, first;
  __device__ QueryWarp(const Problem& p, int q0, int warp)
      : w0(q0 + warp * 16 * M),
        last(p.causal ? w0 + 16 * M - 1 + p.shift : p.tk - 1),
        first(p.causal ? w0 + p.shift : p.tk - 1) {}
  __device__ bool skips(int key0) const { return key0 > last; }
  // Whether the tile of keys key0.. crosses the diagonal or the end of the keys.
  __device__ bool partial(int key0, const Problem& p) const { return key0 + N - 1 > first || key0 + N > p.tk; }
};

// Whether the mask hides `key` from `query` (or the key is padding past the end).
__device__ inline bool hidden(int key, int query, const Problem& p) {
  return key >= p.tk || (p.causal && key > query + p.shift);
}

// The kernels mask only tiles that cross the diagonal or an end, in a pass of its own under a
// branch the warp takes as one. Tested element by element inside the softmax's loop, the tile's
// "partial" flag becomes a predicate on every element, so every tile would pay for the mask's
// integer arithmetic (bench_attention shows the pass faster, forward and backward, wgmma and
// mma.sync).

// Sets to `value` the elements of a warp's 16 M x N tile (queries from w0, keys from key0) that the
// mask hides or that lie past the last key.
template <int M, int N>
__device__ inline void mask_scores(Acc<M, N>& s, int w0, int key0, int lane, const Problem& p, float value) {
  for_each_element<M, N>([&](int m, int n, int e) {
    if (hidden(key0 + acc_col(lane, n, e), w0 + acc_row(lane, m, e), p)) s[m][n][e] = value;
  });
}

// The same for a transposed tile (keys from w0, queries from q0; a query past the last is hidden
// too), setting probabilities to zero.
template <int M, int N>
__device__ inline void mask_probabilities_transposed(Acc<M, N>& pt, int w0, int q0, int lane, const Problem& p) {
  for_each_element<M, N>([&](int m, int n, int e) {
    const int i = q0 + acc_col(lane, n, e), key = w0 + acc_row(lane, m, e);
    if (i >= p.tq || hidden(key, i, p)) pt[m][n][e] = 0.0f;
  });
}

// ---- Launching ----------------------------------------------------------------------------

inline cudaStream_t compute_stream() { return context().compute_stream().native(); }

// Kernels above 48 KiB of dynamic shared memory must say so; once per kernel is enough.
template <class Kernel>
void allow_shared_memory(Kernel kernel, std::size_t bytes) {
  BMT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// ---- The wgmma kernels (attention_wgmma_cuda.cpp), for a 64- or 128-wide head ---------------

constexpr int kWgTile = 64;  // queries per block, keys per tile

// The head sizes the wgmma kernels take.
__host__ __device__ constexpr bool wgmma_head(int d) { return d == 64 || d == 128; }

// Whether the device runs the sm_90a code of attention_wgmma_cuda.cpp. Asked once, with one wait.
bool wgmma_available();

// E is __nv_bfloat16 or __half, D 64 or 128 (wgmma_head). bh: B * h query heads.
template <class E, int D>
void launch_forward_wgmma(const Problem& p, unsigned bh, Rows q, Rows k, Rows v, Rows out, float* lse);
template <class E, int D>
void launch_backward_wgmma(const Problem& p, unsigned bh, Rows q, Rows k, Rows v, Rows dout, const float* lse,
                           const float* delta, Rows dq, Rows dk, Rows dv);

}  // namespace bmt::kernels::attention_tiles
