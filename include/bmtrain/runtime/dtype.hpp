#pragma once
// Element types of tensors and communication buffers.
#include <cstddef>
#include <cstdint>
#include <string>

namespace bmt {

enum class DType : std::uint8_t { f32, bf16, f16, i32, i64, u16, u8 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::bf16: case DType::f16: case DType::u16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

const char* dtype_name(DType t);  // "f32", "bf16", ...
// Parses "f32"/"float32"/"fp32", "bf16"/"bfloat16", "f16"/"fp16"/"float16", "i32", "i64", "u16", "u8";
// throws bmt::Error naming the accepted spellings otherwise.
DType parse_dtype(const std::string& name);

}  // namespace bmt
