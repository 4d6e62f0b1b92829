// The per-stream timeline: a training step of a small block list (gathers, forward, recompute,
// backward, reduce-scatters, optimizer) written as Chrome trace JSON, one file per rank, parsed
// back here. Besides the spans being there, the trace must show the ordering the scheduler's
// events enforce: a block computes only after its gather ended, and its reduce-scatter starts only
// after its backward ended.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/ops/ops.hpp"
#include "bmtrain/optim/adamw.hpp"
#include "bmtrain/optim/lr_scheduler.hpp"
#include "bmtrain/optim/optim_manager.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/timeline.hpp"
#include "bmtrain/zero/distributed_module.hpp"
#include "bmtrain/zero/transformer_block_list.hpp"
#include "common/toy_block.hpp"

namespace {

constexpr std::int64_t kD = 37;
constexpr int kBlocks = 3;

struct Model : bmt::DistributedModule {
  bmt::TransformerBlockList<toy::Block> blocks{1};
  Model() {
    for (int i = 0; i < kBlocks; ++i) blocks.append(bmt::CheckpointOptions{}, kD);
    register_module("blocks", blocks);
  }
  bmt::Tensor loss(const bmt::Tensor& x) { return bmt::autograd::call<toy::SumAll>({blocks(x, 0.7f)})[0]; }
};

// One directory for every rank's file: rank 0's process id names it.
std::string shared_prefix() {
  long id = static_cast<long>(getpid());
  MPI_Bcast(&id, 1, MPI_LONG, 0, bmt::context().mpi_comm());
  return ::testing::TempDir() + "bmt_timeline_" + std::to_string(id);
}

struct Span {
  std::string name, category, track;
  double ts, dur;
};

std::vector<Span> read_trace(const std::string& path, int rank, nlohmann::json* other) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "missing " << path;
  const nlohmann::json trace = nlohmann::json::parse(f);
  std::map<int, std::string> tracks;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name") tracks[e.at("tid").get<int>()] = e.at("args").at("name");
  std::vector<Span> spans;
  for (const auto& e : trace.at("traceEvents")) {
    EXPECT_EQ(e.at("pid").get<int>(), rank) << e.dump();
    if (e.at("ph") != "X") continue;
    const int tid = e.at("tid").get<int>();
    EXPECT_TRUE(tracks.count(tid)) << "no thread_name for tid " << tid;
    spans.push_back({e.at("name"), e.at("cat"), tracks[tid], e.at("ts").get<double>(), e.at("dur").get<double>()});
  }
  if (other) *other = trace.at("otherData");
  return spans;
}

Model& initialized(Model& model) {
  bmt::init_parameters(model);
  return model;
}

// A model with AdamW under an OptimManager; step() runs one training step on rank-dependent data.
struct Training {
  Model model;
  bmt::optim::AdamW adamw;
  std::unique_ptr<bmt::optim::LRScheduler> schedule;
  bmt::optim::OptimManager manager;

  Training() : adamw(initialized(model)) {  // AdamW copies the initialized shards
    schedule = bmt::optim::make_scheduler("constant", 1e-3f, 0, 10, 0.0f);
    manager.add_optimizer(adamw, schedule.get());
  }

  void step() {
    std::vector<float> x(3 * kD);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = std::sin(0.1f * static_cast<float>(i) + static_cast<float>(bmt::rank()));
    manager.zero_grad();
    manager.backward(model.loss(bmt::Tensor::from_floats(x, {3, kD})));
    manager.step();
  }
};

TEST(Timeline, RankPathInsertsTheRank) {
  EXPECT_EQ(bmt::timeline::rank_path("trace.json", 3), "trace.rank3.json");
  EXPECT_EQ(bmt::timeline::rank_path("out/run.1/trace", 0), "out/run.1/trace.rank0");
  EXPECT_EQ(bmt::timeline::rank_path("out/.hidden", 1), "out/.hidden.rank1");
  EXPECT_EQ(bmt::timeline::rank_path("a.b.json", 12), "a.b.rank12.json");
}

