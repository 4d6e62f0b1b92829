#include "bmtrain/runtime/configuration_check.hpp"

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <sstream>
#include <vector>

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/runtime/error.hpp"

// Set by lib/CMakeLists.txt for this file; the fallbacks keep other build systems working.
#ifndef BMT_VERSION_TEXT
#define BMT_VERSION_TEXT "unknown"
#endif
#ifndef BMT_BUILD_TYPE_TEXT
#define BMT_BUILD_TYPE_TEXT "unknown"
#endif
#ifndef BMT_SANITIZE_TEXT
#define BMT_SANITIZE_TEXT ""
#endif

namespace bmt {

namespace {

// FNV-1a: a stable 64-bit hash; equal descriptions give equal hashes on every machine.
std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string mpi_library() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string s(text, static_cast<std::size_t>(length));
  // "Open MPI v4.1.4, package: ..., ident: ...": the name and version are enough.
  const auto end = s.find_first_of(",\n");
  return end == std::string::npos ? s : s.substr(0, end);
}

std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}

// The items of a description: split at ";" and newlines, surrounding spaces dropped.
std::vector<std::string> items_of(const std::string& description) {
  std::vector<std::string> items;
  std::string item;
  auto flush = [&] {
    const auto first = item.find_first_not_of(' ');
    const auto last = item.find_last_not_of(' ');
    if (first != std::string::npos) items.push_back(item.substr(first, last - first + 1));
    item.clear();
  };
  for (char c : description) {
    if (c == ';' || c == '\n') flush();
    else item += c;
  }
  flush();
  return items;
}

std::string key_of(const std::string& item) { return item.substr(0, item.find('=')); }

// Where two descriptions first differ, in words.
std::string first_difference(const std::string& reference, const std::string& other, int other_rank) {
  const auto a = items_of(reference), b = items_of(other);
  const std::string them = "rank " + std::to_string(other_rank);
  for (std::size_t i = 0; i < a.size() || i < b.size(); ++i) {
    if (i < a.size() && i < b.size() && a[i] == b[i]) continue;
    std::ostringstream os;
    if (i >= b.size()) os << "rank 0 has '" << a[i] << "', " << them << " has nothing there";
    else if (i >= a.size()) os << "rank 0 has nothing there, " << them << " has '" << b[i] << "'";
    else if (key_of(a[i]) == key_of(b[i])) os << "'" << key_of(a[i]) << "': rank 0 has '" << a[i] << "', " << them << " has '" << b[i] << "'";
    else os << "rank 0 has '" << a[i] << "', " << them << " has '" << b[i] << "'";
    return os.str();
  }
  return "the descriptions differ only in separators";  // same items, different text
}

}  // namespace

std::string build_description() {
  std::ostringstream os;
  os << "bmtrain=" << BMT_VERSION_TEXT;
#ifdef BMT_ENABLE_CUDA
  os << "; backend=cuda";
#else
  os << "; backend=host";
#endif
  os << "; kokkos=" << KOKKOS_VERSION << "; mpi=" << mpi_library() << "; compiler=" << compiler()
     << "; build_type=" << BMT_BUILD_TYPE_TEXT << "; sanitize=" << (*BMT_SANITIZE_TEXT ? BMT_SANITIZE_TEXT : "none")
     << "; pointer_bits=" << 8 * sizeof(void*);
  return os.str();
}

void agree_on_configuration(const std::string& description, MPI_Comm comm) {
  comm = comm_or_world(comm);
  // min(h) and min(~h) = ~max(h) in one reduction: they are equal only if every rank has the same h.
  const std::uint64_t h = fnv1a(description);
  unsigned long long mine[2] = {h, ~h}, all[2] = {0, 0};
  BMT_MPI_CHECK(MPI_Allreduce(mine, all, 2, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm));
  if (all[0] == ~all[1]) return;

  // They differ: each rank that differs from rank 0 says how, and the lowest one's words reach all.
  std::string reference = description;
  broadcast_text(comm, reference, 0);
  int rank = 0;
  BMT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  std::string error;
  if (reference != description)
    error = "configuration mismatch: expected every rank to run the same configuration and library build as rank 0, "
            "found " + first_difference(reference, description, rank);
  agree_on_errors(comm, error);
}

}  // namespace bmt
