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

// On the host a team is one thread, and a reduction that adds one element at a time waits on the
// latency of every add. Combining blocks of consecutive elements as a tree first breaks that chain
// (several times the throughput). On a GPU the threads of the team share the row instead.
constexpr int kRowBlock = memory::is_host() ? 8 : 1;

template <class Combine, class F>
KOKKOS_INLINE_FUNCTION float block_combine(std::int64_t j0, const F& f) {
  float p[kRowBlock];
  for (int k = 0; k < kRowBlock; ++k) p[k] = f(j0 + k);
  for (int w = kRowBlock / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) p[k] = Combine::apply(p[k], p[k + w]);
  return p[0];
}

struct CombineSum {
  KOKKOS_INLINE_FUNCTION static float apply(float a, float b) { return a + b; }
};
struct CombineMax {
  KOKKOS_INLINE_FUNCTION static float apply(float a, float b) { return a > b ? a : b; }
};

// sum over j in [0, n) of f(j), the same on every thread of the team.
template <class F>
KOKKOS_INLINE_FUNCTION float team_sum(const Team& team, std::int64_t n, const F& f) {
  const std::int64_t blocks = (n + kRowBlock - 1) / kRowBlock;
  float total = 0.0f;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, blocks),
      [&](std::int64_t b, float& acc) {
        const std::int64_t j0 = b * kRowBlock;
        if (j0 + kRowBlock <= n) {
          acc += block_combine<CombineSum>(j0, f);
        } else {
          for (std::int64_t j = j0; j < n; ++j) acc += f(j);
        }
      },
      total);
  return total;
}

// max over j in [0, n) of f(j) (-infinity for n == 0), the same on every thread of the team.
template <class F>
KOKKOS_INLINE_FUNCTION float team_max(const Team& team, std::int64_t n, const F& f) {
  const std::int64_t blocks = (n + kRowBlock - 1) / kRowBlock;
  float result;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, blocks),
      [&](std::int64_t b, float& acc) {
        const std::int64_t j0 = b * kRowBlock;
        if (j0 + kRowBlock <= n) {
          const float m = block_combine<CombineMax>(j0, f);
          acc = acc > m ? acc : m;
        } else {
          for (std::int64_t j = j0; j < n; ++j) {
            const float v = f(j);
            acc = acc > v ? acc : v;
          }
        }
      },
      Kokkos::Max<float>(result));
  return result;
}

// One team per row; rows must fit a Kokkos league (int).
inline TeamPolicy row_policy(std::int64_t rows, const char* op) {
  BMT_REQUIRE(rows <= 0x7fffffff, op << ": expected at most 2^31-1 rows, found " << rows);
  return TeamPolicy(space(), static_cast<int>(rows), Kokkos::AUTO);
}

}  // namespace bmt::kernels
