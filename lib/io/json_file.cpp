#include "bmtrain/io/json_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "bmtrain/runtime/error.hpp"
#include "posix_file.hpp"

namespace bmt::io {

void write_json_atomic(const std::string& path, const nlohmann::json& value, int indent) {
  std::string text;
  try {
    text = value.dump(indent) + "\n";
  } catch (const nlohmann::json::exception& e) {
    BMT_REQUIRE(false, "write_json_atomic '" << path << "': expected JSON with UTF-8 strings, found " << e.what());
  }
  const std::string temp = path + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  BMT_REQUIRE(fd >= 0, "write_json_atomic: cannot create '" << temp << "': " << detail::errno_text(errno));
  try {
    detail::write_all(fd, text.data(), text.size(), temp);
    BMT_REQUIRE(::fsync(fd) == 0, "write_json_atomic: flushing '" << temp << "' to storage failed: "
                                                                  << detail::errno_text(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  // close() can report a deferred write error (NFS): a file that did not close is not trusted.
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    BMT_REQUIRE(false, "write_json_atomic: closing '" << temp << "' failed: " << detail::errno_text(err));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    BMT_REQUIRE(false, "write_json_atomic: renaming '" << temp << "' to '" << path << "' failed: "
                                                       << detail::errno_text(err));
  }
  detail::fsync_path(detail::parent_directory(path));
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  BMT_REQUIRE(in.good(), "read_json: cannot open '" << path << "': " << detail::errno_text(errno));
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
