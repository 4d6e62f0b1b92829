// Fuzz target: bmt-train's command line (bmt_train::parse_options, then the model configuration
// the options describe). The input is the argument list, one argument per line. Bad input must be
// a bmt::Error with a message; accepted options must describe a valid model.
// (--config is left to fuzz_train_config: here a file name from the input could name any file.)
#include <bmtrain/runtime/error.hpp>

#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "options.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args{"bmt-train"};
  std::string current;
  for (std::size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == '\n') {
      if (current.find("config") == std::string::npos) args.push_back(current);
      current.clear();
      if (args.size() > 64) break;
    } else {
      current += static_cast<char>(data[i]);
    }
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // --help prints the help text; keep it out of the fuzzer's output.
  std::ostringstream sink;
  auto* saved = std::cout.rdbuf(sink.rdbuf());
  try {
    bmt_train::TrainOptions options;
    int code = -1;
    if (bmt_train::parse_options(static_cast<int>(args.size()), argv.data(), options, code)) {
      const auto config = options.model_config();
      BMT_FUZZ_CHECK(config.layers > 0 && config.heads > 0 && config.dim % config.heads == 0 && config.ffn > 0);
      BMT_FUZZ_CHECK(options.batch > 0 && options.seq > 0 && options.seq <= config.max_seq);
      BMT_FUZZ_CHECK(!bmt_train::shared_description(options, config).empty());
    } else {
      BMT_FUZZ_CHECK(code == 0);  // --help
    }
  } catch (const bmt::Error&) {
  }
  std::cout.rdbuf(saved);
  return 0;
}
