// Fuzz target: bmt-train's config file (bmt-train --config run.toml; CLI11 reads the TOML keys as
// the long flag names), then the model configuration it describes. The input is the file's content.
// Bad input must be a bmt::Error with a message; accepted options must describe a valid model.
#include <bmtrain/runtime/error.hpp>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "options.hpp"

namespace {

const std::string& scratch_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string pattern = std::string(dir && *dir ? dir : "/tmp") + "/bmt-fuzz-config-XXXXXX";
    const int fd = ::mkstemp(pattern.data());
    BMT_FUZZ_CHECK(fd >= 0);
    ::close(fd);
    std::atexit([] { std::remove(scratch_path().c_str()); });
    return pattern;
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = scratch_path();
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    BMT_FUZZ_CHECK(f != nullptr);
    BMT_FUZZ_CHECK(size == 0 || std::fwrite(data, 1, size, f) == size);
    std::fclose(f);
  }
  std::vector<std::string> args{"bmt-train", "--config", path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::ostringstream sink;
  auto* saved = std::cout.rdbuf(sink.rdbuf());
  try {
    bmt_train::TrainOptions options;
    int code = -1;
    if (bmt_train::parse_options(static_cast<int>(args.size()), argv.data(), options, code)) {
      const auto config = options.model_config();
      BMT_FUZZ_CHECK(config.layers > 0 && config.heads > 0 && config.dim % config.heads == 0 && config.ffn > 0);
      BMT_FUZZ_CHECK(options.batch > 0 && options.seq > 0 && options.seq <= config.max_seq);
    }
  } catch (const bmt::Error&) {
  }
  std::cout.rdbuf(saved);
  return 0;
}
