#include "bmtrain/data/synthetic_markov.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "bmtrain/kernels/random.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt::data {

namespace {

// Uniform in (0, 1) from 53 random bits.
double open_uniform(std::uint64_t key, std::uint64_t index) {
  return (static_cast<double>(random::bits(key, index) >> 11) + 0.5) * 0x1.0p-53;
}

}  // namespace

SyntheticMarkovDataset::SyntheticMarkovDataset(const MarkovOptions& options) : options_(options) {
  const std::int32_t V = options.vocab_size, K = options.successors;
  BMT_REQUIRE(V >= 2, "SyntheticMarkovDataset: expected a vocabulary of at least 2 tokens, found " << V);
  BMT_REQUIRE(K >= 1 && K <= V, "SyntheticMarkovDataset: expected between 1 and " << V
                                    << " successors per token, found " << K);
  BMT_REQUIRE(options.sequences > 0, "SyntheticMarkovDataset: expected sequences > 0, found 0");
  const auto v = static_cast<std::size_t>(V), k = static_cast<std::size_t>(K);
  next_.resize(v * k);
  probability_.resize(v * k);
  cumulative_.resize(v * k);

  const std::uint64_t rows_key = random::key(options.seed, "markov.rows");
  std::vector<std::pair<std::int32_t, double>> row;
  for (std::int32_t i = 0; i < V; ++i) {
    row.clear();
    row.emplace_back((i + 1) % V, 0.0);
    std::uint64_t draw = static_cast<std::uint64_t>(i) << 32;
    while (row.size() < k) {
      const auto candidate = static_cast<std::int32_t>(random::bits(rows_key, draw++) % static_cast<std::uint64_t>(V));
      if (std::none_of(row.begin(), row.end(), [&](const auto& e) { return e.first == candidate; }))
        row.emplace_back(candidate, 0.0);
    }
    // Exponential weights, normalized: a uniformly random point of the probability simplex.
    double total = 0;
    for (auto& e : row) total += e.second = -std::log(open_uniform(rows_key, draw++));
    std::sort(row.begin(), row.end());
    double running = 0;
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t at = static_cast<std::size_t>(i) * k + j;
      next_[at] = row[j].first;
      probability_[at] = row[j].second / total;
      running += probability_[at];
      cumulative_[at] = j + 1 == k ? 1.0 : running;
    }
  }

  // Stationary distribution: power iteration on the lazy chain (I + P) / 2, which has the same
  // stationary distribution and converges even when P is periodic.
  std::vector<double> pi(v, 1.0 / static_cast<double>(V)), moved(v);
  // With one successor the chain is the cycle i -> i+1, whose stationary distribution is uniform
  // (and whose lazy iteration mixes too slowly to find it).
  bool converged = K == 1;
  for (int iteration = 0; iteration < 1000000 && !converged; ++iteration) {
    std::fill(moved.begin(), moved.end(), 0.0);
    for (std::size_t i = 0; i < v; ++i)
      for (std::size_t j = 0; j < k; ++j) moved[static_cast<std::size_t>(next_[i * k + j])] += pi[i] * probability_[i * k + j];
    double total = 0, change = 0;
    for (std::size_t i = 0; i < v; ++i) total += moved[i] = 0.5 * (pi[i] + moved[i]);
    for (std::size_t i = 0; i < v; ++i) {
      moved[i] /= total;
      change += std::abs(moved[i] - pi[i]);
    }
    pi.swap(moved);
    converged = change < 1e-14;
  }
  BMT_REQUIRE(converged, "SyntheticMarkovDataset: expected the stationary distribution to converge, found it did not "
                         "after 1000000 iterations (vocabulary " << V << ", " << K << " successors)");
  stationary_ = pi;
  stationary_cumulative_.resize(v);
  std::partial_sum(pi.begin(), pi.end(), stationary_cumulative_.begin());
  stationary_cumulative_.back() = 1.0;

  entropy_rate_ = 0;
  for (std::size_t i = 0; i < v; ++i) {
    double row_entropy = 0;
    for (std::size_t j = 0; j < k; ++j) {
      const double p = probability_[i * k + j];
      if (p > 0) row_entropy -= p * std::log(p);
    }
    entropy_rate_ += pi[i] * row_entropy;
  }
}

std::vector<SyntheticMarkovDataset::Transition> SyntheticMarkovDataset::transitions(std::int32_t state) const {
  BMT_REQUIRE(state >= 0 && state < options_.vocab_size,
              "SyntheticMarkovDataset: expected a token in [0, " << options_.vocab_size << "), found " << state);
  const auto k = static_cast<std::size_t>(options_.successors);
  std::vector<Transition> row;
  for (std::size_t j = 0; j < k; ++j)
    row.push_back({next_[static_cast<std::size_t>(state) * k + j], probability_[static_cast<std::size_t>(state) * k + j]});
  return row;
}

std::uint64_t SyntheticMarkovDataset::sequence_count(std::size_t) const { return options_.sequences; }

void SyntheticMarkovDataset::sequence(std::uint64_t index, std::size_t seq_len, std::int32_t* out) const {
  const std::uint64_t key = random::bits(random::key(options_.seed, "markov.sequences"), index);
  const auto k = static_cast<std::size_t>(options_.successors);
  // The first token from the stationary distribution, each next one from its row.
  const double u0 = open_uniform(key, 0);
  auto state = static_cast<std::int32_t>(
      std::min<std::size_t>(std::upper_bound(stationary_cumulative_.begin(), stationary_cumulative_.end(), u0) -
                                stationary_cumulative_.begin(),
                            stationary_.size() - 1));
  out[0] = state;
  for (std::size_t t = 1; t <= seq_len; ++t) {
    const double u = open_uniform(key, t);
    const double* c = cumulative_.data() + static_cast<std::size_t>(state) * k;
    std::size_t j = 0;
    while (j + 1 < k && c[j] <= u) ++j;
    state = next_[static_cast<std::size_t>(state) * k + j];
    out[t] = state;
  }
}

}  // namespace bmt::data
