// Forward: one team per row (max, f32 sum of exp, logsumexp, the row's loss), then one team folds
// the per-row losses into the mean in a fixed order (deterministic, no atomics, no host round trip).
// Backward: one team per row writes (exp(x - lse) - onehot) * grad / count (the vocabulary-parallel
// backward's kernel, with the whole vocabulary as its part).
#include "bmtrain/kernels/cross_entropy.hpp"
#include "bmtrain/kernels/vocab_parallel_cross_entropy.hpp"

#include "memory_bound_seam.hpp"
#include "row_reduce.hpp"

namespace bmt::kernels {

namespace {

struct CeShape {
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
};

CeShape check_shapes(const Tensor& logits, const Tensor& targets, const char* op) {
  BMT_REQUIRE(logits.defined() && logits.dim() >= 1, op << ": expected logits with at least one dimension");
  BMT_REQUIRE(targets.defined(), op << ": expected a targets tensor");
  CeShape s;
  s.vocab = logits.size(-1);
  BMT_REQUIRE(s.vocab > 0, op << ": expected logits with a non-empty last dimension, found shape "
                              << to_string(logits.shape()));
  s.rows = logits.numel() / s.vocab;
  Shape rows_shape = logits.shape();
  rows_shape.pop_back();
  BMT_REQUIRE(targets.numel() == s.rows && (targets.shape() == rows_shape || targets.dim() == 1),
              op << ": expected targets of shape " << to_string(rows_shape) << " for logits of shape "
                 << to_string(logits.shape()) << ", found " << to_string(targets.shape()));
  BMT_REQUIRE(targets.is_contiguous(), op << ": expected contiguous targets");
  return s;
}

template <class T, class I>
void forward_kernel(const Tensor& logits, const Tensor& targets, std::int64_t ignore, const Tensor& lse,
                    const Tensor& loss, const Tensor& count, BadIndexRecord bad, CeShape s) {
  const char* op = "cross_entropy";
  const std::int64_t V = s.vocab;
  const std::int64_t N = s.rows;
  const T* xp = view1<T>(logits, op).data();
  const I* tp = view1<I>(targets, op).data();
  float* lsep = view1<float>(lse, op).data();
  Tensor per_row = Tensor::empty({2, N}, DType::f32);  // loss and 1/0 "counts" per row
  float* row_loss = per_row.data_as<float>();
  float* row_count = row_loss + N;
  Kokkos::parallel_for(
      "bmt::cross_entropy", row_policy(N, op), KOKKOS_LAMBDA(const Team& team) {
        const std::int64_t r = team.league_rank();
        const T* xr = xp + r * V;
        const float m = team_max(team, V, [&](std::int64_t j) { return to_f32(xr[j]); });
        const float sum = team_sum(team, V, [&](std::int64_t j) { return kmath::exp(to_f32(xr[j]) - m); });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          const float log_sum = kmath::log(sum);
          lsep[r] = m + log_sum;
          const std::int64_t t = static_cast<std::int64_t>(tp[r]);
          const bool in_range = t >= 0 && t < V;
          if (!in_range && t != ignore) bad.record(r, t);
          row_loss[r] = in_range && t != ignore ? (m - to_f32(xr[t])) + log_sum : 0.0f;  // no cancellation of m
          row_count[r] = in_range && t != ignore ? 1.0f : 0.0f;
        });
      });
  float* lossp = view1<float>(loss, op).data();
  float* countp = view1<float>(count, op).data();
  Kokkos::parallel_for(
      "bmt::cross_entropy_mean", TeamPolicy(space(), 1, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const float total = team_sum(team, N, [&](std::int64_t r) { return row_loss[r]; });
        const float n = team_sum(team, N, [&](std::int64_t r) { return row_count[r]; });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          countp[0] = n;
          lossp[0] = n > 0.0f ? total / n : 0.0f;
        });
      });
}

