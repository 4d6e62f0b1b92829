// AdamW with bf16 moments (AdamWOptions::moments) against the update written out in f64, on the
// device and offloaded, at every world size: gradients accumulated over two micro-batches, loss
// scaled and clipped through OptimManager (the norm read on the host or left to the device). The
// reference stores its moments rounded to bf16 as the optimizer does and reads them back widened,
// so the stored moments must match it within one bf16 step and the master weights to f32 rounding.
// A run resumed with the moments' dtype changed (f32 -> bf16 rounds, bf16 -> f32 widens) continues
// from the converted state.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "bmtrain/io/model_checkpoint.hpp"
#include "bmtrain/io/safetensors_file.hpp"
#include "bmtrain/optim/adamw.hpp"
#include "bmtrain/optim/optim_manager.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/half.hpp"
#include "bmtrain/zero/distributed_module.hpp"
#include "bmtrain/zero/transformer_block_list.hpp"
#include "common/gathered_parameters.hpp"
#include "common/toy_block.hpp"

namespace {

constexpr std::int64_t kDim = 301;
constexpr float kLr = 0.01f, kWeightDecay = 0.1f, kLossScale = 1024.0f;
constexpr float kBeta1 = 0.9f, kBeta2 = 0.95f;  // bf16 moments take betas up to 0.99

struct Model : bmt::DistributedModule {
  bmt::DistributedParameter bias;  // outside the blocks, with weight decay (a matrix)
  bmt::TransformerBlockList<toy::Block> blocks;
  Model() : bias({3, kDim}, bmt::DType::bf16, bmt::init::normal(0.1f)) {
    register_parameter("bias", bias);
    for (int i = 0; i < 3; ++i) blocks.append(kDim, bmt::DType::bf16);
    register_module("blocks", blocks);
  }
};

// A micro-batch's loss-scaled gradient of element i of a storage: the same on every rank, so
// their average is too.
float micro_grad(std::int64_t i, int step, int micro) {
  return kLossScale * 0.02f * std::sin(0.1f * static_cast<float>(i) + 1.3f * static_cast<float>(step) + 0.7f * micro);
}

double round_bf16(double x) { return bmt::bf16_t::to_float(bmt::bf16_t::from_float(static_cast<float>(x))); }

// The f64 state over each storage's flat buffer (padding included, never updated).
struct Reference {
  std::vector<std::vector<double>> w, m, v;
  std::vector<std::vector<bool>> decays, trainable;
  int steps = 0;
};

// A training run: the model, its AdamW and the manager that steps it.
struct Training {
  Model model;
  bmt::optim::AdamW adamw;
  bmt::optim::OptimManager manager;

  Training(bool offload, bmt::DType moments, bool defer, float clip)
      : adamw(initialized(model), options(offload, moments)), manager(manager_options(defer, clip)) {
    manager.add_optimizer(adamw);
  }
  static Model& initialized(Model& m) {
    bmt::init_parameters(m);
    return m;
  }
  static bmt::optim::AdamWOptions options(bool offload, bmt::DType moments) {
    bmt::optim::AdamWOptions o;
    o.lr = kLr;
    o.beta1 = kBeta1;
    o.beta2 = kBeta2;
    o.weight_decay = kWeightDecay;
    o.offload = offload;
    o.moments = moments;
    o.host_threads = 3;
    return o;
  }
  static bmt::optim::OptimManagerOptions manager_options(bool defer, float clip) {
    bmt::optim::OptimManagerOptions o;
    o.loss_scale = kLossScale;
    o.clip_grad_norm = clip;
    o.defer_norm_read = defer;
    return o;
  }

