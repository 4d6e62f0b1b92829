// CUDA side of LayerNorm/RMSNorm (memory_bound_seam.hpp). A team of whole warps (one for forward rows up to
// 1024 elements, up to 16 for wider ones) owns a row; each thread loads its share with 16-byte
// loads and keeps it in registers, so the statistics and the normalization read x from memory
// once. A block per resident slot walks its teams' rows, each thread loading its share of the
// next row while it reduces this one. Forward keeps the rows as loaded and widens them to f32 in
// each pass: a bf16 row takes half the registers, so more rows are in flight. Row sums are f32,
// reduced by warp shuffles (and shared memory across warps) in a fixed order.
//
// Backward does dx and the weight/bias gradients in one pass over (x, dy): each thread owns the
// same columns in every row its team handles and accumulates dweight/dbias for them in registers;
// a block folds its teams' sums in team order into one partial row per block, and a second small
// kernel, launched as the first one's dependent, adds the partial rows in a fixed order. No
// atomics, so the result is the same on every run.
#include "bmtrain/runtime/cuda_check.hpp"
#include "cuda_common.hpp"
#include "memory_bound_seam.hpp"

namespace bmt::kernels::seam {

namespace {

using namespace cuda;

constexpr int kForwardValues = 32;   // elements of x a thread keeps in forward
constexpr int kBackwardValues = 16;  // ... in backward, where x, dy and two column sums are kept

// Two blocks of the widest team per multiprocessor cap a thread at 64 registers: two rows of a
// 2-byte type kept as loaded in 16-byte packs (this one and the next) fit, and blocks of 256
// threads run four to a multiprocessor.
template <class T, int kVec>
constexpr int norm_forward_min_blocks() {
  return sizeof(T) == 2 && kVec > 1 ? 2 : 1;
}

// A block per resident slot walks its rows `stride` apart. With 16-byte packs each thread starts
// loading its packs of the team's next row before reducing this one, so that two rows' loads are
// in flight through the reductions' barriers (a block that loads one row and then sits in its
// reductions leaves the memory system idle; bench_nn_kernels' LayerNormForward shows the
// difference). Element-wise packs (rows off a 16-byte boundary) load in place.
template <class T, int kVec, int kPacks, bool kCentered>
__global__ void __launch_bounds__(kMaxTeamThreads, norm_forward_min_blocks<T, kVec>())
    norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
                        float* __restrict__ mean, float* __restrict__ rstd, std::int64_t rows, int C, float eps) {
  constexpr bool kPrefetch = kVec > 1;
  __shared__ float team_scratch[kMaxTeamsPerBlock * kTeamScratchFloats];
  TeamScratch scratch(team_scratch);
  const int packs = C / kVec;
  const float inv_c = 1.0f / static_cast<float>(C);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.y;
  Raw<kVec, T> next[kPacks] = {};  // kPrefetch: the team's next row
  std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * blockDim.y;
  if (kPrefetch) load_row_packs(x, base + threadIdx.y, rows, C, next);
  // Whole teams step together (uniform trip count), since team_reduce synchronizes the team.
  for (; base < rows; base += stride) {
    const std::int64_t r = base + threadIdx.y;
    const bool active = r < rows;
    Raw<kVec, T> v[kPacks];  // the row as loaded, widened to floats where each pass uses it
    take_row_packs<kPrefetch>(x, r, stride, rows, C, v, next);
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = threadIdx.x + k * blockDim.x;
      if (active && p < packs) {
        float f[kVec];
        unpack(v[k], f);
#pragma unroll
        for (int j = 0; j < kVec; ++j) sum += f[j];
      }
    }
    float mu = 0.0f;
    if (kCentered) mu = team_reduce<SumOp>(sum, scratch) * inv_c;
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      if (active && threadIdx.x + k * blockDim.x < packs) {
        refresh(v[k]);
        float f[kVec];
        unpack(v[k], f);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const float d = f[j] - mu;
          sq += d * d;
        }
      }
    }
    const float rs = 1.0f / sqrtf(team_reduce<SumOp>(sq, scratch) * inv_c + eps);
    if (!active) continue;
    T* yr = y + r * C;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = threadIdx.x + k * blockDim.x;
      if (p >= packs) continue;
      refresh(v[k]);
      float o[kVec];
      unpack(v[k], o);
