#include "bmtrain/zero/sharded_storage.hpp"

#include <algorithm>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/common.hpp"
#include "bmtrain/kernels/gather_packing.hpp"
#include "bmtrain/kernels/random.hpp"
#include "bmtrain/nn/parameter.hpp"
#include "bmtrain/nn/part_map.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/timeline.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "block_gather.hpp"

namespace bmt {

namespace {

// A tensor over part of another's memory: `numel` elements of `dtype` from element `offset`.
TensorImpl view_impl(const Tensor& base, DType dtype, std::int64_t offset, const Shape& shape) {
  TensorImpl impl;
  impl.storage = base.storage();
  const std::size_t base_bytes = base.impl()->offset * dtype_size(base.dtype());
  impl.offset = base_bytes / dtype_size(dtype) + static_cast<std::size_t>(offset);
  impl.shape = shape;
  impl.strides.assign(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) impl.strides[i - 1] = impl.strides[i] * shape[i];
  impl.dtype = dtype;
  return impl;
}

// Elements a parameter of `numel` elements takes in the flat buffer, so that the next starts
// aligned (`align` elements: kAllocationAlignment bytes).
std::int64_t slot_elements(std::int64_t numel, std::int64_t align) { return (numel + align - 1) / align * align; }

std::int64_t alignment_elements(DType dtype) {
  return static_cast<std::int64_t>(kAllocationAlignment / dtype_size(dtype));
}

}  // namespace

std::int64_t ShardedStorage::planned_total(const std::vector<std::int64_t>& numels, DType dtype, int world_size) {
  BMT_REQUIRE(world_size > 0, "ShardedStorage::planned_total: expected a world size > 0, found " << world_size);
  const std::int64_t align = alignment_elements(dtype);
  std::int64_t offset = 0;
  for (std::int64_t n : numels) offset += slot_elements(n, align);
  // Padded so that every shard has the same size and starts aligned.
  const std::int64_t unit = align * world_size;
  return std::max<std::int64_t>(unit, (offset + unit - 1) / unit * unit);
}

ShardedStorage::ShardedStorage(std::string name, const std::vector<std::pair<std::string, Tensor>>& parameters,
                               int rank, int world_size, std::uint64_t seed, int replicas, int replica_rank)
    : name_(std::move(name)), rank_(rank), world_size_(world_size), replicas_(replicas), replica_rank_(replica_rank) {
  BMT_REQUIRE(world_size > 0 && rank >= 0 && rank < world_size,
              "ShardedStorage: expected 0 <= rank < world_size, found rank " << rank << " of " << world_size);
  BMT_REQUIRE(replica_rank >= 0 && replica_rank < replicas,
              "ShardedStorage: expected 0 <= replica_rank < replicas, found replica " << replica_rank << " of "
                                                                                       << replicas);
  if (!parameters.empty()) dtype_ = parameters.front().second.dtype();
  const std::int64_t align = alignment_elements(dtype_);
  std::int64_t offset = 0;
  std::vector<std::int64_t> numels;
  for (const auto& [pname, p] : parameters) {
    BMT_REQUIRE(is_parameter(p), "ShardedStorage '" << name_ << "': expected parameters, found a plain tensor '"
                                                   << pname << "'");
    BMT_REQUIRE(p.dtype() == dtype_, "ShardedStorage '" << name_ << "': expected every parameter in dtype "
                                                        << dtype_name(dtype_) << ", found '" << pname << "' in "
                                                        << dtype_name(p.dtype()));
    BMT_REQUIRE(!p.impl()->param->sharded, "ShardedStorage '" << name_ << "': parameter '" << pname
                                                              << "' already belongs to '"
                                                              << p.impl()->param->sharded->name()
                                                              << "' (was bmt::init_parameters called twice, or is "
                                                                 "the parameter registered in two places?)");
    entries_.push_back({pname, p, offset, p.numel(), p.impl()->param->trainable});
    offset += slot_elements(p.numel(), align);
    numels.push_back(p.numel());
  }
  total_ = planned_total(numels, dtype_, world_size);
  shard_size_ = total_ / world_size;
  for (const auto& e : entries_)
    if (e.trainable) grad_layout_.insert(grad_layout_.end(), {e.offset, e.numel});
  grad_layout_.push_back(total_);

  shard_ = Tensor::zeros({shard_size_}, dtype_);
  for (auto& e : entries_) {
    e.parameter.impl()->param->sharded = this;
    e.parameter.impl()->param->offset = e.offset;
    e.parameter.impl()->name = e.name;
    const Slice s = local_slice(e);
    if (s.count == 0) continue;
    const Tensor part = shard_.slice(0, s.shard_offset, s.shard_offset + s.count);
    const auto& init = e.parameter.impl()->param->init;
    if (init) init(part, s.param_offset, PartMap::of(e.parameter), random::key(seed, e.name));
  }
}

ShardedStorage::~ShardedStorage() {
  // Settle outstanding work before the buffers it writes or reads go away.
  for (const Event* e : {&reduced_, &values_written_, &gradient_read_})
    if (!e->query()) e->synchronize();
  for (auto& e : entries_) {
    if (e.parameter.impl()->param->sharded == this) e.parameter.impl()->param->sharded = nullptr;
    e.parameter.impl()->storage.reset();
    e.parameter.impl()->grad.reset();
  }
}

std::int64_t ShardedStorage::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& e : entries_) n += e.numel;
  return n;
}

