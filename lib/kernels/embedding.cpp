// One team per looked-up row: the threads of a team copy (forward) or atomically add (backward) the
// C values of that row, so memory accesses along a row are contiguous on every backend. The CUDA
// build takes contiguous calls to embedding_cuda.cpp first, whose backward has no atomics (the same
// sums on every run).
#include "bmtrain/kernels/embedding.hpp"

#include "bmtrain/kernels/basic.hpp"
#include "memory_bound_seam.hpp"
#include "row_reduce.hpp"

namespace bmt::kernels {

namespace {

void check_weight(const Tensor& weight, const char* what, const char* op) {
  BMT_REQUIRE(weight.defined() && weight.dim() == 2, op << ": expected " << what << " of shape [V, C], found "
                                                        << (weight.defined() ? to_string(weight.shape()) : "none"));
  BMT_REQUIRE(is_floating(weight.dtype()), op << ": expected a floating " << what << ", found "
                                              << dtype_name(weight.dtype()));
}

template <class T, class I>
void forward_kernel(const Tensor& ids, const Tensor& weight, const Tensor& out, BadIndexRecord bad) {
  const char* op = "embedding";
  const std::int64_t V = weight.size(0), C = weight.size(1);
  const I* idp = view1<I>(ids, op).data();
  const T* wp = view1<T>(weight, op).data();
  T* outp = view1<T>(out, op).data();
  Kokkos::parallel_for(
      "bmt::embedding", row_policy(ids.numel(), op), KOKKOS_LAMBDA(const Team& team) {
        const std::int64_t n = team.league_rank();
        const std::int64_t id = static_cast<std::int64_t>(idp[n]);
        const bool ok = id >= 0 && id < V;
        if (!ok) Kokkos::single(Kokkos::PerTeam(team), [&]() { bad.record(n, id); });
        const T* src = wp + (ok ? id : 0) * C;
        T* dst = outp + n * C;
        const T zero = from_f32<T>(0.0f);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C), [&](std::int64_t c) { dst[c] = ok ? src[c] : zero; });
      });
}

template <class G, class I>
void backward_kernel(const Tensor& ids, const Tensor& grad_out, float* acc, std::int64_t V, std::int64_t C) {
  const char* op = "embedding_backward";
  const I* idp = view1<I>(ids, op).data();
  const G* gp = view1<G>(grad_out, op).data();
  Kokkos::parallel_for(
      "bmt::embedding_backward", row_policy(ids.numel(), op), KOKKOS_LAMBDA(const Team& team) {
        const std::int64_t n = team.league_rank();
        const std::int64_t id = static_cast<std::int64_t>(idp[n]);
        if (id < 0 || id >= V) return;
        const G* src = gp + n * C;
        float* dst = acc + id * C;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, C),
                             [&](std::int64_t c) { Kokkos::atomic_add(&dst[c], to_f32(src[c])); });
      });
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& weight, const Tensor& out, BadIndexRecord bad) {
  const char* op = "embedding";
  check_weight(weight, "weight", op);
  BMT_REQUIRE(ids.defined(), op << ": expected an ids tensor");
  BMT_REQUIRE(out.defined() && out.numel() == ids.numel() * weight.size(1) && out.dtype() == weight.dtype(),
              op << ": expected an output of " << ids.numel() * weight.size(1) << " " << dtype_name(weight.dtype())
                 << " elements");
  if (out.numel() == 0) return;
  if (seam::embedding_forward(ids, weight, out, bad)) return;
  BMT_DISPATCH_FLOAT(weight.dtype(), op, T, {
    BMT_DISPATCH_INDEX(ids.dtype(), op, I, { forward_kernel<T, I>(ids, weight, out, bad); });
  });
}

Tensor ids_from(const Tensor& ids, std::int64_t first) {
  const char* op = "ids_from";
  BMT_REQUIRE(ids.defined() && (ids.dtype() == DType::i32 || ids.dtype() == DType::i64),
              op << ": expected i32 or i64 ids, found " << (ids.defined() ? dtype_name(ids.dtype()) : "none"));
  const Tensor src = contiguous(ids);
  Tensor out = Tensor::empty(src.shape(), src.dtype());
  if (src.numel() == 0) return out;
  BMT_DISPATCH_INDEX(src.dtype(), op, I, {
    const I* in = view1<I>(src, op).data();
    I* dst = view1<I>(out, op).data();
    Kokkos::parallel_for(
        "bmt::ids_from", Kokkos::RangePolicy<ExecSpace>(space(), 0, static_cast<std::size_t>(src.numel())),
        KOKKOS_LAMBDA(std::size_t i) { dst[i] = static_cast<I>(in[i] - first); });
  });
  return out;
}

EmbeddingIndex embedding_index(const Tensor& ids, std::int64_t V) {
  const char* op = "embedding_index";
  BMT_REQUIRE(ids.defined(), op << ": expected an ids tensor");
  BMT_REQUIRE(ids.dtype() == DType::i32 || ids.dtype() == DType::i64,
              op << ": expected i32 or i64 ids, found " << dtype_name(ids.dtype()));
  BMT_REQUIRE(V > 0, op << ": expected a table of at least one row, found " << V);
  return EmbeddingIndex(ids.numel(), V, seam::embedding_index(ids, V));
}

void embedding_backward(const Tensor& ids, const Tensor& grad_out, const Tensor& grad_weight,
                        const EmbeddingIndex& index) {
  const char* op = "embedding_backward";
  check_weight(grad_weight, "weight gradient", op);
  BMT_REQUIRE(ids.defined(), op << ": expected an ids tensor");
  const std::int64_t V = grad_weight.size(0), C = grad_weight.size(1);
  BMT_REQUIRE(grad_out.defined() && grad_out.numel() == ids.numel() * C && is_floating(grad_out.dtype()),
              op << ": expected a floating output gradient of " << ids.numel() * C << " elements");
  BMT_REQUIRE(!index.defined() || (index.tokens() == ids.numel() && index.vocabulary() == V),
              op << ": expected an index of " << ids.numel() << " ids into " << V << " rows, found one of "
                 << index.tokens() << " ids into " << index.vocabulary() << " rows");
  if (seam::embedding_backward(ids, grad_out, grad_weight, index.state())) return;
  const bool direct = grad_weight.dtype() == DType::f32;
  const Tensor acc = direct ? grad_weight : Tensor::empty(grad_weight.shape(), DType::f32);
  view1<float>(acc, op);  // contiguity check
  acc.zero_();
  if (ids.numel() > 0 && C > 0) {
    BMT_DISPATCH_FLOAT(grad_out.dtype(), op, G, {
      BMT_DISPATCH_INDEX(ids.dtype(), op, I, { backward_kernel<G, I>(ids, grad_out, acc.data_as<float>(), V, C); });
    });
  }
  if (!direct) copy_into(grad_weight, acc);
}

}  // namespace bmt::kernels
