// Tensor-parallel layers (nn/tensor_parallel.hpp) against the plain layer holding the whole
// weight: every rank builds the whole parameters, inputs and output gradients from one seed, the
// tensor-parallel layer takes this rank's part of each, and its outputs and gradients must be the
// matching part of the plain layer's (within f32 rounding). Input gradients also against finite
// differences of the group's summed loss. Registered at 1, 2 and 4 ranks, plain and under tp meshes.
#include <gtest/gtest.h>

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/nn/tensor_parallel.hpp>

#include "../common/tensor_parallel_reference.hpp"

namespace {

using bmt::Tensor;
using bmt::testing::random_floats;
using bmt_test::expect_close;
using bmt_test::my_columns;
using bmt_test::my_rows;
using bmt_test::part_of;

constexpr double kTol = 2e-5;

template <class Layer>
struct Holder : bmt::DistributedModule {
  Layer l;
  template <class... A>
  explicit Holder(A&&... args) : l(std::forward<A>(args)...) {
    register_module("l", l);
  }
};

const bmt::TensorParallelSplit& split_of(const bmt::DistributedParameter& p) { return p.impl()->param->tp; }

// A leaf of `values`, requiring grad.
Tensor leaf(const std::vector<float>& values, const bmt::Shape& shape) {
  Tensor t = Tensor::from_floats(values, shape);
  t.set_requires_grad(true);
  return t;
}

// Output columns [N, out] split by parts, as a column-parallel layer's output holds them.
std::vector<float> output_part(const std::vector<float>& y, std::int64_t rows, std::int64_t out,
                               const std::vector<std::int64_t>& parts) {
  return part_of(y, bmt::TensorParallelSplit{1, parts, {rows, out}, bmt::tp_rank(), bmt::tp_size()});
}

TEST(TensorParallelLayers, ColumnParallelWithPartsIsItsPartOfThePlainLinear) {
  const std::int64_t N = 4 * bmt::tp_size(), in = 5, out = 6 * bmt::tp_size();
  const std::vector<std::int64_t> parts = {2 * bmt::tp_size(), 3 * bmt::tp_size(), bmt::tp_size()};
  Holder<bmt::nn::Linear> plain(in, out);
  Holder<bmt::nn::ColumnParallelLinear> tp(in, out, true, bmt::DType::f32, bmt::init::Fn{}, parts);
  bmt::init_parameters(plain);
  bmt::init_parameters(tp);
  const auto& split = split_of(tp.l.weight);
  EXPECT_EQ(split.dim, 0);
  EXPECT_EQ(split.parts, parts);
  EXPECT_EQ(split.whole_shape, (bmt::Shape{out, in}));
  EXPECT_EQ(tp.l.weight.shape(), (bmt::Shape{out / bmt::tp_size(), in}));
  EXPECT_EQ(split_of(tp.l.bias).whole_shape, (bmt::Shape{out}));

  const auto w = random_floats(out * in, 1), b = random_floats(out, 2), x = random_floats(N * in, 3),
             g = random_floats(N * out, 4);
  bmt_test::set_parameters(plain, {{"l.weight", w}, {"l.bias", b}});
  bmt_test::set_parameters(tp, {{"l.weight", part_of(w, split)}, {"l.bias", part_of(b, split_of(tp.l.bias))}});

  for (bool gelu : {false, true}) {
    SCOPED_TRACE(gelu ? "forward_gelu" : "forward");
    Tensor xp = leaf(x, {N, in}), xt = leaf(my_rows(x, N, in), {N / bmt::tp_size(), in});
    const Tensor yp = gelu ? plain.l.forward_gelu(xp) : plain.l.forward(xp);
    const Tensor yt = gelu ? tp.l.forward_gelu(xt) : tp.l.forward(xt);
    ASSERT_EQ(yt.shape(), (bmt::Shape{N, out / bmt::tp_size()}));
    expect_close(yt.to_host_floats(), output_part(yp.to_host_floats(), N, out, parts), kTol, "output");
    bmt::autograd::backward({yp}, {Tensor::from_floats(g, {N, out})});
    bmt::autograd::backward({yt}, {Tensor::from_floats(output_part(g, N, out, parts), yt.shape())});
    expect_close(xt.grad().to_host_floats(), my_rows(xp.grad().to_host_floats(), N, in), kTol, "input gradient");
  }
  const auto gp = bmt_test::parameter_grads(plain), gt = bmt_test::parameter_grads(tp);
  expect_close(gt.at("l.weight"), part_of(gp.at("l.weight"), split), kTol, "weight gradient");
  expect_close(gt.at("l.bias"), part_of(gp.at("l.bias"), split_of(tp.l.bias)), kTol, "bias gradient");
}

TEST(TensorParallelLayers, RowParallelIsThePlainLinearOnItsColumns) {
  const std::int64_t N = 3 * bmt::tp_size(), in = 4 * bmt::tp_size(), out = 5;
  Holder<bmt::nn::Linear> plain(in, out);
  Holder<bmt::nn::RowParallelLinear> tp(in, out);
  bmt::init_parameters(plain);
  bmt::init_parameters(tp);
  const auto& split = split_of(tp.l.weight);
  EXPECT_EQ(split.dim, 1);
  EXPECT_EQ(split.whole_shape, (bmt::Shape{out, in}));
  EXPECT_TRUE(split_of(tp.l.bias).replicated());

  const auto w = random_floats(out * in, 11), b = random_floats(out, 12), x = random_floats(N * in, 13),
             g = random_floats(N * out, 14), res = random_floats(N * out, 15);
  bmt_test::set_parameters(plain, {{"l.weight", w}, {"l.bias", b}});
  bmt_test::set_parameters(tp, {{"l.weight", part_of(w, split)}, {"l.bias", b}});

  for (int form = 0; form < 3; ++form) {
    SCOPED_TRACE(form == 0 ? "forward" : form == 1 ? "gelu_forward" : "forward_onto");
    Tensor xp = leaf(x, {N, in}), xt = leaf(my_columns(x, N, in), {N, in / bmt::tp_size()});
    const Tensor rp = Tensor::from_floats(res, {N, out}), rt = Tensor::from_floats(my_rows(res, N, out), {N / bmt::tp_size(), out});
    const Tensor yp = form == 0 ? plain.l.forward(xp) : form == 1 ? plain.l.gelu_forward(xp) : plain.l.forward_onto(rp, xp, true);
    const Tensor yt = form == 0 ? tp.l.forward(xt) : form == 1 ? tp.l.gelu_forward(xt) : tp.l.forward_onto(rt, xt, true);
    ASSERT_EQ(yt.shape(), (bmt::Shape{N / bmt::tp_size(), out}));
    expect_close(yt.to_host_floats(), my_rows(yp.to_host_floats(), N, out), kTol, "output");
    bmt::autograd::backward({yp}, {Tensor::from_floats(g, {N, out})});
    bmt::autograd::backward({yt}, {Tensor::from_floats(my_rows(g, N, out), yt.shape())});
    expect_close(xt.grad().to_host_floats(), my_columns(xp.grad().to_host_floats(), N, in), kTol, "input gradient");
  }
  const auto gp = bmt_test::parameter_grads(plain), gt = bmt_test::parameter_grads(tp);
  expect_close(gt.at("l.weight"), part_of(gp.at("l.weight"), split), kTol, "weight gradient");
  // The replicated bias: the whole gradient on every rank, each rank's rows summed by copy_tp.
  expect_close(gt.at("l.bias"), gp.at("l.bias"), kTol, "bias gradient");
}

TEST(TensorParallelLayers, VocabParallelEmbeddingIsThePlainLookupsRows) {
  const std::int64_t N = 3 * bmt::tp_size(), V = 4 * bmt::tp_size(), dim = 3;
  Holder<bmt::nn::Embedding> plain(V, dim);
  Holder<bmt::nn::VocabParallelEmbedding> tp(V, dim);
  bmt::init_parameters(plain);
  bmt::init_parameters(tp);
  const auto& split = split_of(tp.l.weight);
  EXPECT_EQ(tp.l.first_row(), bmt::tp_rank() * 4);
  const auto w = random_floats(V * dim, 21), g = random_floats(N * dim, 22);
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < N; ++i) ids.push_back((i * 7 + 3) % V);  // every part, with repeats
  bmt_test::set_parameters(plain, {{"l.weight", w}});
  bmt_test::set_parameters(tp, {{"l.weight", part_of(w, split)}});
  const Tensor id_tensor = Tensor::from_ints(ids, {N});
  const Tensor yp = plain.l.forward(id_tensor), yt = tp.l.forward(id_tensor);
  ASSERT_EQ(yt.shape(), (bmt::Shape{N / bmt::tp_size(), dim}));
  expect_close(yt.to_host_floats(), my_rows(yp.to_host_floats(), N, dim), kTol, "output");
  bmt::autograd::backward({yp}, {Tensor::from_floats(g, {N, dim})});
  bmt::autograd::backward({yt}, {Tensor::from_floats(my_rows(g, N, dim), yt.shape())});
  expect_close(bmt_test::parameter_grads(tp).at("l.weight"), part_of(bmt_test::parameter_grads(plain).at("l.weight"), split),
               kTol, "weight gradient");
}

