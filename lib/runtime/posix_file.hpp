#pragma once
// Small POSIX helpers shared by the data and io layers: whole reads and writes that retry on EINTR and short
// transfers, and fsync of files and directories. All throw bmt::Error naming the path and errno.
#include <cstddef>
#include <cstdint>
#include <string>

namespace bmt::detail {

std::string errno_text(int err);
// Reads exactly `bytes` at `offset`; a file that ends sooner is an error.
void pread_all(int fd, void* out, std::size_t bytes, std::uint64_t offset, const std::string& path);
void write_all(int fd, const void* data, std::size_t bytes, const std::string& path);
std::uint64_t file_size(int fd, const std::string& path);
// fsync of a file or directory by path (a directory's fsync makes renames inside it durable).
void fsync_path(const std::string& path);
std::string parent_directory(const std::string& path);

}  // namespace bmt::detail
