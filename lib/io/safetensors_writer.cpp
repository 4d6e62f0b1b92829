#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/io/safetensors_file.hpp"
#include "bmtrain/runtime/error.hpp"
#include "element_conversion.hpp"
#include "mpi_io_error.hpp"

namespace bmt::io {

namespace {

// MPI counts are ints; stay well below INT_MAX per call.
constexpr std::uint64_t kMaxBytesPerCall = std::uint64_t(1) << 30;
// Elements converted per staging round when the caller's dtype differs from the file's.
constexpr std::uint64_t kStagingElements = std::uint64_t(1) << 20;

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Writes `bytes` bytes at `offset`; returns "" or what went wrong.
std::string write_at(MPI_File file, std::uint64_t offset, const void* data, std::uint64_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const int n = static_cast<int>(std::min(bytes, kMaxBytesPerCall));
    MPI_Status status;
    const int rc = MPI_File_write_at(file, static_cast<MPI_Offset>(offset), p, n, MPI_BYTE, &status);
    if (rc != MPI_SUCCESS)
      return "writing " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
             " failed: " + detail::mpi_error_text(rc);
    int done = 0;
    MPI_Get_count(&status, MPI_BYTE, &done);
    if (done != n)
      return "writing " + std::to_string(n) + " bytes at offset " + std::to_string(offset) + " failed: " +
             std::to_string(done) + " written (no space left, or a file size limit?)";
    p += n;
    offset += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::uint64_t>(n);
  }
  return {};
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<TensorSpec>& tensors,
                                     const std::map<std::string, std::string>& metadata, MPI_Comm comm)
    : path_(path), comm_(comm_or_world(comm)) {
  const std::string where = "safetensors writer '" + path + "': ";
  const std::string build_error = error_of([&] { header_ = SafetensorsHeader::build(tensors, metadata); });
  agree_on_errors(comm_, build_error.empty() ? "" : where + build_error);

  // Every rank must have built the same header, or the ranks would write different layouts.
  const std::uint64_t hash = fnv1a(header_.bytes());
  std::uint64_t lowest = 0, highest = 0;
  BMT_MPI_CHECK(MPI_Allreduce(&hash, &lowest, 1, MPI_UINT64_T, MPI_MIN, comm_));
  BMT_MPI_CHECK(MPI_Allreduce(&hash, &highest, 1, MPI_UINT64_T, MPI_MAX, comm_));
  BMT_REQUIRE(lowest == highest, where << "expected every rank to declare the same tensors and metadata, found "
                                          "different tensor lists on different ranks");

  int rc = MPI_File_open(comm_, path.c_str(), MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &file_);
  const std::string open_failure =
      agreed_error(comm_, rc == MPI_SUCCESS ? "" : where + "cannot open for writing: " + detail::mpi_error_text(rc));
  if (!open_failure.empty()) {
    // MPI-IO agrees on open failures; should a rank nevertheless hold a handle, closing it (a
    // collective the failed ranks cannot join) could hang, so it is dropped.
    file_ = MPI_FILE_NULL;
    throw Error(open_failure);
  }
  // Existing longer files are cut to the new size.
  rc = MPI_File_set_size(file_, static_cast<MPI_Offset>(header_.file_size()));
  const std::string error = rc == MPI_SUCCESS ? "" : where + "cannot set the file size to " + std::to_string(header_.file_size()) +
                                       " bytes (no space left, or a file size limit?): " + detail::mpi_error_text(rc);
  try {
    agree_on_errors(comm_, error);
  } catch (...) {
    MPI_File_close(&file_);
    file_ = MPI_FILE_NULL;
    throw;
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (file_ == MPI_FILE_NULL || finalized) return;
  try {
    finish(false);
  } catch (...) {
    // A destructor must not throw; the failure already left the file without a header.
  }
}

void SafetensorsWriter::write(const std::string& name, std::uint64_t first, std::uint64_t count, DType dtype,
                              const void* data, Rounding rounding) {
  const std::string where = "safetensors writer '" + path_ + "': ";
  BMT_REQUIRE(file_ != MPI_FILE_NULL, where << "expected an open file, found write('" << name << "') after close()");
  const TensorEntry& t = header_.tensor(name);
  const std::uint64_t numel = t.numel();
  BMT_REQUIRE(first <= numel && count <= numel - first,
              where << "tensor '" << name << "': expected elements within [0, " << numel << "), found [" << first
                    << ", " << first + count << ")");
  const DType file_dtype = dtype_from_safetensors(t.dtype);
  BMT_REQUIRE(detail::is_convertible(dtype, file_dtype),
              where << "tensor '" << name << "' is " << t.dtype << ": expected data of a convertible dtype, found "
                    << dtype_name(dtype));
  BMT_REQUIRE(detail::is_lossless(dtype, file_dtype) || rounding == Rounding::allow,
              where << "tensor '" << name << "' is " << t.dtype << ": writing " << dtype_name(dtype)
                    << " data rounds it; expected Rounding::allow to accept that, found Rounding::forbid");
  BMT_REQUIRE(count == 0 || data != nullptr, where << "tensor '" << name << "': expected data, found a null pointer");
  if (count == 0 || !io_error_.empty()) return;  // after a failure, close() reports it

  const std::uint64_t offset = header_.data_start() + t.begin + first * t.element_size;
  if (dtype == file_dtype) {
    io_error_ = write_at(file_, offset, data, count * t.element_size);
  } else {
    std::vector<unsigned char> staging(std::min(count, kStagingElements) * t.element_size);
    for (std::uint64_t done = 0; done < count && io_error_.empty();) {
      const std::uint64_t n = std::min(count - done, kStagingElements);
      detail::convert(static_cast<const unsigned char*>(data) + done * dtype_size(dtype), dtype, staging.data(),
                      file_dtype, n);
      io_error_ = write_at(file_, offset + done * t.element_size, staging.data(), n * t.element_size);
      done += n;
    }
  }
  if (!io_error_.empty()) {
    io_error_ = where + io_error_;
    return;
  }
  const std::uint64_t end = offset + count * t.element_size;
  if (!written_.empty() && written_.back().second == offset)
    written_.back().second = end;
  else
    written_.emplace_back(offset, end);
}

void SafetensorsWriter::close() {
  BMT_REQUIRE(file_ != MPI_FILE_NULL, "safetensors writer '" << path_ << "': expected an open file, found a second close()");
  finish(true);
}

void SafetensorsWriter::finish(bool report) {
  const std::string where = "safetensors writer '" + path_ + "': ";
  int rank = 0, size = 1;
  MPI_Comm_rank(comm_, &rank);
  MPI_Comm_size(comm_, &size);

  std::string failure = agreed_error(comm_, io_error_);

  if (failure.empty()) {
    // Rank 0 checks that the ranks' ranges together cover the data section.
    std::vector<std::uint64_t> mine;
    for (const auto& [b, e] : written_) {
      mine.push_back(b);
      mine.push_back(e);
    }
    int n = static_cast<int>(mine.size());
    std::vector<int> counts(rank == 0 ? size : 0), displs(rank == 0 ? size : 0);
    BMT_MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm_));
    std::vector<std::uint64_t> all;
    if (rank == 0) {
      int total = 0;
      for (int r = 0; r < size; ++r) {
        displs[r] = total;
        total += counts[r];
      }
      all.resize(static_cast<std::size_t>(total));
    }
    BMT_MPI_CHECK(MPI_Gatherv(mine.data(), n, MPI_UINT64_T, all.data(), counts.data(), displs.data(), MPI_UINT64_T,
                              0, comm_));
    std::string gap;
    if (rank == 0) {
      std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
      for (std::size_t i = 0; i + 1 < all.size(); i += 2) ranges.emplace_back(all[i], all[i + 1]);
      std::sort(ranges.begin(), ranges.end());
      std::uint64_t covered = header_.data_start(), missing = 0, gap_begin = 0, gap_end = 0;
      auto note_gap = [&](std::uint64_t b, std::uint64_t e) {
        if (missing == 0) {
          gap_begin = b;
          gap_end = e;
        }
        missing += e - b;
      };
      for (const auto& [b, e] : ranges) {
        if (b > covered) note_gap(covered, b);
        covered = std::max(covered, e);
      }
      if (covered < header_.file_size()) note_gap(covered, header_.file_size());
      if (missing > 0) {
        const std::uint64_t rel = gap_begin - header_.data_start();
        for (const auto& t : header_.tensors()) {
          if (rel < t.begin || rel >= t.end) continue;
          const std::uint64_t last = std::min(gap_end - header_.data_start(), t.end);
          std::ostringstream os;
          os << where << "expected the ranks together to write every element, found elements ["
             << (rel - t.begin) / t.element_size << ", " << (last - t.begin + t.element_size - 1) / t.element_size
             << ") of tensor '" << t.name << "' written by no rank (" << missing << " bytes missing in all)";
          gap = os.str();
          break;
        }
      }
    }
    failure = agreed_error(comm_, gap);
  }

  if (failure.empty()) {
    std::string error;
    if (rank == 0) {
      error = write_at(file_, 0, header_.bytes().data(), header_.bytes().size());
      if (!error.empty()) error = where + "header: " + error;
    }
    failure = agreed_error(comm_, error);
  }
  if (failure.empty()) {
    const int rc = MPI_File_sync(file_);
    failure = agreed_error(comm_, rc == MPI_SUCCESS ? "" : where + "flushing to storage failed: " + detail::mpi_error_text(rc));
  }
  const int rc = MPI_File_close(&file_);
  file_ = MPI_FILE_NULL;
  if (failure.empty())
    failure = agreed_error(comm_, rc == MPI_SUCCESS ? "" : where + "closing failed: " + detail::mpi_error_text(rc));
  if (report && !failure.empty()) throw Error(failure);
}

}  // namespace bmt::io
