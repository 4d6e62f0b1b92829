// The attention kernels of a 64- or 128-wide head on Hopper's warpgroup MMA (wgmma, sm_90a):
// forward, dK/dV and dQ, with the math and the per-warp register layouts of the mma.sync kernels in
// attention_cuda.cpp, which picks these when wgmma_available() says the device runs this file's
// sm_90a code. The build compiles this file, and only this one, for sm_90a too
// (lib/CMakeLists.txt), so the rest of the library keeps its plain sm_90 code.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "attention_cuda.hpp"
#include "bmtrain/runtime/environment.hpp"

namespace bmt::kernels::attention_tiles {

namespace {

// The block's 4 warps are one warpgroup; it owns 64 queries and walks over 64-key tiles, for a
// head of D = 64 or 128. S = Q K^T is D / 16 wgmma.m64n64k16 reading Q and K from shared memory
// through matrix descriptors; O += P V is 4 per 64 columns of the head, with P from registers and
// V read transposed (its rows are keys, the MMA's K dimension). Tiles are stored unpadded in the
// 128-byte swizzle the descriptors name: a tile is D / 64 panels of 64 rows by 64 columns (128
// bytes, one swizzle row), panel after panel, and 16-byte chunk c of a panel's row r sits at chunk
// c ^ (r % 8), 8 rows making one 1024-byte atom. Q K^T's K steps walk along a panel's row, then to
// the next panel; P V runs one n = 64 product per panel of V into the matching 64 columns of O,
// since a panel is exactly the B operand the D = 64 kernels describe. wgmma's accumulator gives
// warp w rows 16 w .. 16 w + 15 in the same per-warp layout as mma.sync (Acc<1, N>), and its
// register A operand is mma.sync's, so the softmax and the packing of P are the mma.sync kernels'.
// wgmma is issued by the whole warpgroup, so a warp cannot skip a tile its rows do not see: the
// mask zeroes it instead.
//
// Registers at D = 128: O is 64 f32 a thread; dK/dV holds two such accumulators beside S^T and
// dP^T (32 each) and their 16-bit copies as A operands, nearly all of the 255 registers a thread
// of a 128-thread block may have, so the block stays one warpgroup. Shared memory sets the
// occupancy there: 16 KiB a tile, five (forward) or six (backward) tiles a block, so two blocks a
// multiprocessor.

constexpr float kLazyRescale = 8.0f;               // see the forward's softmax
constexpr int kPanelBytes = kWgTile * 128;         // 64 rows of one 128-byte swizzle row each
template <int D>
constexpr int kTileBytes = kWgTile * D * 2;        // 64 rows of a D-wide head, 2-byte elements
// Blocks a multiprocessor holds. D = 64: five fit its shared memory; holding the registers to 96
// a thread keeps five there too (at 98, four). D = 128: two fit its shared memory, which leaves
// each thread all 255 registers.
template <int D>
constexpr int kForwardBlocks = D == 64 ? 5 : 2;

// Starts copying rows [row0, row0 + 64) of a [rows, D] tensor into a swizzled tile of D / 64
// panels (zeros past `rows`).
template <class E, int D>
__device__ inline void copy_tile_swizzled_async(unsigned char* tile, const E* base, long long st, int row0,
                                                int rows) {
  constexpr int kChunks = D / 8, kRowsPerPass = kThreads / kChunks;  // 16-byte chunks of a row
  static_assert(kThreads % kChunks == 0 && kWgTile % kRowsPerPass == 0, "whole rows per pass");
  const int c = threadIdx.x % kChunks, r0 = threadIdx.x / kChunks;
  const int chunk = c % 8;
  unsigned char* panel = tile + (c / 8) * kPanelBytes;
  // One 64-bit multiply a call, each pass kRowsPerPass rows further: the compiler does not
  // strength-reduce a multiply per pass under the select below, and these copies run for every tile.
  const E* src = base + static_cast<long long>(row0 + r0) * st + c * 8;
  const long long pass_stride = kRowsPerPass * st;
#pragma unroll
  for (int pass = 0; pass < kWgTile / kRowsPerPass; ++pass, src += pass_stride) {
    const int r = r0 + kRowsPerPass * pass;
    const bool valid = row0 + r < rows;
    copy16_async(panel + r * 128 + ((chunk ^ (r % 8)) << 4), valid ? src : base, valid);
  }
}

// Matrix descriptor of a swizzled panel: start address / 16, the 1024-byte stride between 8-row
// groups, 128-byte swizzle (mode 1 in bits 62-63). The leading byte offset is unused with this
// swizzle when a row is one swizzle row. Adding 2 moves the start 32 bytes: 16 elements further
// along a row (the next K step of a K-major panel); adding kPanelBytes / 16, the next panel.
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
template <int SLICES>  // 8-column slices: an Acc<1, 8 SLICES>
__device__ inline void hold(float (&acc)[1][SLICES][4]) {
#pragma unroll
  for (int n = 0; n < SLICES; ++n)
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

// d (+)= A B^T, m64 n64 k16: A and B K-major panels in shared memory. `accumulate` 0 overwrites.
template <class E>
__device__ inline void wgmma_ss(float (&d)[8][4], std::uint64_t a, std::uint64_t b, int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
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

// d += A B, m64 n64 k16: A from registers (mma.sync's A layout per warp), B a panel in shared
// memory whose rows run along K (transposed, "MN-major").
template <class E>
__device__ inline void wgmma_rs_transposed_b(float (&d)[8][4], const std::uint32_t (&a)[4], std::uint64_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
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

// acc = A B^T over a D-wide head: A and B swizzled K-major tiles (64 rows, D), K steps of 16
// along each panel in turn.
template <class E, int D>
__device__ inline void wgmma_tile_nt(Acc<1, kWgTile>& acc, const unsigned char* a, const unsigned char* b) {
  const std::uint64_t ad = tile_descriptor(a), bd = tile_descriptor(b);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const std::uint64_t step = (kk / 4) * (kPanelBytes >> 4) + 2 * (kk % 4);
    wgmma_ss<E>(acc[0], ad + step, bd + step, kk > 0);
  }
}

// acc += A B: A 64 x 64 in registers (pack_a), B a swizzled tile (64 rows along K, D columns):
// panel j of B gives columns 64 j .. 64 j + 63 of acc, which are acc[0][8 j .. 8 j + 7].
template <class E, int D>
__device__ inline void wgmma_tile_nn(Acc<1, D>& acc, const std::uint32_t (&a)[4][4], const unsigned char* b) {
#pragma unroll
  for (int j = 0; j < D / 64; ++j) {
    float(&d)[8][4] = *reinterpret_cast<float(*)[8][4]>(&acc[0][8 * j][0]);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_rs_transposed_b<E>(d, a[kk], tile_descriptor(b + j * kPanelBytes + kk * 16 * 128));
  }
}

// The swizzle is a function of address bits 4-9, so tiles start on 1024-byte boundaries: the
// first one at or after the start of dynamic shared memory (the launches ask for 1024 bytes more).
__device__ inline unsigned char* first_tile(unsigned char* smem) {
  const unsigned misalign = static_cast<unsigned>(__cvta_generic_to_shared(smem)) % 1024;
  return smem + (misalign ? 1024 - misalign : 0);
}

// The walk over the 64-key tiles that query block q0 sees, each tile's K and V rows copied into
// kbuf / vbuf (two swizzled tiles each) while the previous tile is used: use(t, buffer).
template <class E, int D, class Use>
__device__ inline void walk_kv_tiles(const Problem& p, int q0, unsigned char* kbuf, unsigned char* vbuf, Rows k, Rows v,
                                     const E* kb, const E* vb, Use&& use) {
  walk_tiles<true>(
      0, key_tiles<1, kWgTile>(p, q0),
      [&](int t, int b) {
        copy_tile_swizzled_async<E, D>(kbuf + b * kTileBytes<D>, kb, k.st, t * kWgTile, p.tk);
        copy_tile_swizzled_async<E, D>(vbuf + b * kTileBytes<D>, vb, v.st, t * kWgTile, p.tk);
      },
      use);
}

template <class E, int D>
__global__ void __launch_bounds__(kThreads, kForwardBlocks<D>)
    forward_wgmma_kernel(Rows q, Rows k, Rows v, Rows o, float* lse, Problem p) {
  constexpr int kTile = kTileBytes<D>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* qs = first_tile(smem_raw);
  unsigned char* kbuf = qs + kTile;  // [2] tiles
  unsigned char* vbuf = kbuf + 2 * kTile;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * kWgTile, bh = blockIdx.y;
  const QueryWarp<1, kWgTile> qw(p, q0, warp);
  const int w0 = qw.w0;
  const E* kb = kv_rows_of<E>(k, bh, p);
  const E* vb = kv_rows_of<E>(v, bh, p);

  copy_tile_swizzled_async<E, D>(qs, rows_of<E>(q, bh, p.h), q.st, q0, p.tq);  // lands with tile 0
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  Acc<1, D> out;
  Acc<1, kWgTile> s;
  clear(out);
  walk_kv_tiles<E, D>(p, q0, kbuf, vbuf, k, v, kb, vb, [&](int t, int b) {
    const int key0 = t * kWgTile;
    wgmma_fence();
    wgmma_tile_nt<E, D>(s, qs, kbuf + b * kTile);
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
      for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) out[0][n][e] *= alpha[e / 2];
    }
    wgmma_fence();
    wgmma_tile_nn<E, D>(out, pa, vbuf + b * kTile);
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
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) out[0][n][e] *= inv[e / 2];
  if (lane % 4 == 0)
    for (int i = 0; i < 2; ++i) {
      const int row = w0 + lane / 4 + 8 * i;
      if (row < p.tq) lse[static_cast<long long>(bh) * p.tq + row] = lse2[i] / kLog2e;
    }
  store_rows<E, D, 1>(out, const_cast<E*>(rows_of<E>(o, bh, p.h)), o.st, w0, p.tq, 1.0f, lane);
}

// dK and dV for 64 keys of a D-wide head (the mma.sync kernel's math): per query tile,
// S^T = K Q^T and dP^T = V dO^T, then dV += P^T dO and dK += dS^T Q. The block (blockIdx.y: a
// key/value head of [B, h / group]) walks the query tiles of each query head of its group in turn.
template <class E, int D>
__global__ void __launch_bounds__(kThreads) backward_kv_wgmma_kernel(Rows q, Rows k, Rows v, Rows dout,
                                                                     const float* lse, const float* delta, Rows dk,
                                                                     Rows dv, Problem p) {
  constexpr int kTile = kTileBytes<D>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* ks = first_tile(smem_raw);
  unsigned char* vs = ks + kTile;
  unsigned char* qbuf = vs + kTile;  // [2] tiles
  unsigned char* dobuf = qbuf + 2 * kTile;
  float* lse_buf = reinterpret_cast<float*>(dobuf + 2 * kTile);  // [2][64]
  float* delta_buf = lse_buf + 2 * kWgTile;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = blockIdx.x * kWgTile, bhk = blockIdx.y, w0 = k0 + warp * 16;
  const int hk = p.kv_heads();
  copy_tile_swizzled_async<E, D>(ks, rows_of<E>(k, bhk, hk), k.st, k0, p.tk);  // land with the first tile
  copy_tile_swizzled_async<E, D>(vs, rows_of<E>(v, bhk, hk), v.st, k0, p.tk);
  // Step s of the walk is query tile first_tile + s % head_tiles of the group's head s / head_tiles.
  const int first_tile = (p.causal ? max(0, k0 - p.shift) : 0) / kWgTile;
  const int head_tiles = (p.tq + kWgTile - 1) / kWgTile - first_tile;
  Acc<1, D> dk_acc, dv_acc;
  Acc<1, kWgTile> pt, dst;
  clear(dk_acc);
  clear(dv_acc);
  walk_tiles<true>(
      0, p.group * head_tiles,
      [&](int s, int b) {
        const int g = s / head_tiles, q0 = (first_tile + s - g * head_tiles) * kWgTile;
        const int bh = query_head(bhk, g, p);
        copy_tile_swizzled_async<E, D>(qbuf + b * kTile, rows_of<E>(q, bh, p.h), q.st, q0, p.tq);
        copy_tile_swizzled_async<E, D>(dobuf + b * kTile, rows_of<E>(dout, bh, p.h), dout.st, q0, p.tq);
        // The tile's lse (thread c) and delta (thread 64 + c) travel with it instead of through
        // registers, whose load would hold the warp before the barrier. A query past the end
        // reads 0; the mask below hides it.
        static_assert(kThreads == 2 * kWgTile, "one thread per lse or delta element");
        const int c = threadIdx.x % kWgTile, i = q0 + c;
        const bool is_lse = threadIdx.x < kWgTile;
        copy4_async((is_lse ? lse_buf : delta_buf) + b * kWgTile + c,
                    (is_lse ? lse : delta) + static_cast<long long>(bh) * p.tq + min(i, p.tq - 1), i < p.tq);
      },
      [&](int s, int b) {
        const int q0 = (first_tile + s % head_tiles) * kWgTile;
        const unsigned char* qt = qbuf + b * kTile;
        const unsigned char* dot = dobuf + b * kTile;
        const float* lse_s = lse_buf + b * kWgTile;
        const float* delta_s = delta_buf + b * kWgTile;
        wgmma_fence();
        wgmma_tile_nt<E, D>(pt, ks, qt);
        wgmma_tile_nt<E, D>(dst, vs, dot);
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
        wgmma_tile_nn<E, D>(dv_acc, pa, dot);
        wgmma_tile_nn<E, D>(dk_acc, da, qt);
        wgmma_commit();
        wgmma_wait_all();
        hold(dv_acc);
        hold(dk_acc);
        hold(pa);
        hold(da);
      });
  wait_copies<0>();  // a block that walked no tile still has its own tiles in flight
  store_rows<E, D, 1>(dk_acc, const_cast<E*>(rows_of<E>(dk, bhk, hk)), dk.st, w0, p.tk, p.scale, lane);
  store_rows<E, D, 1>(dv_acc, const_cast<E*>(rows_of<E>(dv, bhk, hk)), dv.st, w0, p.tk, 1.0f, lane);
}

// dQ for 64 queries of a D-wide head: per key tile, S = Q K^T and dP = dO V^T, then dQ += dS K.
template <class E, int D>
__global__ void __launch_bounds__(kThreads) backward_q_wgmma_kernel(Rows q, Rows k, Rows v, Rows dout,
                                                                    const float* lse, const float* delta, Rows dq,
                                                                    Problem p) {
  constexpr int kTile = kTileBytes<D>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* qs = first_tile(smem_raw);
  unsigned char* dos = qs + kTile;
  unsigned char* kbuf = dos + kTile;  // [2] tiles
  unsigned char* vbuf = kbuf + 2 * kTile;

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
  const E* kb = kv_rows_of<E>(k, bh, p);
  const E* vb = kv_rows_of<E>(v, bh, p);
  copy_tile_swizzled_async<E, D>(qs, rows_of<E>(q, bh, p.h), q.st, q0, p.tq);  // land with tile 0
  copy_tile_swizzled_async<E, D>(dos, rows_of<E>(dout, bh, p.h), dout.st, q0, p.tq);
  Acc<1, D> dq_acc;
  Acc<1, kWgTile> s, ds;
  clear(dq_acc);
  walk_kv_tiles<E, D>(p, q0, kbuf, vbuf, k, v, kb, vb, [&](int t, int b) {
    const int key0 = t * kWgTile;
    const unsigned char* kt = kbuf + b * kTile;
    wgmma_fence();
    wgmma_tile_nt<E, D>(s, qs, kt);
    wgmma_tile_nt<E, D>(ds, dos, vbuf + b * kTile);
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
    wgmma_tile_nn<E, D>(dq_acc, da, kt);
    wgmma_commit();
    wgmma_wait_all();
    hold(dq_acc);
    hold(da);
  });
  store_rows<E, D, 1>(dq_acc, const_cast<E*>(rows_of<E>(dq, bh, p.h)), dq.st, w0, p.tq, p.scale, lane);
}

// 1 where this module's device code was compiled with the sm_90a features (wgmma), else 0.
__global__ void wgmma_probe(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *out = 1;
#else
  *out = 0;
#endif
}

}  // namespace

template <class E, int D>
void launch_forward_wgmma(const Problem& p, unsigned bh, Rows q, Rows k, Rows v, Rows out, float* lse) {
  const std::size_t bytes = 5 * kTileBytes<D> + 1024;  // Q, two K and two V tiles, and room to align them
  static const bool allowed = (allow_shared_memory(forward_wgmma_kernel<E, D>, bytes), true);
  (void)allowed;
  forward_wgmma_kernel<E, D><<<dim3((p.tq + kWgTile - 1) / kWgTile, bh), kThreads, bytes, compute_stream()>>>(
      q, k, v, out, lse, p);
  BMT_CUDA_CHECK(cudaGetLastError());
}

template <class E, int D>
void launch_backward_wgmma(const Problem& p, unsigned bh, Rows q, Rows k, Rows v, Rows dout, const float* lse,
                           const float* delta, Rows dq, Rows dk, Rows dv) {
  const std::size_t kv_bytes = 6 * kTileBytes<D> + 1024 + 4 * kWgTile * sizeof(float);
  static const bool kv_allowed = (allow_shared_memory(backward_kv_wgmma_kernel<E, D>, kv_bytes), true);
  (void)kv_allowed;
  backward_kv_wgmma_kernel<E, D><<<dim3((p.tk + kWgTile - 1) / kWgTile, bh / p.group), kThreads, kv_bytes,
                                   compute_stream()>>>(q, k, v, dout, lse, delta, dk, dv, p);
  BMT_CUDA_CHECK(cudaGetLastError());
  const std::size_t q_bytes = 6 * kTileBytes<D> + 1024;
  static const bool q_allowed = (allow_shared_memory(backward_q_wgmma_kernel<E, D>, q_bytes), true);
  (void)q_allowed;
  backward_q_wgmma_kernel<E, D><<<dim3((p.tq + kWgTile - 1) / kWgTile, bh), kThreads, q_bytes, compute_stream()>>>(
      q, k, v, dout, lse, delta, dq, p);
  BMT_CUDA_CHECK(cudaGetLastError());
}

// Whether the device runs this file's sm_90a code (the build adds it for Hopper; the driver may
// still load the plain sm_90 code). Asked once, with one wait.
bool wgmma_available() {
  static const bool available = [] {
    if (environment().attention_no_wgmma) return false;
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

template void launch_forward_wgmma<__nv_bfloat16, 64>(const Problem&, unsigned, Rows, Rows, Rows, Rows, float*);
template void launch_forward_wgmma<__nv_bfloat16, 128>(const Problem&, unsigned, Rows, Rows, Rows, Rows, float*);
template void launch_forward_wgmma<__half, 64>(const Problem&, unsigned, Rows, Rows, Rows, Rows, float*);
template void launch_forward_wgmma<__half, 128>(const Problem&, unsigned, Rows, Rows, Rows, Rows, float*);
template void launch_backward_wgmma<__nv_bfloat16, 64>(const Problem&, unsigned, Rows, Rows, Rows, Rows, const float*,
                                                       const float*, Rows, Rows, Rows);
template void launch_backward_wgmma<__nv_bfloat16, 128>(const Problem&, unsigned, Rows, Rows, Rows, Rows, const float*,
                                                       const float*, Rows, Rows, Rows);
template void launch_backward_wgmma<__half, 64>(const Problem&, unsigned, Rows, Rows, Rows, Rows, const float*,
                                                       const float*, Rows, Rows, Rows);
template void launch_backward_wgmma<__half, 128>(const Problem&, unsigned, Rows, Rows, Rows, Rows, const float*,
                                                       const float*, Rows, Rows, Rows);

}  // namespace bmt::kernels::attention_tiles
