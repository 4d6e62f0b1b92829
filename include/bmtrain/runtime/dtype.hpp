#pragma once
// Element types of tensors and communication buffers.
#include <cstddef>
#include <cstdint>
#include <string>

namespace bmt {

// f8e4m3 and f8e5m2 (runtime/float8.hpp) are storage for FP8 matrix products: the kernels that
// read them are the float8 casts and the GEMM, and no gradient flows through them.
enum class DType : std::uint8_t { f32, bf16, f16, i32, i64, u16, u8, f8e4m3, f8e5m2 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::bf16: case DType::f16: case DType::u16: return 2;
    case DType::u8: case DType::f8e4m3: case DType::f8e5m2: return 1;
  }
  return 0;
}

// The floating dtypes kernels compute in and gradients flow through.
constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }
constexpr bool is_float8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }

const char* dtype_name(DType t);  // "f32", "bf16", ...
// Parses "f32"/"float32"/"fp32", "bf16"/"bfloat16", "f16"/"fp16"/"float16", "i32", "i64", "u16", "u8",
// "f8e4m3"/"float8_e4m3fn", "f8e5m2"/"float8_e5m2";
// throws bmt::Error naming the accepted spellings otherwise.
DType parse_dtype(const std::string& name);

}  // namespace bmt
