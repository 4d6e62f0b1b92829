// Reductions: sums over all elements, over one dimension, broadcast gradients back, and the
// multi-tensor inf/nan and L2-norm checks. Accumulation is f32 for every storage type, except the
// multi-tensor sum of squares, which is f64 (global_sum_squares says why).
#include "bmtrain/kernels/reduce.hpp"

#include <algorithm>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/math.hpp"
#include "bmtrain/tensor/memory.hpp"
#include "memory_bound_seam.hpp"
#include "index_math.hpp"

namespace bmt::kernels {

namespace {

using Team = Kokkos::TeamPolicy<ExecSpace>;
using ScalarF32 = Kokkos::View<float, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using ScalarF64 = Kokkos::View<double, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

std::int64_t wrap_dim(std::int64_t dim, std::int64_t ndim, const char* op) {
  const std::int64_t d = dim < 0 ? dim + ndim : dim;
  BMT_REQUIRE(d >= 0 && d < ndim, op << ": expected a dimension in [" << -ndim << ", " << ndim << "), found " << dim);
  return d;
}

// x viewed as [outer, n, inner] around dimension d.
struct Split3 {
  std::int64_t outer = 1, n = 1, inner = 1;
  Split3(const Shape& s, std::int64_t d) {
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(s.size()); ++i) {
      if (i < d) outer *= s[i];
      else if (i == d) n = s[i];
      else inner *= s[i];
    }
  }
};

// Column sums: below this many output columns, long columns are split into chunks of rows, so a
// bias gradient ([16384 tokens, 6400 features] summed over tokens) still runs on some 2^18 threads
// (a GPU needs that many loads in flight to reach its memory bandwidth).
constexpr std::int64_t kParallelColumns = 1 << 18;
constexpr std::int64_t kChunkRows = 128;

// out[o, i] = scale * sum_j x[o, j, i] (out in f32 or T); with `accumulate`, out[o, i] += that.
template <class T, class O>
void sum_middle_kernel(O* out, const T* x, Split3 s, float scale, bool accumulate = false) {
  const std::int64_t n = s.n, inner = s.inner;
  if (inner == 1) {
    // Rows: one team per row, threads share its elements.
    Kokkos::parallel_for("bmt::sum_rows", Team(space(), static_cast<int>(s.outer), Kokkos::AUTO),
                         KOKKOS_LAMBDA(const Team::member_type& team) {
                           const std::int64_t r = team.league_rank();
                           float total = 0.0f;
                           Kokkos::parallel_reduce(
                               Kokkos::TeamThreadRange(team, n),
                               [&](std::int64_t j, float& acc) { acc += to_f32(x[r * n + j]); }, total);
                           Kokkos::single(Kokkos::PerTeam(team), [&]() {
                             out[r] = from_f32<O>(scale * total + (accumulate ? to_f32(out[r]) : 0.0f));
                           });
                         });
    return;
  }
  // Columns: one thread per output element; neighbouring threads read neighbouring elements. Few
  // long columns (a bias gradient: [tokens, features] summed over tokens) would leave a GPU mostly
  // idle, so the rows are cut into chunks summed in parallel into f32 partials, then added up.
  const std::int64_t cols = s.outer * inner;
  const std::int64_t chunks = cols >= kParallelColumns || n < 2 * kChunkRows
                                  ? 1
                                  : std::min<std::int64_t>(n / kChunkRows, kParallelColumns / cols + 1);
  if (chunks == 1) {
    Kokkos::parallel_for("bmt::sum_columns", flat_range(cols), KOKKOS_LAMBDA(std::int64_t idx) {
      const std::int64_t o = idx / inner, i = idx % inner;
      const T* base = x + o * n * inner + i;
      float acc = 0.0f;
      for (std::int64_t j = 0; j < n; ++j) acc += to_f32(base[j * inner]);
      out[idx] = from_f32<O>(scale * acc + (accumulate ? to_f32(out[idx]) : 0.0f));
    });
    return;
  }
  const Tensor partial = Tensor::empty({chunks, cols}, DType::f32);
  float* p = partial.data_as<float>();
  const std::int64_t rows_per_chunk = (n + chunks - 1) / chunks;
  Kokkos::parallel_for("bmt::sum_column_chunks", flat_range(chunks * cols), KOKKOS_LAMBDA(std::int64_t idx) {
    const std::int64_t c = idx / cols, col = idx % cols, o = col / inner, i = col % inner;
    const std::int64_t begin = c * rows_per_chunk, end = begin + rows_per_chunk < n ? begin + rows_per_chunk : n;
    const T* base = x + o * n * inner + i;
    float acc = 0.0f;
    for (std::int64_t j = begin; j < end; ++j) acc += to_f32(base[j * inner]);
    p[idx] = acc;
  });
  Kokkos::parallel_for("bmt::sum_column_partials", flat_range(cols), KOKKOS_LAMBDA(std::int64_t col) {
    float acc = 0.0f;
    for (std::int64_t c = 0; c < chunks; ++c) acc += p[c * cols + col];
    out[col] = from_f32<O>(scale * acc + (accumulate ? to_f32(out[col]) : 0.0f));
  });
}

// Dimensions of a contiguous tensor split into those an output keeps and those it sums over,
// innermost first, with their strides.
struct ReducedDims {
  int kept = 0, reduced = 0;
  std::int64_t kept_size[kMaxIndexDims] = {}, kept_stride[kMaxIndexDims] = {};
  std::int64_t red_size[kMaxIndexDims] = {}, red_stride[kMaxIndexDims] = {};
  std::int64_t red_count = 1;
};

// Sums of squares or inf/nan checks over up to kTableSize tensors of one dtype in one launch.
constexpr int kTableSize = 32;
struct TensorTable {
  const void* data[kTableSize] = {};
  std::int64_t end[kTableSize] = {};  // running element count: tensor t covers [end[t-1], end[t])
  int count = 0;

