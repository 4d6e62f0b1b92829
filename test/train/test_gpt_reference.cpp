// bmt-train's GPT-2 and Llama (ZeRO-3 over the ranks, f32) against a float64 reference written
// from the models' definitions with nothing of bmtrain (gpt_reference.hpp): a step's loss, and its
// gradients at coordinates spread over every parameter against central differences of the
// reference's loss. Every rank computes the reference on the whole global batch, of which it
// trains on its own part: the gradients reduced over the ranks are the whole batch's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "../zero/gathered_parameters.hpp"
#include "gpt_reference.hpp"
#include "small_gpt.hpp"

namespace {

// The whole global batch of `step` as the reference takes it: [batch][seq] tokens and targets.
struct Batch {
  std::vector<std::vector<std::int64_t>> tokens, targets;
};
Batch reference_batch(int step, std::int64_t vocab) {
  const auto all = small_gpt::sequences(small_gpt::global_batch(step, vocab), 0, small_gpt::kGlobalBatch);
  Batch b;
  for (std::int64_t i = 0; i < small_gpt::kGlobalBatch; ++i) {
    const auto row = [&](const std::vector<std::int64_t>& v) {
      return std::vector<std::int64_t>(v.begin() + i * small_gpt::kSeq, v.begin() + (i + 1) * small_gpt::kSeq);
    };
    b.tokens.push_back(row(all.tokens));
    b.targets.push_back(row(all.targets));
  }
  return b;
}

// A step's mean loss over the global batch; the gradients stay in the gradient shards.
float loss_and_gradients(bmt_train::GPT& model, bmt::optim::OptimManager& manager, int step, bool through_manager) {
  const int n = bmt::world_size();
  const std::int64_t local = small_gpt::kGlobalBatch / n;
  const auto mine = small_gpt::sequences(small_gpt::global_batch(step, model.config().vocab), bmt::rank() * local, local);
  manager.zero_grad();
  bmt::Tensor loss = model.loss(bmt::Tensor::from_ints(mine.tokens, {local, small_gpt::kSeq}),
                                bmt::Tensor::from_ints(mine.targets, {local, small_gpt::kSeq}));
  if (through_manager)
    manager.backward(loss);
  else
    loss.backward();
  float l = loss.to_host_floats()[0];
  bmt::context().host_comm().all_reduce(&l, &l, 1, bmt::DType::f32, bmt::ReduceOp::avg, bmt::context().compute_stream());
  return l;
}

// The two-block model of `arch` after one AdamW step, held to the reference at the next batch.
void expect_reference_loss_and_gradients(const std::string& arch, std::size_t parameters) {
  const auto cfg = small_gpt::config(arch, 2);
  bmt_train::GPT model(cfg);
  bmt::init_parameters(model);
  bmt::optim::AdamW adamw(model, bmt::optim::AdamWOptions{});
  bmt::optim::ConstantLR lr(3e-2f, 0);
  bmt::optim::OptimManager manager;
  manager.add_optimizer(adamw, &lr);
  // One AdamW step first, so that no parameter sits at an initial constant (the norms' ones and
  // zeros, the zero biases), where a swapped or dropped term could go unseen.
  loss_and_gradients(model, manager, 0, true);
  manager.step();
  const float loss = loss_and_gradients(model, manager, 1, false);
  const bmt_test::Gathered params = bmt_test::gathered(model);

  gpt_reference::Params reference;
  for (const auto& [name, vg] : params) reference[name] = std::vector<double>(vg.first.begin(), vg.first.end());
  ASSERT_EQ(reference.size(), parameters) << arch;
  const gpt_reference::Shape shape{arch, cfg.vocab, cfg.dim, cfg.heads, cfg.ffn, cfg.layers, cfg.norm_eps,
                                   cfg.rope_theta};
  const Batch batch = reference_batch(1, cfg.vocab);
  const double reference_loss = gpt_reference::loss(reference, shape, batch.tokens, batch.targets);
  EXPECT_NEAR(loss, reference_loss, 1e-5 * reference_loss);

  // Five coordinates spread over each parameter, and two in a row of wte the batch's tokens pick
  // (its gradient comes from the embedding, and in GPT-2 from the tied head as well).
  int checked = 0;
  for (const auto& [name, vg] : params) {
    const std::vector<float>& grad = vg.second;
    const std::size_t numel = grad.size();
    std::vector<std::size_t> at;
    for (std::size_t i = 0; i < 5; ++i) at.push_back((numel * (2 * i + 1)) / 10);
    if (name == "wte")
      for (std::size_t c : {std::size_t{0}, std::size_t{17}})
        at.push_back(static_cast<std::size_t>(batch.tokens[3][5]) * static_cast<std::size_t>(cfg.dim) + c);
    for (std::size_t i : at) {
      const double h = 1e-4, kept = reference[name][i];
      reference[name][i] = kept + h;
      const double up = gpt_reference::loss(reference, shape, batch.tokens, batch.targets);
      reference[name][i] = kept - h;
      const double down = gpt_reference::loss(reference, shape, batch.tokens, batch.targets);
      reference[name][i] = kept;
      const double want = (up - down) / (2 * h);
      // f32 against float64: within 2e-6 relative where measured on the host, or 4e-9 absolute
      // where the gradient nearly cancels (3e-5); 1e-4 relative with a 1e-7 floor leaves room
      // for other summation orders, while a wrong term moves a gradient by far more.
      EXPECT_NEAR(grad[i], want, 1e-4 * std::fabs(want) + 1e-7) << arch << " " << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 5 * static_cast<int>(parameters) + 2);
}

}  // namespace

TEST(GptReference, Gpt2LossAndGradientsMatchAFloat64Reference) {
  expect_reference_loss_and_gradients("gpt2", 4 + 12 * 2);  // wte, wpe, ln_f's two; 12 a block
}

TEST(GptReference, LlamaLossAndGradientsMatchAFloat64Reference) {
  expect_reference_loss_and_gradients("llama", 3 + 9 * 2);  // wte, norm, lm_head; 9 a block
}
