// CUDA side of the attention seam: tensor-core kernels (WMMA, 16x16x16 bf16/f16 tiles with f32
// accumulation) for the shapes transformer training uses, head dimension 64 or 128 with 16-byte
// aligned rows. Everything else takes the portable kernel in attention.cpp.
//
// A thread block owns a tile of 16 W rows (queries, or keys for dK/dV; W = 4 or 8 warps, 16 rows
// each) and walks over 64-row tiles of the other side, copying the next tile with cp.async while
// it works on the current one. Products go through WMMA; the elementwise softmax work runs on a
// warp's f32 copy of its 16 x 64 score tile in shared memory (two lanes per row, 32 columns each),
// so no fragment layout is assumed. Under a causal mask a warp skips tiles it cannot see. Memory
// stays linear in T.
//
// Forward (two passes over the keys): the first finds each row's max and sum (the logsumexp), the
// second forms the normalized probabilities P = exp(S - lse) in 16 bits and accumulates P V. The
// second score product costs a third more forward FLOPs but needs no rescaling of partial outputs.
// Backward (the same math as the portable kernel): one kernel per key tile accumulates
//   dV += P^T dO,  dK += dS^T Q,   dS = P * (dO V^T - D),
// another per query tile accumulates dQ += dS K, with D = rowsum(dO * O) from a third, small
// kernel. Every output row has one writer: no atomics, results are deterministic.
// Scores are kept in log2 units (scale * log2 e folded in) so the special-function unit's 2^x
// serves every exponential.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "attention_seam.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/cuda_check.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt::kernels {

namespace {

using namespace nvcuda;

constexpr int kStep = 64;                 // rows of each tile a block walks over (keys, or queries for dK/dV)
constexpr int kScoreLd = kStep + 8;       // f32 scratch row stride, in floats (see lane_chunk)
constexpr int kProbLd = kStep + 8;        // 16-bit scratch row stride, in elements (a multiple of 8)
constexpr float kLog2e = 1.4426950408889634f;

using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

template <class E>
__device__ inline E to_e(float x);
template <>
__device__ inline __nv_bfloat16 to_e<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ inline __half to_e<__half>(float x) { return __float2half_rn(x); }

template <class E>
__device__ inline float to_float(E x);
template <>
__device__ inline float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ inline float to_float<__half>(__half x) { return __half2float(x); }

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

// Shared-memory tiles have row stride D + 8, which keeps WMMA loads off a single bank.
template <int D>
__host__ __device__ constexpr int tile_ld() { return D + 8; }

// Asynchronous 16-byte copy to shared memory (cp.async, sm_80+); an invalid source fills zeros.
__device__ inline void copy16_async(void* dst, const void* src, bool valid) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src), "r"(valid ? 16 : 0));
}
__device__ inline void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ inline void wait_copies() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Starts copying rows [row0, row0 + ROWS) of a tensor into a tile; rows past `rows` become zeros
// (a padding key must contribute 0, not NaN, to P V). Visible after wait_copies and a barrier.
template <class E, int D, int ROWS, int THREADS>
__device__ inline void copy_rows_async(E* tile, const E* base, long long st, int row0, int rows) {
  constexpr int kVec = 8, kPerRow = D / kVec;
  for (int i = threadIdx.x; i < ROWS * kPerRow; i += THREADS) {
    const int r = i / kPerRow, c = (i % kPerRow) * kVec;
    const bool valid = row0 + r < rows;
    copy16_async(tile + r * tile_ld<D>() + c, valid ? base + (row0 + r) * st + c : base, valid);
  }
}

