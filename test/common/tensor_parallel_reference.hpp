#pragma once
// Test helpers for tensor-parallel layers and ops: a module's parameters set to and read back as
// whole-parameter slices, the sequence-parallel rows of a whole matrix, and gradient checks by finite
// differences of a loss summed over the tensor-parallel group.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <mpi.h>
#include <string>
#include <vector>

#include <bmtrain/bmtrain.hpp>

#include "gradcheck.hpp"

namespace bmt_test {

// This rank's part of a whole parameter's values, as `split` divides it (a copy when replicated).
inline std::vector<float> part_of(const std::vector<float>& whole, const bmt::TensorParallelSplit& split) {
  if (split.replicated()) return whole;
  const bmt::Shape& shape = split.whole_shape;
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < split.dim; ++d) outer *= shape[static_cast<std::size_t>(d)];
  for (std::size_t d = static_cast<std::size_t>(split.dim) + 1; d < shape.size(); ++d) inner *= shape[d];
  const std::int64_t along = shape[static_cast<std::size_t>(split.dim)];
  std::vector<float> out;
  for (std::int64_t o = 0; o < outer; ++o) {
    std::int64_t part_start = 0;
    for (std::int64_t part : split.parts) {
      const std::int64_t piece = part / split.tp_size, first = part_start + split.tp_rank * piece;
      const auto begin = whole.begin() + (o * along + first) * inner;
      out.insert(out.end(), begin, begin + piece * inner);
      part_start += part;
    }
  }
  return out;
}

// Every rank of the shard group's `shard`, concatenated in rank order.
inline std::vector<float> gather_shards(const bmt::Tensor& shard) {
  bmt::Context& ctx = bmt::context();
  bmt::Tensor full = bmt::Tensor::empty({shard.numel() * ctx.mesh().shard_size}, shard.dtype());
  ctx.shard_comm().all_gather(shard.data(), full.data(), static_cast<std::size_t>(shard.numel()), shard.dtype(),
                              ctx.compute_stream());
  ctx.compute_stream().synchronize();
  return full.to_host_floats();
}

// Sets each named parameter of `model` (f32, after init_parameters) to values[name], the
// parameter's own (this rank's part) elements.
inline void set_parameters(bmt::Module& model, const std::map<std::string, std::vector<float>>& values) {
  for (auto* s : bmt::sharded_storages(model)) {
    std::vector<float> shard = s->shard().to_host_floats();
    for (const auto& e : s->entries()) {
      const auto it = values.find(e.name);
      ASSERT_NE(it, values.end()) << "no values for " << e.name;
      ASSERT_EQ(static_cast<std::int64_t>(it->second.size()), e.numel) << e.name;
      for (std::int64_t i = 0; i < s->shard_size(); ++i) {
        const std::int64_t g = s->shard_begin() + i;
        if (g >= e.offset && g < e.offset + e.numel) shard[static_cast<std::size_t>(i)] = it->second[g - e.offset];
      }
    }
    s->shard().copy_from_host(shard.data(), shard.size() * sizeof(float));
  }
}

// name -> this rank's part of each parameter's f32 gradient.
inline std::map<std::string, std::vector<float>> parameter_grads(bmt::Module& model) {
  std::map<std::string, std::vector<float>> out;
  for (auto* s : bmt::sharded_storages(model)) {
    s->settle();
    const auto g = gather_shards(s->grad_shard());
    for (const auto& e : s->entries()) out[e.name] = {g.begin() + e.offset, g.begin() + e.offset + e.numel};
  }
  return out;
}

// Rows [r*rows/tp, (r+1)*rows/tp) of a whole row-major [rows, cols] matrix, r this tp rank.
inline std::vector<float> my_rows(const std::vector<float>& whole, std::int64_t rows, std::int64_t cols) {
  const std::int64_t per = rows / bmt::tp_size(), first = bmt::tp_rank() * per;
  return {whole.begin() + first * cols, whole.begin() + (first + per) * cols};
}

// Columns [r*cols/tp, (r+1)*cols/tp) of a whole row-major [rows, cols] matrix.
inline std::vector<float> my_columns(const std::vector<float>& whole, std::int64_t rows, std::int64_t cols) {
  const std::int64_t per = cols / bmt::tp_size(), first = bmt::tp_rank() * per;
  std::vector<float> out;
  for (std::int64_t r = 0; r < rows; ++r)
    out.insert(out.end(), whole.begin() + r * cols + first, whole.begin() + r * cols + first + per);
  return out;
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::abs(static_cast<double>(got[i]) - want[i]) > tol * (1.0 + std::abs(want[i])) && reported++ < 5)
      ADD_FAILURE() << what << " element " << i << ": " << got[i] << ", expected " << want[i];
}