template <class Plain, class SequenceParallel>
void check_norm(const std::vector<std::string>& names) {
  const std::int64_t N = 3 * bmt::tp_size(), dim = 6;
  Holder<Plain> plain(dim);
  Holder<SequenceParallel> tp(dim);
  bmt::init_parameters(plain);
  bmt::init_parameters(tp);
  std::map<std::string, std::vector<float>> params;
  for (std::size_t i = 0; i < names.size(); ++i) params[names[i]] = random_floats(dim, 31 + i, 0.5f, 1.5f);
  bmt_test::set_parameters(plain, params);
  bmt_test::set_parameters(tp, params);
  const auto x = random_floats(N * dim, 35), g = random_floats(N * dim, 36);
  Tensor xp = leaf(x, {N, dim}), xt = leaf(my_rows(x, N, dim), {N / bmt::tp_size(), dim});
  const Tensor yp = plain.l.forward(xp), yt = tp.l.forward(xt);
  expect_close(yt.to_host_floats(), my_rows(yp.to_host_floats(), N, dim), kTol, "output");
  bmt::autograd::backward({yp}, {Tensor::from_floats(g, {N, dim})});
  bmt::autograd::backward({yt}, {Tensor::from_floats(my_rows(g, N, dim), yt.shape())});
  expect_close(xt.grad().to_host_floats(), my_rows(xp.grad().to_host_floats(), N, dim), kTol, "input gradient");
  const auto gp = bmt_test::parameter_grads(plain), gt = bmt_test::parameter_grads(tp);
  for (const auto& name : names) expect_close(gt.at(name), gp.at(name), kTol, name.c_str());
}

