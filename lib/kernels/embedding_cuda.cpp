// CUDA side of the embedding lookup and its gradient (fast_path.hpp).
//
// Forward is a gather: a grid-stride loop over (token, 16-byte pack of its row).
//
// Backward is deterministic, with no float atomics. It needs the token positions grouped by id: an
// EmbeddingIndex, a stable radix sort of (id, position) pairs (each id's positions stay in token
// order) queued on a side stream of higher priority. The op makes the index at the forward, so the
// sort's small, latency-bound kernels run beside the forward's work; a backward given none makes
// it first, and its sort then runs beside the zeroing below. Most of the backward's traffic is
// writing the whole table gradient, mostly zeros: the compute stream zeroes the table, then
// writes the looked-up rows. The sorted list is cut into segments, at every change of id and at
// every kSegment-th entry, and a warp per slice of a segment's rows adds them in order in f32
// registers. A run of one id that lies in one segment is written to its table row; a longer run's
// segments go to scratch rows, which a last kernel adds in order into the table row. Every segment
// has at most kSegment rows, so a frequent token is summed by many warps, and every sum's order
// depends on the ids alone: the result is the same on every run.
#include <cub/device/device_radix_sort.cuh>

#include "bmtrain/tensor/memory.hpp"
#include "cuda_common.hpp"
#include "fast_path.hpp"

namespace bmt::kernels {

// An EmbeddingIndex on the CUDA build: the sorted pairs, and the event that marks them written on
// the side stream.
struct EmbeddingIndex::State {
  std::int64_t tokens, V;
  Tensor ids;    // held until the side stream has read them
  Tensor pairs;  // [4, tokens] i32: keys as read, keys sorted, positions as read, positions sorted
  Tensor temp;   // the sort's
  cudaEvent_t ready = nullptr;

