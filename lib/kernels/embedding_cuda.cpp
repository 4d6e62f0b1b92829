// CUDA side of the embedding lookup and its gradient (fast_path.hpp).
//
// Forward is a gather: a grid-stride loop over (token, 16-byte pack of its row).
//
// Backward is deterministic, with no float atomics. Most of its traffic is writing the whole table
// gradient, mostly zeros, so the compute stream zeroes the table while a side stream of higher
// priority sorts the token positions by id (a stable radix sort of (id, position) pairs, so each
// id's positions stay in token order): the sort's small kernels run beside the fill instead of
// before it. The sorted list is then cut into segments, at every change of id and at every
// kSegment-th entry, and a warp adds each segment's gradient rows in order in f32 registers. A run
// of one id that lies in one segment is written to its table row; a longer run's segments go to
// scratch rows, which a second kernel adds in order into the table row. Every segment has at most
// kSegment rows, so a frequent token is summed by many warps, and every sum's order depends on the
// ids alone: the result is the same on every run.
#include <cub/device/device_radix_sort.cuh>

#include "bmtrain/tensor/memory.hpp"
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

constexpr int kSegment = 32;  // sorted entries per chunk; a segment never crosses a chunk's end
constexpr int kWarpsPerBlock = 8;
constexpr int kPacksPerLane = 4;  // a warp adds up to 32 * 4 packs of a row per pass over its positions

// acc[k] = sum of packs p0 + lane + 32 k of the grad_out rows at the segment's n positions, in
// order; lane q holds the segment's q-th position.
template <class G, int N>
__device__ __forceinline__ void add_segment_rows(float (&acc)[kPacksPerLane][N], const G* __restrict__ grad_out,
                                                 std::int32_t position, int n, std::int64_t p0,
                                                 std::int64_t per_row, std::int64_t C, int lane) {
#pragma unroll
  for (int k = 0; k < kPacksPerLane; ++k)
#pragma unroll
    for (int j = 0; j < N; ++j) acc[k][j] = 0.0f;
#pragma unroll 4
  for (int q = 0; q < n; ++q) {
    const G* src = grad_out + static_cast<std::int64_t>(__shfl_sync(0xffffffffu, position, q)) * C;
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

// dst[packs p0 + lane + 32 k] = acc[k], for the packs of the row.
template <class T, int N>
__device__ __forceinline__ void store_packs(T* __restrict__ dst, const float (&acc)[kPacksPerLane][N], std::int64_t p0,
                                            std::int64_t per_row, int lane) {
#pragma unroll
  for (int k = 0; k < kPacksPerLane; ++k) {
    const std::int64_t p = p0 + lane + 32 * k;
    if (p < per_row) store<N>(dst + p * N, acc[k]);
  }
}

// A warp per sorted entry i that starts a segment (its id differs from entry i - 1's, or i begins
// a chunk of kSegment entries) adds the segment's rows. The sum goes to the id's table row when
// the segment is its run's only one; otherwise to scratch row 2c + 1 for the run's first segment
// (in chunk c) or 2c for a later one (beginning chunk c).
template <class G, class W, int N>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    embedding_segments_kernel(const G* __restrict__ grad_out, const std::int32_t* __restrict__ keys,
                              const std::int32_t* __restrict__ positions, std::int64_t tokens,
                              W* __restrict__ grad_weight, float* __restrict__ scratch, std::int64_t V,
                              std::int64_t C) {
  static_assert(kSegment == 32, "a segment's positions are held one a lane");
  const int lane = threadIdx.x & 31;
  const std::int64_t per_row = C / N;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); i < tokens;
       i += warps) {
    const std::int32_t key = keys[i];
    const bool head = i == 0 || keys[i - 1] != key;
    if (key >= V || !(head || i % kSegment == 0)) continue;  // out-of-range ids have no row
    const std::int64_t chunk = i / kSegment;
    const std::int64_t chunk_end = (chunk + 1) * kSegment < tokens ? (chunk + 1) * kSegment : tokens;
    // The segment ends at the first entry of another id, or at its chunk's end.
    const std::int64_t j = i + lane;
    const unsigned other = __ballot_sync(0xffffffffu, j >= chunk_end || keys[j] != key);
    const int n = other ? __ffs(other) - 1 : 32;
    const std::int32_t position = lane < n ? positions[j] : 0;
    const bool run_goes_on = i + n == chunk_end && chunk_end < tokens && keys[chunk_end] == key;
    float* partial = head ? (run_goes_on ? scratch + (2 * chunk + 1) * C : nullptr) : scratch + 2 * chunk * C;
    for (std::int64_t p0 = 0; p0 < per_row; p0 += 32 * kPacksPerLane) {
      float acc[kPacksPerLane][N];
      add_segment_rows<G, N>(acc, grad_out, position, n, p0, per_row, C, lane);
      if (partial)
        store_packs<float, N>(partial, acc, p0, per_row, lane);
      else
        store_packs<W, N>(grad_weight + static_cast<std::int64_t>(key) * C, acc, p0, per_row, lane);
    }
  }
}

