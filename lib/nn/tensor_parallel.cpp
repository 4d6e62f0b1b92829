#include "bmtrain/nn/tensor_parallel.hpp"

#include <cmath>
#include <numeric>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/ops/elementwise.hpp"
#include "bmtrain/ops/embedding.hpp"
#include "bmtrain/ops/norm.hpp"
#include "bmtrain/ops/shape.hpp"
#include "bmtrain/ops/tensor_parallel.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "linear_product.hpp"

namespace bmt::nn {

namespace {

void require_positive(const char* layer, const char* what, std::int64_t value) {
  BMT_REQUIRE(value > 0, layer << ": expected a positive " << what << ", found " << value);
}

void require_divisible(const char* layer, const char* what, std::int64_t value) {
  BMT_REQUIRE(value % tp_size() == 0,
              layer << ": expected " << what << " divisible by tp " << tp_size() << ", found " << value);
}

// Any leading shape, read as rows of the last dimension.
Tensor as_rows(const Tensor& x, std::int64_t features, const char* layer) {
  BMT_REQUIRE(x.defined() && x.dim() >= 1 && x.size(-1) == features,
              layer << ": expected an input [..., " << features << "], found "
                    << (x.defined() ? to_string(x.shape()) : "none"));
  return x.dim() == 2 ? x : reshape(x, {-1, features});
}

Tensor gathered_or_none(const DistributedParameter& p) { return p.defined() ? p.gather() : Tensor(); }

// Rows [first, first + count) of x along dimension 0 (x itself when that is all of it).
Tensor rows_of(const Tensor& x, std::int64_t first, std::int64_t count) {
  const std::int64_t total = x.size(0);
  if (first == 0 && count == total) return x;
  std::vector<std::int64_t> sizes;
  if (first > 0) sizes.push_back(first);
  sizes.push_back(count);
  if (total - first - count > 0) sizes.push_back(total - first - count);
  return split(x, sizes, 0)[first > 0 ? 1 : 0];
}

}  // namespace

void split_over_tp(DistributedParameter& p, int dim, std::vector<std::int64_t> parts, Shape whole) {
  p.impl()->param->tp = TensorParallelSplit{dim, std::move(parts), std::move(whole), tp_rank(), tp_size()};
}

ColumnParallelLinear::ColumnParallelLinear(std::int64_t in, std::int64_t out, bool with_bias, DType dtype,
                                           init::Fn weight_init, std::vector<std::int64_t> parts) {
  const char* layer = "nn::ColumnParallelLinear";
  require_positive(layer, "input size", in);
  require_positive(layer, "output size", out);
  if (parts.empty()) parts = {out};
  const std::int64_t total = std::accumulate(parts.begin(), parts.end(), std::int64_t{0});
  BMT_REQUIRE(total == out, layer << ": expected parts summing to the output size " << out << ", found " << total);
  for (std::int64_t part : parts) {
    require_positive(layer, "part size", part);
    require_divisible(layer, parts.size() == 1 ? "the output size" : "every part of the output", part);
  }
  if (!weight_init) weight_init = init::normal(1.0f / std::sqrt(static_cast<float>(in)));
  weight = DistributedParameter({out / tp_size(), in}, dtype, std::move(weight_init));
  split_over_tp(weight, 0, parts, {out, in});
  register_parameter("weight", weight);
  if (with_bias) {
    bias = DistributedParameter({out / tp_size()}, dtype, init::zeros());
    split_over_tp(bias, 0, parts, {out});
    register_parameter("bias", bias);
  }
}

Tensor ColumnParallelLinear::forward(const Tensor& rows) const {
  return forward_gathered(gather_tokens(as_rows(rows, in_features(), "nn::ColumnParallelLinear")));
}

Tensor ColumnParallelLinear::forward_gelu(const Tensor& rows) const {
  return forward_gelu_gathered(gather_tokens(as_rows(rows, in_features(), "nn::ColumnParallelLinear")));
}

Tensor ColumnParallelLinear::forward_gathered(const Tensor& x) const {
  return linear_product(as_rows(x, in_features(), "nn::ColumnParallelLinear"), weight.gather(), gathered_or_none(bias),
                        LinearForm::plain, fp8_);
}

Tensor ColumnParallelLinear::forward_gelu_gathered(const Tensor& x) const {
  return linear_product(as_rows(x, in_features(), "nn::ColumnParallelLinear"), weight.gather(), gathered_or_none(bias),
                        LinearForm::gelu_after, fp8_);
}

RowParallelLinear::RowParallelLinear(std::int64_t in, std::int64_t out, bool with_bias, DType dtype,
                                     init::Fn weight_init) {
  const char* layer = "nn::RowParallelLinear";
  require_positive(layer, "input size", in);
  require_positive(layer, "output size", out);
  require_divisible(layer, "the input size", in);
  if (!weight_init) weight_init = init::normal(1.0f / std::sqrt(static_cast<float>(in)));
  weight = DistributedParameter({out, in / tp_size()}, dtype, std::move(weight_init));
  split_over_tp(weight, 1, {in}, {out, in});
  register_parameter("weight", weight);
  if (with_bias) {
    bias = DistributedParameter({out}, dtype, init::zeros());
    register_parameter("bias", bias);  // replicated: the default split
  }
}

// The rows of the whole product, summed over the group, before the bias.
Tensor RowParallelLinear::product(const Tensor& x, bool gelu_first) const {
  const Tensor partial = linear_product(as_rows(x, local_in_features(), "nn::RowParallelLinear"), weight.gather(),
                                        Tensor(), gelu_first ? LinearForm::gelu_before : LinearForm::plain, fp8_);
  return scatter_tokens(partial);
}

Tensor RowParallelLinear::forward(const Tensor& x) const {
  if (tp_size() == 1)
    return linear_product(as_rows(x, local_in_features(), "nn::RowParallelLinear"), weight.gather(),
                          gathered_or_none(bias), LinearForm::plain, fp8_);
  const Tensor y = product(x, false);
  return bias.defined() ? add(y, copy_tp(bias.gather())) : y;
}

Tensor RowParallelLinear::gelu_forward(const Tensor& x) const {
  if (tp_size() == 1)
    return linear_product(as_rows(x, local_in_features(), "nn::RowParallelLinear"), weight.gather(),
                          gathered_or_none(bias), LinearForm::gelu_before, fp8_);
  const Tensor y = product(x, true);
  return bias.defined() ? add(y, copy_tp(bias.gather())) : y;
}

Tensor RowParallelLinear::forward_onto(const Tensor& residual, const Tensor& x, bool gelu_first) const {
  const Tensor b = bias.defined() ? copy_tp(bias.gather()) : Tensor();
  return residual_add(residual, product(x, gelu_first), b);
}

VocabParallelEmbedding::VocabParallelEmbedding(std::int64_t count, std::int64_t dim, DType dtype,
                                               init::Fn weight_init) {
  const char* layer = "nn::VocabParallelEmbedding";
  require_positive(layer, "row count", count);
  require_positive(layer, "feature size", dim);
  require_divisible(layer, "the row count", count);
  first_row_ = tp_rank() * (count / tp_size());
  weight = DistributedParameter({count / tp_size(), dim}, dtype, std::move(weight_init));
  split_over_tp(weight, 0, {count}, {count, dim});
  register_parameter("weight", weight);
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) const {
  BMT_REQUIRE(ids.defined(), "nn::VocabParallelEmbedding: expected an ids tensor");
  const Tensor flat = contiguous(ids).view({ids.numel()});
  if (tp_size() == 1) return embedding(flat, weight.gather());
  BMT_REQUIRE(ids.numel() % tp_size() == 0, "nn::VocabParallelEmbedding: expected a token count divisible by tp "
                                                << tp_size() << ", found " << ids.numel());
  return scatter_tokens(embedding_part(flat, weight.gather(), first_row_));
}

ReplicatedLinear::ReplicatedLinear(std::int64_t in, std::int64_t out, bool with_bias, DType dtype,
                                   init::Fn weight_init)
    : parameters_(in, out, with_bias, dtype, std::move(weight_init)) {
  weight = parameters_.weight;
  bias = parameters_.bias;
  register_parameter("weight", weight);
  if (bias.defined()) register_parameter("bias", bias);
}

Tensor ReplicatedLinear::forward_gathered(const Tensor& x, std::int64_t first, std::int64_t count) const {
  BMT_REQUIRE(first >= 0 && count > 0 && first + count <= out_features(),
              "nn::ReplicatedLinear: expected outputs [first, first + count) within " << out_features() << ", found ["
                                                                                      << first << ", " << first + count
                                                                                      << ")");
  const Tensor w = rows_of(copy_tp(weight.gather()), first, count);
  const Tensor b = bias.defined() ? rows_of(copy_tp(bias.gather()), first, count) : Tensor();
  return linear_product(as_rows(x, in_features(), "nn::ReplicatedLinear"), w, b, LinearForm::plain, fp8());
}

Tensor SequenceParallelLayerNorm::forward(const Tensor& rows) const {
  return layer_norm(rows, copy_tp(weight.gather()), copy_tp(bias.gather()), eps);
}

Tensor SequenceParallelRMSNorm::forward(const Tensor& rows) const {
  return rms_norm(rows, copy_tp(weight.gather()), eps);
}

}  // namespace bmt::nn