bool ShardedStorage::has_trainable() const {
  return std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.trainable; });
}

ShardedStorage::Slice ShardedStorage::local_slice(const Entry& e) const {
  const std::int64_t lo = std::max(e.offset, shard_begin());
  const std::int64_t hi = std::min(e.offset + e.numel, shard_begin() + shard_size_);
  if (hi <= lo) return {};
  return {lo - shard_begin(), lo - e.offset, hi - lo};
}

std::vector<Tensor> ShardedStorage::norm_parts(const Tensor& grad) const {
  const Mesh& mesh = context().mesh();
  if (mesh.tp_size == 1 || mesh.tp_rank == 0) return {grad};
  std::vector<Tensor> parts;
  for (const auto& e : entries_) {
    if (!e.trainable || e.parameter.impl()->param->tp.replicated()) continue;
    const Slice s = local_slice(e);
    if (s.count > 0) parts.push_back(grad.slice(0, s.shard_offset, s.shard_offset + s.count));
  }
  return parts;
}

const Tensor& ShardedStorage::shard() const {
  if (is_initialized()) {
    run_deferred_update(context().compute_stream());
    context().compute_stream().wait(values_written_);
    let_go_of_update();
  }
  return shard_;
}

Tensor ShardedStorage::values() const {
  return shard().dtype() == dtype_ ? shard_ : cast(shard_, dtype_);
}

void ShardedStorage::hold_values_in_f32() {
  if (shard_.dtype() == DType::f32) return;
  BMT_REQUIRE(!bound_, "ShardedStorage '" << name_ << "': expected its parameters unbound to change how the values "
                                                      "are held, found them bound");
  shard_ = cast(shard(), DType::f32);
}

void ShardedStorage::values_written(const Event& done) { values_written_ = done; }

void ShardedStorage::defer_update(DeferredUpdate update) {
  let_go_of_update();
  BMT_REQUIRE(!deferred_update_, "ShardedStorage '" << name_ << "': expected the last deferred update run before "
                                                               "deferring another, found it pending");
  deferred_update_ = std::move(update);
  deferred_after_ = context().compute_stream().record();
}

void ShardedStorage::run_deferred_update(Stream& stream) const {
  if (!deferred_update_) return;
  stream.wait(deferred_after_);
  stream.wait(values_written_);
  {
    timeline::Span span(stream, "optimizer update", name_);
    deferred_update_(stream);
  }
  values_written_ = stream.record();
  // What the update holds (the gradient, whose shard the step gave back) may return to the
  // allocator, whose reuse follows the compute stream's order, once that order is past the update:
  // on another stream, when the compute stream next waits for the values (let_go_of_update).
  ran_update_ = std::move(deferred_update_);
  deferred_update_ = nullptr;
  if (&stream == &context().compute_stream()) ran_update_ = nullptr;
}

void ShardedStorage::let_go_of_update() const {
  if (!ran_update_) return;
  context().compute_stream().wait(values_written_);  // as a reader of the values has, or will
  ran_update_ = nullptr;
}

