#pragma once
// Reverse-mode autograd. Every differentiable op, in the library and in user code, is a Function:
// a forward over tensors and a backward from output gradients to input gradients.
//
//   struct Square : bmt::autograd::Function {
//     bmt::Tensor x;
//     std::vector<bmt::Tensor> forward(const std::vector<bmt::Tensor>& in) override {
//       x = in[0].detach();
//       return {bmt::mul(x, x)};
//     }
//     std::vector<bmt::Tensor> backward(const std::vector<bmt::Tensor>& g) override {
//       return {bmt::mul(bmt::scale(x, 2.0f), g[0])};
//     }
//     std::string name() const override { return "Square"; }
//   };
//   bmt::Tensor y = bmt::autograd::call<Square>({x})[0];
//
// forward runs with gradient recording off, so the ops it uses leave no graph of their own. When
// grad mode is on and an input requires grad, the outputs get the Function as their grad_fn.
// Save what backward needs as members; save outputs (or anything derived from the graph) detached,
// so that no tensor holds its own producer and no cycle keeps memory alive.
#include <memory>
#include <string>
#include <vector>

#include "bmtrain/tensor/tensor.hpp"

namespace bmt::autograd {

class Node;

// Where the gradient of one input goes: output `input_nr` of `node`.
struct Edge {
  std::shared_ptr<Node> node;
  int input_nr = 0;
};

class Node {
 public:
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  // grad_outputs[i] is the gradient of output i (undefined if none reached it); returns one
  // gradient per input, undefined where the input needs none.
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) = 0;
  // Drops what forward saved; called once backward has passed through this node.
  virtual void release() {}

  std::vector<Edge> next_edges;  // one per input
  int num_outputs = 0;
  // Set by the backward pass around apply: per input, the gradient it has already received from
  // its other consumers, where this node may add into it in place (Function::partial_gradient).
  std::vector<Tensor> partial_grads;
};

class Function : public Node {
 public:
  virtual std::vector<Tensor> forward(const std::vector<Tensor>& inputs) = 0;
  virtual std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) = 0;

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) final;
  void release() override { released_ = true; release_saved(); }
  // Override to free saved tensors early (members are freed with the node otherwise).
  virtual void release_saved() {}

  // True if the Function owns trainable state (parameters) beyond its inputs: its outputs then
  // need a graph even when no input requires grad.
  virtual bool holds_trainable_parameters() const { return false; }

  // Runs fn->forward and, if recording, links the outputs to fn.
  static std::vector<Tensor> run(const std::shared_ptr<Function>& fn, const std::vector<Tensor>& inputs);

  // True while forward runs if its outputs will be recorded into a graph (backward may follow).
  bool is_recording() const { return recording_; }
  // True once backward has passed through this node and dropped what forward saved.
  bool is_released() const { return released_; }

  // True for inputs whose gradient the graph needs (backward may skip the others).
  bool needs_input_grad(std::size_t i) const {
    return i < next_edges.size() && static_cast<bool>(next_edges[i].node);
  }

  // Where input i's gradient ends up, when that input is a leaf whose .grad already exists,
  // contiguous, of the leaf's shape and of its dtype or f32 (a parameter inside a CheckpointBlock,
  // bound to the block's f32 gradient buffer; or a gradient accumulated over micro-batches). backward may then
  // add its gradient there itself (a GEMM with beta = 1 instead of a new buffer and a separate add)
  // and return an undefined gradient for input i. Undefined otherwise. A buffer that holds no
  // values yet (a ZeRO block's, bound unwritten: TensorImpl::grad_unwritten) is zeroed here, so
  // that backward may add into it, unless `will_claim`: then it is returned as it is, and backward
  // calls claim_leaf_gradient(i) right before putting its gradient there.
  Tensor leaf_gradient(std::size_t i, bool will_claim = false) const;

  // For a backward about to put input i's gradient into leaf_gradient(i, true): true when that
  // buffer holds no values yet, and backward must then write every element of it (a GEMM with
  // beta = 0, column sums stored rather than added); false when it must add to what is there.
  // Either way the buffer counts as written from then on.
  bool claim_leaf_gradient(std::size_t i) const;

  // The gradient input i has already received, where backward may add its own into it in place
  // (a kernel that reads it as it writes, a GEMM with beta = 1) and return an undefined gradient
  // for i, saving the pass that would sum the two: for a leaf, its .grad as leaf_gradient gives it
  // (the backward pass runs a leaf's other sinks first); otherwise what the input's other consumers
  // gave it in this pass (the residual branch's, at a norm whose input also feeds a residual), when
  // nothing but the pass holds it. Check its shape and dtype before use. Undefined otherwise.
  Tensor partial_gradient(std::size_t i) const;

 private:
  bool released_ = false;
  bool recording_ = false;
};

// A Function whose backward needs only its inputs, never a value its forward computes (a GEMM, an
// elementwise add), may split its forward: prepare checks the inputs, saves what backward needs
// and returns the outputs allocated but not written; write computes them from the inputs and what
// prepare saved alone (it may run later, so no random draws or other state read at the call).
// Under OutputsOnDemandGuard, Function::run calls prepare only, and write runs when an output's
// memory is first used; work whose outputs nobody reads never runs.
class DeferrableFunction : public Function {
 public:
  virtual std::vector<Tensor> prepare(const std::vector<Tensor>& inputs) = 0;
  virtual void write(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) = 0;
  // True when prepare itself queues device work that backward needs (gelu_linear's GELU): an op
  // timeline then times prepare as a span of the op too.
  virtual bool prepare_queues_work() const { return false; }
  // True after a prepare that handed back outputs holding their values already (kept from the
  // forward: KeptOutputs); write then never runs, and nothing is put off.
  virtual bool outputs_ready() const { return false; }

  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) final {
    std::vector<Tensor> outputs = prepare(inputs);
    if (!outputs_ready()) write(inputs, outputs);
    return outputs;
  }
};

// While alive (per thread), DeferrableFunctions compute their outputs on first use. A block's
// recompute runs under it: backward needs the recomputed graph and the values it saved, not the
// block's outputs, so the work that only produces them (the last GEMM and the residual add of a
// transformer block) is skipped. Code run under it must not change an op's input in place before
// the op's outputs are used: the put-off write would read the changed value (the same rule that
// already holds for every tensor an op saves for backward).
bool outputs_on_demand();
class OutputsOnDemandGuard {
 public:
  OutputsOnDemandGuard();
  ~OutputsOnDemandGuard();
  OutputsOnDemandGuard(const OutputsOnDemandGuard&) = delete;
  OutputsOnDemandGuard& operator=(const OutputsOnDemandGuard&) = delete;

 private:
  bool previous_;
};

template <class F, class... Args>
std::vector<Tensor> call(const std::vector<Tensor>& inputs, Args&&... args) {
  return Function::run(std::make_shared<F>(std::forward<Args>(args)...), inputs);
}

// Gradient recording switch, per thread.
bool grad_enabled();
void set_grad_enabled(bool on);

class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// Runs backward from `roots` with the given gradients (defaults: 1 for scalar roots).
// Leaf tensors that require grad accumulate into .grad(). The graph is freed as it is walked.
// Gradients handed over (moved in, held by no one else) may be summed into in place and end up
// as a leaf's .grad(), so a chain of blocks passes one buffer along instead of allocating.
void backward(const std::vector<Tensor>& roots, std::vector<Tensor> grads = {});

}  // namespace bmt::autograd

namespace bmt {
using autograd::NoGradGuard;
}