  // Which tensor holds flat element i, and i's position in it.
  KOKKOS_INLINE_FUNCTION int locate(std::int64_t i, std::int64_t* local) const {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (i < end[mid]) hi = mid;
      else lo = mid + 1;
    }
    *local = i - (lo ? end[lo - 1] : 0);
    return lo;
  }
  std::int64_t total() const { return count ? end[count - 1] : 0; }
};

// Groups the tensors by dtype into tables; `keep` holds contiguous copies alive until queued work
// that reads them is ordered before their release on the compute stream.
std::vector<std::pair<DType, TensorTable>> make_tables(const std::vector<Tensor>& tensors, std::vector<Tensor>& keep,
                                                      const char* op) {
  std::vector<std::pair<DType, TensorTable>> tables;
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    TensorTable table;
    for (const Tensor& t : tensors) {
      BMT_REQUIRE(t.defined(), op << ": expected defined tensors, found an empty Tensor()");
      BMT_REQUIRE(is_floating(t.dtype()), op << ": expected floating tensors (f32, bf16, f16), found "
                                             << dtype_name(t.dtype()) << " " << to_string(t.shape()));
      if (t.dtype() != dt || t.numel() == 0) continue;
      keep.push_back(contiguous(t));
      table.data[table.count] = keep.back().data();
      table.end[table.count] = table.total() + t.numel();
      if (++table.count == kTableSize) {
        tables.emplace_back(dt, table);
        table = TensorTable();
      }
    }
    if (table.count) tables.emplace_back(dt, table);
  }
  return tables;
}

template <class T>
void flag_inf_nan_kernel(const TensorTable& table, int* flag) {
  Kokkos::parallel_for("bmt::inf_nan", flat_range(table.total()), KOKKOS_LAMBDA(std::int64_t i) {
    std::int64_t local = 0;
    const int t = table.locate(i, &local);
    // Every writer stores the same value, so the race is harmless.
    if (!kmath::isfinite(to_f32(static_cast<const T*>(table.data[t])[local]))) *flag = 1;
  });
}

// The square of an f32 value is exact in f64, so only the additions round.
template <class T>
void sum_squares_kernel(DType dtype, const TensorTable& table, double* result) {
  if (seam::sum_squares(dtype, table.data, table.end, table.count, result)) return;
  Kokkos::parallel_reduce(
      "bmt::sum_squares", flat_range(table.total()),
      KOKKOS_LAMBDA(std::int64_t i, double& acc) {
        std::int64_t local = 0;
        const int t = table.locate(i, &local);
        const double v = to_f32(static_cast<const T*>(table.data[t])[local]);
        acc += v * v;
      },
      ScalarF64(result));
}

}  // namespace

Tensor sum_all(const Tensor& x, float scale) {
  Tensor out = Tensor::empty({}, x.dtype());
  Tensor acc = Tensor::empty({}, DType::f32);
  if (x.numel() == 0) {
    fill_(out, 0.0f);
    return out;
  }
  BMT_DISPATCH_FLOAT(x.dtype(), "sum", T, {
    const T* px = view1<T>(x, "sum").data();
    float* pa = acc.data_as<float>();
    T* po = out.data_as<T>();
    Kokkos::parallel_reduce(
        "bmt::sum_all", flat_range(x.numel()), KOKKOS_LAMBDA(std::int64_t i, float& s) { s += to_f32(px[i]); },
        ScalarF32(pa));
    Kokkos::parallel_for("bmt::sum_all_store", flat_range(1),
                         KOKKOS_LAMBDA(std::int64_t) { po[0] = from_f32<T>(scale * pa[0]); });
  });
  return out;
}

