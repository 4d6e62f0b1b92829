#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/io/safetensors_file.hpp"
#include "bmtrain/runtime/error.hpp"
#include "element_conversion.hpp"
#include "../runtime/posix_file.hpp"

namespace bmt::io {

namespace {
constexpr std::uint64_t kStagingElements = std::uint64_t(1) << 20;
constexpr int kMaxBcast = 1 << 30;
}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path, MPI_Comm comm) : path_(path) {
  comm = comm_or_world(comm);
  int rank = 0;
  BMT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const std::string where = "safetensors reader '" + path + "': ";

  std::string error;
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) error = where + "cannot open: " + bmt::detail::errno_text(errno);
  // Rank 0 reads the header once and shares it: every rank then parses the same bytes and reaches
  // the same verdict, and a job of thousands of ranks does not read it thousands of times.
  std::string head;
  std::uint64_t size = 0;
  if (rank == 0 && error.empty()) {
    error = error_of([&] {
      size = bmt::detail::file_size(fd_, path);
      head.resize(static_cast<std::size_t>(std::min<std::uint64_t>(size, 8)));
      bmt::detail::pread_all(fd_, head.data(), head.size(), 0, path);
      if (size < 8) return;
      const std::uint64_t n = SafetensorsHeader::json_length(head);
      if (n > size - 8 || n > SafetensorsHeader::max_json_bytes) return;  // parse() names the problem
      head.resize(static_cast<std::size_t>(8 + n));
      bmt::detail::pread_all(fd_, head.data() + 8, static_cast<std::size_t>(n), 8, path);
    });
    if (!error.empty()) error = where + error;
  }
  try {
    agree_on_errors(comm, error);
  } catch (...) {
    if (fd_ >= 0) ::close(fd_);
    throw;
  }
  std::uint64_t sizes[2] = {size, head.size()};
  BMT_MPI_CHECK(MPI_Bcast(sizes, 2, MPI_UINT64_T, 0, comm));
  head.resize(static_cast<std::size_t>(sizes[1]));
  for (std::uint64_t done = 0; done < sizes[1];) {
    const int n = static_cast<int>(std::min<std::uint64_t>(sizes[1] - done, kMaxBcast));
    BMT_MPI_CHECK(MPI_Bcast(head.data() + done, n, MPI_CHAR, 0, comm));
    done += static_cast<std::uint64_t>(n);
  }
  try {
    header_ = SafetensorsHeader::parse(head, sizes[0]);
  } catch (const Error& e) {
    ::close(fd_);
    throw Error(where + e.what());
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsReader::read(const std::string& name, std::uint64_t first, std::uint64_t count, DType dtype,
                             void* out, Rounding rounding) const {
  const std::string where = "safetensors reader '" + path_ + "': ";
  const TensorEntry& t = header_.tensor(name);
  BMT_REQUIRE(has_bmt_dtype(t.dtype), where << "tensor '" << name << "' is stored as " << t.dtype
                                            << ": expected one of F32, BF16, F16, I32, I64, U16, U8");
  const DType file_dtype = dtype_from_safetensors(t.dtype);
  const std::uint64_t numel = t.numel();
  BMT_REQUIRE(first <= numel && count <= numel - first,
              where << "tensor '" << name << "': expected elements within [0, " << numel << "), found [" << first
                    << ", " << first + count << ")");
  BMT_REQUIRE(detail::is_convertible(file_dtype, dtype),
              where << "tensor '" << name << "' is " << t.dtype << ": expected to read it as a dtype it converts to, found "
                    << dtype_name(dtype));
  BMT_REQUIRE(detail::is_lossless(file_dtype, dtype) || rounding == Rounding::allow,
              where << "tensor '" << name << "' is " << t.dtype << ": reading it as " << dtype_name(dtype)
                    << " rounds; expected Rounding::allow to accept that, found Rounding::forbid");
  BMT_REQUIRE(count == 0 || out != nullptr, where << "tensor '" << name << "': expected a buffer, found a null pointer");
  if (count == 0) return;

  const std::uint64_t offset = header_.data_start() + t.begin + first * t.element_size;
  if (dtype == file_dtype) {
    bmt::detail::pread_all(fd_, out, static_cast<std::size_t>(count * t.element_size), offset, path_);
    return;
  }
  std::vector<unsigned char> staging(static_cast<std::size_t>(std::min(count, kStagingElements) * t.element_size));
  for (std::uint64_t done = 0; done < count;) {
    const std::uint64_t n = std::min(count - done, kStagingElements);
    bmt::detail::pread_all(fd_, staging.data(), static_cast<std::size_t>(n * t.element_size),
                      offset + done * t.element_size, path_);
    detail::convert(staging.data(), file_dtype, static_cast<unsigned char*>(out) + done * dtype_size(dtype), dtype,
                    static_cast<std::size_t>(n));
    done += n;
  }
}

}  // namespace bmt::io