// acc[n] = A B^T for a 16 x K block of A (row-major, lda) and 16 n-th rows of B (row-major, ldb):
// a warp's 16 x 64 score tile when B holds 64 rows.
template <class E, int K>
__device__ inline void product_nt(Acc (&acc)[4], const E* a, int lda, const E* b, int ldb) {
#pragma unroll
  for (int n = 0; n < 4; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
  for (int k = 0; k < K; k += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + k, lda);
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major> fb;  // B^T, read from B's rows
      wmma::load_matrix_sync(fb, b + n * 16 * ldb + k, ldb);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// acc[n] += A B for a 16 x kStep block of A (row-major, lda) and a kStep x (16 N) block of B
// (row-major, ldb).
template <class E, int N>
__device__ inline void accumulate_nn(Acc (&acc)[N], const E* a, int lda, const E* b, int ldb) {
#pragma unroll
  for (int k = 0; k < kStep; k += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + k, lda);
#pragma unroll
    for (int n = 0; n < N; ++n) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::row_major> fb;
      wmma::load_matrix_sync(fb, b + k * ldb + n * 16, ldb);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

__device__ inline void store_scores(float* scratch, Acc (&acc)[4]) {
#pragma unroll
  for (int n = 0; n < 4; ++n) wmma::store_matrix_sync(scratch + n * 16, acc[n], kScoreLd, wmma::mem_row_major);
}

// The elementwise softmax work: lane (r, half) of a warp owns row r = lane / 2 of the warp's
// 16 x 64 tile, in 8 chunks of 4 columns, chunk j at columns 8 j + 4 half. Each chunk is one
// 16-byte shared-memory load, and with the row stride kScoreLd = 72 the 8 lanes of a load phase
// hit 32 distinct banks.
__device__ inline int chunk_column(int half, int j) { return j * 8 + half * 4; }

__device__ inline void load_chunk(float (&x)[4], const float* tile, int r, int half, int j) {
  const float4 f = *reinterpret_cast<const float4*>(tile + r * kScoreLd + chunk_column(half, j));
  x[0] = f.x;
  x[1] = f.y;
  x[2] = f.z;
  x[3] = f.w;
}

// Stores 4 values to the warp's 16-bit tile (row stride kProbLd) at chunk j of row r: one 8-byte store.
template <class E>
__device__ inline void store_chunk(E* tile, int r, int half, int j, const float (&x)[4]) {
  alignas(8) E packed[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) packed[e] = to_e<E>(x[e]);
  *reinterpret_cast<uint2*>(tile + r * kProbLd + chunk_column(half, j)) = *reinterpret_cast<const uint2*>(packed);
}

// 2^x on the special-function unit (2^-inf = 0).
__device__ inline float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Writes a warp's 16 x D accumulator, times `factor`, to rows of a tensor through the warp's f32
// scratch, 64 columns at a time; lane (r, half) writes 32 columns of row r when `row` < rows.
template <class E, int D>
__device__ inline void store_rows(Acc (&acc)[D / 16], float* scratch, E* base, long long st, int row, int rows,
                                  float factor, int r, int half) {
#pragma unroll
  for (int n0 = 0; n0 < D / 16; n0 += 4) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      wmma::store_matrix_sync(scratch + j * 16, acc[n0 + j], kScoreLd, wmma::mem_row_major);
    __syncwarp();
    if (row < rows) {
      const float* src = scratch + r * kScoreLd + half * 32;
      E* dst = base + row * st + n0 * 16 + half * 32;
#pragma unroll
      for (int c = 0; c < 32; c += 8) {
        alignas(16) E packed[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) packed[i] = to_e<E>(src[c + i] * factor);
        *reinterpret_cast<uint4*>(dst + c) = *reinterpret_cast<const uint4*>(packed);
      }
    }
    __syncwarp();
  }
}

// Number of key tiles the query rows [q0, q0 + rows) see.
__device__ inline int key_tiles(const Problem& p, int q0, int rows) {
  const int last = p.causal ? min(p.tk, q0 + rows + p.shift) : p.tk;  // exclusive
  return (last + kStep - 1) / kStep;
}

// The walk over tiles t = 0, 1, ... with two buffers: tile t + 1 is copied while tile t is used.
//   issue(t, buffer) starts the copies of tile t; use(t, buffer) runs once tile t has landed.
template <class Issue, class Use>
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
    __syncthreads();  // tile t is visible to every thread
    use(t, buffer);
    __syncthreads();  // every warp is done with this buffer before tile t + 2 goes into it
  }
}

