#include "bmtrain/io/safetensors_header.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "bmtrain/runtime/error.hpp"

namespace bmt::io {

namespace {

using nlohmann::json;

// a * b into `out`; true if it overflows 64 bits (portable: nvcc's front end may lack the builtin).
bool multiply_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return true;
  *out = a * b;
  return false;
}

struct DTypeName {
  const char* code;
  std::size_t size;
};
// The byte-sized element types of the safetensors format.
constexpr DTypeName kDTypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},
};

std::string known_dtypes() {
  std::string s;
  for (const auto& d : kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.code);
  return s;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

// What a JSON value is, for messages: "-3", "2.5", "a string", ...
std::string describe(const json& v) {
  if (v.is_number() || v.is_boolean() || v.is_null()) return v.dump();
  if (v.is_string()) return "the string " + v.dump();
  return std::string("a JSON ") + v.type_name();
}

// A non-negative integer field; `what` names it in messages.
std::uint64_t unsigned_value(const json& v, const std::string& what) {
  BMT_REQUIRE(v.is_number_unsigned(),
              what << ": expected a non-negative integer, found "
                   << (v.is_number_integer() ? "the negative integer " + v.dump()
                                             : v.is_number_float() ? "the non-integer number " + v.dump()
                                                                   : describe(v)));
  return v.get<std::uint64_t>();
}

TensorEntry parse_entry(const std::string& name, const json& v) {
  const std::string where = "safetensors header: tensor '" + name + "'";
  BMT_REQUIRE(v.is_object(), where << ": expected an object with dtype, shape and data_offsets, found "
                                   << describe(v));
  for (const char* field : {"dtype", "shape", "data_offsets"})
    BMT_REQUIRE(v.contains(field), where << ": expected a '" << field << "' field, found none");
  TensorEntry e;
  e.name = name;

  const json& dtype = v.at("dtype");
  BMT_REQUIRE(dtype.is_string(), where << ": dtype: expected a string, found " << describe(dtype));
  e.dtype = dtype.get<std::string>();
  e.element_size = safetensors_dtype_size(e.dtype);
  BMT_REQUIRE(e.element_size != 0,
              where << ": unknown dtype '" << e.dtype << "': expected one of " << known_dtypes());

  const json& shape = v.at("shape");
  BMT_REQUIRE(shape.is_array(), where << ": shape: expected an array of integers, found " << describe(shape));
  std::uint64_t numel = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::uint64_t d = unsigned_value(shape[i], where + ": shape[" + std::to_string(i) + "]");
    BMT_REQUIRE(d <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
                where << ": shape[" << i << "]: expected at most 2^63-1, found " << d);
    e.shape.push_back(static_cast<std::int64_t>(d));
    overflow = overflow || multiply_overflows(numel, d, &numel);
  }

  const json& offsets = v.at("data_offsets");
  BMT_REQUIRE(offsets.is_array() && offsets.size() == 2,
              where << ": data_offsets: expected an array [begin, end], found " << describe(offsets)
                    << (offsets.is_array() ? " of " + std::to_string(offsets.size()) + " elements" : ""));
  e.begin = unsigned_value(offsets[0], where + ": data_offsets[0]");
  e.end = unsigned_value(offsets[1], where + ": data_offsets[1]");
  BMT_REQUIRE(e.begin <= e.end,
              where << ": data_offsets: expected begin <= end, found [" << e.begin << ", " << e.end << "]");

  std::uint64_t bytes = 0;
  overflow = overflow || multiply_overflows(numel, static_cast<std::uint64_t>(e.element_size), &bytes);
  BMT_REQUIRE(!overflow, where << ": shape " << shape_text(e.shape) << " of " << e.dtype
                               << " has more bytes than 2^64");
  BMT_REQUIRE(bytes == e.end - e.begin,
              where << ": shape " << shape_text(e.shape) << " of " << e.dtype << " needs " << bytes
                    << " bytes (" << numel << " x " << e.element_size << "), but data_offsets [" << e.begin
                    << ", " << e.end << "] cover " << (e.end - e.begin) << " bytes");
  return e;
}

std::string little_endian_u64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xffu);
  return s;
}

}  // namespace

std::size_t safetensors_dtype_size(std::string_view code) {
  for (const auto& d : kDTypes)
    if (code == d.code) return d.size;
  return 0;
}

const char* safetensors_dtype_code(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u16: return "U16";
    case DType::u8: return "U8";
    case DType::f8e4m3: return "F8_E4M3";
    case DType::f8e5m2: return "F8_E5M2";
  }
  return "?";
}

bool has_bmt_dtype(std::string_view code) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u16, DType::u8})
    if (code == safetensors_dtype_code(t)) return true;
  return false;
}

DType dtype_from_safetensors(std::string_view code) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u16, DType::u8})
    if (code == safetensors_dtype_code(t)) return t;
  BMT_REQUIRE(false, "safetensors dtype '" << code
                         << "' has no bmtrain dtype: expected one of F32, BF16, F16, I32, I64, U16, U8");
}

std::uint64_t SafetensorsHeader::json_length(std::string_view head) {
  BMT_REQUIRE(head.size() >= 8, "safetensors header: expected at least 8 bytes (the header length), found "
                                    << head.size());
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head[i]);
  return n;
}

