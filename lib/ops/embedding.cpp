#include "bmtrain/ops/embedding.hpp"

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/embedding.hpp"
#include "upstream_grad.hpp"

namespace bmt {

namespace {

// Inputs: ids, weight. A part of a table (first_row set) looks up ids shifted to its rows and lets
// the other parts' ids through as zero rows.
class EmbeddingFn final : public autograd::Function {
 public:
  EmbeddingFn() = default;
  explicit EmbeddingFn(std::int64_t first_row) : first_row_(first_row), part_(true) {}
  std::string name() const override { return part_ ? "embedding_part" : "Embedding"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    BMT_REQUIRE(in[0].defined() && in[1].defined(), "embedding: expected ids and weight tensors");
    BMT_REQUIRE(in[1].dim() == 2, "embedding: expected weight of shape [V, C], found " << to_string(in[1].shape()));
    BMT_REQUIRE(!part_ || first_row_ >= 0, "embedding_part: expected first_row >= 0, found " << first_row_);
    ids_ = part_ ? kernels::ids_from(in[0], first_row_) : contiguous(in[0]).detach();
    const Tensor weight = contiguous(in[1]);
    weight_shape_ = weight.shape();
    weight_dtype_ = weight.dtype();
    Shape out_shape = ids_.shape();
    out_shape.push_back(weight.size(1));
    Tensor out = Tensor::empty(out_shape, weight.dtype());
    if (part_) {
      kernels::embedding_forward(ids_, weight, out);
    } else {
      const kernels::IndexCheck check;
      kernels::embedding_forward(ids_, weight, out, check.record());
      check.throw_if_bad("embedding", "ids", weight.size(0));
    }
    // Grouping the ids for the backward now lets it run beside the rest of the forward.
    if (is_recording()) index_ = kernels::embedding_index(ids_, weight.size(0));
    return {out};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!g[0].defined()) return {Tensor(), Tensor()};
    Shape out_shape = ids_.shape();
    out_shape.push_back(weight_shape_[1]);
    Tensor dweight = Tensor::empty(weight_shape_, weight_dtype_);
    kernels::embedding_backward(ids_, upstream_grad(g[0], out_shape, weight_dtype_, name()), dweight, index_);
    return {Tensor(), dweight};
  }

  void release_saved() override {
    index_ = {};
    ids_ = Tensor();
  }

 private:
  std::int64_t first_row_ = 0;
  bool part_ = false;
  Tensor ids_;
  kernels::EmbeddingIndex index_;
  Shape weight_shape_;
  DType weight_dtype_ = DType::f32;
};

}  // namespace

Tensor embedding(const Tensor& ids, const Tensor& weight) { return autograd::call<EmbeddingFn>({ids, weight})[0]; }

Tensor embedding_part(const Tensor& ids, const Tensor& weight, std::int64_t first_row) {
  return autograd::call<EmbeddingFn>({ids, weight}, first_row)[0];
}

}  // namespace bmt
