#include "training_data.hpp"

#include <bmtrain/io/synthetic_markov.hpp>
#include <bmtrain/io/token_dataset.hpp>

namespace bmt_train {

TrainingData open_training_data(const TrainOptions& o, const ModelConfig& c) {
  TrainingData d;
  if (o.data == "synthetic") {
    bmt::io::MarkovOptions m;
    m.vocab_size = static_cast<std::int32_t>(c.vocab);
    m.seed = o.seed;
    auto chain = std::make_shared<bmt::io::SyntheticMarkovDataset>(m);
    d.entropy_rate = chain->entropy_rate();
    d.train = chain;
    d.val = chain;  // evaluated in another order (the validation loader's seed)
  } else {
    auto files = std::make_shared<bmt::io::TokenDataset>(o.data, bmt::io::parse_token_file_format(o.data_format));
    for (std::size_t i = 0; i < files->shard_count(); ++i) d.files.emplace_back(files->shard(i).path(), files->shard(i).size());
    d.train = files;
  }
  if (!o.val_data.empty())
    d.val = std::make_shared<bmt::io::TokenDataset>(o.val_data, bmt::io::parse_token_file_format(o.data_format));
  return d;
}

bmt::io::TokenLoader make_loader(std::shared_ptr<const bmt::io::SequenceSource> source, const TrainOptions& o,
                                 const ModelConfig& c, std::uint64_t seed, bool shuffle) {
  bmt::io::LoaderOptions lo;
  lo.shuffle = shuffle;
  lo.global_batch = static_cast<std::size_t>(o.batch);
  lo.seq_len = static_cast<std::size_t>(o.seq);
  lo.seed = seed;
  lo.vocab_size = c.vocab;
  return bmt::io::TokenLoader(std::move(source), lo);
}

}  // namespace bmt_train