Tensor sum_dim(const Tensor& x, std::int64_t dim, bool keepdim, float scale) {
  const std::int64_t d = wrap_dim(dim, x.dim(), "sum");
  Shape shape = x.shape();
  if (keepdim) shape[d] = 1;
  else shape.erase(shape.begin() + d);
  Tensor out = Tensor::empty(shape, x.dtype());
  if (out.numel() == 0) return out;
  if (x.numel() == 0) {
    fill_(out, 0.0f);
    return out;
  }
  const Split3 s(x.shape(), d);
  BMT_DISPATCH_FLOAT(x.dtype(), "sum", T, {
    sum_middle_kernel<T, T>(out.data_as<T>(), view1<T>(x, "sum").data(), s, scale);
  });
  return out;
}

void column_sums(const Tensor& x, const Tensor& out, bool accumulate) {
  const char* op = "column_sums";
  BMT_REQUIRE(x.dim() == 2, op << ": expected x of shape [rows, cols], found " << to_string(x.shape()));
  BMT_REQUIRE(out.dim() == 1 && out.size(0) == x.size(1) && out.is_contiguous() &&
                  (out.dtype() == x.dtype() || out.dtype() == DType::f32),
              op << ": expected a contiguous [" << x.size(1) << "] output in f32"
                 << (x.dtype() == DType::f32 ? "" : std::string(" or ") + dtype_name(x.dtype())) << ", found "
                 << to_string(out.shape()) << " in " << dtype_name(out.dtype()));
  if (x.numel() == 0) {
    if (!accumulate) out.zero_();
    return;
  }
  if (seam::column_sums(x, out, accumulate)) return;
  const Split3 s(x.shape(), 0);
  BMT_DISPATCH_FLOAT(x.dtype(), op, T, {
    const T* px = view1<T>(x, op).data();
    if (out.dtype() == DType::f32) sum_middle_kernel<T, float>(out.data_as<float>(), px, s, 1.0f, accumulate);
    else sum_middle_kernel<T, T>(out.data_as<T>(), px, s, 1.0f, accumulate);
  });
}

Tensor expand_dim(const Tensor& reduced, const Shape& shape, std::int64_t dim, float scale) {
  const std::int64_t d = wrap_dim(dim, static_cast<std::int64_t>(shape.size()), "expand");
  const Split3 s(shape, d);
  BMT_REQUIRE(reduced.numel() == s.outer * s.inner,
              "expand: expected " << s.outer * s.inner << " elements to stretch along dimension " << d << " of "
                                  << to_string(shape) << ", found " << to_string(reduced.shape()));
  Tensor out = Tensor::empty(shape, reduced.dtype());
  if (out.numel() == 0) return out;
  BMT_DISPATCH_FLOAT(reduced.dtype(), "expand", T, {
    const T* pr = view1<T>(reduced, "expand").data();
    T* po = out.data_as<T>();
    const std::int64_t n = s.n, inner = s.inner;
    Kokkos::parallel_for("bmt::expand_dim", flat_range(out.numel()), KOKKOS_LAMBDA(std::int64_t i) {
      const std::int64_t o = i / (n * inner), k = i % inner;
      po[i] = from_f32<T>(scale * to_f32(pr[o * inner + k]));
    });
  });
  return out;
}

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const Shape& xs = x.shape();
  const std::size_t nd = xs.size();
  BMT_REQUIRE(shape.size() <= nd, "sum_to_shape: expected a target of at most " << nd << " dimensions, found "
                                      << to_string(shape) << " for " << to_string(xs));
  Shape aligned(nd, 1);
  for (std::size_t i = 0; i < shape.size(); ++i) aligned[nd - shape.size() + i] = shape[i];
  for (std::size_t i = 0; i < nd; ++i)
    BMT_REQUIRE(aligned[i] == xs[i] || aligned[i] == 1,
                "sum_to_shape: expected " << to_string(shape) << " to broadcast to " << to_string(xs));

  // Leading dimensions stretched, the rest kept (a bias over rows): column sums.
  std::size_t lead = 0;
  while (lead < nd && aligned[lead] == 1) ++lead;
  bool suffix = true;
  for (std::size_t i = lead; i < nd; ++i) suffix = suffix && aligned[i] == xs[i];
  if (suffix) {
    std::int64_t outer = 1;
    for (std::size_t i = 0; i < lead; ++i) outer *= xs[i];
    const std::int64_t inner = x.numel() / std::max<std::int64_t>(outer, 1);
    Tensor out = sum_dim(x.view({outer, inner}), 0, false);
    return out.view(shape);
  }

  // General case: each output element sums over the stretched dimensions.
  BMT_REQUIRE(nd <= static_cast<std::size_t>(kMaxIndexDims),
              "sum_to_shape: expected at most " << kMaxIndexDims << " dimensions, found " << to_string(xs));
  Tensor out = Tensor::empty(shape, x.dtype());
  if (out.numel() == 0) return out;
  ReducedDims dims;
  std::int64_t stride = 1;
  for (std::size_t i = nd; i-- > 0;) {
    if (aligned[i] == xs[i]) {
      dims.kept_size[dims.kept] = xs[i];
      dims.kept_stride[dims.kept++] = stride;  // innermost first
    } else {
      dims.red_size[dims.reduced] = xs[i];
      dims.red_stride[dims.reduced++] = stride;
      dims.red_count *= xs[i];
    }
    stride *= xs[i];
  }
  BMT_DISPATCH_FLOAT(x.dtype(), "sum_to_shape", T, {
    const T* px = view1<T>(x, "sum_to_shape").data();
    T* po = out.data_as<T>();
    Kokkos::parallel_for("bmt::sum_to_shape", flat_range(out.numel()), KOKKOS_LAMBDA(std::int64_t o) {
      std::int64_t base = 0, rest = o;
      for (int k = 0; k < dims.kept; ++k) {
        base += (rest % dims.kept_size[k]) * dims.kept_stride[k];
        rest /= dims.kept_size[k];
      }
      float acc = 0.0f;
      for (std::int64_t r = 0; r < dims.red_count; ++r) {
        std::int64_t off = base, q = r;
        for (int k = 0; k < dims.reduced; ++k) {
          off += (q % dims.red_size[k]) * dims.red_stride[k];
          q /= dims.red_size[k];
        }
        acc += to_f32(px[off]);
      }
      po[o] = from_f32<T>(acc);
    });
  });
  return out;
}

}  // namespace bmt::kernels

