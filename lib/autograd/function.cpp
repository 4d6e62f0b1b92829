#include "bmtrain/autograd/function.hpp"

#include "bmtrain/runtime/error.hpp"
#include "op_span.hpp"

namespace bmt::autograd {

std::vector<Tensor> accumulate_into_leaf(const std::shared_ptr<TensorImpl>& leaf, const Tensor& grad);

namespace {
thread_local bool t_grad_enabled = true;

// Gradient sink of a leaf tensor: adds into its .grad.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) { num_outputs = 1; }
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> apply(const std::vector<Tensor>& grads) override {
    // grads[0] by reference: a copy (as `grads.empty() ? Tensor() : grads[0]` makes) would count as
    // a second owner, and the leaf would clone a gradient it could have taken.
    if (grads.empty()) return {};
    return accumulate_into_leaf(leaf_, grads[0]);
  }
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }

namespace {
thread_local bool t_outputs_on_demand = false;

// Inputs whose write was put off are written before an op's span opens, so that a timeline does
// not count their work as the op's.
void write_pending(const std::vector<Tensor>& inputs) {
  for (const auto& in : inputs)
    if (in.defined() && in.storage() && in.storage()->has_pending_write()) in.storage()->data();
}

void write_outputs(DeferrableFunction& fn, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  write_pending(inputs);
  NoGradGuard no_grad;
  OpSpan span("op forward", fn);
  fn.write(inputs, outputs);
}

// The write half of a DeferrableFunction's forward, run once, when one of its outputs' memory is
// first used. It writes through aliases of the outputs' memory, so it holds no output Storage
// (each of which holds it).
class PendingForward {
 public:
  PendingForward(std::shared_ptr<DeferrableFunction> fn, std::vector<Tensor> inputs, const std::vector<Tensor>& outputs)
      : fn_(std::move(fn)), inputs_(std::move(inputs)) {
    for (const Tensor& out : outputs) targets_.push_back(Tensor::wrap(out.data(), out.shape(), out.dtype()));
  }

  void run() {
    if (!fn_) return;  // another output got there first
    const std::shared_ptr<DeferrableFunction> fn = std::move(fn_);
    BMT_REQUIRE(!fn->is_released(), fn->name() << ": an output computed on first use was first used after backward "
                                                  "passed through its op; expected it used before");
    write_outputs(*fn, inputs_, targets_);
    inputs_.clear();
    targets_.clear();
  }

