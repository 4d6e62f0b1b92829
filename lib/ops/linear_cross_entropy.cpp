// The chunked linear + cross-entropy, over the whole vocabulary or over a vocabulary split across
// a group of ranks (ops/vocab_parallel_cross_entropy.hpp): the two differ only in how a chunk's
// logits become its logsumexp and loss (one kernel, or three steps with the group's all-reduces
// between them) and in which kernel turns them into their gradient.
#include "bmtrain/ops/linear_cross_entropy.hpp"

#include <algorithm>
#include <string>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/cross_entropy.hpp"
#include "bmtrain/kernels/vocab_parallel_cross_entropy.hpp"
#include "bmtrain/ops/vocab_parallel_cross_entropy.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "matrix_batch.hpp"
#include "upstream_grad.hpp"

namespace bmt {

namespace {

// Inputs: h, weight, targets. With a group, weight is this rank's part of the vocabulary (rows
// [first, first + Vp) of the whole V = Vp * group size, first = Vp * rank).
//
// When a backward may follow, forward makes the gradients too: each chunk's logits, once reduced
// to the loss, become their gradient for an upstream gradient of 1 and go straight into the chunk's
// rows of dh and its part of dweight (f32), so backward only scales those by the loss's upstream
// gradient, and the head's GEMM does not run a second time. The count of rows the mean is over is
// taken from the targets first, so the logits' gradient is the one backward would make for an
// upstream gradient of 1. f16 keeps to making the gradients in backward: its logits' gradient must
// carry the loss scale before it is rounded, or the small ones flush to zero.
class LinearCrossEntropyFn final : public autograd::Function {
 public:
  LinearCrossEntropyFn(std::int64_t chunk_rows, std::int64_t ignore_index, Communicator* group = nullptr)
      : chunk_(chunk_rows), ignore_(ignore_index), group_(group) {}
  std::string name() const override { return group_ ? "vocab_parallel_cross_entropy" : "linear_cross_entropy"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor &h = in[0], &w = in[1], &targets = in[2];
    const std::string name_of_op = name();
    const char* op = name_of_op.c_str();
    BMT_REQUIRE(chunk_ > 0, op << ": expected chunk_rows > 0, found " << chunk_);
    BMT_REQUIRE(h.defined() && w.defined() && is_floating(h.dtype()) && h.dtype() == w.dtype(),
                op << ": expected h and weight of one floating dtype, found "
                   << (h.defined() ? dtype_name(h.dtype()) : "none") << " and "
                   << (w.defined() ? dtype_name(w.dtype()) : "none"));
    BMT_REQUIRE(w.dim() == 2 && w.size(0) > 0 && w.size(1) > 0 && h.dim() >= 1 && h.size(-1) == w.size(1),
                op << ": expected h [..., C] and weight [V, C] with V, C > 0, found h " << to_string(h.shape())
                   << " and weight " << to_string(w.shape()));
    const std::int64_t C = w.size(1), V = w.size(0), N = h.numel() / C;
    first_ = group_ ? V * group_->rank() : 0;
    vocab_ = group_ ? V * group_->size() : V;
    BMT_REQUIRE(targets.defined() && targets.numel() == N,
                op << ": expected " << N << " targets (one per row of h " << to_string(h.shape()) << "), found "
                   << (targets.defined() ? std::to_string(targets.numel()) + " in " + to_string(targets.shape())
                                         : std::string("none")));
    h_shape_ = h.shape();
    dtype_ = h.dtype();
    h_ = contiguous(h.detach()).view({N, C});
    w_ = contiguous(w.detach());
    targets_ = contiguous(targets.detach()).view({N});
    lse_ = Tensor::empty({N}, DType::f32);
    count_ = Tensor::empty({}, DType::f32);
    ahead_ = is_recording() && (h.requires_grad() || w.requires_grad()) && h.dtype() != DType::f16;
    Tensor unit;  // the upstream gradient the forward's gradients are made for
    if (ahead_) {
      kernels::count_targets(targets_, vocab_, ignore_, count_);
      unit = full({}, 1.0f);
      if (h.requires_grad()) dh_ahead_ = Tensor::empty({N, C}, DType::f32);
      if (w.requires_grad()) dw_ahead_ = Tensor::empty({V, C}, DType::f32);
      if (N == 0 && dw_ahead_.defined()) dw_ahead_.zero_();
    }
    Tensor loss = Tensor::empty({}, DType::f32);
    const std::int64_t chunks = (N + chunk_ - 1) / chunk_;
    Tensor parts = Tensor::empty({chunks, 2}, DType::f32);  // each chunk's mean loss and count
    Tensor logits = Tensor::empty({std::min(chunk_, N), V}, h.dtype());
    // With a group: a chunk's row maxima, then its sums of exponentials and target logits [2, rows].
    Tensor row_max = group_ ? Tensor::empty({std::min(chunk_, N)}, DType::f32) : Tensor();
    Tensor stats = group_ ? Tensor::empty({2 * std::min(chunk_, N)}, DType::f32) : Tensor();
    const std::string allowed = " or ignore_index (" + std::to_string(ignore_) + ")";
    const MatrixBatch weight = as_matrices(w_);
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::int64_t r0 = c * chunk_, r1 = std::min(N, r0 + chunk_), n = r1 - r0;
      const Tensor part = logits.slice(0, 0, n), chunk_targets = targets_.slice(0, r0, r1);
      const Tensor chunk_loss = parts.slice(0, c, c + 1).slice(1, 0, 1), chunk_count = parts.slice(0, c, c + 1).slice(1, 1, 2);
      const MatrixBatch h_rows = as_matrices(h_.slice(0, r0, r1));
      multiply(h_rows, weight.transposed(), part);
      const kernels::IndexCheck check;
      if (group_) {
        Stream& stream = context().compute_stream();
        const Tensor m = row_max.slice(0, 0, n), st = stats.slice(0, 0, 2 * n).view({2, n});
        kernels::vocab_part_max(part, m);
        group_->all_reduce(m.data(), m.data(), static_cast<std::size_t>(n), DType::f32, ReduceOp::max, stream);
        kernels::vocab_part_sums(part, chunk_targets, first_, m, st);
        group_->all_reduce(st.data(), st.data(), static_cast<std::size_t>(2 * n), DType::f32, ReduceOp::sum, stream);
        kernels::vocab_parallel_loss(chunk_targets, vocab_, ignore_, m, st, lse_.slice(0, r0, r1), chunk_loss,
                                     chunk_count, check.record());
      } else {
        kernels::cross_entropy_forward(part, chunk_targets, ignore_, lse_.slice(0, r0, r1), chunk_loss, chunk_count,
                                       check.record());
      }
      check.throw_if_bad(op, "targets", vocab_, allowed.c_str(), r0);
      if (ahead_) chunk_gradients(part, h_rows, weight, r0, r1, unit, dh_ahead_, dw_ahead_);
    }
    if (chunks == 0) {
      loss.zero_();
      count_.zero_();
    } else {
      kernels::cross_entropy_combine(parts, loss, count_);
    }
    if (ahead_) h_ = w_ = targets_ = lse_ = Tensor();  // backward needs only the gradients
    return {loss};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!g[0].defined()) return {Tensor(), Tensor(), Tensor()};
    const Tensor dloss = upstream_grad(g[0], {}, DType::f32, name());
    const std::vector<Tensor> grads = ahead_ ? scaled_gradients(dloss) : gradients(dloss);
    release_saved();
    return grads;
  }

