#include "bmtrain/io/token_dataset.hpp"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <utility>

#include "bmtrain/runtime/error.hpp"
#include "posix_file.hpp"

namespace bmt::io {

TokenShard::TokenShard(const std::string& path, TokenFileFormat format) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BMT_REQUIRE(fd >= 0, "token file '" << path << "': cannot open: " << detail::errno_text(errno));
  std::uint64_t bytes = 0;
  std::int32_t header[3] = {0, 0, 0};
  try {
    bytes = detail::file_size(fd, path);
    if (bytes >= sizeof header) detail::pread_all(fd, header, sizeof header, 0, path);
    else if (bytes >= 4) detail::pread_all(fd, header, 4, 0, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (format == TokenFileFormat::detect)
    format = bytes >= 4 && header[0] == kLlmcMagic ? TokenFileFormat::llmc : TokenFileFormat::raw_u16;
  format_ = format;

  std::uint64_t offset = 0;
  std::string problem;
  std::ostringstream os;
  if (format == TokenFileFormat::llmc) {
    const std::string what = "token file '" + path + "' (llm.c format): ";
    if (bytes < kLlmcHeaderBytes)
      os << what << "expected a header of " << kLlmcHeaderBytes << " bytes, found a file of " << bytes
         << " bytes (truncated)";
    else if (header[0] != kLlmcMagic)
      os << what << "expected the magic number " << kLlmcMagic << " in the first int32, found " << header[0];
    else if (header[1] != kLlmcVersion)
      os << what << "expected version " << kLlmcVersion << " (uint16 tokens), found " << header[1];
    else if (header[2] <= 0)
      os << what << "expected a positive token count, found " << header[2];
    else if (bytes - kLlmcHeaderBytes != 2 * static_cast<std::uint64_t>(header[2]))
      os << what << "the header says " << header[2] << " tokens (" << 2 * static_cast<std::uint64_t>(header[2])
         << " bytes after the header), but the file has " << bytes - kLlmcHeaderBytes << " bytes after it"
         << (bytes - kLlmcHeaderBytes < 2 * static_cast<std::uint64_t>(header[2]) ? " (count beyond the file)"
                                                                               : " (bytes after the last token)");
    offset = kLlmcHeaderBytes;
    count_ = header[2] > 0 ? static_cast<std::uint64_t>(header[2]) : 0;
  } else {
    const std::string what = "token file '" + path + "' (raw uint16): ";
    if (bytes == 0) os << what << "expected at least one token, found an empty file";
    else if (bytes % 2 != 0) os << what << "expected an even number of bytes (uint16 tokens), found " << bytes;
    count_ = bytes / 2;
  }
  problem = os.str();
  if (!problem.empty()) {
    ::close(fd);
    BMT_REQUIRE(false, problem);
  }
  map_bytes_ = static_cast<std::size_t>(bytes);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  BMT_REQUIRE(map_ != MAP_FAILED, "token file '" << path << "': cannot map " << bytes << " bytes: " << detail::errno_text(err));
  // Sequences are read at random positions: tell the kernel not to read ahead much.
  ::madvise(map_, map_bytes_, MADV_RANDOM);
  tokens_ = reinterpret_cast<const std::uint16_t*>(static_cast<const char*>(map_) + offset);
}

TokenShard::~TokenShard() {
  if (map_ && map_ != MAP_FAILED) ::munmap(map_, map_bytes_);
}

TokenShard::TokenShard(TokenShard&& other) noexcept { *this = std::move(other); }

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    if (map_ && map_ != MAP_FAILED) ::munmap(map_, map_bytes_);
    path_ = std::move(other.path_);
    format_ = other.format_;
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    count_ = std::exchange(other.count_, 0);
  }
  return *this;
}

TokenDataset::TokenDataset(const std::string& pattern, TokenFileFormat format) {
  glob_t found{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &found);
  std::vector<std::string> paths;
  if (rc == 0)
    for (std::size_t i = 0; i < found.gl_pathc; ++i) paths.emplace_back(found.gl_pathv[i]);
  ::globfree(&found);
  BMT_REQUIRE(rc != GLOB_NOMATCH, "TokenDataset: expected files matching '" << pattern << "', found none");
  BMT_REQUIRE(rc == 0, "TokenDataset: listing files matching '" << pattern << "' failed ("
                                                                 << (rc == GLOB_NOSPACE ? "out of memory" : "read error")
                                                                 << ")");
  // glob sorts by the locale's collation; the shard order must not depend on the locale.
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) shards_.emplace_back(p, format);
}

std::uint64_t TokenDataset::token_count() const {
  std::uint64_t n = 0;
  for (const auto& s : shards_) n += s.size();
  return n;
}

namespace {
std::uint64_t windows_in(std::uint64_t tokens, std::size_t seq_len) {
  return tokens > seq_len ? (tokens - 1) / seq_len : 0;
}
}  // namespace

std::uint64_t TokenDataset::sequence_count(std::size_t seq_len) const {
  BMT_REQUIRE(seq_len > 0, "TokenDataset: expected a sequence length > 0, found 0");
  std::uint64_t n = 0;
  for (const auto& s : shards_) n += windows_in(s.size(), seq_len);
  return n;
}

void TokenDataset::sequence(std::uint64_t index, std::size_t seq_len, std::int32_t* out) const {
  BMT_REQUIRE(seq_len > 0, "TokenDataset: expected a sequence length > 0, found 0");
  std::uint64_t k = index;
  for (const auto& s : shards_) {
    const std::uint64_t n = windows_in(s.size(), seq_len);
    if (k >= n) {
      k -= n;
      continue;
    }
    const std::uint16_t* first = s.tokens() + k * seq_len;
    for (std::size_t t = 0; t <= seq_len; ++t) out[t] = first[t];
    return;
  }
  BMT_REQUIRE(false, "TokenDataset: expected a sequence index below " << sequence_count(seq_len)
                                                                     << " (sequences of " << seq_len << " + 1 tokens), found " << index);
}

}  // namespace bmt::io