constexpr int kRunBatch = 8;  // scratch rows a lane loads before adding them

// Warp (c, s) takes packs 32 s .. 32 s + 31 of the run that crosses the end of chunk c, if the run
// began in chunk c: it adds the run's first segment (scratch row 2c + 1) and then the later ones
// (rows 2c' for the chunks c' > c that begin inside the run) in order, and writes the sum to the
// id's table row.
template <class W, int N>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    embedding_runs_kernel(const std::int32_t* __restrict__ keys, std::int64_t tokens,
                          const float* __restrict__ scratch, W* __restrict__ grad_weight, std::int64_t V,
                          std::int64_t C) {
  const int lane = threadIdx.x & 31;
  const std::int64_t per_row = C / N, slices = (per_row + 31) / 32;
  const std::int64_t chunks = (tokens + kSegment - 1) / kSegment;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
  for (std::int64_t w = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
       w < chunks * slices; w += warps) {
    const std::int64_t c = w / slices, p = (w - c * slices) * 32 + lane;
    const std::int64_t first = c * kSegment, chunk_end = first + kSegment;
    if (chunk_end >= tokens) continue;
    const std::int32_t key = keys[chunk_end - 1];
    if (key >= V || keys[chunk_end] != key) continue;  // no run crosses this chunk's end
    if (first > 0 && keys[first - 1] == key) continue;  // it began in an earlier chunk
    // later = the chunks after c that begin inside the run (consecutive ones).
    std::int64_t later = 0;
    for (;;) {
      const std::int64_t cc = c + 1 + later + lane;
      const unsigned inside = __ballot_sync(0xffffffffu, cc < chunks && keys[cc * kSegment] == key);
      const int n = __ffs(~inside) - 1;  // leading lanes inside the run; -1 when all 32 are
      later += n < 0 ? 32 : n;
      if (n >= 0) break;
    }
    if (p >= per_row) continue;
    float acc[N];
    load<N>(scratch + (2 * c + 1) * C + p * N, acc);
    for (std::int64_t t0 = 1; t0 <= later; t0 += kRunBatch) {
      float g[kRunBatch][N];
#pragma unroll
      for (int b = 0; b < kRunBatch; ++b)
        if (t0 + b <= later) load<N>(scratch + 2 * (c + t0 + b) * C + p * N, g[b]);
#pragma unroll
      for (int b = 0; b < kRunBatch; ++b)
        if (t0 + b <= later)
#pragma unroll
          for (int j = 0; j < N; ++j) acc[j] += g[b][j];
    }
    store<N>(grad_weight + static_cast<std::int64_t>(key) * C + p * N, acc);
  }
}

int warp_blocks(std::int64_t warps) {
  return static_cast<int>(std::clamp<std::int64_t>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock, 1, 1 << 20));
}