TEST(TensorParallelLayers, SequenceParallelNormsAreThePlainNormsRowsWithWholeGradients) {
  {
    SCOPED_TRACE("LayerNorm");
    check_norm<bmt::nn::LayerNorm, bmt::nn::SequenceParallelLayerNorm>({"l.weight", "l.bias"});
  }
  {
    SCOPED_TRACE("RMSNorm");
    check_norm<bmt::nn::RMSNorm, bmt::nn::SequenceParallelRMSNorm>({"l.weight"});
  }
}

TEST(TensorParallelLayers, InputGradientsMatchFiniteDifferencesOfTheGroupsLoss) {
  const int tp = bmt::tp_size();
  const bmt::testing::GradcheckOptions opt{1e-2f, 1e-2f, 1e-3f, {}};
  Holder<bmt::nn::ColumnParallelLinear> column(3, 2 * tp);
  Holder<bmt::nn::RowParallelLinear> row(2 * tp, 3);
  Holder<bmt::nn::SequenceParallelLayerNorm> norm(4);
  bmt::init_parameters(column);
  bmt::init_parameters(row);
  bmt::init_parameters(norm);
  const std::uint32_t seed = 40u + static_cast<std::uint32_t>(bmt::tp_rank());
  {
    SCOPED_TRACE("column");
    bmt_test::tp_gradcheck([&](const std::vector<Tensor>& in) { return column.l.forward_gelu(in[0]); },
                           {bmt::testing::random_tensor({2, 3}, seed)}, opt);
  }
  {
    SCOPED_TRACE("row");
    bmt_test::tp_gradcheck([&](const std::vector<Tensor>& in) { return row.l.gelu_forward(in[0]); },
                           {bmt::testing::random_tensor({2 * tp, 2}, seed)}, opt);
  }
  {
    SCOPED_TRACE("column then row");
    bmt_test::tp_gradcheck([&](const std::vector<Tensor>& in) { return row.l.forward(column.l.forward(in[0])); },
                           {bmt::testing::random_tensor({2, 3}, seed)}, opt);
  }
  {
    SCOPED_TRACE("norm");
    // A normalization is curved: a smaller step keeps the central difference's error in tolerance.
    bmt_test::tp_gradcheck([&](const std::vector<Tensor>& in) { return norm.l.forward(in[0]); },
                           {bmt::testing::random_tensor({2, 4}, seed)}, {2e-3f, 1e-2f, 1e-3f, {}});
  }
}