template <class E, int D, int W>
__global__ void __launch_bounds__(W * 32) forward_kernel(Rows q, Rows k, Rows v, Rows o, float* lse, Problem p) {
  constexpr int ld = tile_ld<D>(), kRows = 16 * W, kThreads = 32 * W;
  extern __shared__ __align__(128) unsigned char smem[];
  E* qs = reinterpret_cast<E*>(smem);
  E* kbuf = qs + kRows * ld;      // [2][kStep][ld]
  E* vbuf = kbuf + 2 * kStep * ld;
  float* scores = reinterpret_cast<float*>(vbuf + 2 * kStep * ld);
  E* probs = reinterpret_cast<E*>(scores + W * 16 * kScoreLd);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  const int q0 = blockIdx.x * kRows, bh = blockIdx.y;
  float* s_w = scores + warp * 16 * kScoreLd;
  E* p_w = probs + warp * 16 * kProbLd;
  const int qi = q0 + warp * 16 + r;                          // this lane's query row
  const int visible = p.causal ? qi + p.shift : p.tk - 1;     // its last visible key
  const int warp_visible = p.causal ? q0 + warp * 16 + 15 + p.shift : p.tk - 1;  // the warp's last
  const int warp_first_visible = p.causal ? q0 + warp * 16 + p.shift : p.tk - 1;  // its first row's
  const E* kb = rows_of<E>(k, bh, p.h);
  const E* vb = rows_of<E>(v, bh, p.h);

  copy_rows_async<E, D, kRows, kThreads>(qs, rows_of<E>(q, bh, p.h), q.st, q0, p.tq);  // lands with tile 0
  const int tiles = key_tiles(p, q0, kRows);
  Acc s[4];

  // Pass 1: running max and sum of exp2 per row.
  float m = -INFINITY, l = 0.0f;
  walk_tiles(
      0, tiles,
      [&](int t, int b) { copy_rows_async<E, D, kStep, kThreads>(kbuf + b * kStep * ld, kb, k.st, t * kStep, p.tk); },
      [&](int t, int b) {
        if (t * kStep > warp_visible) return;  // the whole tile is masked for this warp
        product_nt<E, D>(s, qs + warp * 16 * ld, ld, kbuf + b * kStep * ld, ld);
        store_scores(s_w, s);
        __syncwarp();
        // Masks apply only where the tile crosses the diagonal or the end of the keys.
        const int key0 = t * kStep;
        const bool partial = key0 + kStep - 1 > warp_first_visible || key0 + kStep > p.tk;
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float x[4];
          load_chunk(x, s_w, r, half, j);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key0 + chunk_column(half, j) + e;
            if (!partial || (key <= visible && key < p.tk)) tile_max = fmaxf(tile_max, x[e] * p.scale_log2);
          }
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        const float m_new = fmaxf(m, tile_max);
        const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row that has seen no key yet sums zeros
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float x[4];
          load_chunk(x, s_w, r, half, j);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key0 + chunk_column(half, j) + e;
            const float pr = exp2_fast(x[e] * p.scale_log2 - base);
            if (!partial || (key <= visible && key < p.tk)) sum += pr;
          }
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = (m == -INFINITY ? 0.0f : l * exp2f(m - base)) + sum;
        m = m_new;
        __syncwarp();
      });
  const float lse2 = l > 0.0f ? m + log2f(l) : INFINITY;  // INFINITY: a row without keys gets P = 0

  // Pass 2: O = sum over key tiles of exp2(S - lse) V.
  Acc out[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(out[n], 0.0f);
  walk_tiles(
      0, tiles,
      [&](int t, int b) {
        copy_rows_async<E, D, kStep, kThreads>(kbuf + b * kStep * ld, kb, k.st, t * kStep, p.tk);
        copy_rows_async<E, D, kStep, kThreads>(vbuf + b * kStep * ld, vb, v.st, t * kStep, p.tk);
      },
      [&](int t, int b) {
        if (t * kStep > warp_visible) return;
        product_nt<E, D>(s, qs + warp * 16 * ld, ld, kbuf + b * kStep * ld, ld);
        store_scores(s_w, s);
        __syncwarp();
        const int key0 = t * kStep;
        const bool partial = key0 + kStep - 1 > warp_first_visible || key0 + kStep > p.tk;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float x[4];
          load_chunk(x, s_w, r, half, j);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key0 + chunk_column(half, j) + e;
            x[e] = exp2_fast(x[e] * p.scale_log2 - lse2);
            if (partial && (key > visible || key >= p.tk)) x[e] = 0.0f;
          }
          store_chunk(p_w, r, half, j, x);
        }
        __syncwarp();
        accumulate_nn<E, D / 16>(out, p_w, kProbLd, vbuf + b * kStep * ld, ld);
      });
  E* ob = const_cast<E*>(rows_of<E>(o, bh, p.h));
  store_rows<E, D>(out, s_w, ob, o.st, qi, p.tq, 1.0f, r, half);
  if (half == 0 && qi < p.tq) lse[static_cast<long long>(bh) * p.tq + qi] = lse2 / kLog2e;
}

