#include "bmtrain/data/token_dataset.hpp"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <utility>

#include "bmtrain/runtime/error.hpp"
#include "../runtime/posix_file.hpp"

namespace bmt::data {

TokenFileFormat parse_token_file_format(const std::string& name) {
  if (name == "auto") return TokenFileFormat::detect;
  if (name == "llmc") return TokenFileFormat::llmc;
  if (name == "raw") return TokenFileFormat::raw_u16;
  BMT_REQUIRE(false, "token file format: expected auto, llmc or raw, found '" << name << "'");
  return TokenFileFormat::detect;
}

namespace {

// nanoGPT's prepare scripts write train.bin and val.bin: headerless uint16 tokens.
bool named_like_nanogpt(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return name == "train.bin" || name == "val.bin";
}

bool is_llmc_magic(std::int32_t m) { return m == TokenShard::kLlmcMagic || m == TokenShard::kLlmcLlama3Magic; }

// The version and token width that go with an llm.c magic number.
std::int32_t llmc_version(std::int32_t magic) {
  return magic == TokenShard::kLlmcLlama3Magic ? TokenShard::kLlmcLlama3Version : TokenShard::kLlmcVersion;
}
std::size_t llmc_token_bytes(std::int32_t magic) { return magic == TokenShard::kLlmcLlama3Magic ? 4 : 2; }

// What the two llm.c formats are, for messages.
constexpr const char* kLlmcMagics = "20240520 (uint16 tokens) or 20240801 (uint32 tokens)";

// An llm.c header but for its magic number: version 1 or 7, a positive count, the unused ints zero.
bool looks_like_llmc_header(const std::int32_t* header, std::uint64_t bytes) {
  if (bytes < TokenShard::kLlmcHeaderBytes || header[2] <= 0) return false;
  if (header[1] != TokenShard::kLlmcVersion && header[1] != TokenShard::kLlmcLlama3Version) return false;
  for (std::size_t i = 3; i < TokenShard::kLlmcHeaderBytes / sizeof(std::int32_t); ++i)
    if (header[i] != 0) return false;
  return true;
}

bool same_time(const timespec& a, const timespec& b) { return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec; }

}  // namespace

TokenShard::TokenShard(const std::string& path, TokenFileFormat format) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BMT_REQUIRE(fd_ >= 0, "token file '" << path << "': cannot open: " << bmt::detail::errno_text(errno));
  std::int32_t header[kLlmcHeaderBytes / sizeof(std::int32_t)] = {};
  std::string problem;
  try {
    struct stat st {};
    BMT_REQUIRE(::fstat(fd_, &st) == 0, "token file '" << path << "': cannot stat: " << bmt::detail::errno_text(errno));
    bytes_ = static_cast<std::uint64_t>(st.st_size);
    modified_ = st.st_mtim;
    bmt::detail::pread_all(fd_, header, static_cast<std::size_t>(std::min<std::uint64_t>(bytes_, sizeof header)), 0, path);
  } catch (...) {
    ::close(fd_);
    throw;
  }
  const bool magic = bytes_ >= 4 && is_llmc_magic(header[0]);
  std::ostringstream os;
  if (format == TokenFileFormat::detect) {
    if (magic) {
      format = TokenFileFormat::llmc;
    } else if (looks_like_llmc_header(header, bytes_)) {
      os << "token file '" << path << "': expected an llm.c magic number, " << kLlmcMagics
         << ", in the first int32 of what is otherwise an llm.c header (version " << header[1] << ", " << header[2]
         << " tokens), found " << header[0] << " (a damaged shard?)";
    } else if (named_like_nanogpt(path)) {
      format = TokenFileFormat::raw_u16;
    } else {
      os << "token file '" << path << "': expected an llm.c shard (the magic number " << kLlmcMagics
         << " in its first int32), found ";
      if (bytes_ < 4) os << "a file of " << bytes_ << " bytes";
      else os << header[0];
      os << "; headerless uint16 tokens are read as raw only when asked for (bmt-train --data-format raw) or "
            "when named train.bin or val.bin, as nanoGPT writes them";
    }
  }
  format_ = format;
  if (format == TokenFileFormat::llmc) {
    const std::string what = "token file '" + path + "' (llm.c format): ";
    if (bytes_ < kLlmcHeaderBytes)
      os << what << "expected a header of " << kLlmcHeaderBytes << " bytes, found a file of " << bytes_
         << " bytes (truncated)";
    else if (!is_llmc_magic(header[0]))
      os << what << "expected the magic number " << kLlmcMagics << " in the first int32, found " << header[0];
    else if (header[1] != llmc_version(header[0]))
      os << what << "expected version " << llmc_version(header[0]) << " after the magic number " << header[0] << " ("
         << 8 * llmc_token_bytes(header[0]) << "-bit tokens), found " << header[1];
    else if (header[2] <= 0)
      os << what << "expected a positive token count, found " << header[2];
    else if (const std::uint64_t want = llmc_token_bytes(header[0]) * static_cast<std::uint64_t>(header[2]);
             bytes_ - kLlmcHeaderBytes != want)
      os << what << "the header says " << header[2] << " tokens (" << want << " bytes after the header), but the file has "
         << bytes_ - kLlmcHeaderBytes << " bytes after it"
         << (bytes_ - kLlmcHeaderBytes < want ? " (count beyond the file)" : " (bytes after the last token)");
    if (bytes_ >= kLlmcHeaderBytes && is_llmc_magic(header[0])) token_bytes_ = llmc_token_bytes(header[0]);
    offset_ = kLlmcHeaderBytes;
    count_ = header[2] > 0 ? static_cast<std::uint64_t>(header[2]) : 0;
  } else if (format == TokenFileFormat::raw_u16) {
    const std::string what = "token file '" + path + "' (raw uint16): ";
    if (bytes_ == 0) os << what << "expected at least one token, found an empty file";
    else if (bytes_ % 2 != 0) os << what << "expected an even number of bytes (uint16 tokens), found " << bytes_;
    else if (magic)
      os << what << "expected headerless tokens, found an llm.c header (the magic number " << header[0]
         << "): read it as llm.c (format auto or llmc)";
    count_ = bytes_ / 2;
  }
  problem = os.str();
  if (!problem.empty()) {
    ::close(fd_);
    BMT_REQUIRE(false, problem);
  }
}

