#include "output_files.hpp"

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/io/atomic_file.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace bmt_train {

void check_output_file(const std::string& flag, const std::string& path, bool create_parents) {
  BMT_REQUIRE(!path.empty(), flag << ": expected a file path, found an empty one");
  if (create_parents) {
    const auto dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
    BMT_REQUIRE(!ec, flag << ": cannot write '" << path << "': cannot create its directory: " << ec.message());
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  bool created = false;
  if (fd < 0 && errno == ENOENT) {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    created = fd >= 0;
  }
  BMT_REQUIRE(fd >= 0, flag << ": cannot write '" << path << "': " << std::strerror(errno));
  ::close(fd);
  if (created) ::unlink(path.c_str());
}

void write_output_file(const std::string& flag, const std::string& path, const std::string& what,
                       std::string_view bytes) {
  try {
    bmt::io::write_file_atomic(path, bytes);
  } catch (const bmt::Error& e) {
    BMT_REQUIRE(false, flag << " '" << path << "': cannot write " << what << ": " << e.what() << "; '" << path
                            << "' is left as it was");
  }
}

}  // namespace bmt_train
