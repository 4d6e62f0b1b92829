// CUDA side of the attention seam: FlashAttention-2 style kernels on the tensor cores (mma.sync
// m16n8k16, bf16/f16 inputs, f32 accumulators) for the shapes transformer training uses: head
// dimension 64 or 128, rows aligned to 16 bytes. Everything else takes the portable kernel in
// attention.cpp.
//
// A thread block of 4 warps owns 64 or 128 rows (queries, or keys for dK/dV), 16 or 32 per warp
// (one or two 16-row m-tiles), and walks over 32- or 64-row tiles of the other side, copying the
// next tile into shared memory with cp.async while it uses the current one (Tiling says which
// sizes each kernel uses). Each warp keeps its score tile in registers (the accumulator layout
// of mma.sync is fixed by PTX: lane l holds rows l/4 and l/4 + 8, columns 2 (l % 4) + {0, 1} of
// every 8-column slice of each m-tile), does the softmax work there, and feeds the probabilities
// back into the next product as its A operand without a trip through memory. Under a causal mask
// a warp skips tiles it cannot see. Memory stays linear in T.
//
// On Hopper a 64-wide head runs on the warpgroup MMA instead (forward_wgmma_kernel,
// backward_kv_wgmma_kernel, backward_q_wgmma_kernel, compiled for sm_90a), when the device runs
// that code (wgmma_available).
//
// Forward: one pass with an online softmax (running row max and sum, partial outputs rescaled
// when the max grows), then O / sum and the logsumexp. Backward (the portable kernel's math):
// one kernel per key tile accumulates dV += P^T dO and dK += dS^T Q with dS = P * (dO V^T - D),
// another per query tile accumulates dQ += dS K; D = rowsum(dO * O) comes from a small kernel.
// Every output row has one writer: no atomics, results are deterministic. Scores are kept in log2
// units (scale * log2 e folded in) so the special-function unit's 2^x serves every exponential.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "attention_seam.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/cuda_check.hpp"

namespace bmt::kernels {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr float kLog2e = 1.4426950408889634f;

// Rows of a [B, H, T, D] tensor: element strides of the first three dimensions.
struct Rows {
  const void* data;
  long long sb, sh, st;
};

struct Problem {
  int h, tq, tk;
  int shift;          // tk - tq: query i sees keys j <= i + shift when causal
  bool causal;
  float scale;        // softmax scale
  float scale_log2;   // scale * log2(e)
};

template <class E>
__device__ inline const E* rows_of(const Rows& r, int bh, int h) {
  return static_cast<const E*>(r.data) + (bh / h) * r.sb + (bh % h) * r.sh;
}

// Shared-memory tiles have row stride D + 8 elements: the 8 rows of an ldmatrix phase then fall
// on distinct banks.
template <int D>
__host__ __device__ constexpr int tile_ld() { return D + 8; }

// ---- PTX building blocks --------------------------------------------------------------------

template <class E>
__device__ inline void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1);
template <>
__device__ inline void mma<__nv_bfloat16>(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ inline void mma<__half>(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 matrices of 16-bit elements from shared memory; lanes 8 i .. 8 i + 7 give the row
// addresses of matrix i, and register i receives matrix i (transposed with .trans).
__device__ inline void load_matrices(std::uint32_t (&r)[4], const void* row) {
  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}
__device__ inline void load_matrices_transposed(std::uint32_t (&r)[4], const void* row) {
  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

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

template <class E>
__device__ inline float to_float(E x);
template <>
__device__ inline float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ inline float to_float<__half>(__half x) { return __half2float(x); }

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

// ---- Tiles and warp products ----------------------------------------------------------------

// Rows of its own side (queries, or keys for dK/dV) a block owns when each warp owns M m-tiles.
template <int M>
__host__ __device__ constexpr int block_rows() { return 16 * M * kWarps; }

// Starts copying rows [row0, row0 + ROWS) of a tensor into a tile; rows past `rows` become zeros
// (a padding key must contribute 0, not NaN, to P V). Visible after wait_copies and a barrier.
template <class E, int D, int ROWS>
__device__ inline void copy_rows_async(E* tile, const E* base, long long st, int row0, int rows) {
  constexpr int kVec = 8, kPerRow = D / kVec, kRowsPerPass = kThreads / kPerRow;
  static_assert(kThreads % kPerRow == 0 && ROWS % kRowsPerPass == 0, "whole rows per pass");
  const int r0 = threadIdx.x / kPerRow, c = (threadIdx.x % kPerRow) * kVec;
#pragma unroll
  for (int pass = 0; pass < ROWS / kRowsPerPass; ++pass) {
    const int r = r0 + pass * kRowsPerPass;
    const bool valid = row0 + r < rows;
    copy16_async(tile + r * tile_ld<D>() + c, valid ? base + static_cast<long long>(row0 + r) * st + c : base, valid);
  }
}

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

// The A operand of a warp's products: 16 M rows of a tile (row-major, width D) as mma fragments;
// a[m][k / 16] holds rows 16m + 0-7 / 8-15 x columns k..k+7 / k+8..k+15.
template <int D, int M>
using Fragments = std::uint32_t[M][D / 16][4];

template <class E, int D, int M>
__device__ inline void load_fragments(Fragments<D, M>& a, const E* rows, int lane) {
  constexpr int ld = tile_ld<D>();
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int k = 0; k < D; k += 16) load_matrices(a[m][k / 16], rows + (16 * m + lane % 16) * ld + k + (lane / 16) * 8);
}

// acc = A B^T: A a warp's fragments, B the N rows of a tile (row-major, width D). Each B
// fragment read from shared memory serves M m-tiles.
template <class E, int D, int M, int N>
__device__ inline void product_nt(Acc<M, N>& acc, const Fragments<D, M>& a, const E* b, int lane) {
  constexpr int ld = tile_ld<D>();
  clear(acc);
#pragma unroll
  for (int k = 0; k < D; k += 16) {
#pragma unroll
    for (int n = 0; n < N / 8; n += 2) {
      std::uint32_t fb[4];  // B rows 8n..8n+7 then 8n+8..: (columns k.., k+8..) each
      load_matrices(fb, b + (8 * n + (lane % 8) + (lane / 16) * 8) * ld + k + ((lane / 8) % 2) * 8);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        mma<E>(acc[m][n], a[m][k / 16], fb[0], fb[1]);
        mma<E>(acc[m][n + 1], a[m][k / 16], fb[2], fb[3]);
      }
    }
  }
}

// The same with A read from shared memory (16 M rows of a tile) for this product only.
template <class E, int D, int M, int N>
__device__ inline void product_nt(Acc<M, N>& acc, const E* a, const E* b, int lane) {
  Fragments<D, M> fa;
  load_fragments<E, D, M>(fa, a, lane);
  product_nt<E, D, M, N>(acc, fa, b, lane);
}

// acc += P B: P is a warp's 16 M x N tile in registers (rounded to E), B N rows of a tile
// (row-major, width D): the A operand of mma.sync is exactly the accumulator layout of P.
template <class E, int D, int M, int N>
__device__ inline void accumulate_pb(Acc<M, D>& acc, const Acc<M, N>& p, const E* b, int lane) {
  constexpr int ld = tile_ld<D>();
#pragma unroll
  for (int k = 0; k < N / 16; ++k) {  // 16 of the N rows of B at a time
    std::uint32_t fa[M][4];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      fa[m][0] = pack<E>(p[m][2 * k][0], p[m][2 * k][1]);
      fa[m][1] = pack<E>(p[m][2 * k][2], p[m][2 * k][3]);
      fa[m][2] = pack<E>(p[m][2 * k + 1][0], p[m][2 * k + 1][1]);
      fa[m][3] = pack<E>(p[m][2 * k + 1][2], p[m][2 * k + 1][3]);
    }
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
      std::uint32_t fb[4];  // rows 16k..+7 / +8..+15 x columns 8n.. / 8n+8..
      load_matrices_transposed(fb, b + (16 * k + (lane % 8) + ((lane / 8) % 2) * 8) * ld + 8 * n + (lane / 16) * 8);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        mma<E>(acc[m][n], fa[m], fb[0], fb[1]);
        mma<E>(acc[m][n + 1], fa[m], fb[2], fb[3]);
      }
    }
  }
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

