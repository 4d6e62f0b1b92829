#pragma once
// Row-wise building blocks of the normalization, softmax and loss kernels: one team per row, and
// reductions over the row accumulated in float whatever the storage type.
#include <cstdint>

#include "bmtrain/kernels/common.hpp"
#include "bmtrain/kernels/math.hpp"
#include "bmtrain/tensor/memory.hpp"

namespace bmt::kernels {

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using Team = TeamPolicy::member_type;

// How the threads of a team split a row for a reduction. On GPUs thread t takes elements t,
// t + team_size, ... so that neighbouring threads read neighbouring addresses. On the host a team
// is one thread (Serial) or a few: each takes one contiguous chunk and sums it in a plain loop with
// eight independent partial sums, so the additions do not wait on each other (a single running sum
// is bound by the add latency) and the compiler can keep them in vector registers.
constexpr bool kChunkedRows = memory::is_host();
constexpr int kPartials = 8;

struct CombineSum {
  KOKKOS_INLINE_FUNCTION static float identity() { return 0.0f; }
  KOKKOS_INLINE_FUNCTION static float apply(float a, float b) { return a + b; }
};
struct CombineMax {
  KOKKOS_INLINE_FUNCTION static float identity() { return -3.402823466e38f; }
  KOKKOS_INLINE_FUNCTION static float apply(float a, float b) { return a > b ? a : b; }
};

// Combines f(j) for j in [j0, j1) with kPartials independent partial results.
template <class Combine, class F>
KOKKOS_INLINE_FUNCTION float combine_range(std::int64_t j0, std::int64_t j1, const F& f) {
  float p[kPartials];
  for (int k = 0; k < kPartials; ++k) p[k] = Combine::identity();
  std::int64_t j = j0;
  for (; j + kPartials <= j1; j += kPartials)
    for (int k = 0; k < kPartials; ++k) p[k] = Combine::apply(p[k], f(j + k));
  for (int k = 0; j < j1; ++j, ++k) p[k] = Combine::apply(p[k], f(j));
  const float a = Combine::apply(Combine::apply(p[0], p[1]), Combine::apply(p[2], p[3]));
  const float b = Combine::apply(Combine::apply(p[4], p[5]), Combine::apply(p[6], p[7]));
  return Combine::apply(a, b);
}

template <class Combine, class Reducer, class F>
KOKKOS_INLINE_FUNCTION float team_combine(const Team& team, std::int64_t n, const F& f) {
  float result = Combine::identity();
  if (kChunkedRows) {
    const std::int64_t parts = team.team_size();
    const std::int64_t chunk = (n + parts - 1) / parts;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, parts),
        [&](std::int64_t t, float& acc) {
          const std::int64_t j0 = t * chunk;
          const std::int64_t j1 = j0 + chunk < n ? j0 + chunk : n;
          acc = Combine::apply(acc, combine_range<Combine>(j0, j1, f));
        },
        Reducer(result));
  } else {
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, n), [&](std::int64_t j, float& acc) { acc = Combine::apply(acc, f(j)); },
        Reducer(result));
  }
  return result;
}

// sum over j in [0, n) of f(j), the same on every thread of the team.
template <class F>
KOKKOS_INLINE_FUNCTION float team_sum(const Team& team, std::int64_t n, const F& f) {
  return team_combine<CombineSum, Kokkos::Sum<float>>(team, n, f);
}

// max over j in [0, n) of f(j), the same on every thread of the team.
template <class F>
KOKKOS_INLINE_FUNCTION float team_max(const Team& team, std::int64_t n, const F& f) {
  return team_combine<CombineMax, Kokkos::Max<float>>(team, n, f);
}

// store(j, value(j)) for j in [0, n), split over the team like the reductions. On the host each
// block of kPartials values is computed before any is stored: the compiler cannot prove that the
// output does not alias the inputs, and without that ordering it would not vectorize the block.
template <class V, class S>
KOKKOS_INLINE_FUNCTION void team_map(const Team& team, std::int64_t n, const V& value, const S& store) {
  if (kChunkedRows) {
    const std::int64_t parts = team.team_size();
    const std::int64_t chunk = (n + parts - 1) / parts;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, parts), [&](std::int64_t t) {
      const std::int64_t j0 = t * chunk;
      const std::int64_t j1 = j0 + chunk < n ? j0 + chunk : n;
      std::int64_t j = j0;
      for (; j + kPartials <= j1; j += kPartials) {
        float v[kPartials];
        for (int k = 0; k < kPartials; ++k) v[k] = value(j + k);
        for (int k = 0; k < kPartials; ++k) store(j + k, v[k]);
      }
      for (; j < j1; ++j) store(j, value(j));
    });
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](std::int64_t j) { store(j, value(j)); });
  }
}

// One team per row; rows must fit a Kokkos league (int).
inline TeamPolicy row_policy(std::int64_t rows, const char* op) {
  BMT_REQUIRE(rows <= 0x7fffffff, op << ": expected at most 2^31-1 rows, found " << rows);
  return TeamPolicy(space(), static_cast<int>(rows), Kokkos::AUTO);
}

}  // namespace bmt::kernels
