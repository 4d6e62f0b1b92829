// CUDA side of the attention seam: tensor-core kernels (WMMA, 16x16x16 bf16/f16 tiles with f32
// accumulation) for the shapes transformer training uses, head dimension 64 or 128 with 16-byte
// aligned rows. Everything else takes the portable kernel in attention.cpp.
//
// A thread block owns a tile of 64 rows (queries, or keys for dK/dV) and four warps, each warp 16
// of those rows, and walks over the 64-row tiles of the other side. Products go through WMMA; the
// elementwise softmax work runs on a warp's f32 copy of its 16 x 64 score tile in shared memory
// (two lanes per row, 32 columns each), so no fragment layout is assumed. Memory stays linear in T.
//
// Forward (two passes over the keys): the first finds each row's max and sum (the logsumexp), the
// second forms the normalized probabilities P = exp(S - lse) in 16 bits and accumulates P V. The
// second score product costs a third more forward FLOPs but needs no rescaling of partial outputs.
// Backward (the same math as the portable kernel): one kernel per key tile accumulates
//   dV += P^T dO,  dK += dS^T Q,   dS = P * (dO V^T - D),
// another per query tile accumulates dQ += dS K, with D = rowsum(dO * O) from a third, small
// kernel. Every output row has one writer: no atomics, results are deterministic.
// Scores are kept in log2 units (scale * log2 e folded in) so exp2f serves every exponential.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <cstdint>

#include "attention_seam.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/cuda_check.hpp"