TokenShard::~TokenShard() {
  if (fd_ >= 0) ::close(fd_);
}

TokenShard::TokenShard(TokenShard&& other) noexcept { *this = std::move(other); }

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    format_ = other.format_;
    fd_ = std::exchange(other.fd_, -1);
    bytes_ = std::exchange(other.bytes_, 0);
    modified_ = other.modified_;
    offset_ = std::exchange(other.offset_, 0);
    count_ = std::exchange(other.count_, 0);
    token_bytes_ = other.token_bytes_;
  }
  return *this;
}

void TokenShard::read(std::uint64_t first, std::size_t count, std::uint32_t* out) const {
  BMT_REQUIRE(first <= count_ && count <= count_ - first, "token file '" << path_ << "': expected tokens below "
                                                                          << count_ << ", asked for [" << first << ", "
                                                                          << first + count << ")");
  struct stat st {};
  BMT_REQUIRE(::fstat(fd_, &st) == 0, "token file '" << path_ << "': cannot stat: " << bmt::detail::errno_text(errno));
  const auto now = static_cast<std::uint64_t>(st.st_size);
  BMT_REQUIRE(now == bytes_, "token file '" << path_ << "' changed while the job reads it: expected its " << bytes_
                                            << " bytes as when it was opened, found " << now
                                            << (now < bytes_ ? " (truncated)" : " (grown)"));
  BMT_REQUIRE(same_time(st.st_mtim, modified_),
              "token file '" << path_ << "' changed while the job reads it: expected it unmodified since it was "
                             << "opened, found it written again (its modification time moved)");
  char* p = reinterpret_cast<char*>(out);
  const std::size_t bytes = count * token_bytes_;
  const std::uint64_t at = offset_ + first * token_bytes_;
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_, p + done, bytes - done, static_cast<off_t>(at + done));
    if (n < 0 && errno == EINTR) continue;
    BMT_REQUIRE(n >= 0, "token file '" << path_ << "': reading " << bytes << " bytes at offset " << at
                                       << " failed: " << bmt::detail::errno_text(errno));
    BMT_REQUIRE(n > 0, "token file '" << path_ << "' changed while the job reads it: expected " << bytes_
                                      << " bytes as when it was opened, found its end at byte " << at + done
                                      << " (truncated)");
    done += static_cast<std::size_t>(n);
  }
  if (token_bytes_ == sizeof(std::uint16_t)) {
    // Widened in place from the last token down: token i's 4 bytes start at or after token i's
    // 2, and cover only the 2-byte tokens above it, already widened.
    // (memcpy: the bytes are read as what they are on disk, without aliasing the uint32 array).
    const char* bytes_read = reinterpret_cast<const char*>(out);
    for (std::size_t i = count; i-- > 0;) {
      std::uint16_t t = 0;
      std::memcpy(&t, bytes_read + i * sizeof t, sizeof t);
      out[i] = t;
    }
  }
}

std::uint32_t TokenShard::operator[](std::uint64_t i) const {
  std::uint32_t t = 0;
  read(i, 1, &t);
  return t;
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
    std::vector<std::uint32_t> tokens(seq_len + 1);
    s.read(k * seq_len, seq_len + 1, tokens.data());
    for (std::size_t t = 0; t <= seq_len; ++t) {
      // Token ids are int32 from here on; no vocabulary comes near 2^31.
      BMT_REQUIRE(tokens[t] <= static_cast<std::uint32_t>(INT32_MAX),
                  "token file '" << s.path() << "': expected token ids below 2^31, found " << tokens[t]
                                 << " at token " << k * seq_len + t);
      out[t] = static_cast<std::int32_t>(tokens[t]);
    }
    return;
  }
  BMT_REQUIRE(false, "TokenDataset: expected a sequence index below " << sequence_count(seq_len)
                                                                     << " (sequences of " << seq_len << " + 1 tokens), found " << index);
}

}  // namespace bmt::data
