#include "bmtrain/io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "bmtrain/runtime/error.hpp"
#include "../runtime/posix_file.hpp"

namespace bmt::io {

void write_file_atomic(const std::string& path, std::string_view bytes) {
  struct stat st {};
  // A device or a pipe cannot be replaced by a rename (and must not be: /dev/null stays a device).
  const bool in_place = ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
  const std::string target = in_place ? path : path + ".tmp";
  const int fd = ::open(target.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | (in_place ? 0 : O_CREAT), 0644);
  BMT_REQUIRE(fd >= 0, "cannot create '" << target << "': " << bmt::detail::errno_text(errno));
  const auto give_up = [&] {
    if (!in_place) ::unlink(target.c_str());
  };
  try {
    bmt::detail::write_all(fd, bytes.data(), bytes.size(), target);
    if (!in_place)
      BMT_REQUIRE(::fsync(fd) == 0, "flushing '" << target << "' to storage failed: " << bmt::detail::errno_text(errno));
  } catch (...) {
    ::close(fd);
    give_up();
    throw;
  }
  // close() can report a deferred write error (NFS): a file that did not close is not trusted.
  if (::close(fd) != 0) {
    const int err = errno;
    give_up();
    BMT_REQUIRE(false, "closing '" << target << "' failed: " << bmt::detail::errno_text(err));
  }
  if (in_place) return;
  if (::rename(target.c_str(), path.c_str()) != 0) {
    const int err = errno;
    give_up();
    BMT_REQUIRE(false, "renaming '" << target << "' to '" << path << "' failed: " << bmt::detail::errno_text(err));
  }
  bmt::detail::fsync_path(bmt::detail::parent_directory(path));
}

}  // namespace bmt::io