void check_scalar(const Tensor& t, const char* what, const char* op) {
  BMT_REQUIRE(t.defined() && t.numel() == 1 && t.dtype() == DType::f32,
              op << ": expected " << what << " to be an f32 scalar, found "
                 << (t.defined() ? dtype_name(t.dtype()) + std::string(" ") + to_string(t.shape()) : "none"));
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index, const Tensor& lse,
                           const Tensor& loss, const Tensor& count, BadIndexRecord bad) {
  const char* op = "cross_entropy";
  const CeShape s = check_shapes(logits, targets, op);
  BMT_REQUIRE(lse.defined() && lse.numel() == s.rows, op << ": expected lse with " << s.rows << " elements");
  check_scalar(loss, "loss", op);
  check_scalar(count, "count", op);
  if (s.rows == 0) {
    loss.zero_();
    count.zero_();
    return;
  }
  if (seam::cross_entropy_forward(logits, targets, ignore_index, lse, loss, count, bad)) return;
  BMT_DISPATCH_FLOAT(logits.dtype(), op, T, {
    BMT_DISPATCH_INDEX(targets.dtype(), op, I,
                       { forward_kernel<T, I>(logits, targets, ignore_index, lse, loss, count, bad, s); });
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                            const Tensor& lse, const Tensor& count, const Tensor& grad_loss, const Tensor& dlogits) {
  const char* op = "cross_entropy_backward";
  const CeShape s = check_shapes(logits, targets, op);
  check_scalar(count, "count", op);
  check_scalar(grad_loss, "the loss gradient", op);
  check_same_shape(dlogits, logits, op);
  check_dtype(dlogits, logits.dtype(), op);
  if (s.rows == 0) return;
  if (seam::cross_entropy_backward(logits, targets, ignore_index, lse, count, grad_loss, dlogits)) return;
  // The portable kernel is the vocabulary-parallel one's, the whole vocabulary being the one part.
  vocab_part_backward(logits.view({s.rows, s.vocab}), targets.view({s.rows}), 0, s.vocab, ignore_index, lse, count,
                      grad_loss, dlogits.view({s.rows, s.vocab}));
}

void count_targets(const Tensor& targets, std::int64_t vocab, std::int64_t ignore_index, const Tensor& count) {
  const char* op = "count_targets";
  BMT_REQUIRE(targets.defined() && targets.is_contiguous(),
              op << ": expected contiguous targets, found "
                 << (targets.defined() ? "strided " + to_string(targets.shape()) : std::string("none")));
  check_scalar(count, "count", op);
  const std::int64_t N = targets.numel();
  float* countp = view1<float>(count, op).data();
  BMT_DISPATCH_INDEX(targets.dtype(), op, I, {
    const I* tp = targets.data_as<I>();
    // One team sums the rows' 1/0 in a fixed order, as the forward's mean does.
    Kokkos::parallel_for(
        "bmt::count_targets", TeamPolicy(space(), 1, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
          const float n = team_sum(team, N, [&](std::int64_t r) {
            const std::int64_t t = static_cast<std::int64_t>(tp[r]);
            return t >= 0 && t < vocab && t != ignore_index ? 1.0f : 0.0f;
          });
          Kokkos::single(Kokkos::PerTeam(team), [&]() { countp[0] = n; });
        });
  });
}

void scale_by_grad_loss(const Tensor& grad, const Tensor& grad_loss, const Tensor& out, bool accumulate) {
  const char* op = "scale_by_grad_loss";
  BMT_REQUIRE(grad.defined() && grad.dtype() == DType::f32 && grad.is_contiguous(),
              op << ": expected a contiguous f32 gradient, found "
                 << (grad.defined() ? dtype_name(grad.dtype()) + std::string(" ") + to_string(grad.shape()) : "none"));
  BMT_REQUIRE(out.defined() && out.is_contiguous() && out.numel() == grad.numel(),
              op << ": expected a contiguous output of " << grad.numel() << " elements, found "
                 << (out.defined() ? to_string(out.shape()) : "none"));
  check_scalar(grad_loss, "grad_loss", op);
  const std::int64_t n = grad.numel();
  if (n == 0) return;
  const float* gp = grad.data_as<float>();
  const float* sp = grad_loss.data_as<float>();
  BMT_DISPATCH_FLOAT(out.dtype(), op, T, {
    T* outp = out.data_as<T>();
    Kokkos::parallel_for(
        "bmt::scale_by_grad_loss", Kokkos::RangePolicy<ExecSpace>(space(), 0, n), KOKKOS_LAMBDA(std::int64_t i) {
          const float v = sp[0] * gp[i];
          outp[i] = from_f32<T>(accumulate ? to_f32(outp[i]) + v : v);
        });
  });
}

void cross_entropy_combine(const Tensor& parts, const Tensor& loss, const Tensor& count) {
  const char* op = "cross_entropy_combine";
  BMT_REQUIRE(parts.defined() && parts.dim() == 2 && parts.size(1) == 2 && parts.dtype() == DType::f32 &&
                  parts.is_contiguous(),
              op << ": expected contiguous f32 parts [chunks, 2], found "
                 << (parts.defined() ? dtype_name(parts.dtype()) + std::string(" ") + to_string(parts.shape()) : "none"));
  check_scalar(loss, "loss", op);
  check_scalar(count, "count", op);
  const std::int64_t chunks = parts.size(0);
  const float* pp = parts.data_as<float>();
  float* lossp = view1<float>(loss, op).data();
  float* countp = view1<float>(count, op).data();
  // A handful of chunks: one thread folds them in order (the result does not depend on the device).
  Kokkos::parallel_for(
      "bmt::cross_entropy_combine", Kokkos::RangePolicy<ExecSpace>(space(), 0, 1), KOKKOS_LAMBDA(int) {
        float total = 0.0f, n = 0.0f;
        for (std::int64_t c = 0; c < chunks; ++c) {
          total += pp[2 * c] * pp[2 * c + 1];
          n += pp[2 * c + 1];
        }
        countp[0] = n;
        lossp[0] = n > 0.0f ? total / n : 0.0f;
      });
}

}  // namespace bmt::kernels