// ---- Kernels --------------------------------------------------------------------------------
// Each is templated on the element type, the head dimension D, the m-tiles per warp M and the
// width N of the tiles it walks over (see Tiling below).

template <class E, int D, int M, int N>
__global__ void __launch_bounds__(kThreads) forward_kernel(Rows q, Rows k, Rows v, Rows o, float* lse, Problem p) {
  constexpr int ld = tile_ld<D>(), rows = block_rows<M>();
  extern __shared__ __align__(128) unsigned char smem[];
  E* qs = reinterpret_cast<E*>(smem);
  E* kbuf = qs + rows * ld;  // [2][N][ld]
  E* vbuf = kbuf + 2 * N * ld;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * rows, bh = blockIdx.y;
  const QueryWarp<M, N> qw(p, q0, warp);
  const int w0 = qw.w0;
  const E* kb = rows_of<E>(k, bh, p.h);
  const E* vb = rows_of<E>(v, bh, p.h);

  copy_rows_async<E, D, rows>(qs, rows_of<E>(q, bh, p.h), q.st, q0, p.tq);  // lands with tile 0
  float row_max[M][2], row_sum[M][2];  // rows 16 m + lane / 4 and 16 m + lane / 4 + 8
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int i = 0; i < 2; ++i) row_max[m][i] = -INFINITY, row_sum[m][i] = 0.0f;
  Acc<M, D> out;
  clear(out);
  Acc<M, N> s;
  Fragments<D, M> qf;  // this warp's queries, read from shared memory once
  walk_tiles(
      0, key_tiles<M, N>(p, q0),
      [&](int t, int b) {
        copy_rows_async<E, D, N>(kbuf + b * N * ld, kb, k.st, t * N, p.tk);
        copy_rows_async<E, D, N>(vbuf + b * N * ld, vb, v.st, t * N, p.tk);
      },
      [&](int t, int b) {
        if (t == 0) load_fragments<E, D, M>(qf, qs + warp * 16 * M * ld, lane);  // Q landed with tile 0
        const int key0 = t * N;
        if (qw.skips(key0)) return;  // the whole tile is masked for this warp
        product_nt<E, D, M, N>(s, qf, kbuf + b * N * ld, lane);
        // The scores stay unscaled until the exponent, one FFMA per element: with scale > 0 (the
        // forward requires it) the max of the raw scores, scaled, is the max of the scaled ones.
        if (qw.partial(key0, p)) mask_scores<M, N>(s, w0, key0, lane, p, -INFINITY);
        float tile_max[M][2];
#pragma unroll
        for (int m = 0; m < M; ++m) {
          tile_max[m][0] = tile_max[m][1] = -INFINITY;
#pragma unroll
          for (int n = 0; n < N / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) tile_max[m][e / 2] = fmaxf(tile_max[m][e / 2], s[m][n][e]);
        }
        float alpha[M][2], base[M][2];
#pragma unroll
        for (int m = 0; m < M; ++m)
#pragma unroll
          for (int i = 0; i < 2; ++i) {  // the four lanes of a row agree on its max
            float& tm = tile_max[m][i];
            tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
            tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
            const float m_new = fmaxf(row_max[m][i], tm * p.scale_log2);
            base[m][i] = m_new == -INFINITY ? 0.0f : m_new;  // a row that has seen no key yet sums zeros
            alpha[m][i] = row_max[m][i] == -INFINITY ? 0.0f : exp2_fast(row_max[m][i] - base[m][i]);
            row_max[m][i] = m_new;
            row_sum[m][i] *= alpha[m][i];
          }
#pragma unroll
        for (int m = 0; m < M; ++m) {
#pragma unroll
          for (int n = 0; n < N / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              s[m][n][e] = exp2_fast(fmaf(s[m][n][e], p.scale_log2, -base[m][e / 2]));
              row_sum[m][e / 2] += s[m][n][e];  // this lane's share; the row's four lanes are summed at the end
            }
#pragma unroll
          for (int n = 0; n < D / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) out[m][n][e] *= alpha[m][e / 2];
        }
        accumulate_pb<E, D, M, N>(out, s, vbuf + b * N * ld, lane);
      });
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float inv[2], lse2[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float& l = row_sum[m][i];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      inv[i] = l > 0.0f ? 1.0f / l : 0.0f;
      lse2[i] = l > 0.0f ? row_max[m][i] + log2f(l) : INFINITY;  // INFINITY: a row without keys gets P = 0
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) out[m][n][e] *= inv[e / 2];
    if (lane % 4 == 0)
      for (int i = 0; i < 2; ++i) {
        const int row = w0 + 16 * m + lane / 4 + 8 * i;
        if (row < p.tq) lse[static_cast<long long>(bh) * p.tq + row] = lse2[i] / kLog2e;
      }
  }
  store_rows<E, D, M>(out, const_cast<E*>(rows_of<E>(o, bh, p.h)), o.st, w0, p.tq, 1.0f, lane);
}

// ---- Forward on Hopper's warpgroup MMA (wgmma, sm_90a) ----------------------------------------
//
// For a 64-wide head. The block's 4 warps are one warpgroup; it owns 64 queries and walks over
// 64-key tiles. S = Q K^T is 4 wgmma.m64n64k16 reading Q and K from shared memory through matrix
// descriptors; O += P V is 4 more with P from registers and V read transposed (its rows are keys,
// the MMA's K dimension). Tiles are stored unpadded in the 128-byte swizzle the descriptors name:
// 16-byte chunk c of row r sits at chunk c ^ (r % 8), so a 64-element row is one swizzle row and
// 8 rows one 1024-byte atom. wgmma's accumulator gives warp w rows 16 w .. 16 w + 15 in the same
// per-warp layout as mma.sync (Acc<1, 64>), and its register A operand is mma.sync's, so the
// softmax and the packing of P are the ones above. wgmma is issued by the whole warpgroup, so a
// warp cannot skip a tile its rows do not see: the mask zeroes it instead.

