#pragma once
// bmt-train's options as one table. A row is one flag: the TrainOptions member it sets, its help,
// the values it takes, whether the ranks must agree on it, what a change means on resume, and the
// field of the checkpoint's model record it sets. The command line and the config file
// (parse_options), --help, shared_description, the trajectory a checkpoint records and the check
// of a checkpoint's model iterate it: an option is a member and a row.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "options.hpp"

namespace bmt_train {

// How a setting's change shows in the steps after a checkpoint (trajectory_changes).
enum class Effect {
  none,            // not part of the trajectory
  learning_rates,  // the schedule's rates from the step on
  length,          // the schedule is re-planned (linear and cosine only)
  data,            // which sequences later steps take
  updates,         // the optimizer's or the model's arithmetic from the step on
  moments,         // as updates, and the checkpoint's moments are converted to the new dtype
  rounding,        // the same steps, added up in another order
};

// What every rank must agree on (bmt::agree_on_configuration, through shared_description).
enum class Agree {
  value,  // the option's value
  model,  // the model it shapes: the ranks agree on the whole model record instead
  no,     // nothing: it only shapes one rank's output (progress, log, metrics, plot and trace paths)
};

using Member = std::variant<std::string TrainOptions::*, bool TrainOptions::*, int TrainOptions::*,
                            std::int64_t TrainOptions::*, std::uint64_t TrainOptions::*, float TrainOptions::*,
                            double TrainOptions::*>;

// A value as written, checked before it is converted: "" when taken, else "expected ..., found ...".
using Check = std::function<std::string(const std::string& text)>;

struct OptionRow {
  std::string flag;           // "--min-lr"
  Member member;              // what it sets
  std::string help;           // --help's text
  Check check;                // the values it takes; every number's is at least its type's range
  std::string value_name;     // the value in --help: INT, FLOAT, NAME, DTYPE; empty for text and switches
  bool clears = false;        // a switch that sets its member to false (--no-checkpointing)
  bool shows_default = false;  // --help shows the default
  std::string needs;          // a flag without which this one means nothing
  Agree agree = Agree::value;
  Effect effect = Effect::none;  // not none: the trajectory records it, and a change is explained
  std::string key;            // its name in shared_description and the trajectory ("min_lr")
  std::string model_field;    // the checkpoint's model record field it sets ("layers"), if any
};

// Every option, in --help's order.
const std::vector<OptionRow>& option_table();

// The option's value in `options` as JSON: a string, a boolean or a number.
nlohmann::json option_value(const TrainOptions& options, const OptionRow& row);

// The flag that sets field `field` of the model record ("layers" -> "--layers"); empty when no
// flag does (the preset or the Hugging Face config fixes it).
std::string flag_of_model_field(const std::string& field);

}  // namespace bmt_train
