// One team per row for the steps that read a row of logits (its part's max, its part's sum of
// exponentials and target logit, its gradient), as cross_entropy.cpp does; the loss folds the rows in
// a fixed order in one team (deterministic, no atomics, no host round trip).
#include "bmtrain/kernels/vocab_parallel_cross_entropy.hpp"

#include "row_reduce.hpp"

namespace bmt::kernels {

namespace {

struct PartShape {
  std::int64_t rows = 0;
  std::int64_t part = 0;  // the part's vocabulary columns
};

PartShape check_logits(const Tensor& logits, const Tensor& targets, const char* op) {
  BMT_REQUIRE(logits.defined() && logits.dim() == 2 && logits.size(1) > 0 && logits.is_contiguous(),
              op << ": expected contiguous logits [n, Vp] with Vp > 0, found "
                 << (logits.defined() ? to_string(logits.shape()) : "none"));
  BMT_REQUIRE(targets.defined() && targets.is_contiguous() && targets.numel() == logits.size(0),
              op << ": expected " << logits.size(0) << " contiguous targets, found "
                 << (targets.defined() ? to_string(targets.shape()) : "none"));
  return {logits.size(0), logits.size(1)};
}

void check_f32(const Tensor& t, std::int64_t numel, const char* what, const char* op) {
  BMT_REQUIRE(t.defined() && t.dtype() == DType::f32 && t.is_contiguous() && t.numel() == numel,
              op << ": expected " << what << " of " << numel << " contiguous f32 elements, found "
                 << (t.defined() ? dtype_name(t.dtype()) + std::string(" ") + to_string(t.shape()) : "none"));
}

KOKKOS_INLINE_FUNCTION bool counts(std::int64_t t, std::int64_t vocab, std::int64_t ignore) {
  return t >= 0 && t < vocab && t != ignore;
}

}  // namespace

void vocab_part_max(const Tensor& logits, const Tensor& row_max) {
  const char* op = "vocab_part_max";
  BMT_REQUIRE(logits.defined() && logits.dim() == 2 && logits.is_contiguous(),
              op << ": expected contiguous logits [n, Vp], found " << (logits.defined() ? to_string(logits.shape()) : "none"));
  const std::int64_t n = logits.size(0), Vp = logits.size(1);
  check_f32(row_max, n, "row maxima", op);
  if (n == 0) return;
  float* mp = row_max.data_as<float>();
  BMT_DISPATCH_FLOAT(logits.dtype(), op, T, {
    const T* xp = view1<T>(logits, op).data();
    Kokkos::parallel_for(
        "bmt::vocab_part_max", row_policy(n, op), KOKKOS_LAMBDA(const Team& team) {
          const std::int64_t r = team.league_rank();
          const T* xr = xp + r * Vp;
          const float m = team_max(team, Vp, [&](std::int64_t j) { return to_f32(xr[j]); });
          Kokkos::single(Kokkos::PerTeam(team), [&]() { mp[r] = m; });
        });
  });
}

void vocab_part_sums(const Tensor& logits, const Tensor& targets, std::int64_t first, const Tensor& row_max,
                     const Tensor& stats) {
  const char* op = "vocab_part_sums";
  const PartShape s = check_logits(logits, targets, op);
  check_f32(row_max, s.rows, "row maxima", op);
  check_f32(stats, 2 * s.rows, "stats", op);
  if (s.rows == 0) return;
  const std::int64_t n = s.rows, Vp = s.part;
  const float* mp = row_max.data_as<float>();
  float* sums = stats.data_as<float>();
  float* target_logits = sums + n;
  BMT_DISPATCH_FLOAT(logits.dtype(), op, T, {
    BMT_DISPATCH_INDEX(targets.dtype(), op, I, {
      const T* xp = view1<T>(logits, op).data();
      const I* tp = view1<I>(targets, op).data();
      Kokkos::parallel_for(
          "bmt::vocab_part_sums", row_policy(n, op), KOKKOS_LAMBDA(const Team& team) {
            const std::int64_t r = team.league_rank();
            const T* xr = xp + r * Vp;
            const float m = mp[r];
            const float sum = team_sum(team, Vp, [&](std::int64_t j) { return kmath::exp(to_f32(xr[j]) - m); });
            Kokkos::single(Kokkos::PerTeam(team), [&]() {
              const std::int64_t local = static_cast<std::int64_t>(tp[r]) - first;
              sums[r] = sum;
              target_logits[r] = local >= 0 && local < Vp ? to_f32(xr[local]) : 0.0f;
            });
          });
    });
  });
}

void vocab_parallel_loss(const Tensor& targets, std::int64_t vocab, std::int64_t ignore_index, const Tensor& row_max,
                         const Tensor& stats, const Tensor& lse, const Tensor& loss, const Tensor& count,
                         BadIndexRecord bad) {
  const char* op = "vocab_parallel_loss";
  BMT_REQUIRE(targets.defined() && targets.is_contiguous(), op << ": expected contiguous targets");
  const std::int64_t n = targets.numel();
  check_f32(row_max, n, "row maxima", op);
  check_f32(stats, 2 * n, "stats", op);
  check_f32(lse, n, "lse", op);
  check_f32(loss, 1, "loss", op);
  check_f32(count, 1, "count", op);
  if (n == 0) {
    loss.zero_();
    count.zero_();
    return;
  }
  const float* mp = row_max.data_as<float>();
  const float* sums = stats.data_as<float>();
  const float* target_logits = sums + n;
  float* lsep = lse.data_as<float>();
  Tensor per_row = Tensor::empty({2, n}, DType::f32);  // loss and 1/0 "counts" per row
  float* row_loss = per_row.data_as<float>();
  float* row_count = row_loss + n;
  const std::int64_t ignore = ignore_index;
  BMT_DISPATCH_INDEX(targets.dtype(), op, I, {
    const I* tp = view1<I>(targets, op).data();
    Kokkos::parallel_for(
        "bmt::vocab_parallel_loss_rows", Kokkos::RangePolicy<ExecSpace>(space(), 0, static_cast<std::size_t>(n)),
        KOKKOS_LAMBDA(std::size_t r) {
          const float log_sum = kmath::log(sums[r]);
          lsep[r] = mp[r] + log_sum;
          const std::int64_t t = static_cast<std::int64_t>(tp[r]);
          const bool counted = counts(t, vocab, ignore);
          if (!counted && t != ignore) bad.record(static_cast<std::int64_t>(r), t);
          row_loss[r] = counted ? (mp[r] - target_logits[r]) + log_sum : 0.0f;  // no cancellation of the max
          row_count[r] = counted ? 1.0f : 0.0f;
        });
  });
  float* lossp = loss.data_as<float>();
  float* countp = count.data_as<float>();
  Kokkos::parallel_for(
      "bmt::vocab_parallel_loss_mean", TeamPolicy(space(), 1, Kokkos::AUTO), KOKKOS_LAMBDA(const Team& team) {
        const float total = team_sum(team, n, [&](std::int64_t r) { return row_loss[r]; });
        const float rows = team_sum(team, n, [&](std::int64_t r) { return row_count[r]; });
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          countp[0] = rows;
          lossp[0] = rows > 0.0f ? total / rows : 0.0f;
        });
      });
}