void ShardedStorage::gradient_read(const Event& done) { gradient_read_ = done; }

const Tensor& ShardedStorage::grad_shard_holder() {
  if (grad_shard_.defined()) return grad_shard_;
  // A new shard stands for zeros without being zeroed whole, as after zero_grad: across ranks the
  // first reduction overwrites all of it (stale until then); at one rank the backward writes the
  // trainable parts over, and only what lies outside them (padding, frozen parameters) is zeroed
  // here, since the optimizer's ranges and the norm read it.
  grad_shard_ = Tensor::empty({shard_size_}, DType::f32);
  if (!whole()) {
    grad_stale_ = true;
    return grad_shard_;
  }
  std::int64_t at = 0;
  for (std::size_t i = 0; i + 1 < grad_layout_.size(); i += 2) {
    if (grad_layout_[i] > at) grad_shard_.slice(0, at, grad_layout_[i]).zero_();
    at = grad_layout_[i] + grad_layout_[i + 1];
  }
  if (total_ > at) grad_shard_.slice(0, at, total_).zero_();
  for (auto& e : entries_) e.grad_unwritten = e.trainable;
  return grad_shard_;
}

const Tensor& ShardedStorage::writable_grad_shard() {
  const Tensor& g = grad_shard_holder();
  context().compute_stream().wait(gradient_read_);
  return g;
}

const Tensor& ShardedStorage::grad_shard() {
  grad_shard_holder();  // a new shard is marked stale or unwritten
  const bool unwritten =
      std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.grad_unwritten; });
  if (!grad_stale_ && !unwritten) return grad_shard_;
  const Tensor& g = writable_grad_shard();
  if (grad_stale_) {
    g.zero_();
    grad_stale_ = false;
  }
  zero_unwritten_parts();
  return g;
}

bool ShardedStorage::zero_unwritten_parts() {
  bool any = false;
  for (auto& e : entries_) {  // parts no gradient reached since zero_grad
    if (!e.grad_unwritten) continue;
    grad_part(grad_shard_, e).zero_();
    e.grad_unwritten = false;
    any = true;
  }
  return any;
}

Tensor ShardedStorage::grad_part(const Tensor& full_grad, const Entry& e) const {
  return Tensor(std::make_shared<TensorImpl>(view_impl(full_grad, DType::f32, e.offset, e.parameter.shape())));
}

void ShardedStorage::bind_own_grads() {
  BMT_REQUIRE(whole(), "ShardedStorage '" << name_ << "': gradients go straight into the shard only at one rank, "
                                                     "found a world of " << world_size_);
  grad_dirty_ = true;
  ++gradient_version_;
  const Tensor& g = writable_grad_shard();
  for (auto& e : entries_) {
    if (!e.trainable) continue;
    auto& impl = *e.parameter.impl();
    impl.grad = grad_part(g, e).impl();
    impl.grad_unwritten = e.grad_unwritten;
  }
  grads_own_ = true;
}

void ShardedStorage::accumulate_grad(std::size_t index, const Tensor& grad) {
  BMT_REQUIRE(whole(), "ShardedStorage '" << name_ << "': gradients go straight into the shard only at one rank, "
                                                     "found a world of " << world_size_);
  BMT_REQUIRE(index < entries_.size(), "ShardedStorage '" << name_ << "': expected an entry index below "
                                                          << entries_.size() << ", found " << index);
  grad_dirty_ = true;
  ++gradient_version_;
  Entry& e = entries_[index];
  const Tensor part = grad_part(writable_grad_shard(), e);
  if (e.grad_unwritten) copy_into(part, grad);
  else add_(part, grad);
  e.grad_unwritten = false;
}