TEST(Timeline, OffRecordsNothing) {
  bmt::timeline::reset();
  ASSERT_FALSE(bmt::timeline::enabled());
  Training training;
  training.step();
  EXPECT_EQ(bmt::timeline::span_count(), 0u);
}

TEST(Timeline, StepOfABlockListIsTracedPerStreamAndRank) {
  bmt::timeline::reset();
  const std::string path = shared_prefix() + ".json";
  Training training;
  training.step();  // warm-up, not traced

  bmt::timeline::enable(path);
  ASSERT_TRUE(bmt::timeline::enabled());
  training.step();
  bmt::timeline::write();
  bmt::timeline::reset();
  EXPECT_FALSE(bmt::timeline::enabled());
  bmt::synchronize();  // every rank's file is written

  const int n = bmt::world_size();
  // Rank 0 reads every rank's file, the others their own.
  for (int r = 0; r < n; ++r) {
    if (bmt::rank() != 0 && r != bmt::rank()) continue;
    nlohmann::json other;
    const auto spans = read_trace(bmt::timeline::rank_path(path, r), r, &other);
    EXPECT_EQ(other.at("rank").get<int>(), r);
    EXPECT_EQ(other.at("world_size").get<int>(), n);
    EXPECT_EQ(other.at("dropped_spans").get<std::size_t>(), 0u);
    EXPECT_EQ(other.at("spans").get<std::size_t>(), spans.size());

    std::map<std::string, std::vector<Span>> by_name;
    for (const auto& s : spans) {
      EXPECT_NE(s.category.rfind("op ", 0), 0u) << s.name << ": an op span at Detail::blocks";
      EXPECT_GE(s.ts, -1.0) << s.name;  // after enable (1 us for the CUDA event resolution)
      EXPECT_GE(s.dur, 0.0) << s.name;
      by_name[s.name].push_back(s);
    }
    auto only = [&](const std::string& name, const char* track) -> std::vector<Span> {
      const auto& v = by_name[name];
      for (const auto& s : v) EXPECT_EQ(s.track, track) << name;
      return v;
    };
    for (int b = 0; b < kBlocks; ++b) {
      const std::string block = "blocks." + std::to_string(b);
      const auto gathers = only("gather " + block, "gather");
      const auto forward = only("forward " + block, "compute");
      const auto recompute = only("recompute " + block, "compute");
      const auto backward = only("backward " + block, "compute");
      const auto scatter = only("reduce-scatter " + block, "scatter");
      ASSERT_EQ(forward.size(), 1u) << block;
      ASSERT_EQ(recompute.size(), 1u) << block;
      ASSERT_EQ(backward.size(), 1u) << block;
      EXPECT_EQ(forward[0].category, "forward");
      // The ordering the events enforce, seen in the trace (1 us: CUDA event resolution).
      const double tol = 1.0;
      EXPECT_GE(backward[0].ts + tol, recompute[0].ts + recompute[0].dur) << block;
      if (b > 0) {
        const auto prev = by_name["forward blocks." + std::to_string(b - 1)];
        ASSERT_EQ(prev.size(), 1u);
        EXPECT_GE(forward[0].ts + tol, prev[0].ts + prev[0].dur) << "forward of " << block << " overlaps the previous";
      }
      const bmt::Mesh& mesh = bmt::context().mesh();
      const auto replica = only("replica all-reduce " + block, "scatter");
      if (mesh.shard_size == 1 && mesh.replica_count == 1) {
        // One rank gathers nothing (the shard is the whole block) and reduces nothing (backward
        // adds into the gradient shard).
        EXPECT_TRUE(gathers.empty()) << block;
        EXPECT_TRUE(scatter.empty()) << block;
        continue;
      }
      if (mesh.shard_size == 1) {  // the shard is the whole block; its gradient still goes to the replicas
        EXPECT_TRUE(gathers.empty()) << block;
      } else {
        ASSERT_EQ(gathers.size(), 2u) << block << ": one gather in forward, one in backward (rank " << r << ")";
        EXPECT_GE(forward[0].ts + tol, gathers[0].ts + gathers[0].dur) << block << ": forward before its gather ended";
        EXPECT_GE(recompute[0].ts + tol, gathers[1].ts + gathers[1].dur) << block << ": recompute before its gather ended";
      }
      ASSERT_EQ(scatter.size(), 1u) << block;
      EXPECT_EQ(scatter[0].category, "reduce-scatter");
      EXPECT_GE(scatter[0].ts + tol, backward[0].ts + backward[0].dur) << block << ": reduce-scatter before backward ended";
      ASSERT_EQ(replica.size(), mesh.replica_count > 1 ? 1u : 0u) << block;
      if (!replica.empty())
        EXPECT_GE(replica[0].ts + tol, scatter[0].ts + scatter[0].dur) << block << ": replica all-reduce before reduce-scatter";
    }
    ASSERT_EQ(by_name["optimizer step"].size(), 1u);
    EXPECT_EQ(by_name["optimizer step"][0].track, "compute");
    // The optimizer runs after the last backward.
    EXPECT_GE(by_name["optimizer step"][0].ts + 1.0, by_name["backward blocks.0"][0].ts);
  }
  bmt::synchronize();
  std::remove(bmt::timeline::rank_path(path, bmt::rank()).c_str());
}

