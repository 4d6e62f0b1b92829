// Tensor parallelism end to end: GPT-2 and two grouped-query Llamas (key/value heads split over the
// tp group, and fewer key/value heads than tp ranks, replicated) built at tp 1 and trained in f32,
// two micro-batches a step, with AdamW and with SGD clipped to a gradient norm below every step's,
// saved halfway and resumed from the files in a model and optimizer built anew; and GPT-2 with
// dropout at dp 1.
// The 1-rank run writes each run's initial parameters, per-step losses, gradient norms and final
// parameters to BMT_GOLDEN_FILE; runs at tp 2 (x dp 1 or 2) must start from exactly the same whole
// parameters and agree at every step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>

#include "bmtrain/optim/sgd.hpp"
#include "float_vectors_file.hpp"
#include "small_gpt.hpp"
#include "common/tensor_parallel_reference.hpp"

namespace {

struct TrainingRun {
  std::vector<float> initial;  // every parameter, whole, in name order, before the first step
  std::vector<float> losses;
  std::vector<float> norms;
  std::vector<float> params;  // every parameter, whole, in name order, after the last step
};

constexpr float kClip = 0.05f;
constexpr int kSteps = 8, kMicroBatches = 2;

// The small models with a vocabulary that divides by 2, and Llamas of 4 query heads.
bmt::models::ModelConfig config(const std::string& name) {
  const bool gpt2 = name.rfind("gpt2", 0) == 0;
  auto c = small_gpt::config(gpt2 ? "gpt2" : "llama", 2);
  c.vocab = 68;
  if (name == "gpt2-dropout") c.dropout = 0.1f;
  if (!gpt2) {
    c.heads = 4;
    c.kv_heads = name == "llama-kv2" ? 2 : 1;
  }
  return c;
}

std::vector<float> flat(const std::map<std::string, std::vector<float>>& by_name) {
  std::vector<float> out;
  for (const auto& [name, v] : by_name) out.insert(out.end(), v.begin(), v.end());
  return out;
}

// A model with its optimizer, schedule and OptimManager, as a run builds them (and a resumed one
// again, before it loads the checkpoint).
struct Training {
  std::unique_ptr<bmt::models::CausalLM> model;
  std::unique_ptr<bmt::optim::Optimizer> optimizer;
  std::unique_ptr<bmt::optim::CosineLR> lr;
  std::unique_ptr<bmt::optim::OptimManager> manager;

  Training(const bmt::models::ModelConfig& cfg, bool clipped_sgd) {
    model = std::make_unique<bmt::models::CausalLM>(cfg, bmt::models::CausalLMOptions{1, {}});
    bmt::init_parameters(*model);
    bmt::optim::OptimManagerOptions mo;
    mo.accumulation_steps = kMicroBatches;
    if (clipped_sgd) {
      optimizer = std::make_unique<bmt::optim::SGD>(*model);
      mo.clip_grad_norm = kClip;
    } else {
      bmt::optim::AdamWOptions ao;
      ao.weight_decay = 0.1f;
      optimizer = std::make_unique<bmt::optim::AdamW>(*model, ao);
    }
    lr = std::make_unique<bmt::optim::CosineLR>(clipped_sgd ? 0.5f : 3e-3f, 2, kSteps);
    manager = std::make_unique<bmt::optim::OptimManager>(mo);
    manager->add_optimizer(*optimizer, lr.get());
  }
};

// Halfway, the run saves its model and optimizer state and goes on with a model and optimizer built
// anew from the files (whole tensors, at every layout), as a resumed job would.
TrainingRun train(const std::string& name, bool clipped_sgd, const std::string& resume_prefix) {
  const auto cfg = config(name);
  auto training = std::make_unique<Training>(cfg, clipped_sgd);
  TrainingRun run;
  run.initial = flat(bmt_test::whole_parameters(*training->model));

  // The ranks of a tp group see the same sequences: data parallelism splits the batch by dp rank.
  const std::int64_t local = small_gpt::kGlobalBatch / bmt::dp_size(), micro = local / kMicroBatches;
  for (int step = 0; step < kSteps; ++step) {
    if (step == kSteps / 2) {
      const auto saved = bmt_test::whole_parameters(*training->model);
      bmt::save(*training->model, resume_prefix + ".model");
      bmt::io::save_optimizer(*training->optimizer, resume_prefix + ".optimizer");
      training = std::make_unique<Training>(cfg, clipped_sgd);
      bmt::load(*training->model, resume_prefix + ".model");
      bmt::io::load_optimizer(*training->optimizer, resume_prefix + ".optimizer");
      training->lr->set_step(step);
      EXPECT_TRUE(bmt_test::whole_parameters(*training->model) == saved) << name << ": the resumed model";
      EXPECT_EQ(training->optimizer->step_count(), step) << name << ": the resumed optimizer's steps";
    }
    auto& manager = *training->manager;
    const auto batch = small_gpt::global_batch(step, cfg.vocab);
    manager.zero_grad();
    float l = 0;
    for (int m = 0; m < kMicroBatches; ++m) {
      const auto mine = small_gpt::sequences(batch, bmt::dp_rank() * local + m * micro, micro);
      bmt::Tensor tokens = bmt::Tensor::from_ints(mine.tokens, {micro, small_gpt::kSeq});
      bmt::Tensor targets = bmt::Tensor::from_ints(mine.targets, {micro, small_gpt::kSeq});
      bmt::Tensor loss = training->model->loss(tokens, targets);
      manager.backward(loss);
      l += loss.to_host_floats()[0] / kMicroBatches;
    }
    manager.step();
    manager.settle();
    run.norms.push_back(manager.last_grad_norm());
    if (clipped_sgd) EXPECT_GT(run.norms.back(), kClip) << "step " << step + 1 << " was not clipped";
    bmt::context().host_comm().all_reduce(&l, &l, 1, bmt::DType::f32, bmt::ReduceOp::avg,
                                          bmt::context().compute_stream());
    run.losses.push_back(l);
  }
  run.params = flat(bmt_test::whole_parameters(*training->model));
  return run;
}

const char* const kRuns[] = {"gpt2", "llama-kv2", "llama-kv1"};

void save(const std::string& path, const std::vector<TrainingRun>& runs) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  for (const auto& r : runs) bmt_test::write_vectors(f, {&r.initial, &r.losses, &r.norms, &r.params});
}

