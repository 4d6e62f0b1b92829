// A whole training loop on the library's own layers: a small causal language model trained for
// 40 steps on a synthetic Markov chain with a cosine schedule, gradient clipping and gradient
// accumulation, a crash-safe checkpoint at step 20, and a resume from it.
//
//   mpirun -np 2 ./train_loop [checkpoint-root]      (default: ./train_loop_ckpt)
//
// The program checks its own result, so it also runs as a test: the loss must fall, and the run
// resumed from the step-20 checkpoint (a fresh model and optimizer, loaded) must repeat the
// uninterrupted run's steps 21-40 exactly, loss for loss and gradient norm for gradient norm.
#include <bmtrain/bmtrain.hpp>
#include <bmtrain/io/checkpoint_dir.hpp>
#include <bmtrain/data/synthetic_markov.hpp>
#include <bmtrain/data/token_loader.hpp>
#include <bmtrain/io/training_state.hpp>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr std::int64_t kVocab = 64, kDim = 64, kHeads = 4, kFfn = 256, kLayers = 2;
constexpr std::int64_t kSeq = 32, kBatch = 16, kAccumulation = 2;  // kBatch: sequences a step, all ranks
constexpr std::int64_t kSteps = 40, kSaveAt = 20;
constexpr float kPeakLr = 3e-3f, kClip = 1.0f;

// Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x)).
struct Block : bmt::Module {
  bmt::nn::LayerNorm ln_attn{kDim}, ln_mlp{kDim};
  bmt::nn::Linear qkv{kDim, 3 * kDim}, out{kDim, kDim}, up{kDim, kFfn}, down{kFfn, kDim};
  Block() {
    register_module("ln_attn", ln_attn);
    register_module("qkv", qkv);
    register_module("out", out);
    register_module("ln_mlp", ln_mlp);
    register_module("up", up);
    register_module("down", down);
  }
  bmt::Tensor forward(const bmt::Tensor& x) const {
    const std::int64_t B = x.size(0), T = x.size(1), D = kDim / kHeads;
    auto q_k_v = bmt::split(qkv.forward(ln_attn.forward(x)), {kDim, kDim, kDim}, -1);
    const bmt::Tensor a = bmt::attention_bthd(bmt::reshape(q_k_v[0], {B, T, kHeads, D}),
                                              bmt::reshape(q_k_v[1], {B, T, kHeads, D}),
                                              bmt::reshape(q_k_v[2], {B, T, kHeads, D}), /*causal=*/true);
    const bmt::Tensor h = out.forward_onto(x, bmt::reshape(a, {B, T, kDim}));
    return down.forward_onto(h, up.forward_gelu(ln_mlp.forward(h)));
  }
};

struct LanguageModel : bmt::DistributedModule {
  bmt::nn::Embedding tokens{kVocab, kDim};
  bmt::TransformerBlockList<Block> blocks;  // ZeRO-3: gathered block by block, prefetched, recomputed
  bmt::nn::LayerNorm ln_f{kDim};
  bmt::nn::Linear head{kDim, kVocab, /*with_bias=*/false};
  LanguageModel() {
    register_module("tokens", tokens);
    for (int i = 0; i < kLayers; ++i) blocks.append();
    register_module("blocks", blocks);
    register_module("ln_f", ln_f);
    register_module("head", head);
  }
  // Mean next-token cross-entropy of a [B, T] batch.
  bmt::Tensor loss(const bmt::Tensor& ids, const bmt::Tensor& targets) {
    const bmt::Tensor h = ln_f.forward(blocks(tokens.forward(ids)));
    return bmt::cross_entropy(bmt::reshape(head.forward(h), {-1, kVocab}), bmt::reshape(targets, {-1}));
  }
};

struct StepLog {
  std::vector<float> loss, norm;
};

// Everything a run holds; a resumed run builds a fresh one and loads it from a checkpoint.
struct Run {
  LanguageModel model;
  std::unique_ptr<bmt::optim::AdamW> adamw;
  bmt::optim::CosineLR schedule{kPeakLr, /*warmup=*/4, kSteps, /*min_lr=*/kPeakLr / 10};
  std::unique_ptr<bmt::optim::OptimManager> manager;
  std::unique_ptr<bmt::data::TokenLoader> loader;
  std::int64_t step = 0;

