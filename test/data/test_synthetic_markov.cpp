// SyntheticMarkovDataset: the stationary distribution and entropy rate against a brute-force
// computation on tiny chains, and the generated sequences against the chain they come from.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/data/synthetic_markov.hpp"
#include "bmtrain/runtime/error.hpp"

using bmt::data::MarkovOptions;
using bmt::data::SyntheticMarkovDataset;
using ::testing::HasSubstr;

namespace {

// Dense transition matrix of a dataset.
std::vector<std::vector<double>> matrix_of(const SyntheticMarkovDataset& d) {
  const auto v = static_cast<std::size_t>(d.vocab_size());
  std::vector<std::vector<double>> P(v, std::vector<double>(v, 0.0));
  for (std::size_t i = 0; i < v; ++i)
    for (const auto& t : d.transitions(static_cast<std::int32_t>(i))) P[i][static_cast<std::size_t>(t.next)] += t.probability;
  return P;
}

// Stationary distribution by solving pi (P - I) = 0, sum pi = 1 with Gaussian elimination
// (partial pivoting): a different method from the dataset's power iteration.
std::vector<double> solve_stationary(const std::vector<std::vector<double>>& P) {
  const std::size_t v = P.size();
  // Rows: equations. Equation j (j < v-1): sum_i pi_i (P_ij - [i==j]) = 0; last: sum_i pi_i = 1.
  std::vector<std::vector<double>> A(v, std::vector<double>(v + 1, 0.0));
  for (std::size_t j = 0; j + 1 < v; ++j)
    for (std::size_t i = 0; i < v; ++i) A[j][i] = P[i][j] - (i == j ? 1.0 : 0.0);
  for (std::size_t i = 0; i < v; ++i) A[v - 1][i] = 1.0;
  A[v - 1][v] = 1.0;
  for (std::size_t c = 0; c < v; ++c) {
    std::size_t pivot = c;
    for (std::size_t r = c + 1; r < v; ++r)
      if (std::abs(A[r][c]) > std::abs(A[pivot][c])) pivot = r;
    std::swap(A[c], A[pivot]);
    for (std::size_t r = 0; r < v; ++r) {
      if (r == c) continue;
      const double f = A[r][c] / A[c][c];
      for (std::size_t k = c; k <= v; ++k) A[r][k] -= f * A[c][k];
    }
  }
  std::vector<double> pi(v);
  for (std::size_t i = 0; i < v; ++i) pi[i] = A[i][v] / A[i][i];
  return pi;
}

// Entropy rate by brute force: the joint entropy of every path X0..Xn (X0 ~ pi) grows by exactly
// the entropy rate per step for a stationary Markov chain, so H = (H(X0..Xn) - H(X0)) / n.
double brute_force_entropy_rate(const std::vector<std::vector<double>>& P, const std::vector<double>& pi, int n) {
  const std::size_t v = P.size();
  double joint = 0, first = 0;
  for (double p : pi)
    if (p > 0) first -= p * std::log(p);
  // Enumerate paths depth-first with their probabilities.
  std::vector<std::size_t> path(static_cast<std::size_t>(n) + 1);
  std::function<void(int, double)> walk = [&](int depth, double p) {
    if (p == 0) return;
    if (depth == n) {
      joint -= p * std::log(p);
      return;
    }
    for (std::size_t j = 0; j < v; ++j) {
      path[static_cast<std::size_t>(depth) + 1] = j;
      walk(depth + 1, p * P[path[static_cast<std::size_t>(depth)]][j]);
    }
  };
  for (std::size_t i = 0; i < v; ++i) {
    path[0] = i;
    walk(0, pi[i]);
  }
  return (joint - first) / n;
}

}  // namespace

TEST(SyntheticMarkov, EntropyRateMatchesBruteForceOnTinyChains) {
  for (auto [V, K, seed] : {std::tuple{3, 2, 1ull}, std::tuple{4, 2, 7ull}, std::tuple{5, 3, 11ull}, std::tuple{4, 4, 2ull}}) {
    SyntheticMarkovDataset d({V, K, seed, 10});
    const auto P = matrix_of(d);
    const auto pi = solve_stationary(P);
    for (std::size_t i = 0; i < pi.size(); ++i) EXPECT_NEAR(d.stationary()[i], pi[i], 1e-12) << "V=" << V;
    const double brute = brute_force_entropy_rate(P, pi, 6);
    EXPECT_NEAR(d.entropy_rate(), brute, 1e-10) << "V=" << V << " K=" << K;
    EXPECT_GT(d.entropy_rate(), 0.0);
    EXPECT_LT(d.entropy_rate(), std::log(static_cast<double>(K)) + 1e-12);
  }
  // One successor: a deterministic cycle, nothing to learn beyond it.
  SyntheticMarkovDataset cycle({6, 1, 3, 10});
  EXPECT_EQ(cycle.entropy_rate(), 0.0);
  for (double p : cycle.stationary()) EXPECT_NEAR(p, 1.0 / 6, 1e-15);
}

