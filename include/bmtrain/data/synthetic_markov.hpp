#pragma once
// Synthetic training data with a known optimum: tokens from a random first-order Markov chain over a
// vocabulary of V tokens. Every state has K possible successors (state+1 mod V, which keeps the
// chain irreducible, and K-1 others drawn at random) with random probabilities. A sequence starts in
// the chain's stationary distribution, so the expected loss of the best possible model at every
// position is exactly the entropy rate
//
//   H = -sum_i pi_i sum_j P_ij log P_ij     (nats per token; pi by power iteration)
//
// which a training run should approach from above. Sequences are generated on the fly from
// (seed, sequence index): any rank produces any sequence with nothing stored.
#include <cstdint>
#include <vector>

#include "bmtrain/data/sequence_source.hpp"

namespace bmt::data {

struct MarkovOptions {
  std::int32_t vocab_size = 0;
  std::int32_t successors = 8;          // K: non-zero entries per row of the transition matrix
  std::uint64_t seed = 0;
  std::uint64_t sequences = 1u << 20;   // sequence_count() for any length: the size of an epoch
};

class SyntheticMarkovDataset final : public SequenceSource {
 public:
  explicit SyntheticMarkovDataset(const MarkovOptions& options);

  std::int32_t vocab_size() const { return options_.vocab_size; }
  // Nats per token: the lowest expected cross-entropy any model can reach on this data.
  double entropy_rate() const { return entropy_rate_; }
  const std::vector<double>& stationary() const { return stationary_; }

  struct Transition {
    std::int32_t next;
    double probability;
  };
  // The K successors of `state` (ascending) and their probabilities, which sum to 1.
  std::vector<Transition> transitions(std::int32_t state) const;

  std::uint64_t sequence_count(std::size_t seq_len) const override;
  // Any index is valid (the chain does not end); the loader uses [0, sequence_count).
  void sequence(std::uint64_t index, std::size_t seq_len, std::int32_t* out) const override;

 private:
  MarkovOptions options_;
  std::vector<std::int32_t> next_;       // V x K successors
  std::vector<double> probability_;      // V x K
  std::vector<double> cumulative_;       // V x K, per row, the last entry 1
  std::vector<double> stationary_;       // V
  std::vector<double> stationary_cumulative_;
  double entropy_rate_ = 0;
};

}  // namespace bmt::data
