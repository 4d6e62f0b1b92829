// The backward pass: a topological walk from the roots that sums the gradients reaching each node
// output, calls the node once all its consumers are done, and releases it right after.
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "bmtrain/autograd/function.hpp"
#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/elementwise.hpp"
#include "bmtrain/runtime/error.hpp"
#include "op_span.hpp"

namespace bmt::autograd {

std::shared_ptr<Node> accumulate_grad_of(const std::shared_ptr<TensorImpl>& leaf);

namespace {

void accumulate(Tensor& slot, Tensor grad) {
  if (!slot.defined()) {
    slot = std::move(grad);
  } else {
    // slot may alias a tensor someone else holds: sum into a fresh buffer (one pass).
    slot = kernels::binary(kernels::BinaryOp::add, slot, grad);
  }
}

// A gradient nothing outside the pass refers to: contiguous, and the only tensor over its memory.
bool solely_held(const Tensor& t) {
  return t.defined() && t.impl().use_count() == 1 && t.storage() && t.storage().use_count() == 1 &&
         t.storage()->owned() && t.is_contiguous() && !t.impl()->requires_grad && !t.impl()->grad_fn &&
         is_floating(t.dtype());
}

using Inbox = std::unordered_map<Node*, std::vector<Tensor>>;

// For each of n's inputs, the gradient already waiting for it that n may add into in place
// (Function::partial_gradient); one input per waiting gradient.
std::vector<Tensor> partial_gradients(const Node& n, const Inbox& inbox) {
  std::vector<Tensor> partial(n.next_edges.size());
  for (std::size_t i = 0; i < n.next_edges.size(); ++i) {
    const Edge& e = n.next_edges[i];
    if (!e.node) continue;
    const auto it = inbox.find(e.node.get());
    if (it == inbox.end() || static_cast<std::size_t>(e.input_nr) >= it->second.size()) continue;
    const Tensor& waiting = it->second[static_cast<std::size_t>(e.input_nr)];
    if (!solely_held(waiting)) continue;
    bool taken = false;
    for (std::size_t j = 0; j < i; ++j) taken = taken || (partial[j].defined() && partial[j].impl() == waiting.impl());
    if (!taken) partial[i] = waiting;
  }
  return partial;
}

}  // namespace

std::vector<Tensor> accumulate_into_leaf(const std::shared_ptr<TensorImpl>& leaf, const Tensor& grad) {
  if (!grad.defined()) return {};
  if (!leaf->grad) {
    // The leaf owns its gradient: never alias a buffer someone else may read or change. A fresh
    // buffer that only this gradient refers to (a weight gradient's GEMM output) is taken as is.
    leaf->grad = solely_held(grad) ? grad.impl() : clone(grad).impl();
  } else if (leaf->grad_unwritten) {
    leaf->grad_unwritten = false;
    copy_into(Tensor(leaf->grad), grad);
  } else {
    add_(Tensor(leaf->grad), grad);
  }
  return {};
}

void backward(const std::vector<Tensor>& roots, std::vector<Tensor> grads) {
  BMT_REQUIRE(grads.empty() || grads.size() == roots.size(),
              "backward: expected one gradient per root (" << roots.size() << "), found " << grads.size());
  std::unordered_map<Node*, std::shared_ptr<Node>> owner;
  std::unordered_map<Node*, int> pending;  // consumers not yet done
  Inbox inbox;

  std::vector<Node*> stack;
  for (std::size_t r = 0; r < roots.size(); ++r) {
    const Tensor& root = roots[r];
    BMT_REQUIRE(root.defined() && root.requires_grad(),
                "backward: expected a root that requires grad, found one that does not (was it computed "
                "under NoGradGuard, or from tensors without requires_grad?)");
    Tensor g = grads.empty() ? Tensor() : std::move(grads[r]);
    if (!g.defined()) {
      BMT_REQUIRE(root.numel() == 1, "backward: expected a scalar root when no gradient is given, found shape "
                                         << to_string(root.shape()));
      g = full(root.shape(), 1.0f, root.dtype());
    }
    check_same_shape(root, g, "backward");
    std::shared_ptr<Node> node = root.grad_fn() ? root.grad_fn() : accumulate_grad_of(root.impl());
    if (!owner.count(node.get())) {
      owner[node.get()] = node;
      stack.push_back(node.get());
    }
    auto& box = inbox[node.get()];
    box.resize(static_cast<std::size_t>(std::max(node->num_outputs, 1)));
    accumulate(box[static_cast<std::size_t>(root.grad_fn() ? root.impl()->output_nr : 0)], std::move(g));
  }

  // Count, for every reachable node, how many edges lead into it.
  std::vector<Node*> walk = stack;
  while (!walk.empty()) {
    Node* n = walk.back();
    walk.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.node) continue;
      if (!owner.count(e.node.get())) {
        owner[e.node.get()] = e.node;
        walk.push_back(e.node.get());
      }
      ++pending[e.node.get()];
    }
  }

  std::vector<Node*> ready;
  for (Node* n : stack)
    if (pending[n] == 0) ready.push_back(n);
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    std::vector<Tensor> in = std::move(inbox[n]);
    inbox.erase(n);
    in.resize(static_cast<std::size_t>(std::max(n->num_outputs, 1)));
    std::vector<Tensor> out;
    {
      // A node that no gradient reached has no work (a parameter whose op added its gradient
      // into the buffer itself): no span, or its two timing events would pass for work.
      const bool reached = std::any_of(in.begin(), in.end(), [](const Tensor& g) { return g.defined(); });
      OpSpan span("op backward", *n, reached);
      n->partial_grads = partial_gradients(*n, inbox);
      out = n->apply(in);
      n->partial_grads.clear();
    }
    in.clear();
    n->release();
    for (std::size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.node) continue;
      if (i < out.size() && out[i].defined()) {
        auto& box = inbox[e.node.get()];
        box.resize(static_cast<std::size_t>(std::max(e.node->num_outputs, 1)));
        accumulate(box[static_cast<std::size_t>(e.input_nr)], std::move(out[i]));
      }
      if (--pending[e.node.get()] == 0) ready.push_back(e.node.get());
    }
    n->next_edges.clear();  // frees the graph behind this node as soon as nothing else needs it
  }
}

}  // namespace bmt::autograd

namespace bmt {
void Tensor::backward(const Tensor& grad) const { autograd::backward({*this}, {grad}); }
}  // namespace bmt