 private:
  std::shared_ptr<DeferrableFunction> fn_;
  std::vector<Tensor> inputs_, targets_;
};

// prepare's outputs with their write put off: fresh, contiguous, one Storage each.
std::vector<Tensor> prepare_on_demand(const std::shared_ptr<DeferrableFunction>& fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outputs;
  {
    if (fn->prepare_queues_work()) write_pending(inputs);  // so that the spans do not nest
    NoGradGuard no_grad;
    OpSpan span("op forward", *fn, fn->prepare_queues_work());
    outputs = fn->prepare(inputs);
  }
  if (fn->outputs_ready()) return outputs;
  bool empty = false;
  for (const Tensor& out : outputs) {
    BMT_REQUIRE(out.defined() && out.is_contiguous() && out.storage()->owned() && out.storage().use_count() == 1,
                fn->name() << "::prepare: expected fresh contiguous outputs, one Storage each, found "
                           << (!out.defined()            ? std::string("an undefined one")
                               : !out.is_contiguous()    ? "a non-contiguous " + to_string(out.shape())
                               : !out.storage()->owned() ? std::string("one over wrapped memory")
                                                         : std::string("one whose Storage is shared")));
    empty = empty || out.numel() == 0;
  }
  if (empty) {  // nothing worth putting off
    write_outputs(*fn, inputs, outputs);
    return outputs;
  }
  auto pending = std::make_shared<PendingForward>(fn, inputs, outputs);
  for (const Tensor& out : outputs) out.storage()->set_pending_write([pending] { pending->run(); });
  return outputs;
}
}  // namespace

bool outputs_on_demand() { return t_outputs_on_demand; }
OutputsOnDemandGuard::OutputsOnDemandGuard() : previous_(t_outputs_on_demand) { t_outputs_on_demand = true; }
OutputsOnDemandGuard::~OutputsOnDemandGuard() { t_outputs_on_demand = previous_; }

namespace {
// Input i's gradient sink when input i is a leaf (its AccumulateGrad), else null.
const AccumulateGrad* leaf_sink(const std::vector<Edge>& edges, std::size_t i) {
  return i < edges.size() ? dynamic_cast<const AccumulateGrad*>(edges[i].node.get()) : nullptr;
}
}  // namespace

Tensor Function::leaf_gradient(std::size_t i, bool will_claim) const {
  const AccumulateGrad* sink = leaf_sink(next_edges, i);
  if (!sink) return Tensor();
  const Tensor leaf(sink->leaf());
  const Tensor grad = leaf.grad();
  if (!grad.defined() || !grad.is_contiguous() || grad.shape() != leaf.shape() ||
      (grad.dtype() != leaf.dtype() && grad.dtype() != DType::f32))
    return Tensor();
  if (!will_claim && claim_leaf_gradient(i)) grad.zero_();
  return grad;
}

bool Function::claim_leaf_gradient(std::size_t i) const {
  const AccumulateGrad* sink = leaf_sink(next_edges, i);
  if (!sink) return false;
  TensorImpl& leaf = *sink->leaf();
  const bool unwritten = leaf.grad_unwritten;
  leaf.grad_unwritten = false;
  return unwritten;
}

Tensor Function::partial_gradient(std::size_t i) const {
  const Tensor leaf = leaf_gradient(i);
  if (leaf.defined()) return leaf;
  return i < partial_grads.size() ? partial_grads[i] : Tensor();
}

// One sink per leaf while a graph refers to it: the gradients of all the leaf's uses then meet in
// that sink's inbox, where one use's backward can add into another's (partial_gradient).
std::shared_ptr<Node> accumulate_grad_of(const std::shared_ptr<TensorImpl>& leaf) {
  std::shared_ptr<Node> sink = leaf->grad_accumulator.lock();
  if (!sink) {
    sink = std::make_shared<AccumulateGrad>(leaf);
    leaf->grad_accumulator = sink;
  }
  return sink;
}

std::vector<Tensor> Function::apply(const std::vector<Tensor>& grad_outputs) {
  BMT_REQUIRE(!released_, name() << ": backward through this part of the graph a second time; "
                                    "expected each graph to be walked once");
  std::vector<Tensor> grads = backward(grad_outputs);
  BMT_REQUIRE(grads.size() == next_edges.size(), name() << "::backward: expected " << next_edges.size()
                                                        << " input gradients, found " << grads.size());
  return grads;
}

std::vector<Tensor> Function::run(const std::shared_ptr<Function>& fn, const std::vector<Tensor>& inputs) {
  bool record = false;
  if (grad_enabled()) {
    record = fn->holds_trainable_parameters();
    for (const auto& in : inputs) record = record || in.requires_grad();
  }

  std::vector<Tensor> outputs;
  fn->recording_ = record;
  auto deferrable = outputs_on_demand() ? std::dynamic_pointer_cast<DeferrableFunction>(fn) : nullptr;
  if (deferrable) {
    outputs = prepare_on_demand(deferrable, inputs);
  } else {
    write_pending(inputs);
    NoGradGuard no_grad;
    OpSpan span("op forward", *fn);
    outputs = fn->forward(inputs);
  }
  if (!record) return outputs;

  fn->next_edges.clear();
  fn->next_edges.reserve(inputs.size());
  for (const auto& in : inputs) {
    if (!in.requires_grad()) {
      fn->next_edges.push_back({});
    } else if (in.grad_fn()) {
      fn->next_edges.push_back({in.grad_fn(), in.impl()->output_nr});
    } else {
      fn->next_edges.push_back({accumulate_grad_of(in.impl()), 0});
    }
  }
  fn->num_outputs = static_cast<int>(outputs.size());
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    Tensor& out = outputs[i];
    if (!out.defined() || !is_floating(out.dtype())) continue;
    // A Function may return one of its inputs (or a view of one): give the output its own
    // autograd identity so the input's history stays intact.
    if (out.impl()->grad_fn || out.impl()->requires_grad) out = out.detach();
    out.impl()->requires_grad = true;
    out.impl()->grad_fn = fn;
    out.impl()->output_nr = static_cast<int>(i);
  }
  return outputs;
}

}  // namespace bmt::autograd
