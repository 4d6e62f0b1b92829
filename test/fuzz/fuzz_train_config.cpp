// Fuzz target: bmt-train's config file (bmt-train --config run.toml; CLI11 reads the TOML keys as
// the long flag names), then the model configuration it describes. The input is the file's content.
// Bad input must be a bmt::Error with a message; accepted options must describe a valid model.
#include <cstdint>

#include "train_options_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check_command_line({"bmt-train", "--config", input_as_file(data, size)});
  return 0;
}
