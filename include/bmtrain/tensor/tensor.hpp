#pragma once
// Tensor: a dtype, a shape and strides over shared storage in the Kokkos memory space.
//
// Views (view, slice, transpose, select) share storage and copy nothing.
// Most kernels want contiguous input and call bmt::contiguous(), which copies only when needed.
// A Tensor is a shared handle: copying it aliases the same data, like a torch.Tensor.
//
// Autograd state (requires_grad, grad, the node that produced the tensor) lives here too, so that
// every tensor can take part in a graph; the autograd layer owns the logic.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "bmtrain/runtime/dtype.hpp"

namespace bmt {

namespace autograd {
class Node;
}
struct ParameterInfo;  // defined by the nn layer: what makes a tensor a (sharded) parameter

using Shape = std::vector<std::int64_t>;

std::int64_t numel_of(const Shape& shape);
std::string to_string(const Shape& shape);  // "[2, 3, 4]"

// A block of memory from the caching allocator, returned to it when the last tensor lets go.
class Storage {
 public:
  explicit Storage(std::size_t bytes);
  // Wraps memory owned by someone else (a gather buffer, say); never freed by the Storage.
  Storage(void* external, std::size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  // The memory; first runs the pending write, if one was set.
  void* data() const {
    if (pending_write_) run_pending_write();
    return data_;
  }
  std::size_t bytes() const { return bytes_; }
  // False for wrapped memory, which its owner may reuse.
  bool owned() const { return owned_; }

  // Work that fills this memory, put off until the memory is first used: data() runs it once,
  // first (see autograd::OutputsOnDemandGuard). The work must not hold this Storage.
  void set_pending_write(std::function<void()> write) { pending_write_ = std::move(write); }
  bool has_pending_write() const { return static_cast<bool>(pending_write_); }

 private:
  void run_pending_write() const;

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  bool owned_ = true;
  mutable std::function<void()> pending_write_;
};

class Tensor;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  std::size_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = DType::f32;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  // `grad` is a buffer lent to this leaf that holds no values yet and stands for zeros (a ZeRO
  // block's gradient buffer): the first gradient may be written over it instead of added
  // (autograd::Function::claim_leaf_gradient), saving the pass that would zero it.
  bool grad_unwritten = false;
  std::shared_ptr<autograd::Node> grad_fn;
  std::weak_ptr<autograd::Node> grad_accumulator;  // a leaf's gradient sink, while a graph holds it
  int output_nr = 0;  // which output of grad_fn this is
  std::string name;   // for error messages and inspection (parameters carry their dotted name)
  std::shared_ptr<ParameterInfo> param;  // set for parameters only
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialized contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  // From host data of the same element type; bytes are copied.
  static Tensor from_host(const void* data, const Shape& shape, DType dtype);
  // From host floats, converted to `dtype` (f32, bf16 or f16; integers are truncated).
  static Tensor from_floats(const std::vector<float>& values, const Shape& shape, DType dtype = DType::f32);
  // From host integers (i32, i64 or u16 tensor).
  static Tensor from_ints(const std::vector<std::int64_t>& values, const Shape& shape, DType dtype = DType::i64);
  // Over memory owned elsewhere (kept alive by `owner`'s storage or by the caller).
  static Tensor wrap(void* data, const Shape& shape, DType dtype);

  bool defined() const { return static_cast<bool>(impl_); }
  DType dtype() const;
  const Shape& shape() const;
  const Shape& strides() const;
  std::int64_t dim() const;
  std::int64_t size(std::int64_t d) const;  // negative d counts from the end
  std::int64_t numel() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype()); }
  bool is_contiguous() const;

  void* data() const;  // address of the first element
  template <class T>
  T* data_as() const { return static_cast<T*>(data()); }
  const std::shared_ptr<Storage>& storage() const;

  // Views: no copy. view() splits and merges dimensions whose strides allow it (always for
  // contiguous data; can_view says whether they do); one dimension may be -1.
  Tensor view(const Shape& shape) const;
  bool can_view(const Shape& shape) const;
  Tensor flatten() const { return view({-1}); }
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end) const;
  Tensor select(std::int64_t dim, std::int64_t index) const;  // removes `dim`
  Tensor transpose(std::int64_t d0, std::int64_t d1) const;
  // This tensor's storage under another shape, strides (non-negative) and offset (elements from
  // the storage's start); throws unless every element lies inside the storage.
  Tensor as_strided(const Shape& shape, const Shape& strides, std::size_t offset) const;

  // Host transfers (blocking). to_host_floats converts any floating dtype to float.
  std::vector<float> to_host_floats() const;
  std::vector<std::int64_t> to_host_ints() const;
  void copy_from_host(const void* data, std::size_t bytes) const;
  void copy_to_host(void* data, std::size_t bytes) const;
  // Copies src (same shape and dtype, both contiguous) into this tensor's memory.
  void copy_(const Tensor& src) const;
  void zero_() const;

  // Autograd.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool on = true);
  Tensor grad() const;
  void set_grad(const Tensor& g);
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  // Same data, no history.
  Tensor detach() const;
  // Reverse-mode pass from this tensor (a scalar unless `grad` is given); defined in autograd.
  void backward(const Tensor& grad = Tensor()) const;

  const std::string& name() const;
  Tensor& set_name(std::string name);
  std::string to_string(std::int64_t max_elements = 16) const;
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }

 private:
  void check_defined(const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// "expected shape [2, 3], found [3, 2]"-style check used by ops.
void check_same_shape(const Tensor& a, const Tensor& b, const char* op);
void check_dtype(const Tensor& t, DType expected, const char* op);

}  // namespace bmt
