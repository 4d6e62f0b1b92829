// CUDA side of the embedding lookup and its gradient (memory_bound_seam.hpp).
//
// Forward is a gather: a grid-stride loop over (token, 16-byte pack of its row).
//
// Backward is deterministic, with no float atomics. It needs the token positions grouped by id: an
// EmbeddingIndex, a stable radix sort of (id, position) pairs (each id's positions stay in token
// order) and each id's run of entries in the sorted list, queued on a side stream of higher
// priority. The op makes the index at the forward, so the sort's small, latency-bound kernels run
// beside the forward's work; a backward given none makes it first. Most of the backward's traffic
// is writing the whole table gradient, mostly zeros, so one kernel writes every table row once: a
// warp per slice of a row writes zeros where no token looked the id up, and otherwise the sum of
// the id's rows of grad_out, added in order in f32 registers. The sorted list is cut into chunks of
// kSegment entries; a run that crosses a chunk's end is summed per chunk into scratch rows by the
// same kernel, and a last kernel adds those in order into the table row. So a frequent token is
// summed by many warps, and every sum's order depends on the ids alone: the result is the same on
// every run.
#include <cub/device/device_radix_sort.cuh>

#include "cuda_common.hpp"
#include "memory_bound_seam.hpp"

namespace bmt::kernels {

// An EmbeddingIndex on the CUDA build: the sorted pairs, and the event that marks them written on
// the side stream.
struct EmbeddingIndex::State {
  std::int64_t tokens, V;
  Tensor ids;    // held until the side stream has read them
  Tensor pairs;  // [4, tokens] i32: keys as read, keys sorted, positions as read, positions sorted
  Tensor runs;   // [V, 2] i32: id v's entries in the sorted list are runs[v][0] .. runs[v][1] - 1
  Tensor temp;   // the sort's
  cudaEvent_t ready = nullptr;

  State(const Tensor& ids, std::int64_t V)
      : tokens(ids.numel()),
        V(V),
        ids(ids),
        pairs(Tensor::empty({4, tokens}, DType::i32)),
        runs(Tensor::empty({V, 2}, DType::i32)) {
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
  int2* id_runs() const { return static_cast<int2*>(runs.data()); }
};

}  // namespace bmt::kernels

namespace bmt::kernels::seam {

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

// runs[v] = {first, end} of id v's entries in the sorted list; ids no token looked up keep the
// {0, 0} they were set to.
__global__ void run_bounds_kernel(const std::int32_t* __restrict__ keys, int2* __restrict__ runs,
                                  std::int64_t tokens, std::int64_t V) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < tokens;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int32_t key = keys[i];
    if (key >= V) continue;
    if (i == 0 || keys[i - 1] != key) runs[key].x = static_cast<std::int32_t>(i);
    if (i == tokens - 1 || keys[i + 1] != key) runs[key].y = static_cast<std::int32_t>(i + 1);
  }
}

constexpr int kSegment = 32;  // sorted entries per chunk; a segment never crosses a chunk's end
constexpr int kWarpsPerBlock = 8;
// Packs of a row a lane writes per warp item: a row's slices of 32 * kPacksPerLane packs go to
// different warps. bench_nn_kernels' EmbeddingBackwardIndexed shows 2 ahead of 4 at 768 wide and
// even at 1600, and 1 behind both.
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

// Whether a run of sorted entries first .. end - 1 crosses the end of a chunk.
__device__ __forceinline__ bool crosses_chunks(int2 run) { return run.x / kSegment != (run.y - 1) / kSegment; }

// dst's slice p0 = the sum of the segment's n rows of grad_out; lane q holds the segment's q-th
// position.
template <class G, class D, int N, int K>
__device__ __forceinline__ void sum_segment(D* __restrict__ dst, const G* __restrict__ grad_out,
                                            std::int32_t position, int n, std::int64_t p0, std::int64_t per_row,
                                            std::int64_t C, int lane) {
  float acc[K][N];
  add_segment_rows<G, N, K>(acc, grad_out, position, n, p0, per_row, C, lane);
  store_packs<D, N, K>(dst, acc, p0, per_row, lane);
}