// name -> every parameter of `model` whole: each rank's part gathered over the shard group, the
// parts gathered over the tensor-parallel group and put in place by part_of (not by the library's
// PartMap, which this checks); a replicated parameter is this rank's own. `shard_of` gives the
// per-storage tensor laid out as the shard (by default the values; an optimizer's state works alike).
inline std::map<std::string, std::vector<float>> whole_parameters(
    bmt::Module& model, const std::function<bmt::Tensor(bmt::ShardedStorage&)>& shard_of = {}) {
  std::map<std::string, std::vector<float>> out;
  const MPI_Comm group = bmt::context().mpi_tp_comm();
  for (auto* s : bmt::sharded_storages(model)) {
    const auto v = gather_shards(shard_of ? bmt::contiguous(shard_of(*s)) : s->shard());
    for (const auto& e : s->entries()) {
      std::vector<float> part(v.begin() + e.offset, v.begin() + e.offset + e.numel);
      const bmt::TensorParallelSplit& split = e.parameter.impl()->param->tp;
      if (split.replicated() || split.tp_size == 1) {
        out[e.name] = std::move(part);
        continue;
      }
      std::vector<float> parts(part.size() * static_cast<std::size_t>(split.tp_size));
      MPI_Allgather(part.data(), static_cast<int>(part.size()), MPI_FLOAT, parts.data(), static_cast<int>(part.size()),
                    MPI_FLOAT, group);
      std::int64_t whole_numel = 1;
      for (auto d : split.whole_shape) whole_numel *= d;
      std::vector<float> index(static_cast<std::size_t>(whole_numel)), whole(index.size());
      for (std::size_t i = 0; i < index.size(); ++i) index[i] = static_cast<float>(i);
      for (int q = 0; q < split.tp_size; ++q) {
        bmt::TensorParallelSplit of_q = split;
        of_q.tp_rank = q;
        const auto where = part_of(index, of_q);
        for (std::size_t k = 0; k < where.size(); ++k)
          whole[static_cast<std::size_t>(where[k])] = parts[q * part.size() + k];
      }
      out[e.name] = std::move(whole);
    }
  }
  return out;
}

// How the values of a tensor-parallel function are laid out over the group.
struct TpLayout {
  // The output is one value every rank computes whole (reduce_tp's sum, a loss): weighted by the
  // same weights on every rank and counted once. Otherwise each rank's output is its own (rows,
  // columns, or a value each rank goes on to use in its own way): weighted by weights of its own and
  // summed over the ranks.
  bool replicated_output = false;
  // The inputs are one value held by every rank (a replicated parameter, copy_tp's input): each
  // element is moved on every rank at once. Otherwise each rank's inputs are its own, moved on
  // their rank alone while the others compute with theirs unchanged.
  bool shared_inputs = false;
};

// Gradient check of a function whose ranks communicate over the tensor-parallel group: the loss
// as `layout` says, each input element moved by +-h (every rank walking the same order, so
// collectives match).
inline void tp_gradcheck(const std::function<bmt::Tensor(const std::vector<bmt::Tensor>&)>& fn,
                         std::vector<bmt::Tensor> inputs, const bmt::testing::GradcheckOptions& opt = {},
                         TpLayout layout = {}) {
  const MPI_Comm group = bmt::context().mpi_tp_comm();
  const int rank = bmt::tp_rank(), size = bmt::tp_size();
  auto wants = [&](std::size_t i) {
    return bmt::is_floating(inputs[i].dtype()) && (opt.check.empty() || opt.check[i]);
  };
  std::vector<bmt::Tensor> leaves;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    bmt::Tensor leaf = inputs[i].detach();
    if (wants(i)) leaf.set_requires_grad(true);
    leaves.push_back(leaf);
  }
  const bmt::Tensor y = fn(leaves);
  const auto weights =
      bmt::testing::random_floats(static_cast<std::size_t>(y.numel()), 4242u + (layout.replicated_output ? 0u : 17u * rank));
  bmt::autograd::backward({y}, {bmt::Tensor::from_floats(weights, y.shape(), y.dtype())});

  auto loss = [&](const std::vector<bmt::Tensor>& in) {
    bmt::NoGradGuard no_grad;
    const auto out = fn(in).to_host_floats();
    double s = 0, total = 0;
    for (std::size_t k = 0; k < out.size(); ++k) s += static_cast<double>(out[k]) * weights[k];
    MPI_Allreduce(&s, &total, 1, MPI_DOUBLE, MPI_SUM, group);
    return layout.replicated_output ? total / size : total;
  };
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!wants(i)) continue;
    ASSERT_TRUE(leaves[i].grad().defined()) << "input " << i << " received no gradient";
    const auto analytic = leaves[i].grad().to_host_floats();
    auto values = inputs[i].to_host_floats();
    int reported = 0;
    for (int owner = 0; owner < (layout.shared_inputs ? 1 : size); ++owner) {
      for (std::size_t k = 0; k < values.size(); ++k) {
        const bool mine = layout.shared_inputs || owner == rank;
        auto moved = [&](float delta) {
          std::vector<bmt::Tensor> probe = inputs;
          if (mine) {
            auto v = values;
            v[k] += delta;
            probe[i] = bmt::Tensor::from_floats(v, inputs[i].shape(), inputs[i].dtype());
          }
          return loss(probe);
        };
        const double numeric = (moved(opt.step) - moved(-opt.step)) / (2.0 * opt.step);
        if (!mine) continue;
        const double a = analytic[k];
        const double tol = opt.atol + opt.rtol * std::max(std::fabs(a), std::fabs(numeric));
        if (std::fabs(a - numeric) > tol && reported++ < 5)
          ADD_FAILURE() << "tp rank " << rank << " input " << i << " element " << k << ": analytic " << a
                        << ", numeric " << numeric << " (tolerance " << tol << ")";
      }
    }
  }
}

}  // namespace bmt_test