// delta[row] = sum over d of dO * O, one warp per row, f32.
template <class E, int D>
__global__ void __launch_bounds__(128) delta_kernel(Rows o, Rows dout, float* delta, Problem p, long long rows) {
  const long long row = static_cast<long long>(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int i = static_cast<int>(row % p.tq), bh = static_cast<int>(row / p.tq);
  const E* orow = rows_of<E>(o, bh, p.h) + i * o.st;
  const E* drow = rows_of<E>(dout, bh, p.h) + i * dout.st;
  float sum = 0.0f;
#pragma unroll
  for (int d = lane; d < D; d += 32) sum += to_float(orow[d]) * to_float(drow[d]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) delta[row] = sum;
}

// dK and dV for a tile of 16 W keys, walking over every query tile that sees them.
template <class E, int D, int W>
__global__ void __launch_bounds__(W * 32) backward_kv_kernel(Rows q, Rows k, Rows v, Rows dout, const float* lse,
                                                            const float* delta, Rows dk, Rows dv, Problem p) {
  constexpr int ld = tile_ld<D>(), kRows = 16 * W, kThreads = 32 * W;
  extern __shared__ __align__(128) unsigned char smem[];
  E* ks = reinterpret_cast<E*>(smem);
  E* vs = ks + kRows * ld;
  E* qbuf = vs + kRows * ld;        // [2][kStep][ld]
  E* dobuf = qbuf + 2 * kStep * ld;
  float* st_all = reinterpret_cast<float*>(dobuf + 2 * kStep * ld);  // S^T per warp
  float* dpt_all = st_all + W * 16 * kScoreLd;                        // dP^T per warp
  E* pt_all = reinterpret_cast<E*>(dpt_all + W * 16 * kScoreLd);
  E* dst_all = pt_all + W * 16 * kProbLd;
  float* lse_buf = reinterpret_cast<float*>(dst_all + W * 16 * kProbLd);  // [2][kStep], log2 units
  float* delta_buf = lse_buf + 2 * kStep;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  const int k0 = blockIdx.x * kRows, bh = blockIdx.y;
  float* st_w = st_all + warp * 16 * kScoreLd;
  float* dpt_w = dpt_all + warp * 16 * kScoreLd;
  E* pt_w = pt_all + warp * 16 * kProbLd;
  E* dst_w = dst_all + warp * 16 * kProbLd;
  const int key = k0 + warp * 16 + r;  // this lane's key row
  const int warp_first_key = k0 + warp * 16;
  const E* qb = rows_of<E>(q, bh, p.h);
  const E* dob = rows_of<E>(dout, bh, p.h);

  copy_rows_async<E, D, kRows, kThreads>(ks, rows_of<E>(k, bh, p.h), k.st, k0, p.tk);  // land with tile 0
  copy_rows_async<E, D, kRows, kThreads>(vs, rows_of<E>(v, bh, p.h), v.st, k0, p.tk);
  const int first_query = p.causal ? max(0, k0 - p.shift) : 0;
  Acc dk_acc[D / 16], dv_acc[D / 16], s[4];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(dk_acc[n], 0.0f);
    wmma::fill_fragment(dv_acc[n], 0.0f);
  }
  walk_tiles(
      first_query / kStep, (p.tq + kStep - 1) / kStep,
      [&](int t, int b) {
        const int q0 = t * kStep;
        copy_rows_async<E, D, kStep, kThreads>(qbuf + b * kStep * ld, qb, q.st, q0, p.tq);
        copy_rows_async<E, D, kStep, kThreads>(dobuf + b * kStep * ld, dob, dout.st, q0, p.tq);
        // (this buffer's last readers finished before the barrier that ended the walk's previous step)
        for (int c = threadIdx.x; c < kStep; c += kThreads) {
          const int i = q0 + c;
          const long long at = static_cast<long long>(bh) * p.tq + i;
          lse_buf[b * kStep + c] = i < p.tq ? lse[at] * kLog2e : INFINITY;  // a padding query gets P = 0
          delta_buf[b * kStep + c] = i < p.tq ? delta[at] : 0.0f;
        }
      },
      [&](int t, int b) {
        const int q0 = t * kStep;
        if (p.causal && warp_first_key > q0 + kStep - 1 + p.shift) return;  // no query here sees these keys
        const E* qs = qbuf + b * kStep * ld;
        const E* dos = dobuf + b * kStep * ld;
        const float* lse_s = lse_buf + b * kStep;
        const float* delta_s = delta_buf + b * kStep;
        product_nt<E, D>(s, ks + warp * 16 * ld, ld, qs, ld);  // S^T: this warp's 16 keys x 64 queries
        store_scores(st_w, s);
        product_nt<E, D>(s, vs + warp * 16 * ld, ld, dos, ld);  // dP^T = V dO^T
        store_scores(dpt_w, s);
        __syncwarp();
        // Masks apply only where the tile crosses the diagonal, the end of the queries or of the keys.
        const bool partial = q0 + kStep > p.tq || warp_first_key + 15 >= p.tk ||
                             (p.causal && warp_first_key + 15 > q0 + p.shift);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float sc[4], dp[4];
          load_chunk(sc, st_w, r, half, j);
          load_chunk(dp, dpt_w, r, half, j);
          const float4 l4 = *reinterpret_cast<const float4*>(lse_s + chunk_column(half, j));
          const float4 d4 = *reinterpret_cast<const float4*>(delta_s + chunk_column(half, j));
          const float lse4[4] = {l4.x, l4.y, l4.z, l4.w}, delta4[4] = {d4.x, d4.y, d4.z, d4.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = q0 + chunk_column(half, j) + e;
            float pr = exp2_fast(sc[e] * p.scale_log2 - lse4[e]);
            if (partial && !(i < p.tq && key < p.tk && (!p.causal || key <= i + p.shift))) pr = 0.0f;
            sc[e] = pr;
            dp[e] = pr * (dp[e] - delta4[e]);
          }
          store_chunk(pt_w, r, half, j, sc);
          store_chunk(dst_w, r, half, j, dp);
        }
        __syncwarp();
        accumulate_nn<E, D / 16>(dv_acc, pt_w, kProbLd, dos, ld);
        accumulate_nn<E, D / 16>(dk_acc, dst_w, kProbLd, qs, ld);
      });
  wait_copies<0>();  // a block that walked no tile still has its own tiles in flight
  store_rows<E, D>(dk_acc, st_w, const_cast<E*>(rows_of<E>(dk, bh, p.h)), dk.st, key, p.tk, p.scale, r, half);
  store_rows<E, D>(dv_acc, st_w, const_cast<E*>(rows_of<E>(dv, bh, p.h)), dv.st, key, p.tk, 1.0f, r, half);
}