void ShardedStorage::all_gather_into(const Tensor& full, Communicator& comm, Stream& stream) const {
  BMT_REQUIRE(full.nbytes() >= static_cast<std::size_t>(total_) * dtype_size(dtype_),
              "ShardedStorage '" << name_ << "': expected a gather buffer of " << total_ * dtype_size(dtype_)
                                 << " bytes, found " << full.nbytes());
  run_deferred_update(stream);
  stream.wait(values_written_);
  timeline::Span span(stream, "gather", name_);
  const auto count = static_cast<std::size_t>(shard_size_);
  if (shard_.dtype() == dtype_) {
    comm.all_gather(shard_.data(), full.data(), count, dtype_, stream);
    return;
  }
  // Values held in f32: rounded into this rank's part of the gathered buffer as the gather packs
  // them (on the gather's own stream), then gathered in place.
  char* mine = static_cast<char*>(full.data()) + static_cast<std::size_t>(shard_begin()) * dtype_size(dtype_);
  const float* src = shard_.data_as<float>();
  const std::int64_t n = shard_size_;
  const DType to = dtype_;
  Stream* on = &stream;
  stream.launch([on, src, mine, n, to] { kernels::convert_on(on->space(), src, DType::f32, mine, to, n); });
  if (world_size_ > 1) comm.all_gather(mine, full.data(), count, dtype_, stream);
}

void ShardedStorage::bind(const Tensor& full) {
  let_go_of_update();  // the compute stream, about to read the gathered values, is past the update
  const GatherLayout& l = gather_layout();
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    auto& impl = *e.parameter.impl();
    if (l.float8[i]) {  // codes and scale in place of values
      impl.storage.reset();
      const auto codes_at = static_cast<std::int64_t>(l.at[i]);
      const std::size_t scale_byte = l.scales_at + GatherLayout::kScaleStride * static_cast<std::size_t>(l.scale[i]);
      const auto scale_at = static_cast<std::int64_t>(scale_byte / sizeof(float));
      impl.param->float8_codes =
          Tensor(std::make_shared<TensorImpl>(view_impl(full, DType::f8e4m3, codes_at, e.parameter.shape())));
      impl.param->float8_scale_inv = Tensor(std::make_shared<TensorImpl>(view_impl(full, DType::f32, scale_at, {})));
      continue;
    }
    const auto at = static_cast<std::int64_t>(l.at[i] / dtype_size(dtype_));
    TensorImpl v = view_impl(full, dtype_, at, e.parameter.shape());
    impl.storage = v.storage;
    impl.offset = v.offset;
  }
  bound_ = true;
}

void ShardedStorage::unbind() {
  for (auto& e : entries_) {
    e.parameter.impl()->storage.reset();
    e.parameter.impl()->param->float8_codes = Tensor();
    e.parameter.impl()->param->float8_scale_inv = Tensor();
  }
  bound_ = false;
}

void ShardedStorage::bind_grads(const Tensor& full_grad) {
  check_dtype(full_grad, DType::f32, "ShardedStorage::bind_grads");
  BMT_REQUIRE(full_grad.numel() >= total_, "ShardedStorage '" << name_ << "': expected a gradient buffer of "
                                                              << total_ << " elements, found " << full_grad.numel());
  for (auto& e : entries_) {
    if (!e.trainable) continue;
    auto& impl = *e.parameter.impl();
    impl.grad = grad_part(full_grad, e).impl();
    impl.grad_unwritten = true;
  }
  grads_own_ = false;
}

void ShardedStorage::unbind_grads() {
  for (auto& e : entries_) {
    auto& impl = *e.parameter.impl();
    if (impl.grad && grads_own_) {
      e.grad_unwritten = impl.grad_unwritten;  // still zeros to the shard's readers (grad_shard())
    } else if (impl.grad && impl.grad_unwritten) {
      Tensor(impl.grad).zero_();  // the buffer is reduced next: where no gradient came, zeros
    }
    impl.grad.reset();
    impl.grad_unwritten = false;
  }
}