namespace bmt {

Tensor inf_nan_flag(const std::vector<Tensor>& tensors) {
  using namespace kernels;
  Tensor flag = Tensor::zeros({}, DType::i32);
  std::vector<Tensor> keep;
  for (const auto& [dt, table] : make_tables(tensors, keep, "inf_nan_flag")) {
    int* f = flag.data_as<int>();
    BMT_DISPATCH_FLOAT(dt, "inf_nan_flag", T, { flag_inf_nan_kernel<T>(table, f); });
  }
  return flag;
}

bool has_inf_nan(const std::vector<Tensor>& tensors) {
  int flag = 0;
  inf_nan_flag(tensors).copy_to_host(&flag, sizeof flag);
  return flag != 0;
}

Tensor global_sum_squares(const std::vector<Tensor>& tensors) {
  using namespace kernels;
  std::vector<Tensor> keep;
  const auto tables = make_tables(tensors, keep, "global_sum_squares");
  // One f64 partial per table; there is no f64 dtype, so they live in i64 storage of the same size.
  static_assert(sizeof(double) == dtype_size(DType::i64));
  const std::int64_t count = static_cast<std::int64_t>(tables.size());
  Tensor partial = Tensor::zeros({std::max<std::int64_t>(count, 1)}, DType::i64);
  double* p = static_cast<double*>(partial.data());
  for (std::int64_t k = 0; k < count; ++k) {
    double* slot = p + k;
    BMT_DISPATCH_FLOAT(tables[k].first, "global_sum_squares", T, { sum_squares_kernel<T>(tables[k].first, tables[k].second, slot); });
  }
  Tensor sum = Tensor::empty({}, DType::f32);
  float* ps = sum.data_as<float>();
  Kokkos::parallel_for("bmt::global_sum_squares", flat_range(1), KOKKOS_LAMBDA(std::int64_t) {
    double s = 0.0;
    for (std::int64_t k = 0; k < count; ++k) s += p[k];
    ps[0] = static_cast<float>(s);
  });
  return sum;
}

Tensor global_l2_norm(const std::vector<Tensor>& tensors) {
  const Tensor sum = global_sum_squares(tensors);
  Tensor norm = Tensor::empty({}, DType::f32);
  const float* ps = sum.data_as<float>();
  float* pn = norm.data_as<float>();
  Kokkos::parallel_for("bmt::global_l2_norm", kernels::flat_range(1),
                       KOKKOS_LAMBDA(std::int64_t) { pn[0] = kmath::sqrt(ps[0]); });
  return norm;
}

}  // namespace bmt