// A sequence-parallel residual MLP: rows [N/tp, kDim] -> norm -> column -> row, onto the rows.
struct MlpBlock : bmt::Module {
  static constexpr std::int64_t kDim = 6;
  bmt::nn::SequenceParallelLayerNorm norm{kDim};
  bmt::nn::ColumnParallelLinear up{kDim, 4 * bmt::tp_size(), true, bmt::DType::f32, bmt::init::normal(0.4f)};
  bmt::nn::RowParallelLinear down{4 * bmt::tp_size(), kDim, true, bmt::DType::f32, bmt::init::normal(0.4f)};
  MlpBlock() {
    register_module("norm", norm);
    register_module("up", up);
    register_module("down", down);
  }
  Tensor forward(const Tensor& rows) const { return down.forward_onto(rows, up.forward_gelu(norm.forward(rows))); }
};

// The same block with its products in FP8: inside a block list the weights are gathered as e4m3
// codes, each tensor-parallel part under its own part's scale.
struct Fp8MlpBlock : MlpBlock {
  Fp8MlpBlock() {
    up.set_fp8(true);
    down.set_fp8(true);
  }
};

// A block with a replicated layer beside a column-parallel one, both on the gathered rows, as
// grouped-query attention's key/value projections with fewer heads than ranks: each rank computes
// only its columns of the replicated layer's output. In FP8 the replicated weight is gathered in
// its dtype (its products read a slice of it) while the split ones arrive as codes.
struct Fp8ReplicatedBlock : bmt::Module {
  static constexpr std::int64_t kDim = MlpBlock::kDim;
  bmt::nn::SequenceParallelLayerNorm norm{kDim};
  bmt::nn::ColumnParallelLinear up{kDim, 4 * bmt::tp_size(), true, bmt::DType::f32, bmt::init::normal(0.4f)};
  bmt::nn::ReplicatedLinear kv{kDim, 4 * bmt::tp_size(), true, bmt::DType::f32, bmt::init::normal(0.4f)};
  bmt::nn::RowParallelLinear down{4 * bmt::tp_size(), kDim, true, bmt::DType::f32, bmt::init::normal(0.4f)};
  Fp8ReplicatedBlock() {
    register_module("norm", norm);
    register_module("up", up);
    register_module("kv", kv);
    register_module("down", down);
    up.set_fp8(true);
    kv.set_fp8(true);
    down.set_fp8(true);
  }
  Tensor forward(const Tensor& rows) const {
    const Tensor x = bmt::gather_tokens(norm.forward(rows));
    const Tensor mine = kv.forward_gathered(x, 4 * bmt::tp_rank(), 4);
    return down.forward_onto(rows, bmt::residual_add(up.forward_gathered(x), mine));
  }
};