Event ShardedStorage::reduce_gradient(const Tensor& full_grad, Communicator& comm, Stream& stream,
                                      const Event& ready) {
  check_dtype(full_grad, DType::f32, "ShardedStorage::reduce_gradient");
  BMT_REQUIRE(full_grad.numel() >= total_, "ShardedStorage '" << name_ << "': expected a gradient buffer of "
                                                              << total_ << " elements, found " << full_grad.numel());
  // Work queued here on the compute stream after `ready` was recorded (zeroing a new gradient shard,
  // settle()'s add that still reads `incoming_`, a fresh allocation whose memory the compute stream
  // may still be using) must finish before the reduce-scatter writes the target.
  bool compute_first = !grad_shard_.defined();
  writable_grad_shard();  // zeros may be written to it on the compute stream here
  ++gradient_version_;
  if (incoming_pending_ || (grad_dirty_ && !reduced_.query())) {
    settle();
    compute_first = true;
  }
  Tensor target = grad_shard_;
  if (!grad_dirty_) {
    for (auto& e : entries_) e.grad_unwritten = false;  // the reduction writes every element
  } else if (zero_unwritten_parts()) {
    compute_first = true;  // settle() adds the reduction to those zeros
  }
  if (grad_dirty_) {
    if (!incoming_.defined()) {
      incoming_ = Tensor::empty({shard_size_}, DType::f32);
      compute_first = true;
    }
    target = incoming_;
    incoming_pending_ = true;
  }
  Context& ctx = context();
  BMT_REQUIRE(replicas_ == 1 || &stream == &ctx.scatter_stream(),
              "ShardedStorage '" << name_ << "': expected the scatter stream for a reduction over "
                                 << replicas_ << " replicas, found stream '" << stream.name() << "'");
  stream.wait(ready);
  stream.wait(gradient_read_);
  if (compute_first) stream.wait(ctx.compute_stream().record());
  const auto count = static_cast<std::size_t>(shard_size_);
  {
    timeline::Span span(stream, "reduce-scatter", name_);
    comm.reduce_scatter(full_grad.data(), target.data(), count, DType::f32, ReduceOp::avg, stream);
  }
  if (replicas_ > 1) {
    // Each replica averaged its shard group's gradients; the average of those averages over equal
    // groups is the average over every data-parallel rank.
    timeline::Span span(stream, "replica all-reduce", name_);
    ctx.replica_comm().all_reduce(target.data(), target.data(), count, DType::f32, ReduceOp::avg, stream);
  }
  reduced_ = stream.record();
  reducing_ = full_grad;
  grad_dirty_ = true;
  grad_stale_ = false;  // the step's first reduction wrote every element
  padding_written_ = padding_written_ || whole();
  return reduced_;
}

void ShardedStorage::settle() {
  if (!is_initialized()) return;
  context().compute_stream().wait(reduced_);
  reducing_ = Tensor();
  if (incoming_pending_) {
    add_(writable_grad_shard(), incoming_);
    incoming_pending_ = false;
  }
}

void ShardedStorage::zero_grad() {
  settle();
  ++gradient_version_;
  // No zeros written: at one rank the backward writes the first gradients over the shard's parts,
  // across ranks the first reduction overwrites all of it; grad_shard() zeroes what neither reached.
  if (grad_shard_.defined()) {
    if (whole() && padding_written_) {  // a reduction wrote between the parts: zero it all
      writable_grad_shard().zero_();
      for (auto& e : entries_) e.grad_unwritten = false;
      padding_written_ = false;
    } else if (whole()) {
      for (auto& e : entries_) e.grad_unwritten = e.trainable;
    } else {
      grad_stale_ = true;
    }
  }
  grad_dirty_ = false;
}

void ShardedStorage::gradient_complete() {
  if (listener_) listener_(*this);
}

void ShardedStorage::release_gradient(const Event& after) {
  BMT_REQUIRE(!grads_own_ || std::none_of(entries_.begin(), entries_.end(),
                                          [](const Entry& e) { return e.parameter.impl()->grad != nullptr; }),
              "ShardedStorage '" << name_ << "': expected its gradients unbound to give the gradient shard back, "
                                             "found them bound");
  settle();
  context().compute_stream().wait(after);
  grad_shard_ = Tensor();
  incoming_ = Tensor();
  grad_dirty_ = grad_stale_ = padding_written_ = false;
  for (auto& e : entries_) e.grad_unwritten = false;  // a new shard is made to stand for zeros
  gradient_read_ = Event();
  ++gradient_version_;
}

Event ShardedStorage::gradient_ready() {
  Stream& compute = context().compute_stream();
  const bool reduced_only = !whole() && grad_dirty_ && !incoming_pending_ && !grad_stale_ &&
                            std::none_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.grad_unwritten; });
  if (reduced_only) return reduced_;  // nothing to fold in or zero: the reduction's own event
  grad_shard();  // zeros where no gradient came
  settle();      // an accumulated reduction folded in
  return compute.record();
}

}  // namespace bmt