#pragma unroll
      for (int j = 0; j < kVec; ++j) o[j] = (o[j] - mu) * rs;
      if (w) {
        float wv[kVec];
        load<kVec>(w + p * kVec, wv);
#pragma unroll
        for (int j = 0; j < kVec; ++j) o[j] *= wv[j];
      }
      if (b) {
        float bv[kVec];
        load<kVec>(b + p * kVec, bv);
#pragma unroll
        for (int j = 0; j < kVec; ++j) o[j] += bv[j];
      }
      store<kVec>(yr + p * kVec, o);
    }
    if (threadIdx.x == 0) {
      if (kCentered) mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * weight, xhat = (x - mean) * rstd
// (without centering the mean(g) term drops out), added to what dx holds with add_dx;
// part_w/part_b[blockIdx.x][C] = this block's sums over its rows of dy * xhat and dy.
template <class T, int kVec, int kPacks, bool kCentered>
__global__ void __launch_bounds__(kMaxTeamThreads)
    norm_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                         const float* __restrict__ mean, const float* __restrict__ rstd, T* __restrict__ dx,
                         float* __restrict__ part_w, float* __restrict__ part_b, std::int64_t rows, int C,
                         bool add_dx) {
  allow_dependents();  // the column sums' pass
  __shared__ float team_scratch[kMaxTeamsPerBlock * kTeamScratchFloats];
  TeamScratch scratch(team_scratch);
  extern __shared__ float columns[];  // [2][C] when a block holds several teams
  const int packs = C / kVec;
  const float inv_c = 1.0f / static_cast<float>(C);
  float aw[kPacks][kVec], ab[kPacks][kVec];
#pragma unroll
  for (int k = 0; k < kPacks; ++k)
#pragma unroll
    for (int j = 0; j < kVec; ++j) aw[k][j] = ab[k][j] = 0.0f;
  // A 2-byte type's thread keeps its columns of the weight as loaded: every row uses the same ones,
  // and reloading them twice a row shows in bench_nn_kernels at GPT-2 XL's width. An f32 thread's
  // registers are full with x, dy and the column sums, so it reloads them from cache.
  constexpr bool kKeepWeight = sizeof(T) == 2;
  Raw<kVec, T> wr[kKeepWeight ? kPacks : 1] = {};
  if constexpr (kKeepWeight) {
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = threadIdx.x + k * blockDim.x;
      if (w && p < packs) load_raw(w + p * kVec, wr[k]);
    }
  }
  auto weight = [&](int k, int p, float(&wv)[kVec]) {
    if constexpr (kKeepWeight)
      unpack(wr[k], wv);
    else
      load<kVec>(w + p * kVec, wv);
  };

  // A team's rows come `stride` apart. Each thread keeps its packs of x and dy as loaded, and
  // starts loading the next row's before working on this one, so that two rows' loads are in
  // flight through the row reduction and its barrier. The next row's index and offset step along
  // rather than being multiplied out each row: fewer instructions in a loop bound by issue
  // (bench_nn_kernels' LayerNormBackwardInBlock, f32, 1600 and 2048 wide, shows it).
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.y;
  Raw<kVec, T> next_x[kPacks] = {}, next_dy[kPacks] = {};
  float next_mu = 0.0f, next_rs = 0.0f;
  std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * blockDim.y;
  std::int64_t next_r = base + threadIdx.y, next_off = next_r * C;
  auto fetch = [&] {
    if (next_r >= rows) return;
    load_team_packs(x + next_off, C, next_x);
    load_team_packs(dy + next_off, C, next_dy);
    if (kCentered) next_mu = mean[next_r];
    next_rs = rstd[next_r];
  };
  fetch();
  for (; base < rows; base += stride) {
    const std::int64_t r = next_r, off = next_off;
    const bool active = r < rows;
    Raw<kVec, T> xr[kPacks], dyr[kPacks];
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      xr[k] = next_x[k];
      dyr[k] = next_dy[k];
    }
    const float mu = next_mu, rs = next_rs;
    next_r += stride;
    next_off += stride * C;
    fetch();
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = threadIdx.x + k * blockDim.x;
      if (active && p < packs) {
        float xh[kVec], d[kVec];
        unpack(xr[k], xh);
        unpack(dyr[k], d);
        float wv[kVec];
        if (w) weight(k, p, wv);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          xh[j] = (kCentered ? xh[j] - mu : xh[j]) * rs;
          aw[k][j] += d[j] * xh[j];
          const float g = w ? d[j] * wv[j] : d[j];
          if constexpr (kCentered) {  // RMSNorm has no bias, and mean(g) drops out of its dx
            ab[k][j] += d[j];
            sum_g += g;
          }
          sum_gx += g * xh[j];
        }
      }
    }
    if (!dx) continue;  // uniform: a kernel argument
    // The values dx holds are loaded before the row's reductions, so that their latency passes
    // under the reductions' barriers instead of after them (bench_nn_kernels'
    // LayerNormBackwardInBlock). An f32 thread, or one of single elements, has no registers left
    // for them (it would spill) and loads them late.
    constexpr bool kEarlyDx = sizeof(T) == 2 && kVec > 1;
    Raw<kVec, T> dx_before[kEarlyDx ? kPacks : 1] = {};
    if constexpr (kEarlyDx) {
      if (add_dx && active) {
#pragma unroll
        for (int k = 0; k < kPacks; ++k) {
          const int p = threadIdx.x + k * blockDim.x;
          if (p < packs) load_raw(dx + off + p * kVec, dx_before[k]);
        }
      }
    }
    float mean_g = 0.0f, mean_gx = 0.0f;
    if constexpr (kCentered) {
      const float2 sums = team_sum2(sum_g, sum_gx, scratch);  // one barrier round for both
      mean_g = sums.x * inv_c;
      mean_gx = sums.y * inv_c;
    } else {
      mean_gx = team_reduce<SumOp>(sum_gx, scratch) * inv_c;
    }
    if (!active) continue;
    // dx = rs * g + (x - mean) * k_x + k_0, the row's constants taken out of the element loop: three
    // instructions an element where the formula as written takes five, in a kernel bound by
    // instruction issue at 768 wide (bench_nn_kernels' LayerNormBackward). x is centered first, as
    // in the forward, so that rows far from zero lose no precision.
    const float k_x = -(rs * mean_gx) * rs, k_0 = kCentered ? -rs * mean_g : 0.0f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = threadIdx.x + k * blockDim.x;
      if (p >= packs) continue;
      refresh(xr[k]);  // formed again from the packs rather than kept as floats through the reductions
      refresh(dyr[k]);
      float xh[kVec], g[kVec];
      unpack(xr[k], xh);
      unpack(dyr[k], g);
      if (w) {
        float wv[kVec];
        weight(k, p, wv);
#pragma unroll
        for (int j = 0; j < kVec; ++j) g[j] *= wv[j];
      }
      float o[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) o[j] = fmaf(g[j], rs, kCentered ? fmaf(xh[j] - mu, k_x, k_0) : xh[j] * k_x);
      if (add_dx) {
        float before[kVec];
        if constexpr (kEarlyDx)
          unpack(dx_before[k], before);
        else
          load<kVec>(dx + off + p * kVec, before);
#pragma unroll
        for (int j = 0; j < kVec; ++j) o[j] += before[j];
      }
      store<kVec>(dx + off + p * kVec, o);
    }
  }

  if (!part_w && !part_b) return;
  float* out_w = part_w ? part_w + static_cast<std::int64_t>(blockIdx.x) * C : nullptr;
  float* out_b = part_b ? part_b + static_cast<std::int64_t>(blockIdx.x) * C : nullptr;
  if (blockDim.y == 1) {
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int p = threadIdx.x + k * blockDim.x;
      if (p >= packs) continue;
      if (out_w) store<kVec>(out_w + p * kVec, aw[k]);
      if (out_b) store<kVec>(out_b + p * kVec, ab[k]);
    }
    return;
  }
  // Several teams: fold them into shared memory one team after another (a fixed order).
  for (int t = 0; t < static_cast<int>(blockDim.y); ++t) {
    if (threadIdx.y == t) {
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int p = threadIdx.x + k * blockDim.x;
        if (p >= packs) continue;
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          const int c = p * kVec + j;
          columns[c] = t == 0 ? aw[k][j] : columns[c] + aw[k][j];
          columns[C + c] = t == 0 ? ab[k][j] : columns[C + c] + ab[k][j];
        }
      }
    }
    __syncthreads();
  }
  for (int c = threadIdx.y * blockDim.x + threadIdx.x; c < C; c += blockDim.x * blockDim.y) {
    if (out_w) out_w[c] = columns[c];
    if (out_b) out_b[c] = columns[C + c];
  }
}