  void release_saved() override { h_ = w_ = targets_ = lse_ = count_ = dh_ahead_ = dw_ahead_ = Tensor(); }

 private:
  // A chunk's logits become their gradient in place (for upstream gradient dloss), and that goes
  // into the chunk's rows of dh and, summed over the chunks, dweight (the first chunk writing it
  // unless add_to_dw).
  void chunk_gradients(const Tensor& part, const MatrixBatch& h_rows, const MatrixBatch& weight, std::int64_t r0,
                       std::int64_t r1, const Tensor& dloss, const Tensor& dh, const Tensor& dw,
                       bool add_to_dw = false) const {
    const Tensor chunk_targets = targets_.slice(0, r0, r1);
    if (group_)
      kernels::vocab_part_backward(part, chunk_targets, first_, vocab_, ignore_, lse_.slice(0, r0, r1), count_, dloss,
                                   part);
    else
      kernels::cross_entropy_backward(part, chunk_targets, ignore_, lse_.slice(0, r0, r1), count_, dloss, part);
    const MatrixBatch dlogits = as_matrices(part);
    if (dh.defined()) multiply(dlogits, weight, dh.slice(0, r0, r1), nullptr, false, dtype_);
    if (dw.defined()) multiply(dlogits.transposed(), h_rows, dw, nullptr, add_to_dw || r0 > 0, dtype_);
  }