// dQ for a tile of 16 W queries, walking over the key tiles they see.
template <class E, int D, int W>
__global__ void __launch_bounds__(W * 32) backward_q_kernel(Rows q, Rows k, Rows v, Rows dout, const float* lse,
                                                           const float* delta, Rows dq, Problem p) {
  constexpr int ld = tile_ld<D>(), kRows = 16 * W, kThreads = 32 * W;
  extern __shared__ __align__(128) unsigned char smem[];
  E* qs = reinterpret_cast<E*>(smem);
  E* dos = qs + kRows * ld;
  E* kbuf = dos + kRows * ld;       // [2][kStep][ld]
  E* vbuf = kbuf + 2 * kStep * ld;
  float* s_all = reinterpret_cast<float*>(vbuf + 2 * kStep * ld);
  float* dp_all = s_all + W * 16 * kScoreLd;
  E* ds_all = reinterpret_cast<E*>(dp_all + W * 16 * kScoreLd);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  const int q0 = blockIdx.x * kRows, bh = blockIdx.y;
  float* s_w = s_all + warp * 16 * kScoreLd;
  float* dp_w = dp_all + warp * 16 * kScoreLd;
  E* ds_w = ds_all + warp * 16 * kProbLd;
  const int qi = q0 + warp * 16 + r;
  const int visible = p.causal ? qi + p.shift : p.tk - 1;
  const int warp_visible = p.causal ? q0 + warp * 16 + 15 + p.shift : p.tk - 1;
  const int warp_first_visible = p.causal ? q0 + warp * 16 + p.shift : p.tk - 1;
  const long long at = static_cast<long long>(bh) * p.tq + qi;
  const float lse2 = qi < p.tq ? lse[at] * kLog2e : INFINITY;
  const float delta_i = qi < p.tq ? delta[at] : 0.0f;
  const E* kb = rows_of<E>(k, bh, p.h);
  const E* vb = rows_of<E>(v, bh, p.h);

  copy_rows_async<E, D, kRows, kThreads>(qs, rows_of<E>(q, bh, p.h), q.st, q0, p.tq);  // land with tile 0
  copy_rows_async<E, D, kRows, kThreads>(dos, rows_of<E>(dout, bh, p.h), dout.st, q0, p.tq);
  Acc dq_acc[D / 16], s[4];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dq_acc[n], 0.0f);
  walk_tiles(
      0, key_tiles(p, q0, kRows),
      [&](int t, int b) {
        copy_rows_async<E, D, kStep, kThreads>(kbuf + b * kStep * ld, kb, k.st, t * kStep, p.tk);
        copy_rows_async<E, D, kStep, kThreads>(vbuf + b * kStep * ld, vb, v.st, t * kStep, p.tk);
      },
      [&](int t, int b) {
        if (t * kStep > warp_visible) return;
        const E* ks = kbuf + b * kStep * ld;
        product_nt<E, D>(s, qs + warp * 16 * ld, ld, ks, ld);
        store_scores(s_w, s);
        product_nt<E, D>(s, dos + warp * 16 * ld, ld, vbuf + b * kStep * ld, ld);
        store_scores(dp_w, s);
        __syncwarp();
        const int key0 = t * kStep;
        const bool partial = key0 + kStep - 1 > warp_first_visible || key0 + kStep > p.tk;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float sc[4], dp[4];
          load_chunk(sc, s_w, r, half, j);
          load_chunk(dp, dp_w, r, half, j);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = key0 + chunk_column(half, j) + e;
            float pr = exp2_fast(sc[e] * p.scale_log2 - lse2);
            if (partial && (key > visible || key >= p.tk)) pr = 0.0f;
            dp[e] = pr * (dp[e] - delta_i);
          }
          store_chunk(ds_w, r, half, j, dp);
        }
        __syncwarp();
        accumulate_nn<E, D / 16>(dq_acc, ds_w, kProbLd, ks, ld);
      });
  store_rows<E, D>(dq_acc, s_w, const_cast<E*>(rows_of<E>(dq, bh, p.h)), dq.st, qi, p.tq, p.scale, r, half);
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