constexpr int kWgTile = 64;                          // queries per block, keys per tile, head size
constexpr float kLazyRescale = 8.0f;                 // see the forward's softmax
constexpr int kWgTileBytes = kWgTile * kWgTile * 2;  // one 64 x 64 tile of 2-byte elements
// Five forward blocks fit a multiprocessor's shared memory; holding the registers to 96 a thread
// keeps five there too (at 98, four).
constexpr int kWgForwardBlocks = 5;

// Starts copying rows [row0, row0 + 64) of a [rows, 64] tensor into a swizzled tile (zeros past `rows`).
template <class E>
__device__ inline void copy_tile_swizzled_async(unsigned char* tile, const E* base, long long st, int row0,
                                                int rows) {
  const int chunk = threadIdx.x % 8, r0 = threadIdx.x / 8;  // 128 threads: 16 rows of 8 chunks per pass
  // One 64-bit multiply a call, each pass 16 rows further: the compiler does not strength-reduce a
  // multiply per pass under the select below, and these copies run for every tile.
  const E* src = base + static_cast<long long>(row0 + r0) * st + chunk * 8;
  const long long pass_stride = 16 * st;
#pragma unroll
  for (int pass = 0; pass < kWgTile / 16; ++pass, src += pass_stride) {
    const int r = r0 + 16 * pass;
    const bool valid = row0 + r < rows;
    copy16_async(tile + r * 128 + ((chunk ^ (r % 8)) << 4), valid ? src : base, valid);
  }
}

// Matrix descriptor of a swizzled tile: start address / 16, the 1024-byte stride between 8-row
// groups, 128-byte swizzle (mode 1 in bits 62-63). The leading byte offset is unused with this
// swizzle when a row is one swizzle row. Adding 2 moves the start 32 bytes: 16 elements further
// along a row (the next K step of a K-major tile).
__device__ inline std::uint64_t tile_descriptor(const unsigned char* tile) {
  const std::uint32_t at = static_cast<std::uint32_t>(__cvta_generic_to_shared(tile));
  return ((at & 0x3FFFFu) >> 4) | (std::uint64_t(1) << 16) | (std::uint64_t(1024 >> 4) << 32) |
         (std::uint64_t(1) << 62);
}

// The sm_90a instructions exist only in that compilation pass (__CUDA_ARCH_FEAT_SM90_ALL); the
// plain sm_90 pass compiles them to nothing and never runs them (wgmma_available).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define BMT_SM90A(...) __VA_ARGS__
#else
#define BMT_SM90A(...)
#endif

__device__ inline void wgmma_fence() { BMT_SM90A(asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory")); }
__device__ inline void wgmma_commit() { BMT_SM90A(asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory")); }
__device__ inline void wgmma_wait_all() { BMT_SM90A(asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory")); }

// wgmma reads and writes its registers asynchronously: after the wait, these empty statements
// keep the compiler from moving uses of them above it (or reusing them before it).
__device__ inline void hold(Acc<1, 64>& acc) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(acc[0][n][e])::"memory");
}
__device__ inline void hold(std::uint32_t (&r)[4][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(r[k][i])::"memory");
}

#define BMT_WG_ACC                                                                                              \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define BMT_WG_ACC_OPERANDS(d)                                                                               \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),   \
      "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), \
      "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), \
      "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
      "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])

// acc (+)= A B^T, m64 n64 k16: A and B K-major tiles in shared memory. `accumulate` 0 overwrites.
template <class E>
__device__ inline void wgmma_ss(Acc<1, 64>& acc, std::uint64_t a, std::uint64_t b, int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  float(&d)[8][4] = acc[0];
  if constexpr (std::is_same_v<E, __nv_bfloat16>)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " BMT_WG_ACC ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : BMT_WG_ACC_OPERANDS(d)
        : "l"(a), "l"(b), "r"(accumulate));
  else
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " BMT_WG_ACC ", %32, %33, p, 1, 1, 0, 0;\n}\n"
        : BMT_WG_ACC_OPERANDS(d)
        : "l"(a), "l"(b), "r"(accumulate));
#endif
}

// acc += A B, m64 n64 k16: A from registers (mma.sync's A layout per warp), B a tile in shared
// memory whose rows run along K (transposed, "MN-major").
template <class E>
__device__ inline void wgmma_rs_transposed_b(Acc<1, 64>& acc, const std::uint32_t (&a)[4], std::uint64_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  float(&d)[8][4] = acc[0];
  if constexpr (std::is_same_v<E, __nv_bfloat16>)
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " BMT_WG_ACC
                 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                 : BMT_WG_ACC_OPERANDS(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
  else
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " BMT_WG_ACC
                 ", {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
                 : BMT_WG_ACC_OPERANDS(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#endif
}

#undef BMT_WG_ACC
#undef BMT_WG_ACC_OPERANDS

// P (or dS) in registers as the A operand of four m64 n64 k16 steps, 16 keys (or queries) each.
template <class E>
__device__ inline void pack_a(std::uint32_t (&a)[4][4], const Acc<1, kWgTile>& p) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    a[kk][0] = pack<E>(p[0][2 * kk][0], p[0][2 * kk][1]);
    a[kk][1] = pack<E>(p[0][2 * kk][2], p[0][2 * kk][3]);
    a[kk][2] = pack<E>(p[0][2 * kk + 1][0], p[0][2 * kk + 1][1]);
    a[kk][3] = pack<E>(p[0][2 * kk + 1][2], p[0][2 * kk + 1][3]);
  }
}

// acc (+)= A B^T over the 64-wide head: A and B swizzled K-major tiles (rows, 64).
template <class E>
__device__ inline void wgmma_tile_nt(Acc<1, kWgTile>& acc, const unsigned char* a, const unsigned char* b) {
  const std::uint64_t ad = tile_descriptor(a), bd = tile_descriptor(b);
#pragma unroll
  for (int kk = 0; kk < kWgTile / 16; ++kk) wgmma_ss<E>(acc, ad + 2 * kk, bd + 2 * kk, kk > 0);
}

// acc += A B: A 64 x 64 in registers (pack_a), B a swizzled tile whose rows run along K.
template <class E>
__device__ inline void wgmma_tile_nn(Acc<1, kWgTile>& acc, const std::uint32_t (&a)[4][4], const unsigned char* b) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_rs_transposed_b<E>(acc, a[kk], tile_descriptor(b + kk * 16 * 128));
}

// The swizzle is a function of address bits 4-9, so tiles start on 1024-byte boundaries: the
// first one at or after the start of dynamic shared memory (the launches ask for 1024 bytes more).
__device__ inline unsigned char* first_tile(unsigned char* smem) {
  const unsigned misalign = static_cast<unsigned>(__cvta_generic_to_shared(smem)) % 1024;
  return smem + (misalign ? 1024 - misalign : 0);
}

