// TokenLoader: the global batch is the same for every world size; rank r gets its rows of it;
// epochs visit every window once; a restored loader continues exactly; micro-batches split rows.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/data/synthetic_markov.hpp"
#include "bmtrain/data/token_dataset.hpp"
#include "bmtrain/data/token_loader.hpp"
#include "bmtrain/io/training_state.hpp"
#include "bmtrain/runtime/error.hpp"
#include "common/io_test_util.hpp"

using bmt::data::LoaderOptions;
using bmt::data::LoaderState;
using bmt::data::TokenBatch;
using bmt::data::TokenLoader;
using bmt::test::SharedTempDir;
using ::testing::HasSubstr;

namespace {

constexpr std::size_t kBatch = 12;  // divisible by 1, 2, 3 and 4 ranks
constexpr std::size_t kSeqLen = 8;

// Two llm.c shards whose token at position p of shard s is unique: (s * 20000 + p * 7) % 65536.
std::uint16_t token_at(int shard, std::size_t p) { return static_cast<std::uint16_t>((shard * 20000 + p * 7) % 65536); }

void write_shards(const SharedTempDir& dir) {
  if (bmt::rank() == 0) {
    const std::size_t sizes[2] = {8 * 40 + 1, 8 * 23 + 5};  // 40 and 23 windows of T=8
    for (int s = 0; s < 2; ++s) {
      std::vector<std::int32_t> header(256, 0);
      header[0] = 20240520;
      header[1] = 1;
      header[2] = static_cast<std::int32_t>(sizes[s]);
      std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
      for (std::size_t p = 0; p < sizes[s]; ++p) {
        const std::uint16_t t = token_at(s, p);
        bytes.append(reinterpret_cast<const char*>(&t), 2);
      }
      bmt::test::write_file(dir / ("train_" + std::to_string(s) + ".bin"), bytes);
    }
  }
  bmt::test::barrier();
}

LoaderOptions options(int rank, int world, std::uint64_t seed = 3) {
  LoaderOptions o;
  o.global_batch = kBatch;
  o.seq_len = kSeqLen;
  o.seed = seed;
  o.rank = rank;
  o.world_size = world;
  return o;
}

// Rows [first, first + count) of a batch, as one vector of inputs then targets.
std::vector<std::int32_t> rows_of(const TokenBatch& b, std::size_t first, std::size_t count) {
  std::vector<std::int32_t> v(b.inputs.begin() + static_cast<std::ptrdiff_t>(first * b.seq_len),
                              b.inputs.begin() + static_cast<std::ptrdiff_t>((first + count) * b.seq_len));
  v.insert(v.end(), b.targets.begin() + static_cast<std::ptrdiff_t>(first * b.seq_len),
           b.targets.begin() + static_cast<std::ptrdiff_t>((first + count) * b.seq_len));
  return v;
}

// Checks that this rank's batch equals its rows of the single-rank batch, for `steps` steps.
void expect_rows_of_single_rank_batches(std::shared_ptr<const bmt::data::SequenceSource> source, std::size_t steps) {
  const int r = bmt::rank(), n = bmt::world_size();
  TokenLoader mine(source, options(-1, -1));  // rank and world size from the runtime
  TokenLoader whole(source, options(0, 1));
  ASSERT_EQ(mine.local_batch(), kBatch / static_cast<std::size_t>(n));
  for (std::size_t step = 0; step < steps; ++step) {
    const TokenBatch part = mine.next(), all = whole.next();
    ASSERT_EQ(part.rows, kBatch / static_cast<std::size_t>(n));
    ASSERT_EQ(part.first_row, static_cast<std::size_t>(r) * part.rows);
    ASSERT_EQ(rows_of(part, 0, part.rows), rows_of(all, part.first_row, part.rows)) << "step " << step;
    ASSERT_EQ(mine.state(), whole.state());
  }
}

std::string error_of(const std::function<void()>& f) { return bmt::error_of(f); }

}  // namespace

TEST(TokenLoader, RanksGetTheirRowsOfTheSameGlobalBatch) {
  SharedTempDir dir;
  write_shards(dir);
  auto data = std::make_shared<bmt::data::TokenDataset>(dir / "train_*.bin");
  ASSERT_EQ(data->sequence_count(kSeqLen), 63u);
  // 63 windows: 5 steps of 12 per epoch; run into the third epoch.
  expect_rows_of_single_rank_batches(data, 12);
}

TEST(TokenLoader, RanksAgreeOnSyntheticDataToo) {
  bmt::data::MarkovOptions m;
  m.vocab_size = 50;
  m.successors = 4;
  m.seed = 9;
  m.sequences = 100;
  expect_rows_of_single_rank_batches(std::make_shared<bmt::data::SyntheticMarkovDataset>(m), 10);
}