  State(const Tensor& ids, std::int64_t V)
      : tokens(ids.numel()), V(V), ids(ids), pairs(Tensor::empty({4, tokens}, DType::i32)) {
    BMT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  // The memory (the ids' too) goes back to the compute stream's pool, whose next user must not run
  // before the side stream is done with it. (No error is raised from here: an error in the stream
  // shows at its next synchronization.)
  ~State() {
    if (is_initialized()) cudaStreamWaitEvent(context().compute_stream().native(), ready, 0);
    cudaEventDestroy(ready);
  }

  std::int32_t* sorted_keys() const { return pairs.data_as<std::int32_t>() + tokens; }
  std::int32_t* sorted_positions() const { return pairs.data_as<std::int32_t>() + 3 * tokens; }
};

}  // namespace bmt::kernels

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
// Packs of a row a lane adds per segment: a row's slices of 32 * kPacksPerLane packs go to different
// warps. 2 against 4 (one or two slices a row for bf16 at 768 and 1600 wide): 75 -> 72 us and
// 135 -> 129 us for the backward given its index.
constexpr int kPacksPerLane = 2;

// acc[k] = sum of packs p0 + lane + 32 k (k < K) of the grad_out rows at the segment's n
// positions, in order; lane q holds the segment's q-th position.
template <class G, int N, int K>
__device__ __forceinline__ void add_segment_rows(float (&acc)[K][N], const G* __restrict__ grad_out,
                                                 std::int32_t position, int n, std::int64_t p0,
                                                 std::int64_t per_row, std::int64_t C, int lane) {
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int j = 0; j < N; ++j) acc[k][j] = 0.0f;
#pragma unroll 4
  for (int q = 0; q < n; ++q) {
    const G* src = grad_out + static_cast<std::int64_t>(__shfl_sync(0xffffffffu, position, q)) * C;
#pragma unroll
    for (int k = 0; k < K; ++k) {
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
template <class T, int N, int K>
__device__ __forceinline__ void store_packs(T* __restrict__ dst, const float (&acc)[K][N], std::int64_t p0,
                                            std::int64_t per_row, int lane) {
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const std::int64_t p = p0 + lane + 32 * k;
    if (p < per_row) store<N>(dst + p * N, acc[k]);
  }
}

// Slices of 32 * K packs in a row of per_row packs. Each slice is a warp's, so a chunk of one
// frequent id (32 rows to add, one load after another per lane) is summed by several warps at
// once instead of by one warp slice after slice.
template <int K>
__host__ __device__ std::int64_t row_slices(std::int64_t per_row) {
  return (per_row + 32 * K - 1) / (32 * K);
}

// A warp per (sorted entry i, slice of the row) where entry i starts a segment (its id differs from
// entry i - 1's, or i begins a chunk of kSegment entries) adds that slice of the segment's rows.
// The sum goes to the id's table row when the segment is its run's only one; otherwise to scratch
// row 2c + 1 for the run's first segment (in chunk c) or 2c for a later one (beginning chunk c).
template <class G, class W, int N, int K>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    embedding_segments_kernel(const G* __restrict__ grad_out, const std::int32_t* __restrict__ keys,
                              const std::int32_t* __restrict__ positions, std::int64_t tokens,
                              W* __restrict__ grad_weight, float* __restrict__ scratch, std::int64_t V,
                              std::int64_t C) {
  static_assert(kSegment == 32, "a segment's positions are held one a lane");
  const int lane = threadIdx.x & 31;
  const std::int64_t per_row = C / N, slices = row_slices<K>(per_row);
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
  for (std::int64_t w = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
       w < tokens * slices; w += warps) {
    const std::int64_t i = w / slices, p0 = (w - i * slices) * 32 * K;
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
    float acc[K][N];
    add_segment_rows<G, N, K>(acc, grad_out, position, n, p0, per_row, C, lane);
    if (partial)
      store_packs<float, N, K>(partial, acc, p0, per_row, lane);
    else
      store_packs<W, N, K>(grad_weight + static_cast<std::int64_t>(key) * C, acc, p0, per_row, lane);
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

// The rows of grad_weight from the index's sorted pairs, on the compute stream: the segments'
// sums, then the runs across chunks.
template <class G, class W, int N>
void sums_launch(const Tensor& grad_out, const EmbeddingIndex::State& index, const Tensor& grad_weight,
                 const Tensor& scratch, std::int64_t C) {
  const std::int64_t tokens = index.tokens, V = index.V;
  W* gw = static_cast<W*>(grad_weight.data());
  constexpr int K = kPacksPerLane;
  embedding_segments_kernel<G, W, N, K><<<warp_blocks(tokens * row_slices<K>(C / N)), 32 * kWarpsPerBlock, 0, stream()>>>(
      static_cast<const G*>(grad_out.data()), index.sorted_keys(), index.sorted_positions(), tokens, gw,
      scratch.data_as<float>(), V, C);
  check_launch();
  const std::int64_t chunks = (tokens + kSegment - 1) / kSegment, slices = (C / N + 31) / 32;
  embedding_runs_kernel<W, N><<<warp_blocks(chunks * slices), 32 * kWarpsPerBlock, 0, stream()>>>(
      index.sorted_keys(), tokens, scratch.data_as<float>(), gw, V, C);
  check_launch();
}

template <class G, class W>
void sums_typed(const Tensor& grad_out, const EmbeddingIndex::State& index, const Tensor& grad_weight,
                const Tensor& scratch, std::int64_t C) {
  constexpr int N = static_cast<int>(16 / (sizeof(G) < sizeof(W) ? sizeof(G) : sizeof(W)));
  const bool vector = C % N == 0 && aligned(grad_out.data(), pack_align<N, G>()) &&
                      aligned(grad_weight.data(), pack_align<N, W>()) &&
                      aligned(scratch.data(), pack_align<N, float>());
  if (vector)
    sums_launch<G, W, N>(grad_out, index, grad_weight, scratch, C);
  else
    sums_launch<G, W, 1>(grad_out, index, grad_weight, scratch, C);
}

// The stream the sort runs on, above the compute stream's priority, and the event that forks it
// from the compute stream. Made once and never destroyed (it may be needed until the process ends).
struct SideStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t forked = nullptr;
  SideStream() {
    int least = 0, greatest = 0;
    BMT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    BMT_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest));
    BMT_CUDA_CHECK(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming));
  }
  // The side stream waits for what is queued on the compute stream so far.
  void fork() const {
    BMT_CUDA_CHECK(cudaEventRecord(forked, cuda::stream()));
    BMT_CUDA_CHECK(cudaStreamWaitEvent(stream, forked, 0));
  }
};