// The walk over the 64-key tiles that query block q0 sees, each tile's K and V rows copied into
// kbuf / vbuf (two swizzled tiles each) while the previous tile is used: use(t, buffer).
template <class E, class Use>
__device__ inline void walk_kv_tiles(const Problem& p, int q0, unsigned char* kbuf, unsigned char* vbuf, Rows k, Rows v,
                                     const E* kb, const E* vb, Use&& use) {
  walk_tiles<true>(
      0, key_tiles<1, kWgTile>(p, q0),
      [&](int t, int b) {
        copy_tile_swizzled_async<E>(kbuf + b * kWgTileBytes, kb, k.st, t * kWgTile, p.tk);
        copy_tile_swizzled_async<E>(vbuf + b * kWgTileBytes, vb, v.st, t * kWgTile, p.tk);
      },
      use);
}

template <class E>
__global__ void __launch_bounds__(kThreads, kWgForwardBlocks)
    forward_wgmma_kernel(Rows q, Rows k, Rows v, Rows o, float* lse, Problem p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* qs = first_tile(smem_raw);
  unsigned char* kbuf = qs + kWgTileBytes;  // [2] tiles
  unsigned char* vbuf = kbuf + 2 * kWgTileBytes;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * kWgTile, bh = blockIdx.y;
  const QueryWarp<1, kWgTile> qw(p, q0, warp);
  const int w0 = qw.w0;
  const E* kb = rows_of<E>(k, bh, p.h);
  const E* vb = rows_of<E>(v, bh, p.h);

  copy_tile_swizzled_async<E>(qs, rows_of<E>(q, bh, p.h), q.st, q0, p.tq);  // lands with tile 0
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  Acc<1, kWgTile> out, s;
  clear(out);
  walk_kv_tiles<E>(p, q0, kbuf, vbuf, k, v, kb, vb, [&](int t, int b) {
    const int key0 = t * kWgTile;
    wgmma_fence();
    wgmma_tile_nt<E>(s, qs, kbuf + b * kWgTileBytes);
    wgmma_commit();
    wgmma_wait_all();
    hold(s);
    // Also partial for a warp that sees none of the tile: wgmma computed it anyway.
    if (qw.partial(key0, p)) mask_scores<1, kWgTile>(s, w0, key0, lane, p, -INFINITY);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[0][n][e]);
    // Lazy rescaling: a row's running max moves only when the tile's max passes it by more than
    // kLazyRescale (log2 units). Below that, P stays under 2^kLazyRescale (exact in f32, and in
    // bf16 to its relative rounding) and O and the sum keep their scale; O / sum and the lse use
    // the same max, so the results are unchanged. A warp none of whose rows moved skips the
    // rescale of O.
    float alpha[2], base[2];
    bool moved = false;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float& tm = tile_max[i];
      tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
      tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
      const float m_tile = tm * p.scale_log2;
      alpha[i] = 1.0f;
      if (m_tile > row_max[i] + kLazyRescale) {  // the first tile a row sees: row_max is -inf
        alpha[i] = row_max[i] == -INFINITY ? 0.0f : exp2_fast(row_max[i] - m_tile);
        row_max[i] = m_tile;
        row_sum[i] *= alpha[i];
        moved = true;
      }
      base[i] = row_max[i] == -INFINITY ? 0.0f : row_max[i];
    }
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[0][n][e] = exp2_fast(fmaf(s[0][n][e], p.scale_log2, -base[e / 2]));
        row_sum[e / 2] += s[0][n][e];
      }
    std::uint32_t pa[4][4];  // P as the A operand, 16 keys per step
    pack_a<E>(pa, s);
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) out[0][n][e] *= alpha[e / 2];
    }
    wgmma_fence();
    wgmma_tile_nn<E>(out, pa, vbuf + b * kWgTileBytes);
    wgmma_commit();
    wgmma_wait_all();
    hold(out);
    hold(pa);
  });
  float inv[2], lse2[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float& l = row_sum[i];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    inv[i] = l > 0.0f ? 1.0f / l : 0.0f;
    lse2[i] = l > 0.0f ? row_max[i] + log2f(l) : INFINITY;
  }
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) out[0][n][e] *= inv[e / 2];
  if (lane % 4 == 0)
    for (int i = 0; i < 2; ++i) {
      const int row = w0 + lane / 4 + 8 * i;
      if (row < p.tq) lse[static_cast<long long>(bh) * p.tq + row] = lse2[i] / kLog2e;
    }
  store_rows<E, kWgTile, 1>(out, const_cast<E*>(rows_of<E>(o, bh, p.h)), o.st, w0, p.tq, 1.0f, lane);
}

// dK and dV for 64 keys of a 64-wide head (the mma.sync kernel's math): per query tile,
// S^T = K Q^T and dP^T = V dO^T, then dV += P^T dO and dK += dS^T Q.
template <class E>
__global__ void __launch_bounds__(kThreads) backward_kv_wgmma_kernel(Rows q, Rows k, Rows v, Rows dout,
                                                                     const float* lse, const float* delta, Rows dk,
                                                                     Rows dv, Problem p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* ks = first_tile(smem_raw);
  unsigned char* vs = ks + kWgTileBytes;
  unsigned char* qbuf = vs + kWgTileBytes;  // [2] tiles
  unsigned char* dobuf = qbuf + 2 * kWgTileBytes;
  float* lse_buf = reinterpret_cast<float*>(dobuf + 2 * kWgTileBytes);  // [2][64]
  float* delta_buf = lse_buf + 2 * kWgTile;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = blockIdx.x * kWgTile, bh = blockIdx.y, w0 = k0 + warp * 16;
  const E* qb = rows_of<E>(q, bh, p.h);
  const E* dob = rows_of<E>(dout, bh, p.h);
  copy_tile_swizzled_async<E>(ks, rows_of<E>(k, bh, p.h), k.st, k0, p.tk);  // land with the first tile
  copy_tile_swizzled_async<E>(vs, rows_of<E>(v, bh, p.h), v.st, k0, p.tk);
  const int first_query = p.causal ? max(0, k0 - p.shift) : 0;
  Acc<1, kWgTile> dk_acc, dv_acc, pt, dst;
  clear(dk_acc);
  clear(dv_acc);
  walk_tiles<true>(
      first_query / kWgTile, (p.tq + kWgTile - 1) / kWgTile,
      [&](int t, int b) {
        const int q0 = t * kWgTile;
        copy_tile_swizzled_async<E>(qbuf + b * kWgTileBytes, qb, q.st, q0, p.tq);
        copy_tile_swizzled_async<E>(dobuf + b * kWgTileBytes, dob, dout.st, q0, p.tq);
        // The tile's lse (thread c) and delta (thread 64 + c) travel with it instead of through
        // registers, whose load would hold the warp before the barrier. A query past the end
        // reads 0; the mask below hides it.
        static_assert(kThreads == 2 * kWgTile, "one thread per lse or delta element");
        const int c = threadIdx.x % kWgTile, i = q0 + c;
        const bool is_lse = threadIdx.x < kWgTile;
        copy4_async((is_lse ? lse_buf : delta_buf) + b * kWgTile + c,
                    (is_lse ? lse : delta) + static_cast<long long>(bh) * p.tq + min(i, p.tq - 1), i < p.tq);
      },
      [&](int t, int b) {
        const int q0 = t * kWgTile;
        const unsigned char* qt = qbuf + b * kWgTileBytes;
        const unsigned char* dot = dobuf + b * kWgTileBytes;
        const float* lse_s = lse_buf + b * kWgTile;
        const float* delta_s = delta_buf + b * kWgTile;
        wgmma_fence();
        wgmma_tile_nt<E>(pt, ks, qt);
        wgmma_tile_nt<E>(dst, vs, dot);
        wgmma_commit();
        wgmma_wait_all();
        hold(pt);
        hold(dst);
        // Masks where the tile crosses the diagonal or an end (also for a warp no query here sees).
        const bool partial = q0 + kWgTile > p.tq || w0 + 15 >= p.tk || (p.causal && w0 + 15 > q0 + p.shift);
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            pt[0][n][e] = exp2_fast(pt[0][n][e] * p.scale_log2 - lse_s[acc_col(lane, n, e)] * kLog2e);
        if (partial) mask_probabilities_transposed<1, kWgTile>(pt, w0, q0, lane, p);
#pragma unroll
        for (int n = 0; n < 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) dst[0][n][e] = pt[0][n][e] * (dst[0][n][e] - delta_s[acc_col(lane, n, e)]);
        std::uint32_t pa[4][4], da[4][4];
        pack_a<E>(pa, pt);
        pack_a<E>(da, dst);
        wgmma_fence();
        wgmma_tile_nn<E>(dv_acc, pa, dot);
        wgmma_tile_nn<E>(dk_acc, da, qt);
        wgmma_commit();
        wgmma_wait_all();
        hold(dv_acc);
        hold(dk_acc);
        hold(pa);
        hold(da);
      });
  wait_copies<0>();  // a block that walked no tile still has its own tiles in flight
  store_rows<E, kWgTile, 1>(dk_acc, const_cast<E*>(rows_of<E>(dk, bh, p.h)), dk.st, w0, p.tk, p.scale, lane);
  store_rows<E, kWgTile, 1>(dv_acc, const_cast<E*>(rows_of<E>(dv, bh, p.h)), dv.st, w0, p.tk, 1.0f, lane);
}