TEST(TokenLoader, RowsAreWindowsWithShiftedTargetsAndEachEpochVisitsAllOnce) {
  SharedTempDir dir;
  write_shards(dir);
  auto data = std::make_shared<bmt::data::TokenDataset>(dir / "train_*.bin");
  TokenLoader loader(data, options(0, 1));
  ASSERT_EQ(loader.steps_per_epoch(), 5u);
  // Which window a row is: its first token identifies shard and position.
  std::map<std::int32_t, std::pair<int, std::size_t>> start_of;
  for (int s = 0; s < 2; ++s)
    for (std::size_t w = 0; w < (s == 0 ? 40u : 23u); ++w) start_of[token_at(s, w * kSeqLen)] = {s, w * kSeqLen};
  std::vector<std::set<std::pair<int, std::size_t>>> seen(2);
  std::vector<std::vector<std::pair<int, std::size_t>>> order(2);
  for (std::size_t step = 0; step < 10; ++step) {
    const TokenBatch b = loader.next();
    const std::size_t epoch = step / 5;
    EXPECT_EQ(loader.state().epoch, epoch);
    for (std::size_t i = 0; i < b.rows; ++i) {
      const auto it = start_of.find(b.inputs[i * kSeqLen]);
      ASSERT_NE(it, start_of.end());
      const auto [s, p] = it->second;
      for (std::size_t t = 0; t < kSeqLen; ++t) {
        ASSERT_EQ(b.inputs[i * kSeqLen + t], token_at(s, p + t));
        ASSERT_EQ(b.targets[i * kSeqLen + t], token_at(s, p + t + 1));
      }
      EXPECT_TRUE(seen[epoch].insert(it->second).second) << "window visited twice in epoch " << epoch;
      order[epoch].push_back(it->second);
    }
  }
  EXPECT_EQ(seen[0].size(), 60u);  // 5 steps x 12 of the 63 windows
  EXPECT_NE(order[0], order[1]) << "each epoch has its own order";
  // Without shuffling, windows come in file order.
  auto o = options(0, 1);
  o.shuffle = false;
  TokenLoader in_order(data, o);
  const TokenBatch first = in_order.next();
  for (std::size_t i = 0; i < kBatch; ++i) EXPECT_EQ(first.inputs[i * kSeqLen], token_at(0, i * kSeqLen));
}

TEST(TokenLoader, RestoreContinuesExactlyOnAnyWorldSize) {
  SharedTempDir dir;
  write_shards(dir);
  auto data = std::make_shared<bmt::data::TokenDataset>(dir / "train_*.bin");
  // A single-rank run saves its state after 7 steps (inside epoch 1) through the training state.
  TokenLoader first(data, options(0, 1));
  for (int i = 0; i < 7; ++i) first.next();
  bmt::io::TrainingState saved;
  saved.step = 7;
  saved.data = first.state();
  const auto json = nlohmann::json(saved);
  std::vector<TokenBatch> expected;
  for (int i = 0; i < 6; ++i) expected.push_back(first.next());

  // This job resumes it at its own world size.
  TokenLoader resumed(data, options(-1, -1));
  resumed.restore(json.get<bmt::io::TrainingState>().data.get<LoaderState>());
  EXPECT_EQ(resumed.state(), (LoaderState{1, 24}));
  for (const auto& want : expected) {
    const TokenBatch got = resumed.next();
    ASSERT_EQ(rows_of(got, 0, got.rows), rows_of(want, got.first_row, got.rows));
  }
  EXPECT_THAT(error_of([&] { nlohmann::json{{"epoch", 1}}.get<LoaderState>(); }),
              HasSubstr("expected a non-negative integer 'position', found none"));
  // A position past the end of the epoch belongs to other data: refused on every rank alike,
  // where the end itself is where the last step of an epoch leaves the loader.
  const std::uint64_t end = resumed.sequences_per_epoch();
  EXPECT_THAT(error_of([&] { resumed.restore({1, end + 1}); }),
              HasSubstr("expected a position within the epoch's " + std::to_string(end) + " sequences"));
  EXPECT_THAT(error_of([&] { resumed.restore({0, ~std::uint64_t{0}}); }), HasSubstr("found 18446744073709551615"));
  resumed.restore({2, end});
  EXPECT_EQ(resumed.next().rows, resumed.local_batch());
  EXPECT_EQ(resumed.state(), (LoaderState{3, kBatch}));
}

TEST(TokenLoader, MicroBatchesSplitThisRanksRows) {
  auto data = std::make_shared<bmt::data::SyntheticMarkovDataset>(bmt::data::MarkovOptions{20, 3, 1, 64});
  TokenLoader loader(data, options(0, 2));  // 6 rows on this rank
  const TokenBatch b = loader.next();
  const auto parts = b.split(3);
  ASSERT_EQ(parts.size(), 3u);
  std::vector<std::int32_t> inputs, targets;
  for (std::size_t m = 0; m < 3; ++m) {
    EXPECT_EQ(parts[m].rows, 2u);
    EXPECT_EQ(parts[m].first_row, b.first_row + 2 * m);
    inputs.insert(inputs.end(), parts[m].inputs.begin(), parts[m].inputs.end());
    targets.insert(targets.end(), parts[m].targets.begin(), parts[m].targets.end());
  }
  EXPECT_EQ(inputs, b.inputs);
  EXPECT_EQ(targets, b.targets);
  EXPECT_THAT(error_of([&] { b.split(4); }),
              HasSubstr("expected a number of micro-batches dividing the 6 rows of this rank, found 4"));
}

TEST(TokenLoader, ClearErrors) {
  auto data = std::make_shared<bmt::data::SyntheticMarkovDataset>(bmt::data::MarkovOptions{20, 3, 1, 10});
  auto o = options(0, 5);
  EXPECT_THAT(error_of([&] { TokenLoader l(data, o); }),
              HasSubstr("expected a global batch divisible by the world size 5, found 12 sequences"));
  EXPECT_THAT(error_of([&] { TokenLoader l(data, options(0, 1)); }),
              HasSubstr("expected at least one global batch of 12 sequences of 8 + 1 tokens, found 10"));
  auto small_vocab = options(0, 1);
  small_vocab.vocab_size = 10;
  auto more = std::make_shared<bmt::data::SyntheticMarkovDataset>(bmt::data::MarkovOptions{20, 3, 1, 100});
  TokenLoader l(more, small_vocab);
  EXPECT_THAT(error_of([&] { l.next(); }), HasSubstr("expected tokens below the vocabulary size 10, found"));
  EXPECT_THAT(error_of([&] { TokenLoader bad(more, options(4, 4)); }),
              HasSubstr("expected 0 <= rank < world_size, found rank 4 of 4"));
}