std::vector<TrainingRun> load(const std::string& path, std::size_t count) {
  std::ifstream f(path, std::ios::binary);
  std::vector<TrainingRun> runs(count);
  for (auto& r : runs) bmt_test::read_vectors(f, {&r.initial, &r.losses, &r.norms, &r.params});
  return f ? runs : std::vector<TrainingRun>{};
}

// As train_gpt_equivalence: the sums a tp group splits (attention heads, the MLP's width, the
// vocabulary's logsumexp) round differently from one rank's, and AdamW's normalized update turns
// last-bit differences of near-zero gradients into parameter differences of ~1e-5.
constexpr double kLossAcrossLayouts = 1e-5;
constexpr double kNormAcrossLayouts = 1e-5;
constexpr double kParamAcrossLayouts = 5e-5;

// The largest difference relative to max(1, |want|), printed on rank 0 so that a run shows how far
// inside its tolerance the layout's rounding lands.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double largest = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double scale = std::max(1.0, std::fabs(static_cast<double>(want[i])));
    ASSERT_NEAR(got[i], want[i], rel * scale) << what << " [" << i << "]";
    largest = std::max(largest, std::fabs(static_cast<double>(got[i]) - want[i]) / scale);
  }
  if (bmt::rank() == 0) std::printf("%s: largest difference %.2e (tolerance %.0e)\n", what.c_str(), largest, rel);
}

}  // namespace

TEST(GptEquivalenceTp, SameInitLossesNormsAndParametersAsOneRank) {
  const char* path = std::getenv("BMT_GOLDEN_FILE");
  ASSERT_NE(path, nullptr) << "expected BMT_GOLDEN_FILE (set by ctest)";
  std::vector<TrainingRun> runs;
  const std::string resume = std::string(path) + ".resume-np" + std::to_string(bmt::world_size());
  for (const char* name : kRuns)
    for (bool sgd : {false, true}) runs.push_back(train(name, sgd, resume));
  // Dropout's mask is the whole [N, C] matrix's at any tp (each rank's rows offset by their first
  // element); data parallelism splits the sequences differently, so this run is compared at dp 1.
  if (bmt::dp_size() == 1) runs.push_back(train("gpt2-dropout", false, resume));
  // The loss must actually fall, or the comparison proves little.
  for (const auto& r : runs) {
    bmt::print_rank("losses: first ", r.losses.front(), ", last ", r.losses.back());
    EXPECT_LT(r.losses.back(), r.losses.front() - 0.2f);
  }
  if (bmt::world_size() == 1) {
    save(path, runs);
    return;
  }
  ASSERT_GT(bmt::tp_size(), 1) << "expected a tensor-parallel run (BMT_TEST_TP_SIZE) beside the 1-rank one";
  const auto golden = load(path, runs.size());
  ASSERT_EQ(golden.size(), runs.size()) << "could not read " << path << " (written by the 1-rank run)";
  for (std::size_t k = 0; k < runs.size(); ++k) {
    const std::string run = k / 2 < std::size(kRuns) ? std::string(kRuns[k / 2]) + (k % 2 ? " (clipped SGD)" : " (AdamW)")
                                                      : std::string("gpt2 with dropout (AdamW)");
    // Initialization addresses the whole tensor: bit for bit the 1-rank values.
    ASSERT_EQ(runs[k].initial.size(), golden[k].initial.size()) << run;
    for (std::size_t i = 0; i < runs[k].initial.size(); ++i)
      ASSERT_EQ(runs[k].initial[i], golden[k].initial[i]) << run << ": initial parameter [" << i << "]";
    expect_close(runs[k].losses, golden[k].losses, kLossAcrossLayouts, run + ": loss");
    ASSERT_EQ(runs[k].norms.size(), golden[k].norms.size());
    double norm_diff = 0;
    for (std::size_t i = 0; i < runs[k].norms.size(); ++i) {
      EXPECT_NEAR(runs[k].norms[i], golden[k].norms[i], kNormAcrossLayouts * golden[k].norms[i])
          << run << ": gradient norm of step " << i + 1;
      norm_diff = std::max(norm_diff, std::fabs(static_cast<double>(runs[k].norms[i]) - golden[k].norms[i]) /
                                          golden[k].norms[i]);
    }
    if (bmt::rank() == 0)
      std::printf("%s: gradient norm: largest relative difference %.2e (tolerance %.0e)\n", run.c_str(), norm_diff,
                  kNormAcrossLayouts);
    expect_close(runs[k].params, golden[k].params, kParamAcrossLayouts, run + ": parameter");
  }
}