// dQ for 64 queries of a 64-wide head: per key tile, S = Q K^T and dP = dO V^T, then dQ += dS K.
template <class E>
__global__ void __launch_bounds__(kThreads) backward_q_wgmma_kernel(Rows q, Rows k, Rows v, Rows dout,
                                                                    const float* lse, const float* delta, Rows dq,
                                                                    Problem p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* qs = first_tile(smem_raw);
  unsigned char* dos = qs + kWgTileBytes;
  unsigned char* kbuf = dos + kWgTileBytes;  // [2] tiles
  unsigned char* vbuf = kbuf + 2 * kWgTileBytes;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * kWgTile, bh = blockIdx.y;
  const QueryWarp<1, kWgTile> qw(p, q0, warp);
  const int w0 = qw.w0;
  float lse2[2], delta_row[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = w0 + lane / 4 + 8 * i;
    const long long at = static_cast<long long>(bh) * p.tq + row;
    lse2[i] = row < p.tq ? lse[at] * kLog2e : INFINITY;
    delta_row[i] = row < p.tq ? delta[at] : 0.0f;
  }
  const E* kb = rows_of<E>(k, bh, p.h);
  const E* vb = rows_of<E>(v, bh, p.h);
  copy_tile_swizzled_async<E>(qs, rows_of<E>(q, bh, p.h), q.st, q0, p.tq);  // land with tile 0
  copy_tile_swizzled_async<E>(dos, rows_of<E>(dout, bh, p.h), dout.st, q0, p.tq);
  Acc<1, kWgTile> dq_acc, s, ds;
  clear(dq_acc);
  walk_kv_tiles<E>(p, q0, kbuf, vbuf, k, v, kb, vb, [&](int t, int b) {
    const int key0 = t * kWgTile;
    const unsigned char* kt = kbuf + b * kWgTileBytes;
    wgmma_fence();
    wgmma_tile_nt<E>(s, qs, kt);
    wgmma_tile_nt<E>(ds, dos, vbuf + b * kWgTileBytes);
    wgmma_commit();
    wgmma_wait_all();
    hold(s);
    hold(ds);
    const bool partial = qw.partial(key0, p);
    for_each_element<1, kWgTile>([&](int, int n, int e) {
      s[0][n][e] = exp2_fast(s[0][n][e] * p.scale_log2 - lse2[e / 2]);
    });
    if (partial) mask_scores<1, kWgTile>(s, w0, key0, lane, p, 0.0f);
    for_each_element<1, kWgTile>([&](int, int n, int e) {
      ds[0][n][e] = s[0][n][e] * (ds[0][n][e] - delta_row[e / 2]);
    });
    std::uint32_t da[4][4];
    pack_a<E>(da, ds);
    wgmma_fence();
    wgmma_tile_nn<E>(dq_acc, da, kt);
    wgmma_commit();
    wgmma_wait_all();
    hold(dq_acc);
    hold(da);
  });
  store_rows<E, kWgTile, 1>(dq_acc, const_cast<E*>(rows_of<E>(dq, bh, p.h)), dq.st, w0, p.tq, p.scale, lane);
}

// 1 where this module's device code was compiled with the sm_90a features (wgmma), else 0.
__global__ void wgmma_probe(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *out = 1;
#else
  *out = 0;
#endif
}

