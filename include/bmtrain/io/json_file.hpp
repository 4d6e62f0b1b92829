#pragma once
// Small JSON files (training state, completion markers) written so that a crash at any moment
// leaves either the previous file or the new one, never a torn mix.
#include <nlohmann/json.hpp>
#include <string>

namespace bmt::io {

// Local (call it on one rank): writes `value` to `path`.tmp, flushes it to storage (fsync), renames
// it over `path` and fsyncs the directory, so the rename itself survives a power loss. Throws
// bmt::Error naming the path and the system's reason (no space left, permission denied, ...).
void write_json_atomic(const std::string& path, const nlohmann::json& value, int indent = 2);

// Local: the JSON in `path`; throws bmt::Error for a missing or unreadable file and for invalid JSON.
nlohmann::json read_json(const std::string& path);

}  // namespace bmt::io