SafetensorsHeader SafetensorsHeader::parse(std::string_view head, std::uint64_t file_size) {
  BMT_REQUIRE(file_size >= 8, "safetensors file: expected at least 8 bytes (the header length), found a file of "
                                  << file_size << " bytes");
  const std::uint64_t n = json_length(head);
  BMT_REQUIRE(n <= file_size - 8, "safetensors header length: expected at most " << (file_size - 8)
                                      << " bytes (the file has " << file_size << "), found " << n
                                      << ", beyond the end of the file");
  BMT_REQUIRE(n <= max_json_bytes, "safetensors header length: expected at most " << max_json_bytes
                                       << " bytes, found " << n);
  BMT_REQUIRE(head.size() >= 8 + n, "safetensors header: expected the first " << (8 + n)
                                        << " bytes of the file, found " << head.size());
  const std::string_view text = head.substr(8, n);

  // nlohmann::json keeps the last of duplicate keys silently; a parser callback sees each key.
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second) duplicate = key;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), on_event);
  } catch (const json::exception& e) {
    BMT_REQUIRE(false, "safetensors header: expected " << n << " bytes of valid UTF-8 JSON, found invalid JSON ("
                                                       << e.what() << ")");
  }
  BMT_REQUIRE(j.is_object(), "safetensors header: expected a JSON object at the top level, found " << describe(j));
  BMT_REQUIRE(duplicate.empty(), "safetensors header: expected unique tensor names, found '" << duplicate
                                                                                            << "' more than once");

  SafetensorsHeader h;
  h.bytes_ = std::string(head.substr(0, 8 + n));
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      BMT_REQUIRE(it->is_object(), "safetensors header: __metadata__: expected an object of strings, found "
                                       << describe(*it));
      for (auto m = it->begin(); m != it->end(); ++m) {
        BMT_REQUIRE(m->is_string(), "safetensors header: __metadata__['" << m.key()
                                        << "']: expected a string, found " << describe(*m));
        h.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    TensorEntry e = parse_entry(it.key(), *it);
    const std::uint64_t available = file_size - 8 - n;
    BMT_REQUIRE(e.end <= available, "safetensors header: tensor '" << e.name << "': data_offsets [" << e.begin
                                        << ", " << e.end << "] reach beyond the end of the file: expected end <= "
                                        << available << " (the data section's size)");
    h.tensors_.push_back(std::move(e));
  }

  // The data section must be covered exactly once.
  std::sort(h.tensors_.begin(), h.tensors_.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  std::uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (const auto& e : h.tensors_) {
    BMT_REQUIRE(e.begin >= covered, "safetensors header: tensor '" << e.name << "' at data_offsets [" << e.begin
                                        << ", " << e.end << "] overlaps tensor '" << previous->name
                                        << "' which ends at " << covered
                                        << ": expected each tensor to start where the previous one ends");
    BMT_REQUIRE(e.begin == covered, "safetensors header: expected contiguous tensor data, found a gap of "
                                        << (e.begin - covered) << " bytes [" << covered << ", " << e.begin
                                        << ") before tensor '" << e.name << "'");
    covered = e.end;
    previous = &e;
  }
  const std::uint64_t available = file_size - 8 - n;
  BMT_REQUIRE(covered == available, "safetensors file: expected the data section to end with the last tensor at "
                                        << covered << " bytes, found " << available << " bytes ("
                                        << (available - covered) << " bytes after the last tensor)");
  h.data_size_ = covered;
  for (std::size_t i = 0; i < h.tensors_.size(); ++i) h.index_[h.tensors_[i].name] = i;
  return h;
}

SafetensorsHeader SafetensorsHeader::build(const std::vector<TensorSpec>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  json j = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    j["__metadata__"] = std::move(m);
  }
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    BMT_REQUIRE(t.name != "__metadata__", "safetensors writer: expected tensor names other than '__metadata__' "
                                          "(reserved for the metadata), found a tensor of that name");
    BMT_REQUIRE(!j.contains(t.name), "safetensors writer: expected unique tensor names, found '" << t.name
                                                                                                << "' more than once");
    std::uint64_t numel = 1;
    for (auto d : t.shape) {
      BMT_REQUIRE(d >= 0, "safetensors writer: tensor '" << t.name << "': expected a shape of non-negative sizes, found "
                                                         << shape_text(t.shape));
      BMT_REQUIRE(!multiply_overflows(numel, static_cast<std::uint64_t>(d), &numel),
                  "safetensors writer: tensor '" << t.name << "': shape " << shape_text(t.shape) << " overflows");
    }
    const std::uint64_t end = offset + numel * dtype_size(t.dtype);
    j[t.name] = {{"dtype", safetensors_dtype_code(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = j.dump();  // keys sorted: the same bytes on every rank
  } catch (const json::exception& e) {
    BMT_REQUIRE(false, "safetensors writer: expected tensor names and metadata in UTF-8, found " << e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string head = little_endian_u64(text.size()) + text;
  return parse(head, head.size() + offset);
}

const TensorEntry* SafetensorsHeader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorEntry& SafetensorsHeader::tensor(const std::string& name) const {
  const TensorEntry* e = find(name);
  if (!e) {
    std::ostringstream names;
    std::size_t shown = 0;
    for (const auto& t : tensors_) {
      if (shown++ == 8) {
        names << ", ...";
        break;
      }
      names << (shown > 1 ? ", " : "") << "'" << t.name << "'";
    }
    BMT_REQUIRE(false, "safetensors: expected a tensor named '" << name << "', found none among the file's "
                                                               << tensors_.size() << " tensors (" << names.str() << ")");
  }
  return *e;
}

}  // namespace bmt::io
