// The tensor-parallel collectives as autograd Functions: each one's backward is the collective
// its forward's transpose calls for (all-gather <-> reduce-scatter, all-reduce <-> identity).
#include "bmtrain/ops/tensor_parallel.hpp"

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "upstream_grad.hpp"

namespace bmt {

namespace {

Communicator& group_of(Communicator* comm) { return comm ? *comm : context().tp_comm(); }

void require_rows(const Tensor& x, const char* op) {
  BMT_REQUIRE(x.defined() && x.dim() >= 1,
              op << ": expected a tensor of rows [n, ...], found " << (x.defined() ? to_string(x.shape()) : "none"));
}

Shape with_rows(Shape shape, std::int64_t rows) {
  shape[0] = rows;
  return shape;
}

// [n, ...] -> [n * size, ...], every rank's rows in rank order.
Tensor all_gather_rows(const Tensor& x, Communicator& comm) {
  const Tensor src = contiguous(x);
  Tensor out = Tensor::empty(with_rows(src.shape(), src.size(0) * comm.size()), src.dtype());
  comm.all_gather(src.data(), out.data(), static_cast<std::size_t>(src.numel()), src.dtype(),
                  context().compute_stream());
  return out;
}

// [N, ...] -> [N / size, ...], this rank's rows of the sum over the group.
Tensor reduce_scatter_rows(const Tensor& x, Communicator& comm) {
  const Tensor src = contiguous(x);
  Tensor out = Tensor::empty(with_rows(src.shape(), src.size(0) / comm.size()), src.dtype());
  comm.reduce_scatter(src.data(), out.data(), static_cast<std::size_t>(out.numel()), src.dtype(), ReduceOp::sum,
                      context().compute_stream());
  return out;
}

Tensor all_reduce_sum(const Tensor& x, Communicator& comm) {
  const Tensor src = contiguous(x);
  Tensor out = Tensor::empty(src.shape(), src.dtype());
  comm.all_reduce(src.data(), out.data(), static_cast<std::size_t>(src.numel()), src.dtype(), ReduceOp::sum,
                  context().compute_stream());
  return out;
}

class GatherTokens final : public autograd::Function {
 public:
  explicit GatherTokens(Communicator& comm) : comm_(comm) {}
  std::string name() const override { return "gather_tokens"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    shape_ = in[0].shape();
    dtype_ = in[0].dtype();
    return {all_gather_rows(in[0], comm_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!g[0].defined()) return {Tensor()};
    return {reduce_scatter_rows(upstream_grad(g[0], with_rows(shape_, shape_[0] * comm_.size()), dtype_, name()),
                                comm_)};
  }

 private:
  Communicator& comm_;
  Shape shape_;
  DType dtype_ = DType::f32;
};

class ScatterTokens final : public autograd::Function {
 public:
  explicit ScatterTokens(Communicator& comm) : comm_(comm) {}
  std::string name() const override { return "scatter_tokens"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    shape_ = in[0].shape();
    dtype_ = in[0].dtype();
    return {reduce_scatter_rows(in[0], comm_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!g[0].defined()) return {Tensor()};
    return {all_gather_rows(upstream_grad(g[0], with_rows(shape_, shape_[0] / comm_.size()), dtype_, name()), comm_)};
  }

 private:
  Communicator& comm_;
  Shape shape_;
  DType dtype_ = DType::f32;
};

class ReduceTp final : public autograd::Function {
 public:
  explicit ReduceTp(Communicator& comm) : comm_(comm) {}
  std::string name() const override { return "reduce_tp"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {all_reduce_sum(in[0], comm_)}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override { return {g[0]}; }

 private:
  Communicator& comm_;
};

class CopyTp final : public autograd::Function {
 public:
  explicit CopyTp(Communicator& comm) : comm_(comm) {}
  std::string name() const override { return "copy_tp"; }
  // A new handle on the same memory: the output needs a grad_fn of its own, the input keeps its.
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0].detach()}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (!g[0].defined()) return {Tensor()};
    return {all_reduce_sum(g[0], comm_)};
  }

 private:
  Communicator& comm_;
};

}  // namespace

Tensor gather_tokens(const Tensor& x, Communicator* comm) {
  require_rows(x, "gather_tokens");
  Communicator& c = group_of(comm);
  if (c.size() == 1) return x;
  return autograd::call<GatherTokens>({x}, c)[0];
}

Tensor scatter_tokens(const Tensor& x, Communicator* comm) {
  require_rows(x, "scatter_tokens");
  Communicator& c = group_of(comm);
  BMT_REQUIRE(x.size(0) % c.size() == 0, "scatter_tokens: expected rows divisible by tp " << c.size() << ", found "
                                                                                          << x.size(0));
  if (c.size() == 1) return x;
  return autograd::call<ScatterTokens>({x}, c)[0];
}

Tensor reduce_tp(const Tensor& x, Communicator* comm) {
  BMT_REQUIRE(x.defined(), "reduce_tp: expected a defined tensor");
  Communicator& c = group_of(comm);
  if (c.size() == 1) return x;
  return autograd::call<ReduceTp>({x}, c)[0];
}

Tensor copy_tp(const Tensor& x, Communicator* comm) {
  BMT_REQUIRE(x.defined(), "copy_tp: expected a defined tensor");
  Communicator& c = group_of(comm);
  if (c.size() == 1) return x;
  return autograd::call<CopyTp>({x}, c)[0];
}

}  // namespace bmt
