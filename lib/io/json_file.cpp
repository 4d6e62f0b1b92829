#include "bmtrain/io/json_file.hpp"

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "bmtrain/io/atomic_file.hpp"
#include "bmtrain/runtime/error.hpp"
#include "../runtime/posix_file.hpp"

namespace bmt::io {

void write_json_atomic(const std::string& path, const nlohmann::json& value, int indent) {
  std::string text;
  try {
    text = value.dump(indent) + "\n";
  } catch (const nlohmann::json::exception& e) {
    BMT_REQUIRE(false, "write_json_atomic '" << path << "': expected JSON with UTF-8 strings, found " << e.what());
  }
  try {
    write_file_atomic(path, text);
  } catch (const Error& e) {
    BMT_REQUIRE(false, "write_json_atomic '" << path << "': " << e.what());
  }
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BMT_REQUIRE(in.good(), "read_json: cannot open '" << path << "': " << bmt::detail::errno_text(errno));
  std::ostringstream text;
  text << in.rdbuf();
  BMT_REQUIRE(!in.bad(), "read_json: reading '" << path << "' failed");
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    BMT_REQUIRE(false, "read_json '" << path << "': expected valid JSON, found " << e.what());
  }
}

}  // namespace bmt::io
