#pragma once
// What the two bmt-train option targets check: a command line parses as bmt-train parses it; what
// is accepted describes a valid model and run, what is refused is a bmt::Error, and --help exits 0.
#include <bmtrain/runtime/error.hpp>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "options.hpp"

inline void check_command_line(std::vector<std::string> args) {
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
}