TEST(SyntheticMarkov, RowsHaveKSuccessorsIncludingTheNextToken) {
  SyntheticMarkovDataset d({100, 8, 5, 10});
  for (std::int32_t i = 0; i < 100; ++i) {
    const auto row = d.transitions(i);
    ASSERT_EQ(row.size(), 8u);
    std::set<std::int32_t> next;
    double total = 0;
    for (const auto& t : row) {
      next.insert(t.next);
      EXPECT_GT(t.probability, 0.0);
      total += t.probability;
    }
    EXPECT_EQ(next.size(), 8u);
    EXPECT_TRUE(next.count((i + 1) % 100));
    EXPECT_NEAR(total, 1.0, 1e-12);
  }
  double total = 0;
  for (double p : d.stationary()) total += p;
  EXPECT_NEAR(total, 1.0, 1e-12);
  // Large vocabularies stay quick: GPT-2's, as a training run would use it.
  SyntheticMarkovDataset big({50257, 8, 1, 10});
  EXPECT_GT(big.entropy_rate(), 0.5);
  EXPECT_LT(big.entropy_rate(), std::log(8.0));
}

TEST(SyntheticMarkov, SequencesFollowTheChain) {
  SyntheticMarkovDataset d({6, 3, 21, 4000});
  const auto P = matrix_of(d);
  const std::size_t T = 64;
  std::vector<std::int32_t> seq(T + 1);
  std::vector<std::vector<double>> count(6, std::vector<double>(6, 0.0));
  std::vector<double> first(6, 0.0);
  double loss = 0, loss_sq = 0, n = 0;
  for (std::uint64_t s = 0; s < 4000; ++s) {
    d.sequence(s, T, seq.data());
    first[static_cast<std::size_t>(seq[0])] += 1;
    for (std::size_t t = 0; t < T; ++t) {
      const auto a = static_cast<std::size_t>(seq[t]), b = static_cast<std::size_t>(seq[t + 1]);
      ASSERT_GT(P[a][b], 0.0) << "a transition the chain does not have";
      count[a][b] += 1;
      const double l = -std::log(P[a][b]);
      loss += l;
      loss_sq += l * l;
      n += 1;
    }
  }
  // The best model's average loss is the entropy rate, within 5 standard errors.
  const double mean = loss / n, sd = std::sqrt(loss_sq / n - mean * mean);
  EXPECT_NEAR(mean, d.entropy_rate(), 5 * sd / std::sqrt(n));
  // Empirical transition frequencies and first-token frequencies match P and pi.
  for (std::size_t a = 0; a < 6; ++a) {
    double row = 0;
    for (double c : count[a]) row += c;
    for (std::size_t b = 0; b < 6; ++b) {
      const double p = P[a][b], se = std::sqrt(p * (1 - p) / row);
      EXPECT_NEAR(count[a][b] / row, p, 5 * se + 1e-12) << a << "->" << b;
    }
    const double p = d.stationary()[a];
    EXPECT_NEAR(first[a] / 4000, p, 5 * std::sqrt(p * (1 - p) / 4000)) << "first token " << a;
  }
}

TEST(SyntheticMarkov, SequencesAreAPureFunctionOfSeedAndIndex) {
  SyntheticMarkovDataset a({1000, 8, 5, 100}), b({1000, 8, 5, 100}), c({1000, 8, 6, 100});
  std::vector<std::int32_t> x(33), y(33), z(33), x_again(33);
  a.sequence(17, 32, x.data());
  a.sequence(3, 32, y.data());  // other calls in between change nothing
  a.sequence(17, 32, x_again.data());
  b.sequence(17, 32, y.data());
  c.sequence(17, 32, z.data());
  EXPECT_EQ(x, x_again);
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  // A shorter sequence is a prefix of a longer one with the same index.
  std::vector<std::int32_t> shorter(9);
  a.sequence(17, 8, shorter.data());
  EXPECT_TRUE(std::equal(shorter.begin(), shorter.end(), x.begin()));
}

TEST(SyntheticMarkov, ClearErrors) {
  auto error = [](const MarkovOptions& o) { return bmt::error_of([&] { SyntheticMarkovDataset d(o); }); };
  EXPECT_THAT(error({1, 1, 0, 10}), HasSubstr("expected a vocabulary of at least 2 tokens, found 1"));
  EXPECT_THAT(error({10, 11, 0, 10}), HasSubstr("expected between 1 and 10 successors per token, found 11"));
  EXPECT_THAT(error({10, 0, 0, 10}), HasSubstr("found 0"));
  SyntheticMarkovDataset d({10, 2, 0, 10});
  EXPECT_THAT(bmt::error_of([&] { d.transitions(10); }), HasSubstr("expected a token in [0, 10), found 10"));
}