// delta[row] = sum over d of dO * O, f32. D / 8 lanes share a row, each reading 16 bytes (8
// elements) of O and of dO (rows are 16-byte aligned), so a warp covers 32 / (D / 8) rows.
template <class E, int D>
__global__ void __launch_bounds__(kThreads) delta_kernel(Rows o, Rows dout, float* delta, Problem p, long long rows) {
  constexpr int kLanesPerRow = D / 8, kRowsPerWarp = 32 / kLanesPerRow;
  const int lane = threadIdx.x % 32;
  const long long row = (static_cast<long long>(blockIdx.x) * kWarps + threadIdx.x / 32) * kRowsPerWarp +
                        lane / kLanesPerRow;
  const bool active = row < rows;
  float sum = 0.0f;
  if (active) {
    const int i = static_cast<int>(row % p.tq), bh = static_cast<int>(row / p.tq);
    const int d0 = (lane % kLanesPerRow) * 8;
    const uint4 ov = *reinterpret_cast<const uint4*>(rows_of<E>(o, bh, p.h) + i * o.st + d0);
    const uint4 dv = *reinterpret_cast<const uint4*>(rows_of<E>(dout, bh, p.h) + i * dout.st + d0);
    const E* oe = reinterpret_cast<const E*>(&ov);
    const E* de = reinterpret_cast<const E*>(&dv);
#pragma unroll
    for (int k = 0; k < 8; ++k) sum += to_float(oe[k]) * to_float(de[k]);
  }
#pragma unroll
  for (int off = kLanesPerRow / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (active && lane % kLanesPerRow == 0) delta[row] = sum;
}

// dK and dV for a block of keys, walking over every query tile that sees them. Per warp (16 M
// keys): S^T = K Q^T and dP^T = V dO^T in registers, then dV += P^T dO and dK += dS^T Q.
// KEEP: the warp's K and V rows stay in registers as fragments (read from shared memory once)
// instead of being read again for every query tile.
template <class E, int D, int M, int N, bool KEEP>
__global__ void __launch_bounds__(kThreads) backward_kv_kernel(Rows q, Rows k, Rows v, Rows dout, const float* lse,
                                                              const float* delta, Rows dk, Rows dv, Problem p) {
  constexpr int ld = tile_ld<D>(), rows = block_rows<M>();
  extern __shared__ __align__(128) unsigned char smem[];
  E* ks = reinterpret_cast<E*>(smem);
  E* vs = ks + rows * ld;
  E* qbuf = vs + rows * ld;  // [2][N][ld]
  E* dobuf = qbuf + 2 * N * ld;
  float* lse_buf = reinterpret_cast<float*>(dobuf + 2 * N * ld);  // [2][N], log2 units
  float* delta_buf = lse_buf + 2 * N;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = blockIdx.x * rows, bh = blockIdx.y, w0 = k0 + warp * 16 * M;  // w0: the warp's first key
  const E* qb = rows_of<E>(q, bh, p.h);
  const E* dob = rows_of<E>(dout, bh, p.h);

  copy_rows_async<E, D, rows>(ks, rows_of<E>(k, bh, p.h), k.st, k0, p.tk);  // land with tile 0
  copy_rows_async<E, D, rows>(vs, rows_of<E>(v, bh, p.h), v.st, k0, p.tk);
  const int first_query = p.causal ? max(0, k0 - p.shift) : 0;
  Acc<M, D> dk_acc, dv_acc;
  clear(dk_acc);
  clear(dv_acc);
  Acc<M, N> pt, dst;  // P^T, then dP^T turned into dS^T: this warp's 16 M keys x N queries
  Fragments<D, M> kf, vf;
  walk_tiles(
      first_query / N, (p.tq + N - 1) / N,
      [&](int t, int b) {
        const int q0 = t * N;
        copy_rows_async<E, D, N>(qbuf + b * N * ld, qb, q.st, q0, p.tq);
        copy_rows_async<E, D, N>(dobuf + b * N * ld, dob, dout.st, q0, p.tq);
        // (this buffer's last readers finished before the barrier that ended the walk's previous step)
        for (int c = threadIdx.x; c < N; c += kThreads) {
          const int i = q0 + c;
          const long long at = static_cast<long long>(bh) * p.tq + i;
          lse_buf[b * N + c] = i < p.tq ? lse[at] * kLog2e : INFINITY;  // a padding query gets P = 0
          delta_buf[b * N + c] = i < p.tq ? delta[at] : 0.0f;
        }
      },
      [&](int t, int b) {
        const int q0 = t * N;
        if (KEEP && t == first_query / N) {  // K and V landed with the first tile
          load_fragments<E, D, M>(kf, ks + warp * 16 * M * ld, lane);
          load_fragments<E, D, M>(vf, vs + warp * 16 * M * ld, lane);
        }
        if (p.causal && w0 > q0 + N - 1 + p.shift) return;  // no query here sees these keys
        const E* qs = qbuf + b * N * ld;
        const E* dos = dobuf + b * N * ld;
        const float* lse_s = lse_buf + b * N;
        const float* delta_s = delta_buf + b * N;
        if constexpr (KEEP) {
          product_nt<E, D, M, N>(pt, kf, qs, lane);
          product_nt<E, D, M, N>(dst, vf, dos, lane);
        } else {
          product_nt<E, D, M, N>(pt, ks + warp * 16 * M * ld, qs, lane);
          product_nt<E, D, M, N>(dst, vs + warp * 16 * M * ld, dos, lane);
        }
        // Masks apply only where the tile crosses the diagonal, the end of the queries or of the keys.
        const int w_last = w0 + 16 * M - 1;
        const bool partial = q0 + N > p.tq || w_last >= p.tk || (p.causal && w_last > q0 + p.shift);
#pragma unroll
        for (int m = 0; m < M; ++m)
#pragma unroll
          for (int n = 0; n < N / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              pt[m][n][e] = exp2_fast(pt[m][n][e] * p.scale_log2 - lse_s[acc_col(lane, n, e)]);
        if (partial) mask_probabilities_transposed<M, N>(pt, w0, q0, lane, p);
#pragma unroll
        for (int m = 0; m < M; ++m)
#pragma unroll
          for (int n = 0; n < N / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) dst[m][n][e] = pt[m][n][e] * (dst[m][n][e] - delta_s[acc_col(lane, n, e)]);
        accumulate_pb<E, D, M, N>(dv_acc, pt, dos, lane);
        accumulate_pb<E, D, M, N>(dk_acc, dst, qs, lane);
      });
  wait_copies<0>();  // a block that walked no tile still has its own tiles in flight
  store_rows<E, D, M>(dk_acc, const_cast<E*>(rows_of<E>(dk, bh, p.h)), dk.st, w0, p.tk, p.scale, lane);
  store_rows<E, D, M>(dv_acc, const_cast<E*>(rows_of<E>(dv, bh, p.h)), dv.st, w0, p.tk, 1.0f, lane);
}

// dQ for a block of queries, walking over the key tiles they see. Per warp (16 M queries):
// S = Q K^T and dP = dO V^T in registers, then dQ += dS K.
template <class E, int D, int M, int N>
__global__ void __launch_bounds__(kThreads) backward_q_kernel(Rows q, Rows k, Rows v, Rows dout, const float* lse,
                                                             const float* delta, Rows dq, Problem p) {
  constexpr int ld = tile_ld<D>(), rows = block_rows<M>();
  extern __shared__ __align__(128) unsigned char smem[];
  E* qs = reinterpret_cast<E*>(smem);
  E* dos = qs + rows * ld;
  E* kbuf = dos + rows * ld;  // [2][N][ld]
  E* vbuf = kbuf + 2 * N * ld;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * rows, bh = blockIdx.y;
  const QueryWarp<M, N> qw(p, q0, warp);
  const int w0 = qw.w0;
  float lse2[M][2], delta_row[M][2];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = w0 + 16 * m + lane / 4 + 8 * i;
      const long long at = static_cast<long long>(bh) * p.tq + row;
      lse2[m][i] = row < p.tq ? lse[at] * kLog2e : INFINITY;
      delta_row[m][i] = row < p.tq ? delta[at] : 0.0f;
    }
  const E* kb = rows_of<E>(k, bh, p.h);
  const E* vb = rows_of<E>(v, bh, p.h);

  copy_rows_async<E, D, rows>(qs, rows_of<E>(q, bh, p.h), q.st, q0, p.tq);  // land with tile 0
  copy_rows_async<E, D, rows>(dos, rows_of<E>(dout, bh, p.h), dout.st, q0, p.tq);
  Acc<M, D> dq_acc;
  clear(dq_acc);
  Acc<M, N> s, ds;
  walk_tiles(
      0, key_tiles<M, N>(p, q0),
      [&](int t, int b) {
        copy_rows_async<E, D, N>(kbuf + b * N * ld, kb, k.st, t * N, p.tk);
        copy_rows_async<E, D, N>(vbuf + b * N * ld, vb, v.st, t * N, p.tk);
      },
      [&](int t, int b) {
        const int key0 = t * N;
        if (qw.skips(key0)) return;
        const E* ks = kbuf + b * N * ld;
        product_nt<E, D, M, N>(s, qs + warp * 16 * M * ld, ks, lane);
        product_nt<E, D, M, N>(ds, dos + warp * 16 * M * ld, vbuf + b * N * ld, lane);
        const bool partial = qw.partial(key0, p);
        for_each_element<M, N>([&](int m, int n, int e) {
          s[m][n][e] = exp2_fast(s[m][n][e] * p.scale_log2 - lse2[m][e / 2]);
        });
        if (partial) mask_scores<M, N>(s, w0, key0, lane, p, 0.0f);
        for_each_element<M, N>([&](int m, int n, int e) {
          ds[m][n][e] = s[m][n][e] * (ds[m][n][e] - delta_row[m][e / 2]);
        });
        accumulate_pb<E, D, M, N>(dq_acc, ds, ks, lane);
      });
  store_rows<E, D, M>(dq_acc, const_cast<E*>(rows_of<E>(dq, bh, p.h)), dq.st, w0, p.tq, p.scale, lane);
}

Rows rows(const Tensor& t) {
  Rows r;
  r.data = t.data();
  r.sb = t.strides()[0];
  r.sh = t.strides()[1];
  r.st = t.strides()[2];
  return r;
}

Problem problem(const Tensor& q, const Tensor& k, bool causal, float scale) {
  Problem p;
  p.h = static_cast<int>(q.size(1));
  p.tq = static_cast<int>(q.size(2));
  p.tk = static_cast<int>(k.size(2));
  p.shift = p.tk - p.tq;
  p.causal = causal;
  p.scale = scale;
  p.scale_log2 = scale * kLog2e;
  return p;
}

// Rows start on 16-byte boundaries: the tile loads and stores move 8 elements at a time.
bool aligned_rows(const Tensor& t) {
  const auto& s = t.strides();
  return reinterpret_cast<std::uintptr_t>(t.data()) % 16 == 0 && s[3] == 1 && s[0] % 8 == 0 && s[1] % 8 == 0 &&
         s[2] % 8 == 0;
}

std::size_t tile_bytes(int rows, int d, std::size_t element) { return std::size_t(rows) * (d + 8) * element; }

// Kernels above 48 KiB of dynamic shared memory must say so; once per kernel is enough.
template <class Kernel>
void allow_shared_memory(Kernel kernel, std::size_t bytes) {
  BMT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

cudaStream_t compute_stream() { return context().compute_stream().native(); }

// How each kernel tiles its work, per head dimension: each warp owns `m` m-tiles (16 m rows) of
// its own side, and the block walks over `n`-row tiles of the other side; keep_kv keeps the dK/dV
// kernel's K and V fragments in registers. bench_attention (bf16, causal, T = 1024, D = 64) shows
// the forward faster with two m-tiles per warp, and the backward kernels slower with two m-tiles
// (32-query walks) or with 32- or 128-row walks, as their four accumulator tiles then crowd the
// registers.
struct Tile {
  int m, n;
};
template <int D>
struct Tiling;
template <>
struct Tiling<64> {
  static constexpr Tile forward{2, 64}, dq{1, 64}, dkdv{1, 64};
  static constexpr bool keep_kv = true;  // faster dK/dV in bench_attention; dQ gains nothing from it
};
template <>
struct Tiling<128> {
  static constexpr Tile forward{1, 64}, dq{1, 64}, dkdv{1, 64};
  static constexpr bool keep_kv = false;  // 64 more registers would spill
};

template <int M>
unsigned tiles_of(int rows) {
  return static_cast<unsigned>((rows + block_rows<M>() - 1) / block_rows<M>());
}

template <class E, int D, int M, int N>
void launch_forward(const Problem& p, unsigned bh, Rows q, Rows k, Rows v, Rows out, float* lse) {
  const std::size_t bytes = tile_bytes(block_rows<M>() + 4 * N, D, sizeof(E));
  static const bool allowed = (allow_shared_memory(forward_kernel<E, D, M, N>, bytes), true);
  (void)allowed;
  forward_kernel<E, D, M, N><<<dim3(tiles_of<M>(p.tq), bh), kThreads, bytes, compute_stream()>>>(q, k, v, out, lse, p);
  BMT_CUDA_CHECK(cudaGetLastError());
}

template <class E, int D, int M, int N, bool KEEP>
void launch_backward_kv(const Problem& p, unsigned bh, Rows q, Rows k, Rows v, Rows dout, const float* lse,
                        const float* delta, Rows dk, Rows dv) {
  const std::size_t bytes = tile_bytes(2 * block_rows<M>() + 4 * N, D, sizeof(E)) + 4 * N * sizeof(float);
  static const bool allowed = (allow_shared_memory(backward_kv_kernel<E, D, M, N, KEEP>, bytes), true);
  (void)allowed;
  backward_kv_kernel<E, D, M, N, KEEP><<<dim3(tiles_of<M>(p.tk), bh), kThreads, bytes, compute_stream()>>>(
      q, k, v, dout, lse, delta, dk, dv, p);
  BMT_CUDA_CHECK(cudaGetLastError());
}

template <class E, int D, int M, int N>
void launch_backward_q(const Problem& p, unsigned bh, Rows q, Rows k, Rows v, Rows dout, const float* lse,
                       const float* delta, Rows dq) {
  const std::size_t bytes = tile_bytes(2 * block_rows<M>() + 4 * N, D, sizeof(E));
  static const bool allowed = (allow_shared_memory(backward_q_kernel<E, D, M, N>, bytes), true);
  (void)allowed;
  backward_q_kernel<E, D, M, N><<<dim3(tiles_of<M>(p.tq), bh), kThreads, bytes, compute_stream()>>>(
      q, k, v, dout, lse, delta, dq, p);
  BMT_CUDA_CHECK(cudaGetLastError());
}

template <class E>
void launch_forward_wgmma(const Problem& p, unsigned bh, Rows q, Rows k, Rows v, Rows out, float* lse) {
  const std::size_t bytes = 5 * kWgTileBytes + 1024;  // Q, two K and two V tiles, and room to align them
  static const bool allowed = (allow_shared_memory(forward_wgmma_kernel<E>, bytes), true);
  (void)allowed;
  forward_wgmma_kernel<E><<<dim3((p.tq + kWgTile - 1) / kWgTile, bh), kThreads, bytes, compute_stream()>>>(
      q, k, v, out, lse, p);
  BMT_CUDA_CHECK(cudaGetLastError());
}

template <class E>
void launch_backward_wgmma(const Problem& p, unsigned bh, Rows q, Rows k, Rows v, Rows dout, const float* lse,
                           const float* delta, Rows dq, Rows dk, Rows dv) {
  const std::size_t kv_bytes = 6 * kWgTileBytes + 1024 + 4 * kWgTile * sizeof(float);
  static const bool kv_allowed = (allow_shared_memory(backward_kv_wgmma_kernel<E>, kv_bytes), true);
  (void)kv_allowed;
  backward_kv_wgmma_kernel<E><<<dim3((p.tk + kWgTile - 1) / kWgTile, bh), kThreads, kv_bytes, compute_stream()>>>(
      q, k, v, dout, lse, delta, dk, dv, p);
  BMT_CUDA_CHECK(cudaGetLastError());
  const std::size_t q_bytes = 6 * kWgTileBytes + 1024;
  static const bool q_allowed = (allow_shared_memory(backward_q_wgmma_kernel<E>, q_bytes), true);
  (void)q_allowed;
  backward_q_wgmma_kernel<E><<<dim3((p.tq + kWgTile - 1) / kWgTile, bh), kThreads, q_bytes, compute_stream()>>>(
      q, k, v, dout, lse, delta, dq, p);
  BMT_CUDA_CHECK(cudaGetLastError());
}

// Whether the device runs this file's sm_90a code (the build adds it for Hopper; the driver may
// still load the plain sm_90 code). Asked once, with one wait.
bool wgmma_available() {
  static const bool available = [] {
    if (std::getenv("BMT_ATTENTION_NO_WGMMA")) return false;
    int* flag = nullptr;
    BMT_CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
    wgmma_probe<<<1, 1, 0, compute_stream()>>>(flag);
    BMT_CUDA_CHECK(cudaGetLastError());
    int value = 0;
    BMT_CUDA_CHECK(cudaMemcpyAsync(&value, flag, sizeof value, cudaMemcpyDeviceToHost, compute_stream()));
    BMT_CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
    BMT_CUDA_CHECK(cudaFree(flag));
    return value == 1;
  }();
  return available;
}

template <class E, int D>
void run_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float scale, const Tensor& out,
                 const Tensor& lse) {
  const Problem p = problem(q, k, causal, scale);
  const unsigned bh = static_cast<unsigned>(q.size(0) * q.size(1));
  if constexpr (D == kWgTile) {
    if (wgmma_available()) return launch_forward_wgmma<E>(p, bh, rows(q), rows(k), rows(v), rows(out),
                                                          lse.data_as<float>());
  }
  launch_forward<E, D, Tiling<D>::forward.m, Tiling<D>::forward.n>(p, bh, rows(q), rows(k), rows(v), rows(out),
                                                                   lse.data_as<float>());
}

template <class E, int D>
void run_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                  const Tensor& lse, bool causal, float scale, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const Problem p = problem(q, k, causal, scale);
  const unsigned bh = static_cast<unsigned>(q.size(0) * q.size(1));
  const long long query_rows = static_cast<long long>(bh) * p.tq;
  Tensor delta = Tensor::empty({q.size(0), q.size(1), q.size(2)}, DType::f32);
  const long long rows_per_block = kWarps * (32 / (D / 8));
  delta_kernel<E, D><<<static_cast<unsigned>((query_rows + rows_per_block - 1) / rows_per_block), kThreads, 0,
                       compute_stream()>>>(
      rows(out), rows(dout), delta.data_as<float>(), p, query_rows);
  BMT_CUDA_CHECK(cudaGetLastError());
  const float* ls = lse.data_as<float>();
  const float* dl = delta.data_as<float>();
  if constexpr (D == kWgTile) {
    if (wgmma_available())
      return launch_backward_wgmma<E>(p, bh, rows(q), rows(k), rows(v), rows(dout), ls, dl, rows(dq), rows(dk),
                                      rows(dv));
  }
  launch_backward_kv<E, D, Tiling<D>::dkdv.m, Tiling<D>::dkdv.n, Tiling<D>::keep_kv>(p, bh, rows(q), rows(k), rows(v),
                                                                                rows(dout), ls, dl, rows(dk), rows(dv));
  launch_backward_q<E, D, Tiling<D>::dq.m, Tiling<D>::dq.n>(p, bh, rows(q), rows(k), rows(v), rows(dout), ls, dl,
                                                            rows(dq));
}

