#include "posix_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "bmtrain/runtime/error.hpp"

namespace bmt::detail {

std::string errno_text(int err) { return std::strerror(err); }

void pread_all(int fd, void* out, std::size_t bytes, std::uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(out);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, p + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    BMT_REQUIRE(n >= 0, "reading " << bytes << " bytes at offset " << offset << " of '" << path
                                   << "' failed: " << errno_text(errno));
    BMT_REQUIRE(n > 0, "reading '" << path << "': expected " << bytes << " bytes at offset " << offset
                                   << ", found the end of the file after " << done);
    done += static_cast<std::size_t>(n);
  }
}

void write_all(int fd, const void* data, std::size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd, p + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    BMT_REQUIRE(n > 0, "writing " << bytes << " bytes to '" << path << "' failed after " << done
                                  << " bytes: " << errno_text(n < 0 ? errno : ENOSPC));
    done += static_cast<std::size_t>(n);
  }
}

std::uint64_t file_size(int fd, const std::string& path) {
  struct stat st;
  BMT_REQUIRE(::fstat(fd, &st) == 0, "cannot stat '" << path << "': " << errno_text(errno));
  return static_cast<std::uint64_t>(st.st_size);
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BMT_REQUIRE(fd >= 0, "cannot open '" << path << "' to flush it to storage: " << errno_text(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory (EINVAL); their renames are durable without it.
  BMT_REQUIRE(rc == 0 || err == EINVAL, "flushing '" << path << "' to storage failed: " << errno_text(err));
}

std::string parent_directory(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace bmt::detail