SideStream& side_stream() {
  static SideStream* s = new SideStream;
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

std::shared_ptr<const EmbeddingIndex::State> embedding_index(const Tensor& ids, std::int64_t V) {
  if (!available() || !ids.is_contiguous()) return nullptr;
  const std::int64_t tokens = ids.numel();
  // Keys and positions are 32-bit.
  if (tokens == 0 || tokens > 0x7fffffff || V <= 0 || V >= 0x7fffffff) return nullptr;
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::i64) return nullptr;
  auto index = std::make_shared<EmbeddingIndex::State>(ids, V);
  std::int32_t* keys_in = index->pairs.data_as<std::int32_t>();
  std::int32_t* pos_in = keys_in + 2 * tokens;
  int end_bit = 1;
  while (end_bit < 31 && (std::int64_t(1) << end_bit) <= V) ++end_bit;  // keys are in [0, V]
  std::size_t temp_bytes = 0;
  BMT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, index->sorted_keys(), pos_in,
                                                 index->sorted_positions(), static_cast<int>(tokens), 0, end_bit));
  index->temp = Tensor::empty({static_cast<std::int64_t>(temp_bytes) + 1}, DType::u8);

  // The side stream starts after everything queued on the compute stream so far (the ids, and
  // earlier users of the memory just taken); the State's destructor makes the compute stream wait
  // for it before that memory goes back.
  const SideStream& side = side_stream();
  side.fork();
  BMT_DISPATCH_INDEX(ids.dtype(), "embedding_index", I, {
    sort_input_kernel<I><<<grid_for(tokens, 256), 256, 0, side.stream>>>(
        static_cast<const I*>(ids.data()), keys_in, pos_in, tokens, V);
  });
  check_launch();
  BMT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(index->temp.data(), temp_bytes, keys_in, index->sorted_keys(),
                                                 pos_in, index->sorted_positions(), static_cast<int>(tokens), 0,
                                                 end_bit, side.stream));
  BMT_CUDA_CHECK(cudaEventRecord(index->ready, side.stream));
  return index;
}

bool embedding_backward(const Tensor& ids, const Tensor& grad_out, const Tensor& grad_weight,
                        const EmbeddingIndex::State* index) {
  if (!available() || !contiguous_or_absent({&ids, &grad_out, &grad_weight})) return false;
  const std::int64_t V = grad_weight.size(0), C = grad_weight.size(1), tokens = ids.numel();
  if (C == 0 || tokens == 0) return false;
  std::shared_ptr<const EmbeddingIndex::State> made;
  if (!index) {
    made = embedding_index(ids, V);
    if (!made) return false;
    index = made.get();
  }
  const std::int64_t chunks = (tokens + kSegment - 1) / kSegment;
  Tensor scratch = Tensor::empty({2 * chunks, C}, DType::f32);
  // The table is zeroed while the index may still be sorting (when it was made just now), and then
  // its looked-up rows are written.
  memory::set_zero(grad_weight.data(), grad_weight.nbytes());
  BMT_CUDA_CHECK(cudaStreamWaitEvent(stream(), index->ready, 0));
  BMT_DISPATCH_FLOAT(grad_out.dtype(), "embedding_backward", G, {
    BMT_DISPATCH_FLOAT(grad_weight.dtype(), "embedding_backward", W, {
      sums_typed<G, W>(grad_out, *index, grad_weight, scratch, C);
    });
  });
  return true;
}

}  // namespace bmt::kernels::fast
