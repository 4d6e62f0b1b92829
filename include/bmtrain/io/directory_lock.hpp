#pragma once
// An exclusive lock on a directory, held by this process for as long as the object lives: two jobs
// writing checkpoints into one root would delete each other's steps. The lock is an open-file-
// description lock (fcntl F_OFD_SETLK, over NFS too) on the file <dir>/.lock, which names its
// owner's host, pid and start time. The kernel releases it when the process ends, however it ends,
// so a killed job never leaves a stale lock: the file stays, unlocked, and the next job takes it.
//
//   bmt::io::DirectoryLock lock(root, "--save");   // rank 0, before the first save
#include <string>

namespace bmt::io {

class DirectoryLock {
 public:
  static constexpr const char* kFile = ".lock";

  // Locks `dir` (which must exist). Throws bmt::Error, naming `what`, the directory and the other
  // owner's host, pid and start time, when another process holds the lock.
  DirectoryLock(const std::string& dir, const std::string& what);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace bmt::io
