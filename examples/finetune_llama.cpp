// Fine-tune a released Llama: build the model a Hugging Face folder describes, load its weights
// into ZeRO-3 shards, train it on token files (or, without them, on a synthetic pattern), and write
// the result back as a folder transformers' from_pretrained loads.
//
//   mpirun -np 2 ./finetune_llama Llama-3.2-1B/ fine-tuned/ [steps] ['data/train_*.bin']
//
// It checks its own result, so it also runs as a test: the loss falls, and the exported folder,
// loaded into a fresh model, gives the trained model's loss.
#include <bmtrain/bmtrain.hpp>
#include <bmtrain/data/synthetic_markov.hpp>
#include <bmtrain/data/token_dataset.hpp>
#include <bmtrain/data/token_loader.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace {

constexpr std::int64_t kBatch = 8, kSeq = 32;  // sequences a step over all ranks, tokens each

// The mean loss of one batch over the ranks, without recording a graph.
float evaluate(bmt::models::CausalLM& model, const bmt::data::TokenBatch& batch) {
  bmt::NoGradGuard no_grad;
  const auto rows = static_cast<std::int64_t>(batch.rows);
  const auto ids = bmt::Tensor::from_host(batch.inputs.data(), {rows, kSeq}, bmt::DType::i32);
  const auto targets = bmt::Tensor::from_host(batch.targets.data(), {rows, kSeq}, bmt::DType::i32);
  return bmt::sum_loss(model.loss(ids, targets));
}

}  // namespace

int main(int argc, char** argv) {
  bmt::init_distributed();
  if (argc < 3) {
    bmt::print_rank("usage: finetune_llama HF_DIR OUT_DIR [steps] [token files]");
    bmt::finalize();
    return 2;
  }
  const std::string from = argv[1], to = argv[2];
  const std::int64_t steps = argc > 3 ? std::atoll(argv[3]) : 30;

  // The model the folder describes, in bf16 on a GPU (f32 on the host build, for exact checks).
  bmt::models::ModelConfig config = bmt::models::read_hf_config(from);
  config.dtype = bmt::memory::is_host() ? bmt::DType::f32 : bmt::DType::bf16;
  bmt::models::CausalLM model(config);
  bmt::init_parameters(model);                         // each rank allocates only its shards
  bmt::models::load_hf_checkpoint(model, from);        // and reads only their elements

  // Token files, or a random Markov chain over the model's vocabulary.
  std::shared_ptr<const bmt::data::SequenceSource> data;
  if (argc > 4) {
    data = std::make_shared<bmt::data::TokenDataset>(argv[4]);
  } else {
    bmt::data::MarkovOptions markov;
    markov.vocab_size = static_cast<std::int32_t>(config.vocab);
    markov.seed = 3;
    data = std::make_shared<bmt::data::SyntheticMarkovDataset>(markov);
  }
  bmt::data::LoaderOptions lo;
  lo.global_batch = kBatch;  // each rank takes its kBatch / N rows of every batch
  lo.seq_len = kSeq;
  lo.vocab_size = config.vocab;
  bmt::data::TokenLoader loader(data, lo);
  const bmt::data::TokenBatch held_out = loader.next();

  bmt::optim::AdamW adamw(model);
  bmt::optim::CosineLR schedule(/*peak=*/1e-3f, /*warmup=*/2, steps, /*min_lr=*/1e-4f);
  bmt::optim::OptimManagerOptions mo;
  mo.clip_grad_norm = 1.0f;
  bmt::optim::OptimManager manager(mo);
  manager.add_optimizer(adamw, &schedule);

  const float before = evaluate(model, held_out);
  for (std::int64_t step = 1; step <= steps; ++step) {
    const bmt::data::TokenBatch batch = loader.next();
    const auto rows = static_cast<std::int64_t>(batch.rows);
    const auto ids = bmt::Tensor::from_host(batch.inputs.data(), {rows, kSeq}, bmt::DType::i32);
    const auto targets = bmt::Tensor::from_host(batch.targets.data(), {rows, kSeq}, bmt::DType::i32);
    const bmt::Tensor loss = model.loss(ids, targets);
    manager.backward(loss);
    manager.step();
    manager.zero_grad();
    if (step % 10 == 0 || step == steps) bmt::print_rank("step ", step, " loss ", bmt::sum_loss(loss));
  }
  const float after = evaluate(model, held_out);
  bmt::models::save_hf_checkpoint(model, to);

  // The export, loaded into a fresh model, is the trained model.
  bmt::models::CausalLM reloaded(bmt::models::read_hf_config(to));
  bmt::init_parameters(reloaded);
  bmt::models::load_hf_checkpoint(reloaded, to);
  const float again = evaluate(reloaded, held_out);
  bmt::print_rank("held-out loss ", before, " -> ", after, "; exported and reloaded: ", again);
  const bool ok = after < before && std::fabs(again - after) <= 1e-6f * std::fabs(after) + 1e-6f;
  if (!ok) bmt::print_rank("FAILED: expected the loss to fall and the export to reload the trained model");
  bmt::finalize();
  return ok ? 0 : 1;
}
