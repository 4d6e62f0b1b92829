#pragma once
// The safetensors file format (https://github.com/huggingface/safetensors):
//
//   [8 bytes: N, little-endian u64] [N bytes: UTF-8 JSON, may be padded with spaces] [data]
//   JSON: {"__metadata__": {string: string},            (optional)
//          "<name>": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...}
//
// Offsets are bytes relative to the start of the data section. The tensors must cover the data
// section exactly: no gaps, no overlaps, nothing after the last tensor (the reference
// implementation rejects such files too). Tensors may appear in any order in the JSON and in the data.
//
// A SafetensorsHeader is either parsed from a file (validated strictly: every problem is a
// bmt::Error naming what was expected and what was found) or built from a list of tensors; a built
// header is a pure function of its inputs, so every rank of a job computes the same bytes and the
// same offsets on its own.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "bmtrain/runtime/dtype.hpp"

namespace bmt::io {

// Byte size of a safetensors dtype ("F32" -> 4, "BOOL" -> 1, ...); 0 for a name the format does
// not define. Sub-byte types (F4, F6_*) are not supported.
std::size_t safetensors_dtype_size(std::string_view code);
// The safetensors name of a bmtrain dtype: f32 -> "F32", bf16 -> "BF16", u16 -> "U16", ...
const char* safetensors_dtype_code(DType dtype);
// The bmtrain dtype of a safetensors name; throws bmt::Error for a name bmtrain has no dtype for.
DType dtype_from_safetensors(std::string_view code);
bool has_bmt_dtype(std::string_view code);

// A tensor a writer declares.
struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
};

// One tensor of a header.
struct TensorEntry {
  std::string name;
  std::string dtype;                // the file's name for it: "F32", "BF16", ...
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;          // byte offsets relative to the data section
  std::uint64_t end = 0;
  std::size_t element_size = 0;
  std::uint64_t numel() const { return element_size ? (end - begin) / element_size : 0; }
};

class SafetensorsHeader {
 public:
  // The reference implementation refuses larger headers; so do we (a corrupt length would otherwise
  // ask for an arbitrary allocation).
  static constexpr std::uint64_t max_json_bytes = 100'000'000;

  // Parses and validates a header. `head` holds the first bytes of the file: all of them, or at
  // least the 8-byte length and the N bytes of JSON; `file_size` is the size of the whole file.
  static SafetensorsHeader parse(std::string_view head, std::uint64_t file_size);
  // The JSON length N stored in the first 8 bytes of `head` (which must hold at least 8 bytes).
  static std::uint64_t json_length(std::string_view head);

  // A header for `tensors`, laid out contiguously in the given order, with the JSON padded with
  // spaces so that the data starts at a multiple of 8 bytes. Names must be unique and not
  // "__metadata__"; the metadata entry is written only when `metadata` is not empty.
  static SafetensorsHeader build(const std::vector<TensorSpec>& tensors,
                                 const std::map<std::string, std::string>& metadata = {});

  // The header as stored: 8-byte length, then the JSON (with its padding).
  const std::string& bytes() const { return bytes_; }
  std::uint64_t data_start() const { return bytes_.size(); }
  std::uint64_t data_size() const { return data_size_; }
  std::uint64_t file_size() const { return data_start() + data_size_; }

  // Tensors in the order of their data in the file.
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  // nullptr if there is no tensor of that name.
  const TensorEntry* find(const std::string& name) const;
  // Throws bmt::Error naming the missing tensor.
  const TensorEntry& tensor(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string bytes_;
  std::uint64_t data_size_ = 0;
  std::vector<TensorEntry> tensors_;
  std::map<std::string, std::size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

}  // namespace bmt::io
