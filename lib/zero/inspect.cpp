#include "bmtrain/zero/inspect.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <vector>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/zero/distributed_module.hpp"

namespace bmt {

namespace {

// Per parameter: count, sum, sum of squares, min, max of values; sum and sum of squares of grads.
struct Moments {
  double n = 0, sum = 0, sq = 0, gsum = 0, gsq = 0;
  double min = std::numeric_limits<double>::infinity(), max = -std::numeric_limits<double>::infinity();
};

}  // namespace

std::string inspect(Module& model) {
  Context& ctx = context();
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "%-40s %-16s %10s %10s %10s %10s %10s %10s\n", "name", "shape", "min", "max", "mean",
                "std", "grad_mean", "grad_std");
  out << line;
  for (auto* s : sharded_storages(model)) {
    s->settle();
    const auto values = s->shard().to_host_floats();
    const auto grads = s->grad_shard().to_host_floats();
    std::vector<Moments> m(s->entries().size());
    for (std::size_t k = 0; k < m.size(); ++k) {
      const auto slice = s->local_slice(s->entries()[k]);
      for (std::int64_t i = slice.shard_offset; i < slice.shard_offset + slice.count; ++i) {
        const double v = values[static_cast<std::size_t>(i)], g = grads[static_cast<std::size_t>(i)];
        m[k].n += 1;
        m[k].sum += v;
        m[k].sq += v * v;
        m[k].gsum += g;
        m[k].gsq += g * g;
        m[k].min = std::min(m[k].min, v);
        m[k].max = std::max(m[k].max, v);
      }
    }
    // Per parameter 5 sums, then 2 extremes (min as the max of its negation), from every rank,
    // folded in rank order.
    const std::size_t width = 7 * m.size();
    std::vector<double> mine;
    mine.reserve(width);
    for (const auto& x : m) mine.insert(mine.end(), {x.n, x.sum, x.sq, x.gsum, x.gsq});
    for (const auto& x : m) mine.insert(mine.end(), {-x.min, x.max});
    const auto all = all_gather_f64(ctx.host_comm(), mine, ctx.compute_stream());
    std::vector<double> sums(5 * m.size(), 0.0), extremes(2 * m.size(), -std::numeric_limits<double>::infinity());
    for (std::size_t r = 0; r < all.size() / std::max<std::size_t>(width, 1); ++r) {
      const double* theirs = all.data() + width * r;
      for (std::size_t i = 0; i < sums.size(); ++i) sums[i] += theirs[i];
      for (std::size_t i = 0; i < extremes.size(); ++i) extremes[i] = std::max(extremes[i], theirs[sums.size() + i]);
    }
    for (std::size_t k = 0; k < m.size(); ++k) {
      const double n = std::max(1.0, sums[5 * k]);
      const double mean = sums[5 * k + 1] / n, gmean = sums[5 * k + 3] / n;
      const double sd = std::sqrt(std::max(0.0, sums[5 * k + 2] / n - mean * mean));
      const double gsd = std::sqrt(std::max(0.0, sums[5 * k + 4] / n - gmean * gmean));
      const auto& e = s->entries()[k];
      std::snprintf(line, sizeof line, "%-40s %-16s %10.4g %10.4g %10.4g %10.4g %10.4g %10.4g\n", e.name.c_str(),
                    to_string(e.parameter.shape()).c_str(), -extremes[2 * k], extremes[2 * k + 1], mean, sd, gmean, gsd);
      out << line;
    }
  }
  return out.str();
}

float sum_loss(const Tensor& loss) {
  Context& ctx = context();
  float v = loss.to_host_floats().at(0);
  ctx.host_comm().all_reduce(&v, &v, 1, DType::f32, ReduceOp::avg, ctx.compute_stream());
  return v;
}

}  // namespace bmt
