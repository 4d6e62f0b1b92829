#pragma once
// Batches for data-parallel training, the same data for any number of ranks.
//
// Each optimizer step consumes one global batch of B sequences of T + 1 tokens. Within an epoch the
// sequences are visited in a pseudo-random order drawn from (seed, epoch) over all of the source's
// sequences (WindowShuffle); step s of the epoch takes positions [s*B, (s+1)*B) of that order, and
// rank r of N takes rows [r*B/N, (r+1)*B/N) of it. The global batch therefore does not depend on N:
// a run on 1, 2, 3 or 4 ranks trains on the same data, and a run resumed from state() on another
// number of ranks continues exactly where it stopped.
//
//   auto data = std::make_shared<bmt::data::TokenDataset>("data/fineweb_train_*.bin");
//   bmt::data::TokenLoader loader(data, {.global_batch = 512, .seq_len = 1024, .seed = 1});
//   for (auto& micro : loader.next().split(accumulation_steps)) ... micro.inputs, micro.targets ...
//   state.data = loader.state();          // into the checkpoint; loader.restore(...) on resume
//
// Batches are host memory (int32 token ids); the caller copies them to the device.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "bmtrain/data/sequence_source.hpp"

namespace bmt::data {

struct LoaderOptions {
  std::size_t global_batch = 0;  // B: sequences per optimizer step, all ranks together
  std::size_t seq_len = 0;       // T: tokens per input row
  std::uint64_t seed = 0;
  bool shuffle = true;           // false: sequences in source order (llm.c's order)
  std::int64_t vocab_size = 0;   // > 0: every token must be below it (a wrong tokenizer shows at once)
  // The ranks that split a batch: the data-parallel group (a tensor-parallel group shares its rows).
  int rank = -1;                 // -1: bmt::dp_rank()
  int world_size = -1;           // -1: bmt::dp_size()
};

// Where the loader stands: the epoch, and how many sequences of its order (all ranks together)
// are consumed. Independent of the world size.
struct LoaderState {
  std::uint64_t epoch = 0;
  std::uint64_t position = 0;
  bool operator==(const LoaderState& o) const { return epoch == o.epoch && position == o.position; }
};
void to_json(nlohmann::json& j, const LoaderState& s);
void from_json(const nlohmann::json& j, LoaderState& s);  // throws bmt::Error on missing fields

// This rank's rows of one global batch: row i is sequence tokens [0, T) as inputs and [1, T] as
// targets.
struct TokenBatch {
  std::size_t rows = 0;
  std::size_t seq_len = 0;
  std::size_t first_row = 0;          // the global batch row of row 0
  std::vector<std::int32_t> inputs;   // rows x seq_len, row-major
  std::vector<std::int32_t> targets;  // rows x seq_len, row-major

  // `count` micro-batches of rows / count consecutive rows each, for gradient accumulation.
  // Throws bmt::Error unless count divides rows.
  std::vector<TokenBatch> split(std::size_t count) const;
};

class TokenLoader {
 public:
  // Throws bmt::Error unless world_size divides global_batch and the source holds at least one
  // global batch of sequences.
  TokenLoader(std::shared_ptr<const SequenceSource> source, const LoaderOptions& options);

  // This rank's part of the next global batch; moves to the next epoch when this one has fewer
  // than B sequences left.
  TokenBatch next();

  LoaderState state() const { return state_; }
  // Continues from `state`; throws bmt::Error if its position is beyond this source's epoch.
  void restore(const LoaderState& state);

  std::size_t local_batch() const { return options_.global_batch / static_cast<std::size_t>(options_.world_size); }
  std::uint64_t sequences_per_epoch() const { return sequences_; }
  std::uint64_t steps_per_epoch() const { return sequences_ / options_.global_batch; }
  // The source sequence at `position` of `epoch`'s order.
  std::uint64_t sequence_at(std::uint64_t epoch, std::uint64_t position) const;

 private:
  std::shared_ptr<const SequenceSource> source_;
  LoaderOptions options_;
  std::uint64_t sequences_ = 0;
  LoaderState state_;
};

}  // namespace bmt::data
