// Fuzz target: bmt-train's command line (bmt_train::parse_options, then the model configuration
// the options describe). The input is the argument list, one argument per line. Bad input must be
// a bmt::Error with a message; accepted options must describe a valid model.
// (--config is left to fuzz_train_config: here a file name from the input could name any file.)
#include <cstdint>
#include <string>
#include <vector>

#include "train_options_check.hpp"

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
  check_command_line(args);
  return 0;
}