// dw[c] = the sum over parts of part_w[part][c] (blockIdx.y 0), db[c] likewise of part_b
// (blockIdx.y 1); with `accumulate` the sums are added to what dw and db hold (O is x's dtype or
// f32). A block takes 16 columns; each of its 64 lanes (threadIdx.y) adds every 64th part, and the
// lanes' sums are added in lane order: a fixed order, so the same on every run. The partial rows
// were just written and sit in L2; what costs is waiting on them, so the pass spreads them over
// many threads with several loads each in flight, where a thread walking its share of the parts
// one load at a time would make the pass a large part of the LayerNorm backward at GPT-2 small's
// width (660 partial rows). It is launched as a dependent of the backward kernel, so its blocks
// are in place as the backward's leave (bench_nn_kernels' LayerNormBackward shows both).
constexpr int kSumColumns = 16;
constexpr int kSumLanes = 64;

template <class O>
__global__ void __launch_bounds__(kSumColumns* kSumLanes)
    column_sum_kernel(const float* __restrict__ part_w, const float* __restrict__ part_b, int parts, int C,
                      O* __restrict__ dw, O* __restrict__ db, bool accumulate) {
  const float* part = blockIdx.y == 0 ? part_w : part_b;
  O* out = blockIdx.y == 0 ? dw : db;
  if (!part) return;  // the whole block: that gradient is not wanted
  __shared__ float lanes[kSumLanes][kSumColumns + 1];
  wait_for_prerequisite();  // the backward kernel's partial rows
  const int c = blockIdx.x * kSumColumns + threadIdx.x;
  float sum = 0.0f;
  if (c < C) {
#pragma unroll 4
    for (int p = threadIdx.y; p < parts; p += kSumLanes) sum += part[static_cast<std::int64_t>(p) * C + c];
  }
  lanes[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float total = 0.0f;
  for (int lane = 0; lane < kSumLanes; ++lane) total += lanes[lane][threadIdx.x];
  out[c] = from_float<O>(accumulate ? total + to_float(out[c]) : total);
}

template <class O>
void launch_column_sums(const float* part_w, const float* part_b, int parts, int C, const Tensor& dweight,
                        const Tensor& dbias, bool accumulate) {
  launch_dependent(column_sum_kernel<O>, dim3((C + kSumColumns - 1) / kSumColumns, 2), dim3(kSumColumns, kSumLanes), 0,
                   part_w, part_b, parts, C, mut_ptr_or_null<O>(dweight), mut_ptr_or_null<O>(dbias), accumulate);
}

template <class T, int kVec, bool kCentered>
bool forward_launch(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd, std::int64_t rows, int C) {
  return launch_row<kForwardValues / kVec, (kVec > 1)>(C / kVec, [&](auto packs, const RowGeometry& g) {
    constexpr int kPacks = decltype(packs)::value;
    auto kernel = norm_forward_kernel<T, kVec, kPacks, kCentered>;
    kernel<<<row_blocks(kernel, rows, g), dim3(g.threads, g.teams), 0, stream()>>>(
        static_cast<const T*>(x.data()), ptr_or_null<T>(weight), ptr_or_null<T>(bias), static_cast<T*>(y.data()),
        mut_ptr_or_null<float>(mean), static_cast<float*>(rstd.data()), rows, C, eps);
    check_launch();
    return true;
  });
}

template <class T, int kVec, bool kCentered>
bool backward_launch(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                     const Tensor& rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                     bool accumulate, bool add_dx, std::int64_t rows, int C) {
  auto launch = [&](auto packs, RowGeometry g) {
    constexpr int kPacks = decltype(packs)::value;
    // A team of four warps or more runs alone in its block, which bench_nn_kernels' norm
    // backwards show faster at 1600 and 2048 wide than two such teams a block; narrower teams keep
    // row_geometry's two or four a block, since alone they are slower.
    if (g.threads >= 128) g.teams = 1;
    auto kernel = norm_backward_kernel<T, kVec, kPacks, kCentered>;
    const bool want_columns = dweight.defined() || dbias.defined();
    const std::size_t shared = want_columns && g.teams > 1 ? 2 * static_cast<std::size_t>(C) * sizeof(float) : 0;
    // One block per resident slot: every block's column sums cost a partial row, so no more blocks
    // than fill the device once.
    const int blocks = row_blocks(kernel, rows, g, shared);
    Tensor partial = want_columns ? Tensor::empty({2, blocks, C}, DType::f32) : Tensor();
    float* pw = dweight.defined() ? partial.data_as<float>() : nullptr;
    float* pb = dbias.defined() ? partial.data_as<float>() + static_cast<std::int64_t>(blocks) * C : nullptr;
    kernel<<<blocks, dim3(g.threads, g.teams), shared, stream()>>>(
        static_cast<const T*>(dy.data()), static_cast<const T*>(x.data()), ptr_or_null<T>(weight),
        kCentered ? static_cast<const float*>(mean.data()) : nullptr, static_cast<const float*>(rstd.data()),
        mut_ptr_or_null<T>(dx), pw, pb, rows, C, add_dx);
    check_launch();
    if (want_columns) {
      if ((dweight.defined() ? dweight : dbias).dtype() == DType::f32)
        launch_column_sums<float>(pw, pb, blocks, C, dweight, dbias, accumulate);
      else
        launch_column_sums<T>(pw, pb, blocks, C, dweight, dbias, accumulate);
    }
    return true;
  };
  // A 2-byte row takes one 16-byte pack a thread instead of two where that fills a team of at most
  // four warps better: 768 wide, 96 threads with every lane busy against 64 threads a quarter of
  // whose second packs are missing. At 1600 and 2048 the one-pack teams (7 and 8 warps) are
  // slower (bench_nn_kernels' norm backwards show both).
  const std::int64_t packs = C / kVec;
  if constexpr (kVec > 1 && sizeof(T) == 2) {
    const RowGeometry one = row_geometry(packs, 1), two = row_geometry(packs, kBackwardValues / kVec);
    if (one.threads > 0 && one.threads <= 128 && one.threads < two.threads * (kBackwardValues / kVec))
      return launch_row<1, true>(packs, launch);
  }
  return launch_row<kBackwardValues / kVec, (kVec > 1)>(packs, launch);
}

template <class T, bool kCentered>
bool forward_typed(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, const Tensor& y,
                   const Tensor& mean, const Tensor& rstd, std::int64_t rows, int C) {
  constexpr int kVec = vec_of<T>();
  if (C % kVec == 0 && aligned_or_absent({&x, &weight, &bias, &y}))
    return forward_launch<T, kVec, kCentered>(x, weight, bias, eps, y, mean, rstd, rows, C);
  return forward_launch<T, 1, kCentered>(x, weight, bias, eps, y, mean, rstd, rows, C);
}

template <class T, bool kCentered>
bool backward_typed(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                    const Tensor& dx, const Tensor& dweight, const Tensor& dbias, bool accumulate, bool add_dx,
                    std::int64_t rows, int C) {
  constexpr int kVec = vec_of<T>();
  if (C % kVec == 0 && aligned_or_absent({&dy, &x, &weight, &dx}))
    return backward_launch<T, kVec, kCentered>(dy, x, weight, mean, rstd, dx, dweight, dbias, accumulate, add_dx,
                                               rows, C);
  return backward_launch<T, 1, kCentered>(dy, x, weight, mean, rstd, dx, dweight, dbias, accumulate, add_dx, rows,
                                          C);
}

// x as `rows` rows of C elements, when the statistics are f32 (mean absent for RMSNorm) and the
// rows are of a width these kernels take.
bool rows_of_norm(const Tensor& x, const Tensor& mean, const Tensor& rstd, std::int64_t& rows, std::int64_t& C) {
  if (rstd.dtype() != DType::f32 || (mean.defined() && mean.dtype() != DType::f32)) return false;
  C = x.size(-1);
  if (C <= 0 || C > (1 << 20)) return false;
  rows = x.numel() / C;
  return true;
}

}  // namespace