// Detail::ops: each op's forward (in the block's forward and again in its recompute) and backward
// is a span on the compute stream, inside the span of the block that ran it.
TEST(Timeline, OpDetailTimesEachOpInsideItsBlock) {
  bmt::timeline::reset();
  const std::string path = shared_prefix() + "_ops.json";
  Training training;
  training.step();
  bmt::timeline::enable(path, bmt::timeline::Detail::ops);
  EXPECT_TRUE(bmt::timeline::ops_enabled());
  training.step();
  bmt::timeline::write();
  bmt::timeline::reset();
  EXPECT_FALSE(bmt::timeline::ops_enabled());
  bmt::synchronize();

  const auto spans = read_trace(bmt::timeline::rank_path(path, bmt::rank()), bmt::rank(), nullptr);
  std::map<std::string, int> count;
  std::vector<Span> blocks;
  for (const auto& s : spans) {
    ++count[s.name];
    if (s.category == "forward" || s.category == "recompute" || s.category == "backward") blocks.push_back(s);
  }
  EXPECT_EQ(count["op forward TanhAffine"], 2 * kBlocks) << "one forward and one recompute per block";
  EXPECT_EQ(count["op backward TanhAffine"], kBlocks);
  EXPECT_EQ(count["op forward SumAll"], 1);
  EXPECT_EQ(count["op backward SumAll"], 1);
  const double tol = 1.0;  // us: CUDA event resolution
  for (const auto& s : spans) {
    if (s.name.find("TanhAffine") == std::string::npos) continue;
    EXPECT_EQ(s.track, "compute") << s.name;
    EXPECT_EQ(s.category, s.name.substr(0, s.name.rfind(' '))) << s.name;
    const bool inside = std::any_of(blocks.begin(), blocks.end(), [&](const Span& b) {
      return s.ts + tol >= b.ts && s.ts + s.dur <= b.ts + b.dur + tol;
    });
    EXPECT_TRUE(inside) << s.name << " at " << s.ts << " us is in no block's span";
  }
  bmt::synchronize();
  std::remove(bmt::timeline::rank_path(path, bmt::rank()).c_str());
}

// Residual MLP halves, x + linear(x), h + linear(gelu(h)) and h + gelu_linear(h): in the recompute
// the first linear and add are put off until gelu reads h, the other GEMMs and adds never run, and
// gelu_linear's GELU (which its backward needs) runs at once, timed as gelu_linear.
struct ResidualBlock : bmt::Module {
  bmt::DistributedParameter w1{{kD, kD}, bmt::init::normal(0.0f, 0.2f)}, w2{{kD, kD}, bmt::init::normal(0.0f, 0.2f)};
  bmt::DistributedParameter w3{{kD, kD}, bmt::init::normal(0.0f, 0.2f)};
  ResidualBlock() {
    register_parameter("w1", w1);
    register_parameter("w2", w2);
    register_parameter("w3", w3);
  }
  bmt::Tensor forward(const bmt::Tensor& x) {
    const bmt::Tensor h = bmt::add(x, bmt::linear(x, w1, bmt::Tensor()));
    const bmt::Tensor g = bmt::add(h, bmt::linear(bmt::gelu(h), w2, bmt::Tensor()));
    return bmt::add(g, bmt::gelu_linear(h, w3, bmt::Tensor()));
  }
};