  explicit Run(std::shared_ptr<const bmt::data::SequenceSource> data) {
    bmt::init_parameters(model);  // each rank initializes only its shards
    adamw = std::make_unique<bmt::optim::AdamW>(model);
    bmt::optim::OptimManagerOptions options;
    options.clip_grad_norm = kClip;
    options.accumulation_steps = static_cast<int>(kAccumulation);
    manager = std::make_unique<bmt::optim::OptimManager>(options);
    manager->add_optimizer(*adamw, &schedule);
    bmt::data::LoaderOptions lo;
    lo.global_batch = kBatch;
    lo.seq_len = kSeq;
    lo.seed = 7;
    lo.vocab_size = kVocab;
    loader = std::make_unique<bmt::data::TokenLoader>(std::move(data), lo);
  }

  // One optimizer step over kAccumulation micro-batches; the loss is the mean over ranks.
  void train_step(StepLog& log) {
    float loss_sum = 0;
    for (const auto& mb : loader->next().split(kAccumulation)) {
      const auto rows = static_cast<std::int64_t>(mb.rows);
      const auto ids = bmt::Tensor::from_host(mb.inputs.data(), {rows, kSeq}, bmt::DType::i32);
      const auto targets = bmt::Tensor::from_host(mb.targets.data(), {rows, kSeq}, bmt::DType::i32);
      const bmt::Tensor loss = model.loss(ids, targets);
      manager->backward(loss);  // gradients reduce-scattered into each rank's shard, accumulated
      loss_sum += bmt::sum_loss(loss);  // the mean over ranks
    }
    manager->step();  // clips by the global norm, then AdamW on each rank's shards
    manager->zero_grad();
    ++step;
    log.loss.push_back(loss_sum / kAccumulation);
    log.norm.push_back(manager->last_grad_norm());
  }

  void save(bmt::io::CheckpointDir& dir) {
    const std::string path = dir.begin_save(step);
    bmt::save(model, path + "/model.safetensors");
    bmt::io::save_optimizer(*adamw, path + "/optimizer.safetensors");
    bmt::io::TrainingState state;
    state.step = step;
    state.lr_scheduler = {{"step", schedule.current_step()}};
    state.data = loader->state();
    bmt::io::save_training_state(path + "/training_state.json", state);
    dir.commit_save(step);
  }

  void load(const std::string& path) {
    bmt::load(model, path + "/model.safetensors");
    bmt::io::load_optimizer(*adamw, path + "/optimizer.safetensors");
    const bmt::io::TrainingState state = bmt::io::load_training_state(path + "/training_state.json");
    step = state.step;
    schedule.set_step(state.lr_scheduler.at("step").get<std::int64_t>());
    loader->restore(state.data.get<bmt::data::LoaderState>());
  }
};

}  // namespace

int main(int argc, char** argv) {
  bmt::DistributedGuard runtime(&argc, &argv);
  const std::string root = argc > 1 ? argv[1] : "train_loop_ckpt";
  bmt::data::MarkovOptions markov;
  markov.vocab_size = kVocab;
  markov.seed = 3;
  const auto data = std::make_shared<bmt::data::SyntheticMarkovDataset>(markov);

  // The uninterrupted run, saving at step 20 on the way.
  StepLog straight;
  bmt::io::CheckpointDir checkpoints(root, /*keep_last=*/1);
  {
    Run run(data);
    bmt::print_rank(bmt::inspect(run.model));  // every parameter's shape and statistics
    while (run.step < kSteps) {
      run.train_step(straight);
      if (run.step == kSaveAt) run.save(checkpoints);
      if (run.step % 10 == 0)
        bmt::print_rank("step ", run.step, " | loss ", straight.loss.back(), " | norm ", straight.norm.back(),
                        " | lr ", run.schedule.current_lr());
    }
  }

  // A fresh model and optimizer, resumed from the newest complete checkpoint.
  StepLog resumed;
  Run run(data);
  const auto last = checkpoints.latest();
  if (!last || *last != kSaveAt) {
    bmt::print_rank("train_loop: expected the checkpoint of step ", kSaveAt, " under ", root, ", found none");
    return 1;
  }
  run.load(checkpoints.step_path(*last));
  while (run.step < kSteps) run.train_step(resumed);

  bool ok = straight.loss.back() < 0.8f * straight.loss.front();
  for (std::size_t i = 0; i < resumed.loss.size(); ++i) {
    const std::size_t k = i + static_cast<std::size_t>(kSaveAt);
    ok = ok && resumed.loss[i] == straight.loss[k] && resumed.norm[i] == straight.norm[k];
  }
  bmt::print_rank("loss ", straight.loss.front(), " -> ", straight.loss.back(), " (lowest achievable ",
                  data->entropy_rate(), "); resumed at step ", kSaveAt, ": steps ", kSaveAt + 1, "-", kSteps,
                  ok ? " identical to the uninterrupted run" : " DIFFER from the uninterrupted run");
  return ok ? 0 : 1;
}
