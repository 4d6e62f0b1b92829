#pragma once
// The token sources a run trains and evaluates on, and the loaders that batch them.
#include <bmtrain/data/sequence_source.hpp>
#include <bmtrain/data/token_loader.hpp>

#include <cstdint>
#include <memory>

#include "options.hpp"
#include "trajectory.hpp"

namespace bmt_train {

struct TrainingData {
  std::shared_ptr<const bmt::data::SequenceSource> train, val;  // val: null when there is none
  double entropy_rate = -1;  // lowest achievable loss, when known (synthetic data)
  DataFiles files;           // the training files, in order (none for synthetic data)
};

// --data and --val-data: the synthetic Markov chain (its held-out sequences come from the same
// chain, read in another order) or token files.
TrainingData open_training_data(const TrainOptions& options, const ModelConfig& config);

// A loader of --batch sequences of --seq tokens a step, shuffled by `seed` (or in the source's
// order when not `shuffle`).
bmt::data::TokenLoader make_loader(std::shared_ptr<const bmt::data::SequenceSource> source, const TrainOptions& options,
                                 const ModelConfig& config, std::uint64_t seed, bool shuffle = true);

}  // namespace bmt_train
