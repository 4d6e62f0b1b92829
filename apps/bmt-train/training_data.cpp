#include "training_data.hpp"

#include <bmtrain/data/synthetic_markov.hpp>
#include <bmtrain/data/token_dataset.hpp>

namespace bmt_train {

TrainingData open_training_data(const TrainOptions& o, const ModelConfig& c) {
  TrainingData d;
  if (o.data == "synthetic") {
    bmt::data::MarkovOptions m;
    m.vocab_size = static_cast<std::int32_t>(c.vocab);
    m.seed = o.seed;
    auto chain = std::make_shared<bmt::data::SyntheticMarkovDataset>(m);
    d.entropy_rate = chain->entropy_rate();
    d.train = chain;
    d.val = chain;  // evaluated in another order (the validation loader's seed)
  } else {
    auto files = std::make_shared<bmt::data::TokenDataset>(o.data, bmt::data::parse_token_file_format(o.data_format));
    for (std::size_t i = 0; i < files->shard_count(); ++i) d.files.emplace_back(files->shard(i).path(), files->shard(i).size());
    d.train = files;
  }
  if (!o.val_data.empty())
    d.val = std::make_shared<bmt::data::TokenDataset>(o.val_data, bmt::data::parse_token_file_format(o.data_format));
  return d;
}

bmt::data::TokenLoader make_loader(std::shared_ptr<const bmt::data::SequenceSource> source, const TrainOptions& o,
                                 const ModelConfig& c, std::uint64_t seed, bool shuffle) {
  bmt::data::LoaderOptions lo;
  lo.shuffle = shuffle;
  lo.global_batch = static_cast<std::size_t>(o.batch);
  lo.seq_len = static_cast<std::size_t>(o.seq);
  lo.seed = seed;
  lo.vocab_size = c.vocab;
  return bmt::data::TokenLoader(std::move(source), lo);
}

}  // namespace bmt_train
