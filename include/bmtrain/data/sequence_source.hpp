#pragma once
// Where training sequences come from: a token file set (TokenDataset) or a generator
// (SyntheticMarkovDataset). TokenLoader draws batches from any of them the same way.
#include <cstddef>
#include <cstdint>

namespace bmt::data {

class SequenceSource {
 public:
  virtual ~SequenceSource() = default;
  // How many distinct sequences of seq_len + 1 tokens (inputs plus the shifted targets) there are.
  virtual std::uint64_t sequence_count(std::size_t seq_len) const = 0;
  // Writes the seq_len + 1 tokens of sequence `index` (< sequence_count(seq_len)) to `out`. Must be
  // a pure function of (index, seq_len): any rank can produce any sequence, in any order.
  virtual void sequence(std::uint64_t index, std::size_t seq_len, std::int32_t* out) const = 0;
};

}  // namespace bmt::data