namespace bmt::kernels {

namespace {

using namespace nvcuda;

constexpr int kTile = 64;                 // rows of a block's own tile, and of each tile it walks over
constexpr int kWarps = 4;                 // 16 of the block's rows each
constexpr int kThreads = kWarps * 32;
constexpr int kScoreLd = kTile + 4;       // f32 scratch row stride, in floats
constexpr int kProbLd = kTile + 8;        // 16-bit scratch row stride, in elements (a multiple of 8)
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

// Shared-memory tile of kTile rows of width D, row stride D + 8 (keeps WMMA loads off one bank).
template <int D>
__host__ __device__ constexpr int tile_ld() { return D + 8; }

// Copies rows [row0, row0 + kTile) of a tensor into a tile, 16 bytes per load; rows past `rows`
// become zeros (a padding key must contribute 0, not NaN, to P V).
template <class E, int D>
__device__ inline void load_tile(E* tile, const E* base, long long st, int row0, int rows) {
  constexpr int kVec = 8, kPerRow = D / kVec;
  for (int i = threadIdx.x; i < kTile * kPerRow; i += kThreads) {
    const int r = i / kPerRow, c = (i % kPerRow) * kVec;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row0 + r < rows) v = *reinterpret_cast<const uint4*>(base + (row0 + r) * st + c);
    *reinterpret_cast<uint4*>(tile + r * tile_ld<D>() + c) = v;
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

// acc[n] += A B for a 16 x kTile block of A (row-major, lda) and a kTile x (16 N) block of B
// (row-major, ldb).
template <class E, int N>
__device__ inline void accumulate_nn(Acc (&acc)[N], const E* a, int lda, const E* b, int ldb) {
#pragma unroll
  for (int k = 0; k < kTile; k += 16) {
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

// Number of key tiles a query tile starting at q0 sees.
__device__ inline int key_tiles(const Problem& p, int q0) {
  const int last = p.causal ? min(p.tk, q0 + kTile + p.shift) : p.tk;  // exclusive
  return (last + kTile - 1) / kTile;
}

template <class E, int D>
__global__ void __launch_bounds__(kThreads) forward_kernel(Rows q, Rows k, Rows v, Rows o, float* lse, Problem p) {
  constexpr int ld = tile_ld<D>();
  extern __shared__ __align__(128) unsigned char smem[];
  E* qs = reinterpret_cast<E*>(smem);
  E* ks = qs + kTile * ld;
  E* vs = ks + kTile * ld;
  float* scores = reinterpret_cast<float*>(vs + kTile * ld);
  E* probs = reinterpret_cast<E*>(scores + kWarps * 16 * kScoreLd);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  const int q0 = blockIdx.x * kTile, bh = blockIdx.y;
  float* s_w = scores + warp * 16 * kScoreLd;
  E* p_w = probs + warp * 16 * kProbLd;
  const int qi = q0 + warp * 16 + r;                          // this lane's query row
  const int visible = p.causal ? qi + p.shift : p.tk - 1;     // its last visible key
  const E* kb = rows_of<E>(k, bh, p.h);
  const E* vb = rows_of<E>(v, bh, p.h);

  load_tile<E, D>(qs, rows_of<E>(q, bh, p.h), q.st, q0, p.tq);
  const int tiles = key_tiles(p, q0);
  Acc s[4];

  // Pass 1: running max and sum of exp2 per row.
  float m = -INFINITY, l = 0.0f;
  for (int t = 0; t < tiles; ++t) {
    __syncthreads();  // every warp is done with the previous key tile
    load_tile<E, D>(ks, kb, k.st, t * kTile, p.tk);
    __syncthreads();
    product_nt<E, D>(s, qs + warp * 16 * ld, ld, ks, ld);
    store_scores(s_w, s);
    __syncwarp();
    float tile_max = -INFINITY;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const int key = t * kTile + c;
      if (key <= visible && key < p.tk) tile_max = fmaxf(tile_max, s_w[r * kScoreLd + c] * p.scale_log2);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // a row that has seen no key yet sums zeros
    float sum = 0.0f;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const int key = t * kTile + c;
      if (key <= visible && key < p.tk) sum += exp2f(s_w[r * kScoreLd + c] * p.scale_log2 - base);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = (m == -INFINITY ? 0.0f : l * exp2f(m - base)) + sum;
    m = m_new;
    __syncwarp();
  }
  const float lse2 = l > 0.0f ? m + log2f(l) : INFINITY;  // INFINITY: a row without keys gets P = 0

  // Pass 2: O = sum over key tiles of exp2(S - lse) V.
  Acc out[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(out[n], 0.0f);
  for (int t = 0; t < tiles; ++t) {
    __syncthreads();
    load_tile<E, D>(ks, kb, k.st, t * kTile, p.tk);
    load_tile<E, D>(vs, vb, v.st, t * kTile, p.tk);
    __syncthreads();
    product_nt<E, D>(s, qs + warp * 16 * ld, ld, ks, ld);
    store_scores(s_w, s);
    __syncwarp();
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const int key = t * kTile + c;
      const bool seen = key <= visible && key < p.tk;
      p_w[r * kProbLd + c] = to_e<E>(seen ? exp2f(s_w[r * kScoreLd + c] * p.scale_log2 - lse2) : 0.0f);
    }
    __syncwarp();
    accumulate_nn<E, D / 16>(out, p_w, kProbLd, vs, ld);
  }
  E* ob = const_cast<E*>(rows_of<E>(o, bh, p.h));
  store_rows<E, D>(out, s_w, ob, o.st, qi, p.tq, 1.0f, r, half);
  if (half == 0 && qi < p.tq) lse[static_cast<long long>(bh) * p.tq + qi] = lse2 / kLog2e;
}

// delta[row] = sum over d of dO * O, one warp per row, f32.
template <class E, int D>
__global__ void __launch_bounds__(kThreads) delta_kernel(Rows o, Rows dout, float* delta, Problem p, long long rows) {
  const long long row = static_cast<long long>(blockIdx.x) * kWarps + threadIdx.x / 32;
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

// dK and dV for one tile of 64 keys, walking over every query tile that sees them.
template <class E, int D>
__global__ void __launch_bounds__(kThreads) backward_kv_kernel(Rows q, Rows k, Rows v, Rows dout, const float* lse,
                                                              const float* delta, Rows dk, Rows dv, Problem p) {
  constexpr int ld = tile_ld<D>();
  extern __shared__ __align__(128) unsigned char smem[];
  E* ks = reinterpret_cast<E*>(smem);
  E* vs = ks + kTile * ld;
  E* qs = vs + kTile * ld;
  E* dos = qs + kTile * ld;
  float* st_all = reinterpret_cast<float*>(dos + kTile * ld);  // S^T per warp
  float* dpt_all = st_all + kWarps * 16 * kScoreLd;             // dP^T per warp
  E* pt_all = reinterpret_cast<E*>(dpt_all + kWarps * 16 * kScoreLd);
  E* dst_all = pt_all + kWarps * 16 * kProbLd;
  float* lse_s = reinterpret_cast<float*>(dst_all + kWarps * 16 * kProbLd);
  float* delta_s = lse_s + kTile;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  const int k0 = blockIdx.x * kTile, bh = blockIdx.y;
  float* st_w = st_all + warp * 16 * kScoreLd;
  float* dpt_w = dpt_all + warp * 16 * kScoreLd;
  E* pt_w = pt_all + warp * 16 * kProbLd;
  E* dst_w = dst_all + warp * 16 * kProbLd;
  const int key = k0 + warp * 16 + r;  // this lane's key row
  const E* qb = rows_of<E>(q, bh, p.h);
  const E* dob = rows_of<E>(dout, bh, p.h);

  load_tile<E, D>(ks, rows_of<E>(k, bh, p.h), k.st, k0, p.tk);
  load_tile<E, D>(vs, rows_of<E>(v, bh, p.h), v.st, k0, p.tk);
  const int first_query = p.causal ? max(0, k0 - p.shift) : 0;
  Acc dk_acc[D / 16], dv_acc[D / 16], s[4];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(dk_acc[n], 0.0f);
    wmma::fill_fragment(dv_acc[n], 0.0f);
  }
  for (int q0 = first_query / kTile * kTile; q0 < p.tq; q0 += kTile) {
    __syncthreads();
    load_tile<E, D>(qs, qb, q.st, q0, p.tq);
    load_tile<E, D>(dos, dob, dout.st, q0, p.tq);
    if (threadIdx.x < kTile) {
      const int i = q0 + threadIdx.x;
      const long long at = static_cast<long long>(bh) * p.tq + i;
      lse_s[threadIdx.x] = i < p.tq ? lse[at] * kLog2e : INFINITY;  // a padding query contributes P = 0
      delta_s[threadIdx.x] = i < p.tq ? delta[at] : 0.0f;
    }
    __syncthreads();
    product_nt<E, D>(s, ks + warp * 16 * ld, ld, qs, ld);  // S^T: this warp's 16 keys x 64 queries
    store_scores(st_w, s);
    product_nt<E, D>(s, vs + warp * 16 * ld, ld, dos, ld);  // dP^T = V dO^T
    store_scores(dpt_w, s);
    __syncwarp();
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const int i = q0 + c;
      const bool seen = i < p.tq && key < p.tk && (!p.causal || key <= i + p.shift);
      const float pr = seen ? exp2f(st_w[r * kScoreLd + c] * p.scale_log2 - lse_s[c]) : 0.0f;
      pt_w[r * kProbLd + c] = to_e<E>(pr);
      dst_w[r * kProbLd + c] = to_e<E>(pr * (dpt_w[r * kScoreLd + c] - delta_s[c]));
    }
    __syncwarp();
    accumulate_nn<E, D / 16>(dv_acc, pt_w, kProbLd, dos, ld);
    accumulate_nn<E, D / 16>(dk_acc, dst_w, kProbLd, qs, ld);
  }
  store_rows<E, D>(dk_acc, st_w, const_cast<E*>(rows_of<E>(dk, bh, p.h)), dk.st, key, p.tk, p.scale, r, half);
  store_rows<E, D>(dv_acc, st_w, const_cast<E*>(rows_of<E>(dv, bh, p.h)), dv.st, key, p.tk, 1.0f, r, half);
}

// dQ for one tile of 64 queries, walking over the key tiles it sees.
template <class E, int D>
__global__ void __launch_bounds__(kThreads) backward_q_kernel(Rows q, Rows k, Rows v, Rows dout, const float* lse,
                                                             const float* delta, Rows dq, Problem p) {
  constexpr int ld = tile_ld<D>();
  extern __shared__ __align__(128) unsigned char smem[];
  E* qs = reinterpret_cast<E*>(smem);
  E* dos = qs + kTile * ld;
  E* ks = dos + kTile * ld;
  E* vs = ks + kTile * ld;
  float* s_all = reinterpret_cast<float*>(vs + kTile * ld);
  float* dp_all = s_all + kWarps * 16 * kScoreLd;
  E* ds_all = reinterpret_cast<E*>(dp_all + kWarps * 16 * kScoreLd);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  const int q0 = blockIdx.x * kTile, bh = blockIdx.y;
  float* s_w = s_all + warp * 16 * kScoreLd;
  float* dp_w = dp_all + warp * 16 * kScoreLd;
  E* ds_w = ds_all + warp * 16 * kProbLd;
  const int qi = q0 + warp * 16 + r;
  const int visible = p.causal ? qi + p.shift : p.tk - 1;
  const long long at = static_cast<long long>(bh) * p.tq + qi;
  const float lse2 = qi < p.tq ? lse[at] * kLog2e : INFINITY;
  const float delta_i = qi < p.tq ? delta[at] : 0.0f;
  const E* kb = rows_of<E>(k, bh, p.h);
  const E* vb = rows_of<E>(v, bh, p.h);

  load_tile<E, D>(qs, rows_of<E>(q, bh, p.h), q.st, q0, p.tq);
  load_tile<E, D>(dos, rows_of<E>(dout, bh, p.h), dout.st, q0, p.tq);
  const int tiles = key_tiles(p, q0);
  Acc dq_acc[D / 16], s[4];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dq_acc[n], 0.0f);
  for (int t = 0; t < tiles; ++t) {
    __syncthreads();
    load_tile<E, D>(ks, kb, k.st, t * kTile, p.tk);
    load_tile<E, D>(vs, vb, v.st, t * kTile, p.tk);
    __syncthreads();
    product_nt<E, D>(s, qs + warp * 16 * ld, ld, ks, ld);
    store_scores(s_w, s);
    product_nt<E, D>(s, dos + warp * 16 * ld, ld, vs, ld);
    store_scores(dp_w, s);
    __syncwarp();
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const int key = t * kTile + c;
      const bool seen = key <= visible && key < p.tk;
      const float pr = seen ? exp2f(s_w[r * kScoreLd + c] * p.scale_log2 - lse2) : 0.0f;
      ds_w[r * kProbLd + c] = to_e<E>(pr * (dp_w[r * kScoreLd + c] - delta_i));
    }
    __syncwarp();
    accumulate_nn<E, D / 16>(dq_acc, ds_w, kProbLd, ks, ld);
  }
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

std::size_t tile_bytes(int d, std::size_t element) { return std::size_t(kTile) * (d + 8) * element; }
std::size_t score_bytes() { return std::size_t(kWarps) * 16 * kScoreLd * sizeof(float); }
std::size_t prob_bytes(std::size_t element) { return std::size_t(kWarps) * 16 * kProbLd * element; }

// Kernels above 48 KiB of dynamic shared memory must say so once per kernel.
template <class Kernel>
void allow_shared_memory(Kernel kernel, std::size_t bytes) {
  BMT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

cudaStream_t compute_stream() { return context().compute_stream().native(); }

unsigned tiles_of(int rows) { return static_cast<unsigned>((rows + kTile - 1) / kTile); }

template <class E, int D>
void run_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float scale, const Tensor& out,
                 const Tensor& lse) {
  const Problem p = problem(q, k, causal, scale);
  const std::size_t bytes = 3 * tile_bytes(D, sizeof(E)) + score_bytes() + prob_bytes(sizeof(E));
  static const bool allowed = (allow_shared_memory(forward_kernel<E, D>, bytes), true);
  (void)allowed;
  const dim3 grid(tiles_of(p.tq), static_cast<unsigned>(q.size(0) * q.size(1)));
  forward_kernel<E, D><<<grid, kThreads, bytes, compute_stream()>>>(rows(q), rows(k), rows(v), rows(out),
                                                                      lse.data_as<float>(), p);
  BMT_CUDA_CHECK(cudaGetLastError());
}

template <class E, int D>
void run_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                  const Tensor& lse, bool causal, float scale, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const Problem p = problem(q, k, causal, scale);
  const unsigned bh = static_cast<unsigned>(q.size(0) * q.size(1));
  const long long query_rows = static_cast<long long>(bh) * p.tq;
  Tensor delta = Tensor::empty({q.size(0), q.size(1), q.size(2)}, DType::f32);
  delta_kernel<E, D><<<static_cast<unsigned>((query_rows + kWarps - 1) / kWarps), kThreads, 0, compute_stream()>>>(
      rows(out), rows(dout), delta.data_as<float>(), p, query_rows);
  BMT_CUDA_CHECK(cudaGetLastError());

  const std::size_t kv_bytes =
      4 * tile_bytes(D, sizeof(E)) + 2 * score_bytes() + 2 * prob_bytes(sizeof(E)) + 2 * kTile * sizeof(float);
  static const bool kv_allowed = (allow_shared_memory(backward_kv_kernel<E, D>, kv_bytes), true);
  (void)kv_allowed;
  backward_kv_kernel<E, D><<<dim3(tiles_of(p.tk), bh), kThreads, kv_bytes, compute_stream()>>>(
      rows(q), rows(k), rows(v), rows(dout), lse.data_as<float>(), delta.data_as<float>(), rows(dk), rows(dv), p);
  BMT_CUDA_CHECK(cudaGetLastError());

  const std::size_t q_bytes = 4 * tile_bytes(D, sizeof(E)) + 2 * score_bytes() + prob_bytes(sizeof(E));
  static const bool q_allowed = (allow_shared_memory(backward_q_kernel<E, D>, q_bytes), true);
  (void)q_allowed;
  backward_q_kernel<E, D><<<dim3(tiles_of(p.tq), bh), kThreads, q_bytes, compute_stream()>>>(
      rows(q), rows(k), rows(v), rows(dout), lse.data_as<float>(), delta.data_as<float>(), rows(dq), p);
  BMT_CUDA_CHECK(cudaGetLastError());
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