  // Two micro-batches' gradients reduced into the shards, then the step.
  void train(int step) {
    manager.zero_grad();
    for (int micro = 0; micro < 2; ++micro)
      for (auto* s : adamw.storages()) {
        std::vector<float> g(static_cast<std::size_t>(s->total()), 0.0f);
        for (const auto& e : s->entries())
          for (std::int64_t k = e.offset; k < e.offset + e.numel; ++k) g[k] = micro_grad(k, step, micro);
        s->reduce_gradient(bmt::Tensor::from_floats(g, {s->total()}), bmt::context().scatter_comm(),
                           bmt::context().scatter_stream(), bmt::Event());
      }
    manager.step();
    manager.settle();
  }

  // State `which` (0 master, 1 exp_avg, 2 exp_avg_sq) of storage k, gathered, and its dtype.
  std::pair<std::vector<float>, bmt::DType> state(std::size_t k, int which) {
    const bmt::Tensor t = adamw.state_of(*adamw.storages()[k])[static_cast<std::size_t>(which)].second;
    return {bmt_test::all_gather(t), t.dtype()};
  }

  // The reference at this run's present state.
  Reference reference() {
    Reference r;
    r.steps = static_cast<int>(adamw.step_count());
    for (std::size_t k = 0; k < adamw.storages().size(); ++k) {
      auto* s = adamw.storages()[k];
      std::vector<double> state[3];
      for (int which = 0; which < 3; ++which) {
        const auto values = this->state(k, which).first;
        state[which].assign(values.begin(), values.end());
      }
      r.w.push_back(state[0]);
      r.m.push_back(state[1]);
      r.v.push_back(state[2]);
      std::vector<bool> decays(static_cast<std::size_t>(s->total()), false), trainable(decays);
      for (const auto& e : s->entries())
        for (std::int64_t j = e.offset; j < e.offset + e.numel; ++j) {
          decays[j] = e.parameter.dim() >= 2;
          trainable[j] = true;
        }
      r.decays.push_back(decays);
      r.trainable.push_back(trainable);
    }
    return r;
  }
};

// One step of the reference: the gradients summed over micro-batches, unscaled and clipped by the
// global norm as OptimManager does, the moments rounded to `moments` when stored.
void reference_step(Reference& r, int step, float clip, bmt::DType moments) {
  ++r.steps;
  double norm_sq = 0;
  std::vector<std::vector<double>> g(r.w.size());
  for (std::size_t k = 0; k < r.w.size(); ++k) {
    g[k].assign(r.w[k].size(), 0.0);
    for (std::size_t j = 0; j < r.w[k].size(); ++j) {
      if (!r.trainable[k][j]) continue;
      g[k][j] = static_cast<double>(micro_grad(static_cast<std::int64_t>(j), step, 0)) +
                static_cast<double>(micro_grad(static_cast<std::int64_t>(j), step, 1));
      norm_sq += g[k][j] * g[k][j];
    }
  }
  const double norm = std::sqrt(norm_sq) / kLossScale;
  double scale = 1.0 / kLossScale;
  if (clip > 0 && norm > clip) scale *= clip / (norm + 1e-6);
  // AdamWOptions' betas and eps are floats: the reference takes the same numbers.
  const double b1 = kBeta1, b2 = kBeta2, eps = 1e-8f;
  const double bias1 = 1 - std::pow(b1, r.steps), bias2 = 1 - std::pow(b2, r.steps);
  for (std::size_t k = 0; k < r.w.size(); ++k)
    for (std::size_t j = 0; j < r.w[k].size(); ++j) {
      if (!r.trainable[k][j]) continue;
      const double gj = g[k][j] * scale;
      const double m = b1 * r.m[k][j] + (1 - b1) * gj;
      const double v = b2 * r.v[k][j] + (1 - b2) * gj * gj;
      const double wd = r.decays[k][j] ? kWeightDecay : 0.0;
      r.w[k][j] = r.w[k][j] * (1 - kLr * wd) - kLr * (m / bias1) / (std::sqrt(v / bias2) + eps);
      r.m[k][j] = moments == bmt::DType::bf16 ? round_bf16(m) : m;
      r.v[k][j] = moments == bmt::DType::bf16 ? round_bf16(v) : v;
    }
}

// The run's state against the reference: moments within one bf16 step (apart only where a rounding
// boundary lies between the f32 and f64 sums: counted) or, in f32, within f32 rounding of the
// storage's largest moment (the first moment's sum may cancel); master weights within f32
// rounding, but where a moment came out one step apart (counted too; rare).
void expect_matches(Training& run, const Reference& r, bmt::DType moments, const std::string& what) {
  std::size_t elements = 0, moment_steps = 0, loose = 0;
  for (std::size_t k = 0; k < r.w.size(); ++k) {
    const auto [w, wd] = run.state(k, 0);
    const auto [m, md] = run.state(k, 1);
    const auto [v, vd] = run.state(k, 2);
    ASSERT_EQ(wd, bmt::DType::f32) << what;
    ASSERT_EQ(md, moments) << what;
    ASSERT_EQ(vd, moments) << what;
    double largest[2] = {0, 0};
    for (std::size_t j = 0; j < r.w[k].size(); ++j) {
      largest[0] = std::max(largest[0], std::fabs(r.m[k][j]));
      largest[1] = std::max(largest[1], std::fabs(r.v[k][j]));
    }
    for (std::size_t j = 0; j < r.w[k].size(); ++j) {
      if (!r.trainable[k][j]) continue;
      ++elements;
      for (int which : {0, 1}) {
        const double got = which == 0 ? m[j] : v[j], want = which == 0 ? r.m[k][j] : r.v[k][j];
        const double step = (moments == bmt::DType::bf16 ? std::ldexp(1.0, -7) * std::fabs(want) : 0.0) +
                            1e-6 * largest[which];
        ASSERT_LE(std::fabs(got - want), step) << what << ": moment " << which + 1 << ", storage " << k
                                               << " element " << j;
        moment_steps += got != want && moments == bmt::DType::bf16;
      }
      const double err = std::fabs(w[j] - r.w[k][j]);
      ASSERT_LE(err, kLr * r.steps * std::ldexp(1.0, -6)) << what << ": master, storage " << k << " element " << j;
      loose += err > 2e-6;
    }
  }
  // One bf16 step apart only where f32 and f64 straddle a rounding boundary, and the master
  // weights apart by more than f32 rounding only there.
  EXPECT_LE(moment_steps, elements / 100) << what;
  EXPECT_LE(loose, elements / 100) << what;
}

TEST(Bf16Moments, MatchTheF64UpdateOnTheDeviceAndOffloaded) {
  struct Case {
    bool defer;
    float clip;
  };
  for (bool offload : {false, true})
    for (const Case c : {Case{false, 0.5f}, Case{true, 0.5f}, Case{true, 0.0f}}) {
      const std::string what = std::string(offload ? "offloaded" : "on the device") + ", defer " +
                               std::to_string(c.defer) + ", clip " + std::to_string(c.clip);
      Training run(offload, bmt::DType::bf16, c.defer, c.clip);
      Reference r = run.reference();
      for (int step = 1; step <= 4; ++step) {
        run.train(step);
        reference_step(r, step, c.clip, bmt::DType::bf16);
        expect_matches(run, r, bmt::DType::bf16, what + ", step " + std::to_string(step));
      }
      // Where clip is 0.5 it applied: the unscaled gradients' norm is above it.
      EXPECT_GT(run.manager.last_grad_norm(), 0.5f) << what;
    }
}

// A directory every rank names the same.
std::string shared_directory(const std::string& name) {
  int pid = static_cast<int>(getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, bmt::context().mpi_comm());
  return ::testing::TempDir() + "bmt_" + name + "_" + std::to_string(pid);
}

TEST(Bf16Moments, AResumeThatChangesTheMomentsDtypeConvertsThem) {
  const std::string dir = shared_directory("moments_resume");
  const std::string path = dir + "/optimizer.safetensors";
  for (bmt::DType saved : {bmt::DType::f32, bmt::DType::bf16})
    for (bool offload : {false, true}) {
      const bmt::DType loaded = saved == bmt::DType::f32 ? bmt::DType::bf16 : bmt::DType::f32;
      const std::string what = std::string(bmt::dtype_name(saved)) + " moments resumed as " +
                               bmt::dtype_name(loaded) + (offload ? ", offloaded" : ", on the device");
      Training writer(!offload, saved, true, 0.5f);
      for (int step = 1; step <= 3; ++step) writer.train(step);
      if (bmt::rank() == 0) std::filesystem::create_directories(dir);
      MPI_Barrier(bmt::context().mpi_comm());
      bmt::io::save_optimizer(writer.adamw, path);
      {
        bmt::io::SafetensorsReader file(path);  // the moments as they were held
        EXPECT_EQ(file.header().tensor("bias.exp_avg").dtype, bmt::io::safetensors_dtype_code(saved)) << what;
        EXPECT_EQ(file.header().tensor("bias.master").dtype, "F32") << what;
      }

      Training resumed(offload, loaded, true, 0.5f);
      bmt::io::load_optimizer(resumed.adamw, path);
      ASSERT_EQ(resumed.adamw.step_count(), 3) << what;
      for (std::size_t k = 0; k < writer.adamw.storages().size(); ++k)
        for (int which = 0; which < 3; ++which) {
          const auto before = writer.state(k, which).first;
          const auto after = resumed.state(k, which);
          ASSERT_EQ(after.second, which == 0 ? bmt::DType::f32 : loaded) << what;
          for (std::size_t j = 0; j < before.size(); ++j) {
            // f32 -> bf16 rounds to nearest even; bf16 -> f32 and the master are exact.
            const float want = which > 0 && loaded == bmt::DType::bf16
                                   ? bmt::bf16_t::to_float(bmt::bf16_t::from_float(before[j]))
                                   : before[j];
            ASSERT_EQ(after.first[j], want) << what << ": state " << which << ", storage " << k << " element " << j;
          }
        }
      // The model's values come from the master weights loaded, rounded to bf16.
      for (auto* s : resumed.adamw.storages()) {
        const auto values = bmt_test::all_gather(s->values());
        const auto master = bmt_test::all_gather(resumed.adamw.state_of(*s)[0].second);
        for (std::size_t j = 0; j < values.size(); ++j)
          ASSERT_EQ(values[j], bmt::bf16_t::to_float(bmt::bf16_t::from_float(master[j]))) << what;
      }
      // And training goes on from the converted state as the reference does.
      Reference r = resumed.reference();
      for (int step = 4; step <= 5; ++step) {
        resumed.train(step);
        reference_step(r, step, 0.5f, loaded);
        expect_matches(resumed, r, loaded, what + ", step " + std::to_string(step));
      }
      MPI_Barrier(bmt::context().mpi_comm());
    }
  if (bmt::rank() == 0) std::filesystem::remove_all(dir);
}

// f16 moments, and bf16 ones with a beta whose decay a step their rounding would lose (beta2 =
// 0.999, AdamWOptions' default: the second moment could only rise), are refused.
TEST(Bf16Moments, OtherMomentDtypesAndBetasAbove099AreRefused) {
  Model model;
  bmt::init_parameters(model);
  struct Case {
    bmt::DType moments;
    float beta2;
    const char* message;
  };
  for (const Case& c : {Case{bmt::DType::f16, 0.95f, "expected moments in f32 or bf16, found f16"},
                        Case{bmt::DType::bf16, 0.999f, "expected betas <= 0.99 with bf16 moments"}}) {
    bmt::optim::AdamWOptions o;
    o.moments = c.moments;
    o.beta2 = c.beta2;
    try {
      bmt::optim::AdamW adamw(model, o);
      ADD_FAILURE() << "expected an error: " << c.message;
    } catch (const bmt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
  bmt::optim::AdamWOptions o;
  o.moments = bmt::DType::bf16;
  o.beta2 = 0.99f;
  EXPECT_NO_THROW(bmt::optim::AdamW(model, o));
}

}  // namespace
