#pragma once
// Device building blocks of the raw CUDA kernels (the *_cuda.cpp files behind memory_bound_seam.hpp):
// the compute stream, float loads/stores of whole 2..32-byte packs of f32/bf16/f16 elements, warp
// and row-team reductions in a fixed order (so results do not depend on scheduling), and a
// grid-stride elementwise launcher. Only CUDA translation units include it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "bmtrain/kernels/common.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/cuda_check.hpp"

namespace bmt::kernels::cuda {

// Kernels go on the compute stream, where the Kokkos kernels and cuBLASLt calls also run, so the
// two paths interleave in order. Without an initialized runtime there is no compute stream and the
// callers keep to the Kokkos path.
inline bool available() { return is_initialized(); }
inline cudaStream_t stream() { return context().compute_stream().native(); }

// Multiprocessors of the device this process uses (one device per process).
inline int sm_count() {
  static const int count = [] {
    int device = 0, n = 0;
    BMT_CUDA_CHECK(cudaGetDevice(&device));
    BMT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return n;
  }();
  return count;
}

inline bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

__host__ __device__ inline bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

inline void check_launch() { BMT_CUDA_CHECK(cudaGetLastError()); }

// ---- programmatic dependent launch (compute capability 9.0 and up) ------------------------------
// A second kernel that only finishes the first one's work (adding its partial sums) would start
// only once the first has ended and the launch has gone through; launched as a dependent, its
// blocks are placed as the first kernel's blocks leave and wait on the device instead. The first
// kernel calls allow_dependents() (early: the dependent's blocks take no slot the first still
// needs when the first has one block per resident slot), the dependent calls
// wait_for_prerequisite() before it reads anything the first wrote: that waits until the first has
// ended and its writes are visible. Both are no-ops below 9.0 and in kernels launched plainly.
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_prerequisite() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

inline bool dependent_launch_supported() {
  static const bool supported = [] {
    int device = 0, major = 0;
    BMT_CUDA_CHECK(cudaGetDevice(&device));
    BMT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 9;
  }();
  return supported;
}

// kernel<<<grid, block, shared, stream()>>>(args...), as a dependent of the kernel before it.
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream();
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = dependent_launch_supported() ? 1 : 0;
  BMT_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

// ---- element conversions: widen to f32, round back once ----------------------------------------
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16_t x) { return __uint_as_float(static_cast<unsigned>(x.bits) << 16); }
__device__ __forceinline__ float to_float(f16_t x) { return __half2float(__ushort_as_half(x.bits)); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
// The hardware conversions round to nearest even, as bf16_t::from_float and f16_t::from_float do on
// the host: the same bits for every number (a NaN stays a NaN, with the hardware's payload). One
// cvt.rn.bf16x2 rounds two floats, where the host's bit arithmetic takes several instructions each.
template <>
__device__ __forceinline__ bf16_t from_float<bf16_t>(float x) {
  bf16_t r;
  r.bits = __bfloat16_as_ushort(__float2bfloat16_rn(x));
  return r;
}
template <>
__device__ __forceinline__ f16_t from_float<f16_t>(float x) {
  f16_t r;
  r.bits = __half_as_ushort(__float2half_rn(x));
  return r;
}

// ---- packs: N consecutive elements moved with the widest loads their alignment allows ----------
template <int kBytes>
struct Word;
template <>
struct Word<2> {
  using type = unsigned short;
};
template <>
struct Word<4> {
  using type = unsigned int;
};
template <>
struct Word<8> {
  using type = uint2;
};
template <>
struct Word<16> {
  using type = uint4;
};

// The alignment (bytes) a pack of N elements of T needs: its size, at most 16.
template <int N, class T>
constexpr std::size_t pack_align() {
  return N * sizeof(T) < 16 ? N * sizeof(T) : 16;
}

// A pack of N elements of T as loaded: the words of one or more loads of up to 16 bytes. A row
// kept in registers this way takes its storage size (half the registers of floats for bf16/f16).
template <int N, class T>
struct Raw {
  static constexpr int kBytes = N * static_cast<int>(sizeof(T));
  static constexpr int kWordBytes = kBytes < 16 ? kBytes : 16;
  using W = typename Word<kWordBytes>::type;
  W w[kBytes / kWordBytes];
};

// r = p[0..N); p aligned to pack_align<N, T>(). N is a power of two.
template <int N, class T>
__device__ __forceinline__ void load_raw(const T* __restrict__ p, Raw<N, T>& r) {
  using R = Raw<N, T>;
#pragma unroll
  for (int i = 0; i < R::kBytes / R::kWordBytes; ++i) r.w[i] = reinterpret_cast<const typename R::W*>(p)[i];
}

// f[k] = element k of r. A bf16 widens by moving its bits to the high half of a word, one shift
// or mask per element taken straight from the loaded 32-bit words.
template <int N, class T>
__device__ __forceinline__ void unpack(const Raw<N, T>& r, float (&f)[N]) {
  if constexpr (std::is_same_v<T, bf16_t> && N % 2 == 0) {
    std::uint32_t u[N / 2];
    memcpy(u, r.w, sizeof u);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      f[2 * i] = __uint_as_float(u[i] << 16);  // element 2i is the low half (little-endian)
      f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
  } else {
    T t[N];
    memcpy(t, r.w, sizeof t);
#pragma unroll
    for (int k = 0; k < N; ++k) f[k] = to_float(t[k]);
  }
}

// Marks r as changed, so that floats unpacked from it earlier are not kept alive in registers
// (the compiler would otherwise reuse them, holding the row as floats) but unpacked again.
template <int N, class T>
__device__ __forceinline__ void refresh(Raw<N, T>& r) {
  if constexpr (Raw<N, T>::kBytes % 4 == 0) {
    std::uint32_t u[Raw<N, T>::kBytes / 4];
    memcpy(u, r.w, sizeof u);
#pragma unroll
    for (int i = 0; i < Raw<N, T>::kBytes / 4; ++i) asm volatile("" : "+r"(u[i]));
    memcpy(r.w, u, sizeof u);
  } else {
    unsigned short h;
    memcpy(&h, r.w, sizeof h);
    asm volatile("" : "+h"(h));
    memcpy(r.w, &h, sizeof h);
  }
}

// f[k] = p[k] for k < N as floats; p aligned to pack_align<N, T>(). N is a power of two.
template <int N, class T>
__device__ __forceinline__ void load(const T* __restrict__ p, float (&f)[N]) {
  Raw<N, T> r;
  load_raw(p, r);
  unpack(r, f);
}

// p[k] = f[k] for k < N, each rounded once to T.
template <int N, class T>
__device__ __forceinline__ void store(T* __restrict__ p, const float (&f)[N]) {
  using R = Raw<N, T>;
  T t[N];
  if constexpr (std::is_same_v<T, bf16_t> && N % 2 == 0) {
#pragma unroll
    for (int k = 0; k < N; k += 2) {  // pairs through cvt.rn.bf16x2.f32
      const __nv_bfloat162 pair = __floats2bfloat162_rn(f[k], f[k + 1]);
      memcpy(&t[k], &pair, sizeof pair);
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) t[k] = from_float<T>(f[k]);
  }
  R r;
  memcpy(r.w, t, R::kBytes);
#pragma unroll
  for (int i = 0; i < R::kBytes / R::kWordBytes; ++i) reinterpret_cast<typename R::W*>(p)[i] = r.w[i];
}

// Elements per 16-byte load of T.
template <class T>
__host__ __device__ constexpr int vec_of() {
  return static_cast<int>(16 / sizeof(T));
}

// ---- reductions ---------------------------------------------------------------------------------
struct SumOp {
  __device__ __forceinline__ static float identity() { return 0.0f; }
  __device__ __forceinline__ static float apply(float a, float b) { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ static float identity() { return -3.402823466e38f; }
  __device__ __forceinline__ static float apply(float a, float b) { return a > b ? a : b; }
};

// Butterfly over the 32 lanes: every lane ends with the same value (each step adds two equal
// partial sums in either order, and IEEE addition commutes).
template <class Op>
__device__ __forceinline__ float warp_reduce(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Rows are handled by teams of blockDim.x threads (a multiple of 32); a block holds blockDim.y
// teams. The reduction over a team: warp butterflies, then (teams wider than a warp) the warps'
// values through the team's shared scratch, read back in warp order. Every thread of a team must
// call it the same number of times.
constexpr int kMaxTeamsPerBlock = 8;

// A team's scratch for its reductions: kTeamScratchFloats floats of shared memory a team, used in
// two halves of 32 in turn. A reduction writes one half, passes the team's barrier and reads it;
// the next reduction writes the other half, so no second barrier is needed before the scratch is
// reused: the reduction after that one, which writes this half again, starts only after the next
// one's barrier, which every thread of the team reaches only once it has read this half. One
// barrier a reduction instead of two, with the same results (bench_nn_kernels shows the softmax
// forward the most helped).
constexpr int kTeamScratchFloats = 64;

class TeamScratch {
 public:
  // block_scratch: kTeamScratchFloats floats for each of the block's teams.
  __device__ explicit TeamScratch(float* block_scratch) : team_(block_scratch + threadIdx.y * kTeamScratchFloats) {}
  // The half for the next reduction.
  __device__ float* next() {
    float* half = team_ + offset_;
    offset_ ^= 32;
    return half;
  }

 private:
  float* team_;
  int offset_ = 0;
};

// Synchronizes the threads of this thread's team only (named barrier 1 + team index; barrier 0 is
// __syncthreads'), so a block's teams do not wait for one another in their row reductions
// (bench_nn_kernels shows it in the softmax forward at 1600 wide, four teams of two warps a block).
__device__ __forceinline__ void team_sync() {
  asm volatile("bar.sync %0, %1;" ::"r"(threadIdx.y + 1), "r"(blockDim.x) : "memory");
}

template <class Op>
__device__ __forceinline__ float team_reduce(float v, TeamScratch& scratch) {
  v = warp_reduce<Op>(v);
  if (blockDim.x == 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  float* mine = scratch.next();
  if (lane == 0) mine[warp] = v;
  team_sync();
  v = lane < warps ? mine[lane] : Op::identity();
  return warp_reduce<Op>(v);
}

// A pair of values combined over a team in one round through shared memory (two team_reduce
// calls take two rounds, each with its barrier): `warp_combine` combines a pair over a warp's lanes, each
// warp's lane 0 stores its pair, and every warp combines the team's pairs, in warp order, padded
// with `identity`. A team has at most 16 warps, so both values fit in one half of its scratch.
template <class WarpCombine>
__device__ __forceinline__ float2 team_combine_pair(float2 v, TeamScratch& scratch, WarpCombine warp_combine,
                                                    float2 identity) {
  v = warp_combine(v);
  if (blockDim.x == 32) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  float* mine = scratch.next();
  if (lane == 0) {
    mine[warp] = v.x;
    mine[16 + warp] = v.y;
  }
  team_sync();
  return warp_combine(lane < warps ? make_float2(mine[lane], mine[16 + lane]) : identity);
}

// Two sums over a team in one round; each is added in team_reduce's order, so the results are the
// same floats as two team_reduce calls give.
__device__ __forceinline__ float2 team_sum2(float a, float b, TeamScratch& scratch) {
  const auto sums = [](float2 p) { return make_float2(warp_reduce<SumOp>(p.x), warp_reduce<SumOp>(p.y)); };
  return team_combine_pair(make_float2(a, b), scratch, sums, make_float2(SumOp::identity(), SumOp::identity()));
}

// A running maximum and the sum of exp(x - m) over the same elements: a logsumexp's two row
// reductions as one (the cross-entropy's).
struct MaxSum {
  float m, s;
};

// The pair for the union of two sets of elements; symmetric in its arguments, bit for bit.
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = a.m > b.m ? a.m : b.m;
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

// Butterfly over the 32 lanes, as warp_reduce: every lane ends with the same pair.
__device__ __forceinline__ MaxSum warp_merge(MaxSum v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = merge(v, {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
  return v;
}

// The pair over a team in one round through shared memory.
__device__ __forceinline__ MaxSum team_merge(MaxSum v, TeamScratch& scratch) {
  const auto merged = [](float2 p) {
    const MaxSum q = warp_merge({p.x, p.y});
    return make_float2(q.m, q.s);
  };
  const float2 r = team_combine_pair(make_float2(v.m, v.s), scratch, merged, make_float2(MaxOp::identity(), 0.0f));
  return {r.x, r.y};
}

// How many threads share a row: the narrowest team of whole warps in whose registers the row's
// `packs` fit at `packs_per_thread` each, and how many teams a block holds.
// Teams of up to 512 threads leave each thread 128 registers; a wider row gets threads == 0 and
// goes to the portable kernels.
constexpr int kRowBlockThreads = 256;
constexpr int kMaxTeamThreads = 512;
static_assert(kMaxTeamThreads / 32 <= 16, "team_combine_pair keeps up to 16 warps' values of each kind per team");

struct RowGeometry {
  int threads = 0;  // blockDim.x
  int teams = 0;    // blockDim.y
};

inline RowGeometry row_geometry(std::int64_t packs, int packs_per_thread) {
  RowGeometry g;
  const std::int64_t needed = (packs + packs_per_thread - 1) / packs_per_thread;
  const std::int64_t threads = std::max<std::int64_t>(32, (needed + 31) / 32 * 32);
  if (threads > kMaxTeamThreads) return g;
  g.threads = static_cast<int>(threads);
  g.teams = std::max(1, std::min(kMaxTeamsPerBlock, kRowBlockThreads / g.threads));
  return g;
}

// A team's share of the C elements at `row` as loaded: thread t takes packs t, t + blockDim.x, ...
template <int kVec, int kPacks, class T>
__device__ __forceinline__ void load_team_packs(const T* __restrict__ row, int C, Raw<kVec, T> (&into)[kPacks]) {
  const int packs = C / kVec;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int p = threadIdx.x + k * blockDim.x;
    if (p < packs) load_raw(row + p * kVec, into[k]);
  }
}

// A team's share of row r of a [rows, C] tensor as loaded (nothing past the last row). Row kernels
// call it for the team's next row before reducing this one, so that two rows' loads are in flight
// through the reductions' barriers.
template <int kVec, int kPacks, class T>
__device__ __forceinline__ void load_row_packs(const T* __restrict__ base, std::int64_t r, std::int64_t rows, int C,
                                               Raw<kVec, T> (&into)[kPacks]) {
  if (r < rows) load_team_packs(base + r * C, C, into);
}

// row = the team's packs of row r. With kPrefetch they were loaded into `next` on the previous
// step (or before the loop) and the loads of row r + stride are issued into `next` now; without it
// row r is loaded in place.
template <bool kPrefetch, int kVec, int kPacks, class T>
__device__ __forceinline__ void take_row_packs(const T* __restrict__ base, std::int64_t r, std::int64_t stride,
                                               std::int64_t rows, int C, Raw<kVec, T> (&row)[kPacks],
                                               Raw<kVec, T> (&next)[kPacks]) {
  if constexpr (kPrefetch) {
#pragma unroll
    for (int k = 0; k < kPacks; ++k) row[k] = next[k];
    load_row_packs(base, r + stride, rows, C, next);
  } else {
    load_row_packs(base, r, rows, C, row);
  }
}

// Blocks of a row kernel that fill the device once; its blocks walk the remaining rows.
template <class Kernel>
int resident_blocks(Kernel kernel, int threads, std::size_t shared) {
  int per_sm = 0;
  BMT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, shared));
  return sm_count() * std::max(1, per_sm);
}

// Blocks for `rows` rows in teams of g: one per team group, at most a device-full.
template <class Kernel>
int row_blocks(Kernel kernel, std::int64_t rows, const RowGeometry& g, std::size_t shared = 0) {
  const std::int64_t needed = (rows + g.teams - 1) / g.teams;
  return static_cast<int>(
      std::max<std::int64_t>(1, std::min<std::int64_t>(needed, resident_blocks(kernel, g.threads * g.teams, shared))));
}

template <int K, int kMax, class Launch>
bool dispatch_packs(int need, const RowGeometry& g, Launch& launch) {
  if constexpr (K >= kMax) {
    return launch(std::integral_constant<int, kMax>{}, g);
  } else {
    if (need <= K) return launch(std::integral_constant<int, K>{}, g);
    return dispatch_packs<K + 1, kMax>(need, g, launch);
  }
}

// Launches a row kernel whose threads keep K packs each in registers: the team from row_geometry
// at kMaxPacks per thread, then the smallest K that still holds the row, so rows that fill their
// team's registers only partly do not pay (in registers, hence occupancy) for packs they never
// load. With kTune false K is kMaxPacks (one instantiation, for the element-wise path). Calls
// launch(std::integral_constant<int, K>, geometry); false when the row does not fit.
template <int kMaxPacks, bool kTune, class Launch>
bool launch_row(std::int64_t packs, Launch&& launch) {
  const RowGeometry g = row_geometry(packs, kMaxPacks);
  if (g.threads == 0) return false;
  const int need = static_cast<int>((packs + g.threads - 1) / g.threads);
  return dispatch_packs<kTune ? 1 : kMaxPacks, kMaxPacks>(need, g, launch);
}

inline bool contiguous_or_absent(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && !t->is_contiguous()) return false;
  return true;
}

inline bool aligned_or_absent(std::initializer_list<const Tensor*> ts, std::size_t bytes = 16) {
  for (const Tensor* t : ts)
    if (t->defined() && !aligned(t->data(), bytes)) return false;
  return true;
}

template <class T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data()) : nullptr;
}
template <class T>
T* mut_ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data()) : nullptr;
}

