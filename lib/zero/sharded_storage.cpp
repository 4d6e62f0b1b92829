#include "bmtrain/zero/sharded_storage.hpp"

#include <algorithm>

#include "bmtrain/kernels/basic.hpp"
#include "bmtrain/kernels/random.hpp"
#include "bmtrain/nn/parameter.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/timeline.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "bmtrain/tensor/memory.hpp"

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

}  // namespace

ShardedStorage::ShardedStorage(std::string name, const std::vector<std::pair<std::string, Tensor>>& parameters,
                               int rank, int world_size, std::uint64_t seed)
    : name_(std::move(name)), rank_(rank), world_size_(world_size) {
  BMT_REQUIRE(world_size > 0 && rank >= 0 && rank < world_size,
              "ShardedStorage: expected 0 <= rank < world_size, found rank " << rank << " of " << world_size);
  if (!parameters.empty()) dtype_ = parameters.front().second.dtype();
  const std::int64_t align = static_cast<std::int64_t>(kAllocationAlignment / dtype_size(dtype_));
  std::int64_t offset = 0;
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
    offset += (p.numel() + align - 1) / align * align;
  }
  // Pad so that every shard has the same size and starts aligned.
  const std::int64_t unit = align * world_size;
  total_ = std::max<std::int64_t>(unit, (offset + unit - 1) / unit * unit);
  shard_size_ = total_ / world_size;

  shard_ = Tensor::zeros({shard_size_}, dtype_);
  for (auto& e : entries_) {
    e.parameter.impl()->param->sharded = this;
    e.parameter.impl()->param->offset = e.offset;
    e.parameter.impl()->name = e.name;
    const Slice s = local_slice(e);
    if (s.count == 0) continue;
    const Tensor part = shard_.slice(0, s.shard_offset, s.shard_offset + s.count);
    const auto& init = e.parameter.impl()->param->init;
    if (init) init(part, s.param_offset, random::key(seed, e.name));
  }
}

ShardedStorage::~ShardedStorage() {
  // Settle outstanding work before the buffers it writes go away.
  if (!reduced_.query()) reduced_.synchronize();
  if (!zeroed_.query()) zeroed_.synchronize();
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

const Tensor& ShardedStorage::grad_shard() {
  if (grad_stale_) {
    grad_shard_.zero_();
    grad_stale_ = false;
  }
  await_zeros();
  return grad_shard_holder();
}

void ShardedStorage::await_zeros() {
  if (!zeroing_) return;
  context().compute_stream().wait(zeroed_);
  zeroing_ = false;
}

const Tensor& ShardedStorage::grad_shard_holder() {
  if (!grad_shard_.defined()) grad_shard_ = Tensor::zeros({shard_size_}, DType::f32);
  return grad_shard_;
}

const Tensor& ShardedStorage::accumulate_grads() {
  BMT_REQUIRE(whole(), "ShardedStorage '" << name_ << "': gradients are added into the shard only at one rank, "
                                                     "found a world of " << world_size_);
  grad_dirty_ = true;
  await_zeros();
  return grad_shard_holder();
}

void ShardedStorage::all_gather_into(const Tensor& full, Communicator& comm, Stream& stream) const {
  BMT_REQUIRE(full.nbytes() >= static_cast<std::size_t>(total_) * dtype_size(dtype_),
              "ShardedStorage '" << name_ << "': expected a gather buffer of " << total_ * dtype_size(dtype_)
                                 << " bytes, found " << full.nbytes());
  timeline::Span span(stream, "gather", name_);
  comm.all_gather(shard_.data(), full.data(), static_cast<std::size_t>(shard_size_), dtype_, stream);
}

void ShardedStorage::bind(const Tensor& full) {
  for (auto& e : entries_) {
    TensorImpl v = view_impl(full, dtype_, e.offset, e.parameter.shape());
    auto& impl = *e.parameter.impl();
    impl.storage = v.storage;
    impl.offset = v.offset;
  }
  bound_ = true;
}

void ShardedStorage::unbind() {
  for (auto& e : entries_) e.parameter.impl()->storage.reset();
  bound_ = false;
}

void ShardedStorage::bind_grads(const Tensor& full_grad) {
  check_dtype(full_grad, DType::f32, "ShardedStorage::bind_grads");
  for (auto& e : entries_) {
    if (!e.trainable) continue;
    e.parameter.impl()->grad = std::make_shared<TensorImpl>(view_impl(full_grad, DType::f32, e.offset, e.parameter.shape()));
  }
}

void ShardedStorage::unbind_grads() {
  for (auto& e : entries_) e.parameter.impl()->grad.reset();
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
  grad_shard_holder();
  if (incoming_pending_ || (grad_dirty_ && !reduced_.query())) {
    settle();
    compute_first = true;
  }
  Tensor target = grad_shard_;
  if (grad_dirty_) {
    if (!incoming_.defined()) {
      incoming_ = Tensor::empty({shard_size_}, DType::f32);
      compute_first = true;
    }
    target = incoming_;
    incoming_pending_ = true;
  }
  stream.wait(ready);
  if (compute_first) stream.wait(context().compute_stream().record());
  {
    timeline::Span span(stream, "reduce-scatter", name_);
    comm.reduce_scatter(full_grad.data(), target.data(), static_cast<std::size_t>(shard_size_), DType::f32,
                        ReduceOp::avg, stream);
  }
  reduced_ = stream.record();
  reducing_ = full_grad;
  grad_dirty_ = true;
  grad_stale_ = false;  // the first reduction since zero_grad wrote every element
  return reduced_;
}

void ShardedStorage::settle() {
  if (!is_initialized()) return;
  context().compute_stream().wait(reduced_);
  reducing_ = Tensor();
  if (incoming_pending_) {
    add_(grad_shard_, incoming_);
    incoming_pending_ = false;
  }
}

void ShardedStorage::zero_grad() {
  settle();
  // Across ranks the step's first reduction overwrites the whole shard, so the zeros are written
  // only if something reads the shard before that (grad_shard()). One rank adds into it: its zeros
  // are written on the scatter stream (idle there), overlapping the forward, and the compute
  // stream waits for them at the shard's first use.
  if (grad_shard_.defined()) {
    if (!whole()) {
      grad_stale_ = true;
    } else if (!is_initialized()) {
      grad_shard_.zero_();
    } else {
      Stream& side = context().scatter_stream();
      side.wait(context().compute_stream().record());  // after whatever read the old gradients
      memory::set_zero_async(grad_shard_.data(), grad_shard_.nbytes(), side);
      zeroed_ = side.record();
      zeroing_ = true;
    }
  }
  grad_dirty_ = false;
}

}  // namespace bmt
