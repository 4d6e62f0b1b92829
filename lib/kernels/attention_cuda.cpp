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
// On Hopper both head sizes run on the warpgroup MMA instead (attention_wgmma_cuda.cpp, the only
// file compiled for sm_90a), when the device runs that code (wgmma_available).
//
// Grouped-query attention (k and v with h / group heads): the kernels over query rows read the
// key/value head of their query head (kv_rows_of); the dK/dV kernels run one block per key tile of
// a key/value head and walk the query tiles of the group's heads one after another, so each dK/dV
// row still has one writer and sums its group in a fixed order.
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
#include <type_traits>

#include "attention_cuda.hpp"
#include "attention_seam.hpp"

namespace bmt::kernels {

namespace {

using namespace attention_tiles;

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
__device__ inline float to_float(E x);
template <>
__device__ inline float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ inline float to_float<__half>(__half x) { return __half2float(x); }

// ---- Tiles and warp products ----------------------------------------------------------------

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
  const E* kb = kv_rows_of<E>(k, bh, p);
  const E* vb = kv_rows_of<E>(v, bh, p);

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
  const int k0 = blockIdx.x * rows, bhk = blockIdx.y, w0 = k0 + warp * 16 * M;  // w0: the warp's first key
  const int hk = p.kv_heads();

  copy_rows_async<E, D, rows>(ks, rows_of<E>(k, bhk, hk), k.st, k0, p.tk);  // land with tile 0
  copy_rows_async<E, D, rows>(vs, rows_of<E>(v, bhk, hk), v.st, k0, p.tk);
  // Step s of the walk is query tile first_tile + s % head_tiles of the group's head s / head_tiles.
  const int first_tile = (p.causal ? max(0, k0 - p.shift) : 0) / N;
  const int head_tiles = (p.tq + N - 1) / N - first_tile;
  Acc<M, D> dk_acc, dv_acc;
  clear(dk_acc);
  clear(dv_acc);
  Acc<M, N> pt, dst;  // P^T, then dP^T turned into dS^T: this warp's 16 M keys x N queries
  Fragments<D, M> kf, vf;
  walk_tiles(
      0, p.group * head_tiles,
      [&](int s, int b) {
        const int g = s / head_tiles, q0 = (first_tile + s - g * head_tiles) * N;
        const int bh = query_head(bhk, g, p);
        copy_rows_async<E, D, N>(qbuf + b * N * ld, rows_of<E>(q, bh, p.h), q.st, q0, p.tq);
        copy_rows_async<E, D, N>(dobuf + b * N * ld, rows_of<E>(dout, bh, p.h), dout.st, q0, p.tq);
        // (this buffer's last readers finished before the barrier that ended the walk's previous step)
        for (int c = threadIdx.x; c < N; c += kThreads) {
          const int i = q0 + c;
          const long long at = static_cast<long long>(bh) * p.tq + i;
          lse_buf[b * N + c] = i < p.tq ? lse[at] * kLog2e : INFINITY;  // a padding query gets P = 0
          delta_buf[b * N + c] = i < p.tq ? delta[at] : 0.0f;
        }
      },
      [&](int s, int b) {
        const int q0 = (first_tile + s % head_tiles) * N;
        if (KEEP && s == 0) {  // K and V landed with the first tile
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
  store_rows<E, D, M>(dk_acc, const_cast<E*>(rows_of<E>(dk, bhk, hk)), dk.st, w0, p.tk, p.scale, lane);
  store_rows<E, D, M>(dv_acc, const_cast<E*>(rows_of<E>(dv, bhk, hk)), dv.st, w0, p.tk, 1.0f, lane);
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
  const E* kb = kv_rows_of<E>(k, bh, p);
  const E* vb = kv_rows_of<E>(v, bh, p);

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
  p.group = static_cast<int>(q.size(1) / k.size(1));
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
  backward_kv_kernel<E, D, M, N, KEEP><<<dim3(tiles_of<M>(p.tk), bh / p.group), kThreads, bytes,
                                         compute_stream()>>>(q, k, v, dout, lse, delta, dk, dv, p);
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

template <class E, int D>
void run_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float scale, const Tensor& out,
                 const Tensor& lse) {
  const Problem p = problem(q, k, causal, scale);
  const unsigned bh = static_cast<unsigned>(q.size(0) * q.size(1));
  if constexpr (wgmma_head(D)) {
    if (wgmma_available()) return launch_forward_wgmma<E, D>(p, bh, rows(q), rows(k), rows(v), rows(out),
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
  if constexpr (wgmma_head(D)) {
    if (wgmma_available())
      return launch_backward_wgmma<E, D>(p, bh, rows(q), rows(k), rows(v), rows(dout), ls, dl, rows(dq), rows(dk),
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
  return wgmma_head(static_cast<int>(q.size(3))) && wgmma_available() ? "wgmma" : "mma.sync";
}

bool seam::tensor_core_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float scale,
                                   const Tensor& out, const Tensor& lse) {
  if (!(scale > 0.0f) || !applies({&q, &k, &v, &out})) return false;  // the running max needs scale > 0
  return with_tensor_core_types(q, [&](auto e, auto dim) {
    run_forward<decltype(e), decltype(dim)::value>(q, k, v, causal, scale, out, lse);
  });
}

bool seam::tensor_core_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& dout, const Tensor& lse, bool causal, float scale, const Tensor& dq,
                                    const Tensor& dk, const Tensor& dv) {
  if (!applies({&q, &k, &v, &out, &dout, &dq, &dk, &dv})) return false;
  return with_tensor_core_types(q, [&](auto e, auto dim) {
    run_backward<decltype(e), decltype(dim)::value>(q, k, v, out, dout, lse, causal, scale, dq, dk, dv);
  });
}

}  // namespace bmt::kernels
