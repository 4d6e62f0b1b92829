#pragma once
// bmt-train's --config file: TOML, read strictly. Each non-blank line outside comments is
// `key = value`, where the key is a long flag name without its dashes and the value has the type
// the option takes: a number (`lr = 3e-4`, `batch = 32`), a quoted string (`model = "gpt2-124m"`)
// or true/false for a switch. Anything a TOML reader would take differently or a person could mean
// differently is refused with the file, line and what was expected: a [section], an array
// (`batch = [4, 8]`), an inline table, a multi-line string, a key given twice, a string where a
// number belongs (`lr = "0.1"`) and a bare word where a string belongs (`dtype = bf16`).
#include <CLI/CLI.hpp>

#include <map>
#include <string>
#include <vector>

namespace bmt_train {

// What an option's value must look like in the file.
enum class ConfigValue { number, text, flag };

class StrictConfig final : public CLI::Config {
 public:
  // `keys`: every option a file may set, by long name without dashes.
  explicit StrictConfig(std::map<std::string, ConfigValue> keys) : keys_(std::move(keys)) {}
  // The file's path, for messages (CLI11 hands from_config only the stream).
  void set_path(std::string path) { path_ = std::move(path); }

  // Throws CLI::ConversionError with a one-line message for anything but the lines described above.
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
  std::string to_config(const CLI::App* app, bool default_also, bool write_description,
                        std::string prefix) const override;

 private:
  std::map<std::string, ConfigValue> keys_;
  std::string path_;
};

}  // namespace bmt_train
