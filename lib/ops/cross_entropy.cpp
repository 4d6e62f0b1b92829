#include "bmtrain/ops/cross_entropy.hpp"

#include <string>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/cross_entropy.hpp"
#include "upstream_grad.hpp"

namespace bmt {

namespace {

// Inputs: logits, targets.
class CrossEntropyFn final : public autograd::Function {
 public:
  explicit CrossEntropyFn(std::int64_t ignore_index) : ignore_(ignore_index) {}
  std::string name() const override { return "CrossEntropy"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    BMT_REQUIRE(in[0].defined() && in[0].dim() >= 1, "cross_entropy: expected logits with at least one dimension");
    BMT_REQUIRE(in[1].defined(), "cross_entropy: expected a targets tensor");
    logits_ = contiguous(in[0]).detach();
    targets_ = contiguous(in[1]).detach();
    Shape rows = logits_.shape();
    rows.pop_back();
    lse_ = Tensor::empty(rows, DType::f32);
    count_ = Tensor::empty({}, DType::f32);
    Tensor loss = Tensor::empty({}, DType::f32);
    const kernels::IndexCheck check;
    kernels::cross_entropy_forward(logits_, targets_, ignore_, lse_, loss, count_, check.record());
    check.throw_if_bad("cross_entropy", "targets", logits_.size(-1),
                       (" or ignore_index (" + std::to_string(ignore_) + ")").c_str());
    return {loss};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!g[0].defined()) return {Tensor(), Tensor()};
    // The logits are dead once their gradient exists: when nobody else holds them (a GEMM's
    // output, as a language model's head gives), the gradient overwrites them in place, so the
    // backward never holds two [rows, vocab] tensors (3.3 GB at GPT-2 XL's batch of 16).
    const bool sole_owner = logits_.storage() && logits_.storage().use_count() == 1 && logits_.storage()->owned();
    Tensor dlogits = sole_owner ? logits_ : Tensor::empty(logits_.shape(), logits_.dtype());
    const Tensor dloss = upstream_grad(g[0], {}, DType::f32, name());
    kernels::cross_entropy_backward(logits_, targets_, ignore_, lse_, count_, dloss, dlogits);
    logits_ = Tensor();
    return {dlogits, Tensor()};
  }

  void release_saved() override { logits_ = targets_ = lse_ = count_ = Tensor(); }

 private:
  std::int64_t ignore_;
  Tensor logits_, targets_, lse_, count_;
};

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index) {
  return autograd::call<CrossEntropyFn>({logits, targets}, ignore_index)[0];
}

}  // namespace bmt