bool norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd) {
  if (!available() || !contiguous_or_absent({&x, &weight, &bias, &y, &mean, &rstd})) return false;
  std::int64_t rows = 0, C = 0;
  if (!rows_of_norm(x, mean, rstd, rows, C)) return false;
  const bool centered = mean.defined();
  bool done = false;
  BMT_DISPATCH_FLOAT(x.dtype(), "norm", T, {
    done = centered ? forward_typed<T, true>(x, weight, bias, eps, y, mean, rstd, rows, static_cast<int>(C))
                    : forward_typed<T, false>(x, weight, bias, eps, y, mean, rstd, rows, static_cast<int>(C));
  });
  return done;
}

bool norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                   const Tensor& dx, const Tensor& dweight, const Tensor& dbias, bool accumulate, bool add_into_dx) {
  if (!available() || !contiguous_or_absent({&dy, &x, &weight, &mean, &rstd, &dx, &dweight, &dbias})) return false;
  std::int64_t rows = 0, C = 0;
  if (!rows_of_norm(x, mean, rstd, rows, C)) return false;
  const bool centered = mean.defined();
  bool done = false;
  BMT_DISPATCH_FLOAT(x.dtype(), "norm_backward", T, {
    done = centered
               ? backward_typed<T, true>(dy, x, weight, mean, rstd, dx, dweight, dbias, accumulate, add_into_dx,
                                         rows, static_cast<int>(C))
               : backward_typed<T, false>(dy, x, weight, mean, rstd, dx, dweight, dbias, accumulate, add_into_dx,
                                          rows, static_cast<int>(C));
  });
  return done;
}

}  // namespace bmt::kernels::seam