// Warps per block (each owns 16 rows of the block's tile): BMT_ATTENTION_WARPS=4 or 8 (default 4).
// More warps share each walked tile among more rows (fewer loads per FLOP) but need more shared
// memory per block; dK/dV at D = 128 always uses 4 (8 would not fit).
int warps_per_block() {
  static const int warps = [] {
    const char* text = std::getenv("BMT_ATTENTION_WARPS");
    if (!text || !*text) return 4;
    const std::string s(text);
    BMT_REQUIRE(s == "4" || s == "8", "BMT_ATTENTION_WARPS: expected 4 or 8, found '" << s << "'");
    return std::stoi(s);
  }();
  return warps;
}

std::size_t tile_bytes(int rows, int d, std::size_t element) { return std::size_t(rows) * (d + 8) * element; }
std::size_t score_bytes(int warps) { return std::size_t(warps) * 16 * kScoreLd * sizeof(float); }
std::size_t prob_bytes(int warps, std::size_t element) { return std::size_t(warps) * 16 * kProbLd * element; }

// Kernels above 48 KiB of dynamic shared memory must say so; once per kernel is enough.
template <class Kernel>
void allow_shared_memory(Kernel kernel, std::size_t bytes) {
  BMT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

cudaStream_t compute_stream() { return context().compute_stream().native(); }

unsigned tiles_of(int rows, int per_tile) { return static_cast<unsigned>((rows + per_tile - 1) / per_tile); }

template <class E, int D, int W>
void run_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float scale, const Tensor& out,
                 const Tensor& lse) {
  const Problem p = problem(q, k, causal, scale);
  const std::size_t bytes = tile_bytes(16 * W + 4 * kStep, D, sizeof(E)) + score_bytes(W) + prob_bytes(W, sizeof(E));
  static const bool allowed = (allow_shared_memory(forward_kernel<E, D, W>, bytes), true);
  (void)allowed;
  const dim3 grid(tiles_of(p.tq, 16 * W), static_cast<unsigned>(q.size(0) * q.size(1)));
  forward_kernel<E, D, W><<<grid, 32 * W, bytes, compute_stream()>>>(rows(q), rows(k), rows(v), rows(out),
                                                                       lse.data_as<float>(), p);
  BMT_CUDA_CHECK(cudaGetLastError());
}