// Calls f with (element type, head dimension) when the tensor-core kernels take these inputs.
template <class F>
bool with_tensor_core_types(const Tensor& q, F&& f) {
  const int d = static_cast<int>(q.size(3));
  if (q.dtype() == DType::bf16 && d == 64) return f(__nv_bfloat16(), std::integral_constant<int, 64>()), true;
  if (q.dtype() == DType::bf16 && d == 128) return f(__nv_bfloat16(), std::integral_constant<int, 128>()), true;
  if (q.dtype() == DType::f16 && d == 64) return f(__half(), std::integral_constant<int, 64>()), true;
  if (q.dtype() == DType::f16 && d == 128) return f(__half(), std::integral_constant<int, 128>()), true;
  return false;
}

bool applies(std::initializer_list<const Tensor*> tensors) {
  const Tensor& q = **tensors.begin();
  if (!is_initialized() || q.dtype() == DType::f32 || (q.size(3) != 64 && q.size(3) != 128)) return false;
  if (q.size(0) * q.size(1) > 65535 || q.size(2) > (1 << 30)) return false;
  for (const Tensor* t : tensors)
    if (!aligned_rows(*t) || t->size(2) > (1 << 30)) return false;
  return q.numel() > 0;
}

}  // namespace

bool attention_uses_tensor_cores(const Tensor& q, const Tensor& k, const Tensor& v) { return applies({&q, &k, &v}); }

const char* attention_kernel_name(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!applies({&q, &k, &v})) return "portable";
  return q.size(3) == kWgTile && wgmma_available() ? "wgmma" : "mma.sync";
}

bool tensor_core_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float scale,
                                   const Tensor& out, const Tensor& lse) {
  if (!(scale > 0.0f) || !applies({&q, &k, &v, &out})) return false;  // the running max needs scale > 0
  return with_tensor_core_types(q, [&](auto e, auto dim) {
    run_forward<decltype(e), decltype(dim)::value>(q, k, v, causal, scale, out, lse);
  });
}

bool tensor_core_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& dout, const Tensor& lse, bool causal, float scale, const Tensor& dq,
                                    const Tensor& dk, const Tensor& dv) {
  if (!applies({&q, &k, &v, &out, &dout, &dq, &dk, &dv})) return false;
  return with_tensor_core_types(q, [&](auto e, auto dim) {
    run_backward<decltype(e), decltype(dim)::value>(q, k, v, out, dout, lse, causal, scale, dq, dk, dv);
  });
}

}  // namespace bmt::kernels