  // Backward after a forward that made the gradients: each scaled by the upstream gradient, dweight
  // into the weight's f32 gradient buffer when it has one.
  std::vector<Tensor> scaled_gradients(const Tensor& dloss) {
    Tensor dh, dw;
    if (needs_input_grad(0) && dh_ahead_.defined()) {
      dh = Tensor::empty(h_shape_, dtype_);
      kernels::scale_by_grad_loss(dh_ahead_, dloss, dh, false);
    }
    if (needs_input_grad(1) && dw_ahead_.defined()) {
      const Tensor leaf = leaf_gradient(1, /*will_claim=*/true);
      if (leaf.defined() && leaf.dtype() == DType::f32) {
        kernels::scale_by_grad_loss(dw_ahead_, dloss, leaf, !claim_leaf_gradient(1));
      } else {
        dw = Tensor::empty(dw_ahead_.shape(), dtype_);
        kernels::scale_by_grad_loss(dw_ahead_, dloss, dw, false);
      }
    }
    return {dh, dw, Tensor()};
  }

  // Backward after a forward that made only the loss: each chunk's logits made again.
  std::vector<Tensor> gradients(const Tensor& dloss) {
    const std::int64_t N = h_.size(0), C = h_.size(1), V = w_.size(0);
    Tensor dh = needs_input_grad(0) ? Tensor::empty({N, C}, dtype_) : Tensor();
    // dweight summed over the chunks in f32: straight into the weight's f32 gradient buffer when it
    // has one (a parameter inside a CheckpointBlock), else into a buffer rounded once at the end.
    Tensor dw_leaf = needs_input_grad(1) ? leaf_gradient(1, /*will_claim=*/true) : Tensor();
    if (dw_leaf.defined() && dw_leaf.dtype() != DType::f32) dw_leaf = Tensor();
    // The first chunk writes over a buffer that holds no values yet.
    const bool over_leaf = dw_leaf.defined() && N > 0 && claim_leaf_gradient(1);
    Tensor dw_sum = needs_input_grad(1) && !dw_leaf.defined() ? Tensor::empty({V, C}, DType::f32) : Tensor();
    if (N == 0 && dw_sum.defined()) dw_sum.zero_();
    const Tensor& dw_target = dw_leaf.defined() ? dw_leaf : dw_sum;
    Tensor logits = Tensor::empty({std::min(chunk_, N), V}, dtype_);
    const MatrixBatch weight = as_matrices(w_);
    for (std::int64_t r0 = 0; r0 < N; r0 += chunk_) {
      const std::int64_t r1 = std::min(N, r0 + chunk_);
      const Tensor part = logits.slice(0, 0, r1 - r0);
      const MatrixBatch h_rows = as_matrices(h_.slice(0, r0, r1));
      multiply(h_rows, weight.transposed(), part);
      chunk_gradients(part, h_rows, weight, r0, r1, dloss, dh, dw_target, dw_leaf.defined() && !over_leaf);
    }
    const Tensor dw = dw_sum.defined() ? cast(dw_sum, dtype_) : Tensor();
    return {dh.defined() ? dh.view(h_shape_) : Tensor(), dw, Tensor()};
  }

  std::int64_t chunk_, ignore_;
  Communicator* group_;
  std::int64_t first_ = 0, vocab_ = 0;
  bool ahead_ = false;  // forward made the gradients (for an upstream gradient of 1)
  DType dtype_ = DType::f32;
  Shape h_shape_;
  Tensor h_, w_, targets_, lse_, count_, dh_ahead_, dw_ahead_;
};

}  // namespace

Tensor linear_cross_entropy(const Tensor& h, const Tensor& weight, const Tensor& targets, std::int64_t chunk_rows,
                            std::int64_t ignore_index) {
  return autograd::call<LinearCrossEntropyFn>({h, weight, targets}, chunk_rows, ignore_index)[0];
}

Tensor vocab_parallel_cross_entropy(const Tensor& h, const Tensor& weight, const Tensor& targets,
                                    std::int64_t chunk_rows, std::int64_t ignore_index, Communicator* comm) {
  Communicator& group = comm ? *comm : context().tp_comm();
  if (group.size() == 1) return linear_cross_entropy(h, weight, targets, chunk_rows, ignore_index);
  return autograd::call<LinearCrossEntropyFn>({h, weight, targets}, chunk_rows, ignore_index, &group)[0];
}

}  // namespace bmt