void vocab_part_backward(const Tensor& logits, const Tensor& targets, std::int64_t first, std::int64_t vocab,
                         std::int64_t ignore_index, const Tensor& lse, const Tensor& count, const Tensor& grad_loss,
                         const Tensor& dlogits) {
  const char* op = "vocab_part_backward";
  const PartShape s = check_logits(logits, targets, op);
  check_f32(lse, s.rows, "lse", op);
  check_f32(count, 1, "count", op);
  check_f32(grad_loss, 1, "the loss gradient", op);
  BMT_REQUIRE(dlogits.defined() && dlogits.shape() == logits.shape() && dlogits.dtype() == logits.dtype() &&
                  dlogits.is_contiguous(),
              op << ": expected contiguous dlogits like the logits " << to_string(logits.shape()));
  if (s.rows == 0) return;
  const std::int64_t Vp = s.part, ignore = ignore_index;
  const float* lsep = lse.data_as<float>();
  const float* countp = count.data_as<float>();
  const float* gp = grad_loss.data_as<float>();
  BMT_DISPATCH_FLOAT(logits.dtype(), op, T, {
    BMT_DISPATCH_INDEX(targets.dtype(), op, I, {
      const T* xp = view1<T>(logits, op).data();
      const I* tp = view1<I>(targets, op).data();
      T* dxp = view1<T>(dlogits, op).data();
      Kokkos::parallel_for(
          "bmt::vocab_part_backward", row_policy(s.rows, op), KOKKOS_LAMBDA(const Team& team) {
            const std::int64_t r = team.league_rank();
            const T* xr = xp + r * Vp;
            T* dxr = dxp + r * Vp;
            const std::int64_t t = static_cast<std::int64_t>(tp[r]);
            const float rows = countp[0];
            const float scale = counts(t, vocab, ignore) && rows > 0.0f ? gp[0] / rows : 0.0f;
            const float l = lsep[r];
            const std::int64_t local = t - first;
            // Each element is read before it is written, by the same thread: dlogits may be logits.
            team_map(
                team, Vp,
                [&](std::int64_t j) { return scale * (kmath::exp(to_f32(xr[j]) - l) - (j == local ? 1.0f : 0.0f)); },
                [&](std::int64_t j, float v) { dxr[j] = from_f32<T>(v); });
          });
    });
  });
}

}  // namespace bmt::kernels
