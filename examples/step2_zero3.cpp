// Step 2 of the quick start: ZeRO-3. The model derives from bmt::DistributedModule, its parameters
// are bmt::DistributedParameters, and each transformer block is wrapped in a bmt::CheckpointBlock.
// Every parameter, gradient and optimizer state is then sharded over the ranks; a block's
// parameters are gathered just before it runs and freed after, and backward recomputes the block.
//
//   mpirun -np 2 ./step2_zero3      srun -n 2 ./step2_zero3      ./step2_zero3
//
// The quick start's MyModule, in C++:
//
//   class MyModule(bmt.DistributedModule):
//       def __init__(self):
//           self.param = bmt.DistributedParameter(torch.empty(1024))
//           self.module_list = ModuleList([bmt.CheckpointBlock(SomeTransformerBlock()) x3])
//       def forward(self):
//           x = self.param
//           for module in self.module_list:
//               x = module(x, 1, 2, 3)
//           return x
//
// Runs one training step and exits non-zero unless it lowered the loss.
#include <bmtrain/bmtrain.hpp>

#include "some_transformer_block.hpp"
#include "training_step.hpp"

using example::SomeTransformerBlock;

struct MyModule : bmt::DistributedModule {
  // Outside the blocks: sharded on its own (one storage per parameter), gathered by param.gather().
  // (torch.empty would leave it uninitialized; here it starts from N(0, 1) so the blocks see data.)
  bmt::DistributedParameter param{{example::kParamSize}, bmt::init::normal(1.0f)};
  bmt::nn::ModuleList<bmt::CheckpointBlock<SomeTransformerBlock>> module_list;

  MyModule() {
    register_parameter("param", param);
    // CheckpointBlock<B>'s constructor arguments are B's: SomeTransformerBlock(dim, ffn).
    for (int i = 0; i < example::kBlocks; ++i) module_list.append(example::kDim, example::kFfn);
    register_module("module_list", module_list);
  }

  bmt::Tensor forward() {
    bmt::Tensor x = param.gather();  // the full [1024] value; its gradient flows back to the shard
    for (auto& module : module_list) x = module(x, 1, 2, 3);
    return x;
  }
};

int main(int argc, char** argv) {
  bmt::InitOptions options;
  options.seed = 0;  // bmt.init_distributed(seed=0)
  bmt::DistributedGuard guard(&argc, &argv, options);

  MyModule model;
  // Gives every parameter its shard and its initial value (keyed by seed and parameter name, so
  // the model is the same at every world size). Once, after building, before the first forward.
  bmt::init_parameters(model);
  std::int64_t count = 0, local = 0;
  for (auto* s : bmt::sharded_storages(model)) {
    count += s->parameter_count();
    local += s->shard_size();
  }
  bmt::print_rank("step 2: ", count, " parameters in ", bmt::sharded_storages(model).size(),
                  " sharded storages; each of ", bmt::world_size(), " rank(s) holds ", local, " elements");

  const example::StepResult r = example::train_one_step(model, [&] { return model.forward(); });
  bmt::print_rank("step 2 (CheckpointBlock loop): loss ", example::digits(r.loss), ", grad norm ",
                  example::digits(r.grad_norm), ", loss after one AdamW step ", example::digits(r.loss_after));
  if (!(r.loss_after < r.loss)) {
    bmt::print_rank("step 2: FAILED: the step did not lower the loss");
    return 1;
  }
  bmt::print_rank("step 2: ok");
  return 0;
}