// Warp items are (table row v, slice of the row), then (chunk c, slice). Row v's slice gets zeros
// when no token looked v up, the sum of v's rows of grad_out when its run of sorted entries lies in
// one chunk, and nothing when the run crosses a chunk's end (embedding_runs_kernel writes it then).
// Chunk c's slice takes the segments of such runs inside the chunk: the one that began before the
// chunk (to scratch row 2c) and the one that begins in it and goes on past its end (row 2c + 1).
// A warp's items form a pipeline: while it adds an item's rows it holds the next item's positions
// and loads the run of the one after, so a looked-up row waits for one load, not three in a row.
template <class G, class W, int N, int K>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    embedding_table_kernel(const G* __restrict__ grad_out, const std::int32_t* __restrict__ keys,
                           const std::int32_t* __restrict__ positions, const int2* __restrict__ runs,
                           std::int64_t tokens, W* __restrict__ grad_weight, float* __restrict__ scratch,
                           std::int64_t V, std::int64_t C) {
  static_assert(kSegment == 32, "a segment's positions are held one a lane");
  const int lane = threadIdx.x & 31;
  const std::int64_t per_row = C / N, slices = row_slices<K>(per_row);
  const std::int64_t chunks = (tokens + kSegment - 1) / kSegment, items = (V + chunks) * slices;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock;
  // The run of item w's table row ({0, 0} past the rows); the lane's position in a run the item sums.
  auto run_of = [&](std::int64_t w) { return w < V * slices ? runs[w / slices] : int2{0, 0}; };
  auto position_in = [&](int2 run) {
    const int n = run.y - run.x;
    return lane < n && !crosses_chunks(run) ? positions[run.x + lane] : 0;
  };
  std::int64_t w = static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  int2 next = run_of(w);
  std::int32_t next_position = position_in(next);
  int2 after = run_of(w + warps);
  for (; w < items; w += warps) {
    const int2 run = next;
    const std::int32_t position = next_position;
    next = after;
    next_position = position_in(next);
    after = run_of(w + 2 * warps);
    const std::int64_t item = w / slices, p0 = (w - item * slices) * 32 * K;
    if (item < V) {
      const int n = run.y - run.x;
      if (n > 0 && crosses_chunks(run)) continue;
      sum_segment<G, W, N, K>(grad_weight + item * C, grad_out, position, n, p0, per_row, C, lane);
      continue;
    }
    const std::int64_t c = item - V, first = c * kSegment;
    const std::int64_t chunk_end = first + kSegment < tokens ? first + kSegment : tokens;
    const std::int32_t head_key = keys[first], tail_key = keys[chunk_end - 1];
    const bool from_before = first > 0 && head_key < V && keys[first - 1] == head_key;
    const bool goes_on = chunk_end < tokens && tail_key < V && keys[chunk_end] == tail_key;
    const std::int64_t j = first + lane;
    if (from_before) {
      const unsigned other = __ballot_sync(0xffffffffu, j >= chunk_end || keys[j] != head_key);
      const int n = other ? __ffs(other) - 1 : kSegment;
      sum_segment<G, float, N, K>(scratch + 2 * c * C, grad_out, lane < n ? positions[j] : 0, n, p0, per_row, C,
                                  lane);
    }
    if (goes_on && !(from_before && head_key == tail_key)) {
      const unsigned same = __ballot_sync(0xffffffffu, j < chunk_end && keys[j] == tail_key);
      const int start = __ffs(same) - 1, n = static_cast<int>(chunk_end - first) - start;
      sum_segment<G, float, N, K>(scratch + (2 * c + 1) * C, grad_out, lane < n ? positions[j + start] : 0, n, p0,
                                  per_row, C, lane);
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

// Every row of grad_weight from the index, on the compute stream: the table's rows and the chunks'
// segments of runs that cross chunks, then those runs' sums.
template <class G, class W, int N>
void sums_launch(const Tensor& grad_out, const EmbeddingIndex::State& index, const Tensor& grad_weight,
                 const Tensor& scratch, std::int64_t C) {
  const std::int64_t tokens = index.tokens, V = index.V;
  W* gw = static_cast<W*>(grad_weight.data());
  constexpr int K = kPacksPerLane;
  const std::int64_t chunks = (tokens + kSegment - 1) / kSegment;
  auto table = embedding_table_kernel<G, W, N, K>;
  const int blocks = std::min(warp_blocks((V + chunks) * row_slices<K>(C / N)),
                              resident_blocks(table, 32 * kWarpsPerBlock, 0));
  table<<<blocks, 32 * kWarpsPerBlock, 0, stream()>>>(static_cast<const G*>(grad_out.data()), index.sorted_keys(),
                                                      index.sorted_positions(), index.id_runs(), tokens, gw,
                                                      scratch.data_as<float>(), V, C);
  check_launch();
  const std::int64_t slices = (C / N + 31) / 32;
  embedding_runs_kernel<W, N><<<warp_blocks(chunks * slices), 32 * kWarpsPerBlock, 0, stream()>>>(
      index.sorted_keys(), tokens, scratch.data_as<float>(), gw, V, C);
  check_launch();
}

template <class G, class W>
void sums_typed(const Tensor& grad_out, const EmbeddingIndex::State& index, const Tensor& grad_weight,
                const Tensor& scratch, std::int64_t C) {
  // A lane's pack is 16 bytes of the table gradient, so that a warp's stores fill whole sectors
  // (with 16-byte packs of a bf16 grad_out, an f32 table's lanes would store 32 bytes apart, each
  // store half a sector, keeping the L2 busier than the DRAM).
  constexpr int N = static_cast<int>(16 / sizeof(W));
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
  BMT_CUDA_CHECK(cudaMemsetAsync(index->runs.data(), 0, index->runs.nbytes(), side.stream));
  run_bounds_kernel<<<grid_for(tokens, 256), 256, 0, side.stream>>>(index->sorted_keys(), index->id_runs(), tokens,
                                                                    V);
  check_launch();
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
  BMT_CUDA_CHECK(cudaStreamWaitEvent(stream(), index->ready, 0));
  BMT_DISPATCH_FLOAT(grad_out.dtype(), "embedding_backward", G, {
    BMT_DISPATCH_FLOAT(grad_weight.dtype(), "embedding_backward", W, {
      sums_typed<G, W>(grad_out, *index, grad_weight, scratch, C);
    });
  });
  return true;
}

}  // namespace bmt::kernels::seam