// The same parameter names in both (blocks.i.up.weight, ...), so the same initial values.
template <class Block = MlpBlock>
struct BlockListModel : bmt::DistributedModule {
  bmt::TransformerBlockList<Block> blocks{1};
  BlockListModel() {
    for (int i = 0; i < 3; ++i) blocks.append();
    register_module("blocks", blocks);
  }
};
template <class Block = MlpBlock>
struct PlainModel : bmt::DistributedModule {
  bmt::nn::ModuleList<Block> blocks;
  PlainModel() {
    for (int i = 0; i < 3; ++i) blocks.append();
    register_module("blocks", blocks);
  }
};

// Inside CheckpointBlocks (gathered ahead, recomputed in backward, gradients reduce-scattered) the
// layers' collectives run again in the recompute, in the same order on every rank of the group:
// the results are those of the layers outside blocks.
template <class Block>
void expect_blocks_match_plain_layers() {
  const std::int64_t rows = 2;
  const auto x = random_floats(rows * MlpBlock::kDim, 50u + static_cast<std::uint32_t>(bmt::rank()));
  const auto g = random_floats(rows * MlpBlock::kDim, 60u + static_cast<std::uint32_t>(bmt::rank()));
  BlockListModel<Block> in_blocks;
  PlainModel<Block> outside;
  bmt::init_parameters(in_blocks);
  bmt::init_parameters(outside);
  Tensor xb = leaf(x, {rows, MlpBlock::kDim}), xo = leaf(x, {rows, MlpBlock::kDim});
  const Tensor yb = in_blocks.blocks(xb);
  Tensor yo = xo;
  for (const auto& block : outside.blocks) yo = block.forward(yo);
  expect_close(yb.to_host_floats(), yo.to_host_floats(), kTol, "output");
  bmt::autograd::backward({yb}, {Tensor::from_floats(g, yb.shape())});
  bmt::autograd::backward({yo}, {Tensor::from_floats(g, yo.shape())});
  expect_close(xb.grad().to_host_floats(), xo.grad().to_host_floats(), kTol, "input gradient");
  const auto gb = bmt_test::parameter_grads(in_blocks), go = bmt_test::parameter_grads(outside);
  ASSERT_EQ(gb.size(), go.size());
  ASSERT_FALSE(go.empty());
  for (const auto& [name, grad] : go) expect_close(gb.at(name), grad, kTol, name.c_str());
}

TEST(TensorParallelLayers, LayersInATransformerBlockListMatchTheLayersOutsideBlocks) {
  expect_blocks_match_plain_layers<MlpBlock>();
}

// In FP8 too: the codes a block gathers for each rank's part are those the layer outside blocks
// makes of the part it gathers whole, so the products are the same.
TEST(TensorParallelLayers, Fp8LayersInATransformerBlockListMatchTheLayersOutsideBlocks) {
  expect_blocks_match_plain_layers<Fp8MlpBlock>();
}

TEST(TensorParallelLayers, Fp8ReplicatedLayerInATransformerBlockListMatchesTheLayersOutsideBlocks) {
  expect_blocks_match_plain_layers<Fp8ReplicatedBlock>();
}

