#pragma once
// What fuzz targets share: a check that stops the run the way a crash does (libFuzzer then saves
// the input), for a property that must hold whenever a parser accepts its input; and the input as
// a file, for parsers that read one.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#define BMT_FUZZ_CHECK(cond)                                                              \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

// Writes the input to this process's scratch file (created once under $TMPDIR or /tmp, removed at
// exit) and returns its path.
inline const std::string& input_as_file(const std::uint8_t* data, std::size_t size) {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string pattern = std::string(dir && *dir ? dir : "/tmp") + "/bmt-fuzz-XXXXXX";
    const int fd = ::mkstemp(pattern.data());
    BMT_FUZZ_CHECK(fd >= 0);
    ::close(fd);
    return pattern;
  }();
  static const bool removed_at_exit = (std::atexit([] { std::remove(path.c_str()); }), true);
  (void)removed_at_exit;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  BMT_FUZZ_CHECK(f != nullptr);
  BMT_FUZZ_CHECK(size == 0 || std::fwrite(data, 1, size, f) == size);
  std::fclose(f);
  return path;
}
