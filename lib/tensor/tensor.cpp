#include "bmtrain/tensor/tensor.hpp"

#include <cstring>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/float8.hpp"
#include "bmtrain/runtime/half.hpp"
#include "bmtrain/tensor/allocator.hpp"
#include "bmtrain/tensor/memory.hpp"

namespace bmt {

std::int64_t numel_of(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string to_string(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

namespace {

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

void check_shape(const Shape& shape) {
  for (auto d : shape)
    BMT_REQUIRE(d >= 0, "tensor shape: expected non-negative sizes, found " << to_string(shape));
}

std::int64_t wrap_dim(std::int64_t d, std::int64_t ndim, const char* what) {
  const std::int64_t w = d < 0 ? d + ndim : d;
  BMT_REQUIRE(w >= 0 && w < ndim, what << ": expected a dimension in [" << -ndim << ", " << ndim
                                       << "), found " << d);
  return w;
}

float element_to_float(const void* p, DType t) {
  switch (t) {
    case DType::f32: return *static_cast<const float*>(p);
    case DType::bf16: return bf16_t::to_float(*static_cast<const std::uint16_t*>(p));
    case DType::f16: return f16_t::to_float(*static_cast<const std::uint16_t*>(p));
    case DType::i32: return static_cast<float>(*static_cast<const std::int32_t*>(p));
    case DType::i64: return static_cast<float>(*static_cast<const std::int64_t*>(p));
    case DType::u16: return static_cast<float>(*static_cast<const std::uint16_t*>(p));
    case DType::u8: return static_cast<float>(*static_cast<const std::uint8_t*>(p));
    case DType::f8e4m3: return f8e4m3_t::to_float(*static_cast<const std::uint8_t*>(p));
    case DType::f8e5m2: return f8e5m2_t::to_float(*static_cast<const std::uint8_t*>(p));
  }
  return 0;
}

std::int64_t element_to_int(const void* p, DType t) {
  switch (t) {
    case DType::i32: return *static_cast<const std::int32_t*>(p);
    case DType::i64: return *static_cast<const std::int64_t*>(p);
    case DType::u16: return *static_cast<const std::uint16_t*>(p);
    case DType::u8: return *static_cast<const std::uint8_t*>(p);
    default: return static_cast<std::int64_t>(element_to_float(p, t));
  }
}

void float_to_element(float v, void* p, DType t) {
  switch (t) {
    case DType::f32: *static_cast<float*>(p) = v; break;
    case DType::bf16: *static_cast<std::uint16_t*>(p) = bf16_t::from_float(v); break;
    case DType::f16: *static_cast<std::uint16_t*>(p) = f16_t::from_float(v); break;
    case DType::i32: *static_cast<std::int32_t*>(p) = static_cast<std::int32_t>(v); break;
    case DType::i64: *static_cast<std::int64_t*>(p) = static_cast<std::int64_t>(v); break;
    case DType::u16: *static_cast<std::uint16_t*>(p) = static_cast<std::uint16_t>(v); break;
    case DType::u8: *static_cast<std::uint8_t*>(p) = static_cast<std::uint8_t>(v); break;
    case DType::f8e4m3: *static_cast<std::uint8_t*>(p) = f8e4m3_t::from_float(v); break;
    case DType::f8e5m2: *static_cast<std::uint8_t*>(p) = f8e5m2_t::from_float(v); break;
  }
}

void int_to_element(std::int64_t v, void* p, DType t) {
  switch (t) {
    case DType::i32: *static_cast<std::int32_t*>(p) = static_cast<std::int32_t>(v); break;
    case DType::i64: *static_cast<std::int64_t*>(p) = v; break;
    case DType::u16: *static_cast<std::uint16_t*>(p) = static_cast<std::uint16_t>(v); break;
    case DType::u8: *static_cast<std::uint8_t*>(p) = static_cast<std::uint8_t>(v); break;
    default: float_to_element(static_cast<float>(v), p, t);
  }
}

// Host copy of the tensor's elements in logical (row-major) order, whatever its strides.
std::vector<char> gather_to_host(const Tensor& t) {
  const std::size_t es = dtype_size(t.dtype());
  std::vector<char> out(static_cast<std::size_t>(t.numel()) * es);
  if (t.numel() == 0) return out;
  if (t.is_contiguous()) {
    memory::copy_to_host(out.data(), t.data(), out.size());
    return out;
  }
  // Copy the whole span the view covers, then pick the elements out on the host.
  std::int64_t span = 1;
  for (std::int64_t d = 0; d < t.dim(); ++d) span += (t.shape()[d] - 1) * t.strides()[d];
  std::vector<char> raw(static_cast<std::size_t>(span) * es);
  memory::copy_to_host(raw.data(), t.data(), raw.size());
  Shape index(t.dim(), 0);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    std::int64_t off = 0;
    for (std::int64_t d = 0; d < t.dim(); ++d) off += index[d] * t.strides()[d];
    std::memcpy(out.data() + i * es, raw.data() + off * es, es);
    for (std::int64_t d = t.dim(); d-- > 0;) {
      if (++index[d] < t.shape()[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

}  // namespace

Storage::Storage(std::size_t bytes) : data_(CachingAllocator::instance().allocate(bytes)), bytes_(bytes) {}
Storage::Storage(void* external, std::size_t bytes) : data_(external), bytes_(bytes), owned_(false) {}
void Storage::run_pending_write() const {
  const std::function<void()> write = std::move(pending_write_);
  pending_write_ = nullptr;
  write();
}

Storage::~Storage() {
  if (owned_) CachingAllocator::instance().deallocate(data_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  check_shape(shape);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<std::size_t>(numel_of(shape)) * dtype_size(dtype));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.zero_();
  return t;
}

Tensor Tensor::from_host(const void* data, const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.copy_from_host(data, t.nbytes());
  return t;
}

Tensor Tensor::from_floats(const std::vector<float>& values, const Shape& shape, DType dtype) {
  BMT_REQUIRE(static_cast<std::int64_t>(values.size()) == numel_of(shape),
              "Tensor::from_floats: expected " << numel_of(shape) << " values for shape " << bmt::to_string(shape)
                                               << ", found " << values.size());
  const std::size_t es = dtype_size(dtype);
  std::vector<char> bytes(values.size() * es);
  for (std::size_t i = 0; i < values.size(); ++i) float_to_element(values[i], bytes.data() + i * es, dtype);
  return from_host(bytes.data(), shape, dtype);
}

Tensor Tensor::from_ints(const std::vector<std::int64_t>& values, const Shape& shape, DType dtype) {
  BMT_REQUIRE(static_cast<std::int64_t>(values.size()) == numel_of(shape),
              "Tensor::from_ints: expected " << numel_of(shape) << " values for shape " << bmt::to_string(shape)
                                             << ", found " << values.size());
  const std::size_t es = dtype_size(dtype);
  std::vector<char> bytes(values.size() * es);
  for (std::size_t i = 0; i < values.size(); ++i) int_to_element(values[i], bytes.data() + i * es, dtype);
  return from_host(bytes.data(), shape, dtype);
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype) {
  check_shape(shape);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, static_cast<std::size_t>(numel_of(shape)) * dtype_size(dtype));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

void Tensor::check_defined(const char* what) const {
  BMT_REQUIRE(impl_, what << ": expected a defined tensor, found an empty Tensor()");
}

DType Tensor::dtype() const { check_defined("Tensor::dtype"); return impl_->dtype; }
const Shape& Tensor::shape() const { check_defined("Tensor::shape"); return impl_->shape; }
const Shape& Tensor::strides() const { check_defined("Tensor::strides"); return impl_->strides; }
std::int64_t Tensor::dim() const { return static_cast<std::int64_t>(shape().size()); }
std::int64_t Tensor::size(std::int64_t d) const { return shape()[wrap_dim(d, dim(), "Tensor::size")]; }
std::int64_t Tensor::numel() const { return numel_of(shape()); }
const std::shared_ptr<Storage>& Tensor::storage() const { check_defined("Tensor::storage"); return impl_->storage; }

bool Tensor::is_contiguous() const {
  check_defined("Tensor::is_contiguous");
  std::int64_t expected = 1;
  for (std::size_t i = impl_->shape.size(); i-- > 0;) {
    if (impl_->shape[i] != 1 && impl_->strides[i] != expected) return false;
    expected *= impl_->shape[i];
  }
  return true;
}

void* Tensor::data() const {
  check_defined("Tensor::data");
  BMT_REQUIRE(impl_->storage, "tensor '" << impl_->name << "' " << bmt::to_string(impl_->shape)
                                         << " has no storage: expected an initialized tensor, found a parameter that is "
                                            "not initialized (call bmt::init_parameters) or sharded (outside its "
                                            "CheckpointBlock, use .gather())");
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * dtype_size(impl_->dtype);
}

namespace {
Tensor make_view(const Tensor& base, Shape shape, Shape strides, std::size_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}
}  // namespace

namespace {
// `shape` with its one -1 (if any) resolved for `numel` elements.
Shape resolve_shape(const Shape& shape, std::int64_t numel) {
  Shape s = shape;
  std::int64_t known = 1, infer = -1;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      BMT_REQUIRE(infer < 0, "Tensor::view: expected at most one -1 in " << bmt::to_string(shape));
      infer = static_cast<std::int64_t>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    BMT_REQUIRE(known > 0 && numel % known == 0, "Tensor::view: cannot infer -1 in " << bmt::to_string(shape)
                                                     << " for " << numel << " elements");
    s[infer] = numel / known;
  }
  BMT_REQUIRE(numel_of(s) == numel, "Tensor::view: expected a shape of " << numel << " elements, found "
                                        << bmt::to_string(shape));
  return s;
}

// Strides that read the elements of (shape, strides) in the same order under new_shape, if there
// are any. Runs of dimensions that are contiguous with one another (a "chunk") may be regrouped
// freely; a view can only split or merge dimensions within a chunk. So [B, T, 3C] sliced to
// [B, T, C] views as [B, T, H, D], but a transposed tensor does not flatten.
bool view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape, Shape& out) {
  out.assign(new_shape.size(), 0);
  if (numel_of(shape) == 0 || shape.empty()) {
    out = contiguous_strides(new_shape);
    return true;
  }
  std::int64_t view_d = static_cast<std::int64_t>(new_shape.size()) - 1;
  std::int64_t chunk_stride = strides.back(), chunk_numel = 1, view_numel = 1;
  for (std::int64_t d = static_cast<std::int64_t>(shape.size()) - 1; d >= 0; --d) {
    chunk_numel *= shape[d];
    const bool chunk_ends = d == 0 || (shape[d - 1] != 1 && strides[d - 1] != chunk_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < chunk_numel || new_shape[view_d] == 1)) {
      out[view_d] = view_numel * chunk_stride;
      view_numel *= new_shape[view_d];
      --view_d;
    }
    if (view_numel != chunk_numel) return false;
    if (d > 0) {
      chunk_stride = strides[d - 1];
      chunk_numel = view_numel = 1;
    }
  }
  return view_d == -1;
}
}  // namespace

bool Tensor::can_view(const Shape& new_shape) const {
  check_defined("Tensor::can_view");
  Shape strides_out;
  return view_strides(shape(), strides(), resolve_shape(new_shape, numel()), strides_out);
}

Tensor Tensor::view(const Shape& new_shape) const {
  check_defined("Tensor::view");
  const Shape s = resolve_shape(new_shape, numel());
  if (is_contiguous()) return make_view(*this, s, contiguous_strides(s), impl_->offset);
  Shape st;
  BMT_REQUIRE(view_strides(shape(), strides(), s, st),
              "Tensor::view: cannot view shape " << bmt::to_string(shape()) << " with strides " << bmt::to_string(strides())
                                                 << " as " << bmt::to_string(new_shape)
                                                 << " without a copy (use bmt::contiguous first)");
  return make_view(*this, s, st, impl_->offset);
}

Tensor Tensor::as_strided(const Shape& new_shape, const Shape& new_strides, std::size_t offset) const {
  check_defined("Tensor::as_strided");
  BMT_REQUIRE(impl_->storage, "Tensor::as_strided: expected a tensor with storage, found '" << impl_->name
                                                                                          << "' without");
  BMT_REQUIRE(new_shape.size() == new_strides.size(),
              "Tensor::as_strided: expected one stride per dimension, found shape "
                  << bmt::to_string(new_shape) << " and strides " << bmt::to_string(new_strides));
  for (const std::int64_t n : new_shape)
    BMT_REQUIRE(n >= 0, "Tensor::as_strided: expected non-negative sizes, found shape " << bmt::to_string(new_shape));
  std::size_t end = offset;  // one past the last element
  if (numel_of(new_shape) > 0) {
    for (std::size_t d = 0; d < new_shape.size(); ++d) {
      BMT_REQUIRE(new_strides[d] >= 0, "Tensor::as_strided: expected non-negative strides, found "
                                           << bmt::to_string(new_strides));
      end += static_cast<std::size_t>((new_shape[d] - 1) * new_strides[d]);
    }
    ++end;
  }
  const std::size_t capacity = impl_->storage->bytes() / dtype_size(impl_->dtype);
  BMT_REQUIRE(end <= capacity, "Tensor::as_strided: expected elements within the storage's " << capacity
                                   << ", found shape " << bmt::to_string(new_shape) << " with strides "
                                   << bmt::to_string(new_strides) << " at offset " << offset << " reaching " << end);
  return make_view(*this, new_shape, new_strides, offset);
}

Tensor Tensor::slice(std::int64_t d, std::int64_t start, std::int64_t end) const {
  d = wrap_dim(d, dim(), "Tensor::slice");
  BMT_REQUIRE(0 <= start && start <= end && end <= shape()[d],
              "Tensor::slice: expected 0 <= start <= end <= " << shape()[d] << " on dimension " << d
                                                           << ", found [" << start << ", " << end << ")");
  Shape s = shape();
  s[d] = end - start;
  return make_view(*this, s, strides(), impl_->offset + static_cast<std::size_t>(start * strides()[d]));
}

Tensor Tensor::select(std::int64_t d, std::int64_t index) const {
  d = wrap_dim(d, dim(), "Tensor::select");
  BMT_REQUIRE(0 <= index && index < shape()[d], "Tensor::select: expected an index in [0, " << shape()[d]
                                                    << ") on dimension " << d << ", found " << index);
  Shape s = shape(), st = strides();
  const std::size_t off = impl_->offset + static_cast<std::size_t>(index * st[d]);
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return make_view(*this, s, st, off);
}

Tensor Tensor::transpose(std::int64_t d0, std::int64_t d1) const {
  d0 = wrap_dim(d0, dim(), "Tensor::transpose");
  d1 = wrap_dim(d1, dim(), "Tensor::transpose");
  Shape s = shape(), st = strides();
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return make_view(*this, s, st, impl_->offset);
}

std::vector<float> Tensor::to_host_floats() const {
  check_defined("Tensor::to_host_floats");
  const auto raw = gather_to_host(*this);
  const std::size_t es = dtype_size(dtype());
  std::vector<float> out(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = element_to_float(raw.data() + i * es, dtype());
  return out;
}

std::vector<std::int64_t> Tensor::to_host_ints() const {
  check_defined("Tensor::to_host_ints");
  const auto raw = gather_to_host(*this);
  const std::size_t es = dtype_size(dtype());
  std::vector<std::int64_t> out(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = element_to_int(raw.data() + i * es, dtype());
  return out;
}

void Tensor::copy_from_host(const void* src, std::size_t bytes) const {
  BMT_REQUIRE(is_contiguous(), "Tensor::copy_from_host: expected a contiguous tensor");
  BMT_REQUIRE(bytes == nbytes(), "Tensor::copy_from_host: expected " << nbytes() << " bytes for "
                                     << bmt::to_string(shape()) << " " << dtype_name(dtype()) << ", found " << bytes);
  memory::copy_from_host(data(), src, bytes);
}

void Tensor::copy_to_host(void* dst, std::size_t bytes) const {
  BMT_REQUIRE(bytes == nbytes(), "Tensor::copy_to_host: expected " << nbytes() << " bytes for "
                                     << bmt::to_string(shape()) << " " << dtype_name(dtype()) << ", found " << bytes);
  const auto raw = gather_to_host(*this);
  std::memcpy(dst, raw.data(), bytes);
}

void Tensor::copy_(const Tensor& src) const {
  check_same_shape(*this, src, "Tensor::copy_");
  check_dtype(src, dtype(), "Tensor::copy_");
  BMT_REQUIRE(is_contiguous() && src.is_contiguous(), "Tensor::copy_: expected contiguous tensors");
  memory::copy(data(), src.data(), nbytes());
}

void Tensor::zero_() const {
  BMT_REQUIRE(is_contiguous(), "Tensor::zero_: expected a contiguous tensor");
  memory::set_zero(data(), nbytes());
}

bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }

Tensor& Tensor::set_requires_grad(bool on) {
  check_defined("Tensor::set_requires_grad");
  BMT_REQUIRE(!impl_->grad_fn || on, "set_requires_grad(false): expected a leaf tensor, found the output of an op "
                                         "(use detach())");
  impl_->requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  check_defined("Tensor::grad");
  return impl_->grad ? Tensor(impl_->grad) : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  check_defined("Tensor::set_grad");
  if (g.defined()) check_same_shape(*this, g, "Tensor::set_grad");
  impl_->grad = g.impl();
  impl_->grad_unwritten = false;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  return impl_ ? impl_->grad_fn : none;
}

Tensor Tensor::detach() const {
  check_defined("Tensor::detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->dtype = impl_->dtype;
  impl->name = impl_->name;
  return Tensor(std::move(impl));
}

const std::string& Tensor::name() const { check_defined("Tensor::name"); return impl_->name; }
Tensor& Tensor::set_name(std::string n) { check_defined("Tensor::set_name"); impl_->name = std::move(n); return *this; }

std::string Tensor::to_string(std::int64_t max_elements) const {
  if (!impl_) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(" << dtype_name(dtype()) << ' ' << bmt::to_string(shape());
  if (!impl_->name.empty()) os << " '" << impl_->name << '\'';
  if (requires_grad()) os << " requires_grad";
  os << ") [";
  const auto values = to_host_floats();
  const std::size_t shown = std::min<std::size_t>(values.size(), static_cast<std::size_t>(max_elements));
  os << std::setprecision(6);
  for (std::size_t i = 0; i < shown; ++i) os << (i ? ", " : "") << values[i];
  if (shown < values.size()) os << ", ... (" << values.size() << " elements)";
  os << ']';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  BMT_REQUIRE(a.defined() && b.defined(), op << ": expected defined tensors");
  BMT_REQUIRE(a.shape() == b.shape(), op << ": expected shape " << to_string(a.shape()) << ", found "
                                         << to_string(b.shape()));
}

void check_dtype(const Tensor& t, DType expected, const char* op) {
  BMT_REQUIRE(t.dtype() == expected, op << ": expected dtype " << dtype_name(expected) << ", found "
                                        << dtype_name(t.dtype()));
}

}  // namespace bmt
