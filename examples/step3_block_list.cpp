// Step 3 of the quick start: hide communication behind computation. The blocks go into a
// bmt::TransformerBlockList, called once instead of in a loop: while block i computes, the
// parameters of block i+1 are gathered; in backward, block i-1 is gathered and block i+1's
// gradients are reduce-scattered while block i recomputes and backpropagates.
//
//   mpirun -np 2 ./step3_block_list      srun -n 2 ./step3_block_list      ./step3_block_list
//
//   self.module_list = bmt.TransformerBlockList([CheckpointBlock(SomeTransformerBlock()) x3])
//   x = self.module_list(x, 1, 2, 3)
//
// The schedule changes, the arithmetic does not: this program trains the model both ways from the
// same seed, the block list in one call and step 2's loop over the same CheckpointBlocks, and exits
// non-zero if the loss, the gradient norm or the loss after the step differ by more than 1e-6
// (relative). Parameter names match step 2's ("module_list.1.qkv.weight"), so at the same world
// size its numbers are step 2's too.
#include <bmtrain/bmtrain.hpp>

#include <algorithm>
#include <cmath>

#include "some_transformer_block.hpp"
#include "training_step.hpp"

using example::SomeTransformerBlock;

struct MyModule : bmt::DistributedModule {
  bmt::DistributedParameter param{{example::kParamSize}, bmt::init::normal(1.0f)};
  // prefetch_depth 1: gather one block ahead (0 turns the overlap off).
  bmt::TransformerBlockList<SomeTransformerBlock> module_list{/*prefetch_depth=*/1};

  MyModule() {
    register_parameter("param", param);
    // append(args...) builds CheckpointBlock<SomeTransformerBlock>(args...) at the end of the list.
    for (int i = 0; i < example::kBlocks; ++i) module_list.append(example::kDim, example::kFfn);
    register_module("module_list", module_list);
  }

  // Step 3: one call runs the whole stack with prefetching.
  bmt::Tensor forward() { return module_list(param.gather(), 1, 2, 3); }

  // Step 2's loop over the same CheckpointBlocks, one at a time (no overlap): the reference.
  bmt::Tensor forward_loop() {
    bmt::Tensor x = param.gather();
    for (std::size_t i = 0; i < module_list.size(); ++i) x = module_list[i](x, 1, 2, 3);
    return x;
  }
};

namespace {

bool close(float a, float b, double rel) {
  return std::fabs(static_cast<double>(a) - b) <= rel * std::max(std::fabs(static_cast<double>(b)), 1e-30);
}

}  // namespace

int main(int argc, char** argv) {
  bmt::InitOptions options;
  options.seed = 0;
  bmt::DistributedGuard guard(&argc, &argv, options);

  // Two models, each with its own shards; the same seed and names give them the same parameters.
  MyModule model, reference;
  bmt::init_parameters(model);
  bmt::init_parameters(reference);

  const example::StepResult got = example::train_one_step(model, [&] { return model.forward(); });
  const example::StepResult want = example::train_one_step(reference, [&] { return reference.forward_loop(); });
  bmt::print_rank("step 3 (TransformerBlockList): loss ", example::digits(got.loss), ", grad norm ",
                  example::digits(got.grad_norm), ", loss after one AdamW step ", example::digits(got.loss_after));
  bmt::print_rank("step 2 loop, same seed:        loss ", example::digits(want.loss), ", grad norm ",
                  example::digits(want.grad_norm), ", loss after one AdamW step ", example::digits(want.loss_after));

  constexpr double kTolerance = 1e-6;
  const bool same = close(got.loss, want.loss, kTolerance) && close(got.grad_norm, want.grad_norm, kTolerance) &&
                    close(got.loss_after, want.loss_after, kTolerance);
  if (!same) {
    bmt::print_rank("step 3: FAILED: the block list and the loop differ by more than ", kTolerance, " (relative)");
    return 1;
  }
  bmt::print_rank("step 3: ok: the block list matches the loop within ", kTolerance, " (relative)");
  return 0;
}