template <class F>
void expect_refused(F&& build, const std::string& message) {
  try {
    build();
    ADD_FAILURE() << "expected an error containing: " << message;
  } catch (const bmt::Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(TensorParallelLayers, SizesThatDoNotDivideByTpAreRefused) {
  const int tp = bmt::tp_size();
  if (tp == 1) GTEST_SKIP() << "every size divides by 1";
  const std::string by_tp = " divisible by tp " + std::to_string(tp) + ", found ";
  expect_refused([&] { bmt::nn::ColumnParallelLinear l(4, 2 * tp + 1); },
                 "expected the output size" + by_tp + std::to_string(2 * tp + 1));
  expect_refused([&] { bmt::nn::ColumnParallelLinear l(4, 3 * tp + 1, true, bmt::DType::f32, {}, {tp, tp + 1, tp}); },
                 "expected every part of the output" + by_tp + std::to_string(tp + 1));
  expect_refused([&] { bmt::nn::ColumnParallelLinear l(4, 3 * tp, true, bmt::DType::f32, {}, {tp, tp}); },
                 "expected parts summing to the output size " + std::to_string(3 * tp) + ", found " + std::to_string(2 * tp));
  expect_refused([&] { bmt::nn::RowParallelLinear l(tp + 1, 4); }, "expected the input size" + by_tp + std::to_string(tp + 1));
  expect_refused([&] { bmt::nn::VocabParallelEmbedding e(tp + 1, 4); }, "expected the row count" + by_tp + std::to_string(tp + 1));
  Holder<bmt::nn::VocabParallelEmbedding> table(2 * tp, 3);
  bmt::init_parameters(table);
  expect_refused([&] { table.l.forward(Tensor::from_ints({0, 1, 2}, {3})); },
                 "expected a token count divisible by tp " + std::to_string(tp) + ", found 3");
}

}  // namespace

// PartMap: each element of a part is the whole tensor's element that part_of (the layout written out
// by hand) puts there, and runs() covers any range of the part with maximal runs of consecutive
// whole indices. Fused parts, column and row splits, a bias and the replicated case.
TEST(TensorParallelLayers, PartMapAddressesTheWholeTensor) {
  const std::int64_t tp = bmt::tp_size();
  bmt::nn::ColumnParallelLinear fused(6, 12 * tp, true, bmt::DType::f32, bmt::init::Fn{}, {4 * tp, 4 * tp, 4 * tp});
  bmt::nn::ColumnParallelLinear column(5, 2 * tp);
  bmt::nn::RowParallelLinear row(3 * tp, 7);
  for (const bmt::DistributedParameter* p : {&fused.weight, &fused.bias, &column.weight, &row.weight, &row.bias}) {
    const bmt::TensorParallelSplit& split = split_of(*p);
    const bmt::Shape whole = bmt::whole_shape(*p);
    std::int64_t whole_numel = 1;
    for (auto d : whole) whole_numel *= d;
    std::vector<float> index(static_cast<std::size_t>(whole_numel));
    for (std::size_t i = 0; i < index.size(); ++i) index[i] = static_cast<float>(i);
    const auto want = bmt_test::part_of(index, split);
    ASSERT_EQ(static_cast<std::int64_t>(want.size()), p->numel());
    const bmt::PartMap map = bmt::PartMap::of(*p);
    for (std::int64_t i = 0; i < p->numel(); ++i) ASSERT_EQ(map.whole_index(i), static_cast<std::int64_t>(want[i])) << i;
    for (std::int64_t first : {std::int64_t{0}, std::int64_t{1}, p->numel() / 2}) {
      const std::int64_t count = p->numel() - first - (first > 0 ? 1 : 0);
      std::int64_t next = first;
      const auto runs = map.runs(first, count);
      for (std::size_t r = 0; r < runs.size(); ++r) {
        EXPECT_EQ(runs[r].part_first, next);
        for (std::int64_t k = 0; k < runs[r].count; ++k)
          ASSERT_EQ(runs[r].whole_first + k, static_cast<std::int64_t>(want[next + k]));
        if (r > 0) EXPECT_NE(runs[r - 1].whole_first + runs[r - 1].count, runs[r].whole_first) << "runs not merged";
        next += runs[r].count;
      }
      EXPECT_EQ(next, first + count);
    }
  }
}
