// The quick start with tensor parallelism: tp_size = 2, so 4 ranks (mpirun -np 4) are 2 data-
// parallel groups of 2 tensor-parallel ranks, each group training on its half of the batch. The
// model's blocks, embedding and loss are split over the pair; ZeRO-3 shards each rank's parts over
// the data-parallel group. Exits non-zero unless the loss falls and the saved whole tensors load back
// into the same loss.
#include <bmtrain/bmtrain.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

int main(int argc, char** argv) {
  bmt::InitOptions options;  // step 1: the runtime, with its mesh
  options.seed = 0;
  options.tp_size = 2;  // consecutive ranks of a node; must divide the world
  bmt::DistributedGuard runtime(&argc, &argv, options);
  bmt::print_rank("tp ", bmt::tp_size(), " x dp ", bmt::dp_size());

  bmt::models::ModelConfig config = bmt::models::preset("tiny");  // 4 heads, vocab 256: divisible by 2
  bmt::models::CausalLM model(config);  // steps 2 and 3: blocks in a TransformerBlockList, sharded
  bmt::init_parameters(model);          // the same whole weights as at 1 rank
  bmt::optim::AdamW adamw(model);
  bmt::optim::OptimManager manager;
  manager.add_optimizer(adamw);

  // The ranks of a tp group share their sequences; the data-parallel groups split the batch.
  const std::int64_t B = 2, T = 16;
  std::vector<std::int64_t> ids(B * T), next(B * T);
  for (std::int64_t i = 0; i < B * T; ++i) {
    ids[i] = (i + 5 * bmt::dp_rank()) % config.vocab;
    next[i] = (ids[i] + 1) % config.vocab;
  }
  const bmt::Tensor tokens = bmt::Tensor::from_ints(ids, {B, T}, bmt::DType::i32);
  const bmt::Tensor targets = bmt::Tensor::from_ints(next, {B, T}, bmt::DType::i32);
  float first = 0, last = 0;
  for (int step = 0; step < 10; ++step) {
    const bmt::Tensor loss = model.loss(tokens, targets);  // the same on every rank of the group
    manager.backward(loss);
    manager.step();
    manager.zero_grad();
    last = bmt::sum_loss(loss);
    if (step == 0) first = last;
  }

  bmt::save(model, "tp_model.safetensors");  // whole tensors: loads at any tp and world size
  bmt::models::CausalLM reloaded(config);
  bmt::init_parameters(reloaded);
  bmt::load(reloaded, "tp_model.safetensors");
  bmt::NoGradGuard no_grad;
  const float trained = bmt::sum_loss(model.loss(tokens, targets));
  const float again = bmt::sum_loss(reloaded.loss(tokens, targets));
  bmt::print_rank("loss ", first, " -> ", last, "; trained ", trained, ", reloaded ", again);
  return last < first && again == trained ? 0 : 1;
}
