#include "bmtrain/runtime/dtype.hpp"

#include <algorithm>
#include <cctype>

#include "bmtrain/runtime/error.hpp"

namespace bmt {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u16: return "u16";
    case DType::u8: return "u8";
    case DType::f8e4m3: return "f8e4m3";
    case DType::f8e5m2: return "f8e5m2";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "f32" || n == "fp32" || n == "float32" || n == "float") return DType::f32;
  if (n == "bf16" || n == "bfloat16") return DType::bf16;
  if (n == "f16" || n == "fp16" || n == "float16" || n == "half") return DType::f16;
  if (n == "i32" || n == "int32") return DType::i32;
  if (n == "i64" || n == "int64") return DType::i64;
  if (n == "u16" || n == "uint16") return DType::u16;
  if (n == "u8" || n == "uint8") return DType::u8;
  if (n == "f8e4m3" || n == "float8_e4m3fn" || n == "e4m3") return DType::f8e4m3;
  if (n == "f8e5m2" || n == "float8_e5m2" || n == "e5m2") return DType::f8e5m2;
  BMT_REQUIRE(false, "unknown dtype '" << name
                         << "': expected one of f32, bf16, f16, i32, i64, u16, u8, f8e4m3, f8e5m2");
}

}  // namespace bmt