// ---- grid-stride elementwise launcher -----------------------------------------------------------
// f.template apply<M>(i) handles elements [i, i + M). Whole packs of N go through apply<N> (the
// caller checked that every operand is aligned for it), the last n % N elements through apply<1>.
constexpr int kApplyThreads = 256;

template <int N, class F>
__global__ void __launch_bounds__(kApplyThreads) apply_kernel(std::int64_t n, F f) {
  const std::int64_t packs = n / N;
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t p = first; p < packs; p += stride) f.template apply<N>(p * N);
  if (N > 1) {
    const std::int64_t i = packs * N + first;
    if (i < n) f.template apply<1>(i);
  }
}

// Enough blocks to fill the device once (grid-stride loops take the rest).
inline int grid_for(std::int64_t work_items, int threads) {
  const std::int64_t wanted = (work_items + threads - 1) / threads;
  const std::int64_t fill = static_cast<std::int64_t>(sm_count()) * (2048 / threads);
  return static_cast<int>(std::max<std::int64_t>(1, std::min(wanted, fill)));
}

template <int N, class F>
void launch_apply(std::int64_t n, bool vector, const F& f) {
  if (n <= 0) return;
  if (vector && n >= N)
    apply_kernel<N, F><<<grid_for(n / N, kApplyThreads), kApplyThreads, 0, stream()>>>(n, f);
  else
    apply_kernel<1, F><<<grid_for(n, kApplyThreads), kApplyThreads, 0, stream()>>>(n, f);
  check_launch();
}

}  // namespace bmt::kernels::cuda