// Op spans never nest: work put off in a recompute is timed as its own op, not inside the op
// that first reads its output.
TEST(Timeline, PutOffWorkIsTimedAsItsOwnOp) {
  bmt::timeline::reset();
  const std::string path = shared_prefix() + "_put_off.json";
  struct Residual : bmt::DistributedModule {
    bmt::TransformerBlockList<ResidualBlock> blocks{1};
    Residual() {
      for (int i = 0; i < kBlocks; ++i) blocks.append();
      register_module("blocks", blocks);
    }
  } model;
  bmt::init_parameters(model);
  bmt::timeline::enable(path, bmt::timeline::Detail::ops);
  bmt::Tensor x = bmt::Tensor::from_floats(std::vector<float>(3 * kD, 0.5f), {3, kD}).set_requires_grad(true);
  bmt::Tensor y = model.blocks(x);
  y.backward(bmt::ones(y.shape()));
  bmt::timeline::write();
  bmt::timeline::reset();
  bmt::synchronize();

  std::vector<Span> ops;
  std::map<std::string, int> count;
  for (const auto& s : read_trace(bmt::timeline::rank_path(path, bmt::rank()), bmt::rank(), nullptr)) {
    if (s.category != "op forward" && s.category != "op backward") continue;
    if (s.name.find("CheckpointBlock") != std::string::npos) continue;  // the block list's own node holds them all
    ops.push_back(s);
    ++count[s.name];
  }
  EXPECT_EQ(count["op forward linear"], 3 * kBlocks) << "two per block forward, one in its recompute";
  EXPECT_EQ(count["op forward add"], 4 * kBlocks) << "three per block forward, one in its recompute";
  EXPECT_EQ(count["op forward gelu"], 2 * kBlocks);
  EXPECT_EQ(count["op forward gelu_linear"], 2 * kBlocks) << "its forward, and its GELU in the recompute";
  const double tol = 1.0;  // us: CUDA event resolution
  for (const auto& a : ops)
    for (const auto& b : ops) {
      if (&a == &b) continue;
      const bool inside = b.ts > a.ts + tol && b.ts + b.dur < a.ts + a.dur - tol;
      EXPECT_FALSE(inside) << b.name << " at " << b.ts << " us inside " << a.name << " at " << a.ts << " us";
    }
  bmt::synchronize();
  std::remove(bmt::timeline::rank_path(path, bmt::rank()).c_str());
}

// Run with BMT_TIMELINE set (test_zero_timeline_env): the runtime enabled the timeline when it
// started, and finalize() writes the trace, which the next test reads in another run.
TEST(Timeline, EnvironmentEnablesItAtInit) {
  if (!std::getenv("BMT_TIMELINE")) GTEST_SKIP() << "BMT_TIMELINE is not set";
  EXPECT_TRUE(bmt::timeline::enabled());
  Training training;
  training.step();
  EXPECT_GT(bmt::timeline::span_count(), 0u);
}

// Run with BMT_TIMELINE_WRITTEN naming the path the run above was given, and its world size.
TEST(Timeline, FinalizeWroteEveryRanksTrace) {
  const char* path = std::getenv("BMT_TIMELINE_WRITTEN");
  const char* ranks = std::getenv("BMT_TIMELINE_WRITTEN_RANKS");
  if (!path || !ranks) GTEST_SKIP() << "BMT_TIMELINE_WRITTEN is not set";
  const int n = std::atoi(ranks);
  for (int r = 0; r < n; ++r) {
    nlohmann::json other;
    const auto spans = read_trace(bmt::timeline::rank_path(path, r), r, &other);
    EXPECT_EQ(other.at("world_size").get<int>(), n);
    for (int b = 0; b < kBlocks; ++b)
      for (const char* what : {"forward", "recompute", "backward", "gather", "reduce-scatter"}) {
        const std::string name = std::string(what) + " blocks." + std::to_string(b);
        // One rank neither gathers nor reduces (its shard is the whole block).
        const bool communicates = std::string(what) == "gather" || std::string(what) == "reduce-scatter";
        const bool expected = n > 1 || !communicates;
        EXPECT_EQ(std::any_of(spans.begin(), spans.end(), [&](const Span& s) { return s.name == name; }), expected)
            << name << (expected ? " missing from" : " found in") << " rank " << r << "'s trace";
      }
  }
}

