#include "bmtrain/io/directory_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "bmtrain/runtime/error.hpp"
#include "../runtime/posix_file.hpp"

namespace bmt::io {

namespace {

// Exclusive and non-blocking; false when another process holds it. File systems without
// open-file-description locks get flock(2), which conflicts between processes the same way.
bool try_lock(int fd, const std::string& path) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) return true;
  if (errno == EAGAIN || errno == EACCES) return false;
  BMT_REQUIRE(errno == EINVAL || errno == ENOLCK || errno == ENOSYS,
              "lock '" << path << "': cannot lock it: " << bmt::detail::errno_text(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
  BMT_REQUIRE(errno == EWOULDBLOCK, "lock '" << path << "': cannot lock it: " << bmt::detail::errno_text(errno));
  return false;
}

std::string owner_of(int fd) {
  char text[512] = {};
  ssize_t n = -1;
  do n = ::pread(fd, text, sizeof text - 1, 0);
  while (n < 0 && errno == EINTR);
  std::string owner(text, n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!owner.empty() && (owner.back() == '\n' || owner.back() == ' ')) owner.pop_back();
  return owner.empty() ? "an owner that has not written its name yet" : owner;
}

std::string this_owner() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '?';
  const time_t now = ::time(nullptr);
  struct tm tm {};
  ::gmtime_r(&now, &tm);
  char started[32];
  ::strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return std::string("host ") + host + ", pid " + std::to_string(::getpid()) + " (since " + started + ")\n";
}

}  // namespace

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& what) {
  const std::string path = dir + "/" + kFile;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  BMT_REQUIRE(fd_ >= 0, what << " '" << dir << "': cannot open its lock file '" << path
                             << "': " << bmt::detail::errno_text(errno));
  try {
    BMT_REQUIRE(try_lock(fd_, path), what << " '" << dir << "': expected no other job using it, found one holding its "
                                          << "lock '" << path << "': " << owner_of(fd_));
    const std::string owner = this_owner();
    BMT_REQUIRE(::ftruncate(fd_, 0) == 0, "lock '" << path << "': cannot write it: " << bmt::detail::errno_text(errno));
    bmt::detail::write_all(fd_, owner.data(), owner.size(), path);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace bmt::io
