#include "bmtrain/data/token_loader.hpp"

#include "bmtrain/data/window_shuffle.hpp"
#include "bmtrain/kernels/random.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt::data {

void to_json(nlohmann::json& j, const LoaderState& s) { j = {{"epoch", s.epoch}, {"position", s.position}}; }

void from_json(const nlohmann::json& j, LoaderState& s) {
  for (const char* field : {"epoch", "position"})
    BMT_REQUIRE(j.is_object() && j.contains(field) && j.at(field).is_number_integer() &&
                    (j.at(field).is_number_unsigned() || j.at(field).get<std::int64_t>() >= 0),
                "loader state: expected a non-negative integer '" << field << "', found "
                                                                  << (j.is_object() && j.contains(field) ? j.at(field).dump() : "none"));
  s.epoch = j.at("epoch").get<std::uint64_t>();
  s.position = j.at("position").get<std::uint64_t>();
}

std::vector<TokenBatch> TokenBatch::split(std::size_t count) const {
  BMT_REQUIRE(count > 0 && rows % count == 0, "TokenBatch::split: expected a number of micro-batches dividing the "
                                                  << rows << " rows of this rank, found " << count);
  std::vector<TokenBatch> parts(count);
  const std::size_t each = rows / count, n = each * seq_len;
  for (std::size_t m = 0; m < count; ++m) {
    TokenBatch& p = parts[m];
    p.rows = each;
    p.seq_len = seq_len;
    p.first_row = first_row + m * each;
    p.inputs.assign(inputs.begin() + static_cast<std::ptrdiff_t>(m * n), inputs.begin() + static_cast<std::ptrdiff_t>((m + 1) * n));
    p.targets.assign(targets.begin() + static_cast<std::ptrdiff_t>(m * n), targets.begin() + static_cast<std::ptrdiff_t>((m + 1) * n));
  }
  return parts;
}

TokenLoader::TokenLoader(std::shared_ptr<const SequenceSource> source, const LoaderOptions& options)
    : source_(std::move(source)), options_(options) {
  BMT_REQUIRE(source_ != nullptr, "TokenLoader: expected a sequence source, found none");
  if (options_.rank < 0) options_.rank = bmt::dp_rank();
  if (options_.world_size < 0) options_.world_size = bmt::dp_size();
  const auto& o = options_;
  BMT_REQUIRE(o.world_size > 0 && o.rank < o.world_size,
              "TokenLoader: expected 0 <= rank < world_size, found rank " << o.rank << " of " << o.world_size);
  BMT_REQUIRE(o.seq_len > 0, "TokenLoader: expected a sequence length > 0, found 0");
  BMT_REQUIRE(o.global_batch > 0 && o.global_batch % static_cast<std::size_t>(o.world_size) == 0,
              "TokenLoader: expected a global batch divisible by the world size " << o.world_size << ", found "
                                                                                 << o.global_batch << " sequences");
  sequences_ = source_->sequence_count(o.seq_len);
  BMT_REQUIRE(sequences_ >= o.global_batch, "TokenLoader: expected at least one global batch of " << o.global_batch
                                                << " sequences of " << o.seq_len << " + 1 tokens, found " << sequences_
                                                << " in the source");
}

std::uint64_t TokenLoader::sequence_at(std::uint64_t epoch, std::uint64_t position) const {
  if (!options_.shuffle) return position;
  // A fresh order each epoch, the same for every rank and world size.
  const WindowShuffle order(sequences_, random::mix64(options_.seed ^ random::mix64(epoch + 0x5eed)));
  return order(position);
}

void TokenLoader::restore(const LoaderState& state) {
  // A position at the end of the epoch is where the last step of an epoch leaves it (next() starts
  // the next epoch); beyond it, the state belongs to other data.
  BMT_REQUIRE(state.position <= sequences_,
              "loader state: expected a position within the epoch's " << sequences_ << " sequences of " << options_.seq_len
                  << " + 1 tokens, found " << state.position << " (was the checkpoint trained on other data, or "
                  << "another --seq?)");
  state_ = state;
}

TokenBatch TokenLoader::next() {
  const std::size_t B = options_.global_batch, T = options_.seq_len;
  if (state_.position + B > steps_per_epoch() * B) {
    ++state_.epoch;
    state_.position = 0;
  }
  TokenBatch batch;
  batch.rows = local_batch();
  batch.seq_len = T;
  batch.first_row = static_cast<std::size_t>(options_.rank) * batch.rows;
  batch.inputs.resize(batch.rows * T);
  batch.targets.resize(batch.rows * T);
  std::vector<std::int32_t> tokens(T + 1);
  for (std::size_t i = 0; i < batch.rows; ++i) {
    const std::uint64_t index = sequence_at(state_.epoch, state_.position + batch.first_row + i);
    source_->sequence(index, T, tokens.data());
    if (options_.vocab_size > 0)
      for (std::size_t t = 0; t <= T; ++t)
        BMT_REQUIRE(tokens[t] >= 0 && tokens[t] < options_.vocab_size,
                    "TokenLoader: expected tokens below the vocabulary size " << options_.vocab_size << ", found "
                                                                              << tokens[t] << " in sequence " << index);
    std::copy(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(T), batch.inputs.begin() + static_cast<std::ptrdiff_t>(i * T));
    std::copy(tokens.begin() + 1, tokens.end(), batch.targets.begin() + static_cast<std::ptrdiff_t>(i * T));
  }
  state_.position += B;
  return batch;
}

}  // namespace bmt::data