template <class E, int D, int W>
void run_backward_kv(const Rows& q, const Rows& k, const Rows& v, const Rows& dout, const float* lse,
                     const float* delta, const Rows& dk, const Rows& dv, const Problem& p, unsigned bh) {
  const std::size_t bytes = tile_bytes(2 * 16 * W + 4 * kStep, D, sizeof(E)) + 2 * score_bytes(W) +
                            2 * prob_bytes(W, sizeof(E)) + 4 * kStep * sizeof(float);
  static const bool allowed = (allow_shared_memory(backward_kv_kernel<E, D, W>, bytes), true);
  (void)allowed;
  backward_kv_kernel<E, D, W><<<dim3(tiles_of(p.tk, 16 * W), bh), 32 * W, bytes, compute_stream()>>>(
      q, k, v, dout, lse, delta, dk, dv, p);
  BMT_CUDA_CHECK(cudaGetLastError());
}

template <class E, int D, int W>
void run_backward_q(const Rows& q, const Rows& k, const Rows& v, const Rows& dout, const float* lse,
                    const float* delta, const Rows& dq, const Problem& p, unsigned bh) {
  const std::size_t bytes =
      tile_bytes(2 * 16 * W + 4 * kStep, D, sizeof(E)) + 2 * score_bytes(W) + prob_bytes(W, sizeof(E));
  static const bool allowed = (allow_shared_memory(backward_q_kernel<E, D, W>, bytes), true);
  (void)allowed;
  backward_q_kernel<E, D, W><<<dim3(tiles_of(p.tq, 16 * W), bh), 32 * W, bytes, compute_stream()>>>(
      q, k, v, dout, lse, delta, dq, p);
  BMT_CUDA_CHECK(cudaGetLastError());
}

template <class E, int D>
void run_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                  const Tensor& lse, bool causal, float scale, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const Problem p = problem(q, k, causal, scale);
  const unsigned bh = static_cast<unsigned>(q.size(0) * q.size(1));
  const long long query_rows = static_cast<long long>(bh) * p.tq;
  Tensor delta = Tensor::empty({q.size(0), q.size(1), q.size(2)}, DType::f32);
  delta_kernel<E, D><<<static_cast<unsigned>((query_rows + 3) / 4), 128, 0, compute_stream()>>>(
      rows(out), rows(dout), delta.data_as<float>(), p, query_rows);
  BMT_CUDA_CHECK(cudaGetLastError());
  const float* l = lse.data_as<float>();
  const float* d = delta.data_as<float>();
  if (warps_per_block() == 8 && D == 64)
    run_backward_kv<E, D, 8>(rows(q), rows(k), rows(v), rows(dout), l, d, rows(dk), rows(dv), p, bh);
  else
    run_backward_kv<E, D, 4>(rows(q), rows(k), rows(v), rows(dout), l, d, rows(dk), rows(dv), p, bh);
  if (warps_per_block() == 8)
    run_backward_q<E, D, 8>(rows(q), rows(k), rows(v), rows(dout), l, d, rows(dq), p, bh);
  else
    run_backward_q<E, D, 4>(rows(q), rows(k), rows(v), rows(dout), l, d, rows(dq), p, bh);
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

bool tensor_core_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float scale,
                                   const Tensor& out, const Tensor& lse) {
  if (!applies({&q, &k, &v, &out})) return false;
  return with_tensor_core_types(q, [&](auto e, auto dim) {
    if (warps_per_block() == 8)
      run_forward<decltype(e), decltype(dim)::value, 8>(q, k, v, causal, scale, out, lse);
    else
      run_forward<decltype(e), decltype(dim)::value, 4>(q, k, v, causal, scale, out, lse);
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