template <class G, class W, int N>
void segments_launch(const Tensor& grad_out, const std::int32_t* keys, const std::int32_t* positions,
                     std::int64_t tokens, const Tensor& grad_weight, const Tensor& scratch, std::int64_t V,
                     std::int64_t C) {
  embedding_segments_kernel<G, W, N><<<warp_blocks(tokens), 32 * kWarpsPerBlock, 0, stream()>>>(
      static_cast<const G*>(grad_out.data()), keys, positions, tokens, static_cast<W*>(grad_weight.data()),
      scratch.data_as<float>(), V, C);
  check_launch();
  const std::int64_t chunks = (tokens + kSegment - 1) / kSegment, slices = (C / N + 31) / 32;
  embedding_runs_kernel<W, N><<<warp_blocks(chunks * slices), 32 * kWarpsPerBlock, 0, stream()>>>(
      keys, tokens, scratch.data_as<float>(), static_cast<W*>(grad_weight.data()), V, C);
  check_launch();
}

template <class G, class W>
void segments_typed(const Tensor& grad_out, const std::int32_t* keys, const std::int32_t* positions,
                    std::int64_t tokens, const Tensor& grad_weight, const Tensor& scratch, std::int64_t V,
                    std::int64_t C) {
  constexpr int N = static_cast<int>(16 / (sizeof(G) < sizeof(W) ? sizeof(G) : sizeof(W)));
  const bool vector = C % N == 0 && aligned(grad_out.data(), pack_align<N, G>()) &&
                      aligned(grad_weight.data(), pack_align<N, W>()) &&
                      aligned(scratch.data(), pack_align<N, float>());
  if (vector)
    segments_launch<G, W, N>(grad_out, keys, positions, tokens, grad_weight, scratch, V, C);
  else
    segments_launch<G, W, 1>(grad_out, keys, positions, tokens, grad_weight, scratch, V, C);
}

// The stream the sort runs on, above the compute stream's priority, and the events that fork it
// from and join it back to the compute stream. Made once and never destroyed (it may be needed
// until the process ends).
struct SortStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t forked = nullptr, sorted = nullptr;
  SortStream() {
    int least = 0, greatest = 0;
    BMT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    BMT_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest));
    BMT_CUDA_CHECK(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming));
    BMT_CUDA_CHECK(cudaEventCreateWithFlags(&sorted, cudaEventDisableTiming));
  }
};

SortStream& sort_stream() {
  static SortStream* s = new SortStream;
  return *s;
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
  int end_bit = 1;
  while (end_bit < 31 && (std::int64_t(1) << end_bit) <= V) ++end_bit;  // keys are in [0, V]
  std::size_t temp_bytes = 0;
  BMT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                 static_cast<int>(tokens), 0, end_bit));
  Tensor temp = Tensor::empty({static_cast<std::int64_t>(temp_bytes) + 1}, DType::u8);
  const std::int64_t chunks = (tokens + kSegment - 1) / kSegment;
  Tensor scratch = Tensor::empty({2 * chunks, C}, DType::f32);

  // The side stream starts after everything queued on the compute stream so far (the ids, and
  // earlier users of the memory just taken), and the compute stream's kernels below wait for it.
  SortStream& side = sort_stream();
  BMT_CUDA_CHECK(cudaEventRecord(side.forked, stream()));
  BMT_CUDA_CHECK(cudaStreamWaitEvent(side.stream, side.forked, 0));
  BMT_DISPATCH_INDEX(ids.dtype(), "embedding_backward", I, {
    sort_input_kernel<I><<<grid_for(tokens, 256), 256, 0, side.stream>>>(static_cast<const I*>(ids.data()),
                                                                         keys_in, pos_in, tokens, V);
  });
  check_launch();
  BMT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                 static_cast<int>(tokens), 0, end_bit, side.stream));
  BMT_CUDA_CHECK(cudaEventRecord(side.sorted, side.stream));

  memory::set_zero(grad_weight.data(), grad_weight.nbytes());  // on the compute stream
  BMT_CUDA_CHECK(cudaStreamWaitEvent(stream(), side.sorted, 0));
  BMT_DISPATCH_FLOAT(grad_out.dtype(), "embedding_backward", G, {
    BMT_DISPATCH_FLOAT(grad_weight.dtype(), "embedding_backward", W, {
      segments_typed<G, W>(grad_out, keys_out, pos_out, tokens, grad_weight, scratch, V, C);
    });
  });
  return true;
}

}  // namespace bmt::kernels::fast
