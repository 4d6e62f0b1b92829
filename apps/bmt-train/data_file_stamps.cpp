#include "data_file_stamps.hpp"

#include <bmtrain/runtime/error.hpp>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace bmt_train {

namespace {

using nlohmann::json;

// A modification time as UTC, to the nanosecond.
std::string time_text(std::int64_t ns) {
  const std::time_t seconds = static_cast<std::time_t>(ns / 1000000000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[64];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + n, sizeof text - n, ".%09lldZ", static_cast<long long>(ns % 1000000000));
  return text;
}

}  // namespace

json data_file_stamps(const DataFiles& files) {
  json stamps = json::array();
  for (const auto& [path, tokens] : files) {
    struct stat st {};
    BMT_REQUIRE(::stat(path.c_str(), &st) == 0, "--data: cannot examine '" << path << "': " << std::strerror(errno));
    stamps.push_back({{"path", path},
                      {"bytes", static_cast<std::int64_t>(st.st_size)},
                      {"mtime_ns", static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec}});
  }
  return stamps;
}

std::vector<std::string> data_file_changes(const json& saved, const json& now, std::int64_t step) {
  BMT_REQUIRE(saved.is_array(), "training state: 'extra.data_file_stamps': expected a JSON array, found " << saved.dump());
  std::vector<std::string> lines;
  for (const auto& was : saved) {
    BMT_REQUIRE(was.is_object() && was.contains("path") && was["path"].is_string() && was.contains("bytes") &&
                    was["bytes"].is_number_integer() && was.contains("mtime_ns") && was["mtime_ns"].is_number_integer(),
                "training state: 'extra.data_file_stamps': expected objects of a path, bytes and mtime_ns, found "
                    << was.dump());
    for (const auto& is : now) {
      // Another size is another token count, which the trajectory's 'data_files' names.
      if (is["path"] != was["path"] || is["bytes"] != was["bytes"] || is["mtime_ns"] == was["mtime_ns"]) continue;
      lines.push_back("--data file '" + is["path"].get<std::string>() + "' was modified since the checkpoint (at " +
                      time_text(is["mtime_ns"].get<std::int64_t>()) + "; the checkpoint's run read it as modified at " +
                      time_text(was["mtime_ns"].get<std::int64_t>()) + "), its size the same: the sequences from step " +
                      std::to_string(step + 1) + " on are those of its new content, not the checkpoint's run's");
    }
  }
  return lines;
}

}  // namespace bmt_train