// A node that no gradient reaches does no work and gets no span: here the weight's AccumulateGrad,
// since linear adds dW into the weight's existing gradient buffer itself.
TEST(Timeline, NodesWithoutWorkHaveNoOpSpan) {
  bmt::timeline::reset();
  const std::string path = shared_prefix() + "_idle.json";
  bmt::timeline::enable(path, bmt::timeline::Detail::ops);
  bmt::Tensor w = bmt::Tensor::from_floats({1, 2, 3, 4, 5, 6}, {2, 3}).set_requires_grad(true);
  w.set_grad(bmt::Tensor::zeros({2, 3}));
  bmt::Tensor b = bmt::Tensor::from_floats({1, 2}, {2}).set_requires_grad(true);  // no buffer yet
  const bmt::Tensor x = bmt::Tensor::from_floats({1, 0, 2, 1, 1, 1}, {2, 3});
  bmt::sum(bmt::linear(x, w, b)).backward();
  bmt::timeline::write();
  bmt::timeline::reset();
  bmt::synchronize();
  EXPECT_EQ(w.grad().to_host_floats(), (std::vector<float>{2, 1, 3, 2, 1, 3})) << "dW = sum of x's rows, per output";
  EXPECT_EQ(b.grad().to_host_floats(), (std::vector<float>{2, 2}));

  std::map<std::string, int> count;
  for (const auto& s : read_trace(bmt::timeline::rank_path(path, bmt::rank()), bmt::rank(), nullptr)) ++count[s.name];
  EXPECT_EQ(count["op backward linear"], 1);
  EXPECT_EQ(count["op backward AccumulateGrad"], 1) << "the bias's only: the weight's received nothing";
  bmt::synchronize();
  std::remove(bmt::timeline::rank_path(path, bmt::rank()).c_str());
}

TEST(Timeline, SpansBeyondTheCapAreCountedNotKept) {
  bmt::timeline::reset();
  bmt::timeline::enable(shared_prefix() + "_cap.json");
  auto& compute = bmt::context().compute_stream();
  const std::size_t extra = 5;
  for (std::size_t k = 0; k < bmt::timeline::kMaxSpans + extra; ++k) bmt::timeline::Span span(compute, "empty");
  EXPECT_EQ(bmt::timeline::span_count(), bmt::timeline::kMaxSpans);
  EXPECT_EQ(bmt::timeline::dropped_spans(), extra);
  bmt::timeline::reset();  // nothing written: a million spans make a 100 MB trace
  EXPECT_EQ(bmt::timeline::span_count(), 0u);
}

}  // namespace

// A trace that cannot be written is an error naming the file (it used to be a warning, after which
// bmt-train exited 0 and printed the path as written).
TEST(Timeline, WriteThatFailsIsAnError) {
  bmt::timeline::reset();
  const std::string blocker = shared_prefix() + ".file";
  if (bmt::rank() == 0) std::ofstream(blocker) << "a file, not a directory";
  bmt::synchronize();
  bmt::timeline::enable(blocker + "/trace.json");
  Training training;
  training.step();
  try {
    bmt::timeline::write();
    ADD_FAILURE() << "expected bmt::Error";
  } catch (const bmt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("timeline: cannot write '" + bmt::timeline::rank_path(blocker + "/trace.json", bmt::rank()) + "'"),
              std::string::npos)
        << e.what();
  }
  bmt::timeline::reset();
  bmt::synchronize();
  if (bmt::rank() == 0) std::remove(blocker.c_str());
}
