#pragma once
// What every Kokkos kernel file shares: the execution and memory spaces, unmanaged views over tensor
// memory, dtype dispatch, and float loads/stores for the 16-bit storage types. Kernels compute in
// float whatever the storage type, so every reduction over bf16/f16 data accumulates in f32.
#include <Kokkos_Core.hpp>

#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"
#include "bmtrain/runtime/float8.hpp"
#include "bmtrain/runtime/half.hpp"
#include "bmtrain/tensor/tensor.hpp"

namespace bmt::kernels {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;

template <class T>
using View1 = Kokkos::View<T*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// The compute stream's execution space instance: every kernel is queued there.
inline ExecSpace space() {
  return is_initialized() ? context().compute_stream().space() : ExecSpace();
}


// A flat view over a contiguous tensor whose element type is T.
template <class T>
View1<T> view1(const Tensor& t, const char* op) {
  BMT_REQUIRE(t.defined(), op << ": expected a defined tensor");
  BMT_REQUIRE(t.dtype() == dtype_of<T>(), op << ": expected dtype " << dtype_name(dtype_of<T>()) << ", found "
                                            << dtype_name(t.dtype()));
  BMT_REQUIRE(t.is_contiguous(), op << ": expected a contiguous tensor of shape " << to_string(t.shape()));
  return View1<T>(static_cast<T*>(t.data()), static_cast<std::size_t>(t.numel()));
}

KOKKOS_INLINE_FUNCTION float to_f32(float x) { return x; }
KOKKOS_INLINE_FUNCTION float to_f32(bf16_t x) { return bf16_t::to_float(x.bits); }
KOKKOS_INLINE_FUNCTION float to_f32(f16_t x) { return f16_t::to_float(x.bits); }
KOKKOS_INLINE_FUNCTION float to_f32(f8e4m3_t x) { return f8e4m3_t::to_float(x.bits); }
KOKKOS_INLINE_FUNCTION float to_f32(f8e5m2_t x) { return f8e5m2_t::to_float(x.bits); }

template <class T>
KOKKOS_INLINE_FUNCTION T from_f32(float x);
template <> KOKKOS_INLINE_FUNCTION float from_f32<float>(float x) { return x; }
template <> KOKKOS_INLINE_FUNCTION bf16_t from_f32<bf16_t>(float x) { bf16_t r; r.bits = bf16_t::from_float(x); return r; }
template <> KOKKOS_INLINE_FUNCTION f16_t from_f32<f16_t>(float x) { f16_t r; r.bits = f16_t::from_float(x); return r; }
template <> KOKKOS_INLINE_FUNCTION f8e4m3_t from_f32<f8e4m3_t>(float x) { f8e4m3_t r; r.bits = f8e4m3_t::from_float(x); return r; }
template <> KOKKOS_INLINE_FUNCTION f8e5m2_t from_f32<f8e5m2_t>(float x) { f8e5m2_t r; r.bits = f8e5m2_t::from_float(x); return r; }

}  // namespace bmt::kernels

// Runs the statement block with `T` bound to the storage type of a float8 dtype.
#define BMT_DISPATCH_FLOAT8(dtype, op, T, ...)                                               \
  do {                                                                                      \
    switch (dtype) {                                                                        \
      case ::bmt::DType::f8e4m3: { using T = ::bmt::f8e4m3_t; __VA_ARGS__; break; }          \
      case ::bmt::DType::f8e5m2: { using T = ::bmt::f8e5m2_t; __VA_ARGS__; break; }          \
      default:                                                                              \
        BMT_REQUIRE(false, op << ": expected a float8 dtype (f8e4m3, f8e5m2), found "       \
                              << ::bmt::dtype_name(dtype));                                 \
    }                                                                                       \
  } while (0)

// Runs the statement block with `T` bound to the storage type of a floating dtype:
//   BMT_DISPATCH_FLOAT(x.dtype(), "gelu", T, { gelu_kernel<T>(x, y); });
#define BMT_DISPATCH_FLOAT(dtype, op, T, ...)                                               \
  do {                                                                                      \
    switch (dtype) {                                                                        \
      case ::bmt::DType::f32: { using T = float; __VA_ARGS__; break; }                       \
      case ::bmt::DType::bf16: { using T = ::bmt::bf16_t; __VA_ARGS__; break; }              \
      case ::bmt::DType::f16: { using T = ::bmt::f16_t; __VA_ARGS__; break; }                \
      default:                                                                              \
        BMT_REQUIRE(false, op << ": expected a floating dtype (f32, bf16, f16), found "     \
                              << ::bmt::dtype_name(dtype));                                 \
    }                                                                                       \
  } while (0)
