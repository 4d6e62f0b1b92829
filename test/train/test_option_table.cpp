// bmt-train's option table held to its consumers: --help lists every row's flag; a change to an
// option with an effect on resume is one explained line of trajectory_changes, and a change to any
// other leaves the trajectory as it was; shared_description changes with exactly the options the
// ranks must agree on by value.
#include <gtest/gtest.h>

#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <bmtrain/models/model_config.hpp>

#include "option_table.hpp"
#include "options.hpp"
#include "trajectory.hpp"

namespace {

using bmt_train::Agree;
using bmt_train::Effect;
using bmt_train::OptionRow;
using bmt_train::TrainOptions;

// `o` with the row's option set to another value than it has.
TrainOptions changed(TrainOptions o, const OptionRow& row) {
  std::visit(
      [&](auto member) {
        auto& v = o.*member;
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) v = !v;
        else if constexpr (std::is_same_v<T, std::string>) v += "_changed";
        else if constexpr (std::is_floating_point_v<T>) v = v * T(0.5) + T(0.25);
        else v = v + 1;
      },
      row.member);
  return o;
}

// The trajectory of `o` as the trainer records it: the peak rate the options give for the tiny
// preset (whatever model the options name), on 2 ranks, from one token file.
nlohmann::json trajectory_of(const TrainOptions& o) {
  return bmt_train::trajectory(o, o.peak_lr(bmt::models::preset("tiny")), 2, {{"train.bin", 1000}});
}

TEST(OptionTable, RowsAreDistinct) {
  std::set<std::string> flags, keys;
  for (const OptionRow& row : bmt_train::option_table()) {
    EXPECT_EQ(row.flag.rfind("--", 0), 0u) << row.flag;
    EXPECT_TRUE(flags.insert(row.flag).second) << row.flag << " twice";
    EXPECT_TRUE(keys.insert(row.key).second) << row.key << " twice";
    EXPECT_FALSE(row.help.empty()) << row.flag;
  }
}

TEST(OptionTable, HelpListsEveryRow) {
  std::vector<std::string> args = {"bmt-train", "--help"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream help;
  auto* saved = std::cout.rdbuf(help.rdbuf());
  TrainOptions o;
  int code = -1;
  const bool run = bmt_train::parse_options(static_cast<int>(argv.size()), argv.data(), o, code);
  std::cout.rdbuf(saved);
  EXPECT_FALSE(run);
  EXPECT_EQ(code, 0);
  // A line per option: "  --flag", then its value's name, "{false}" for a switch that clears, or the help.
  std::set<std::string> listed;
  std::istringstream lines(help.str());
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("  --", 0) == 0) listed.insert(line.substr(2, line.find_first_of(" {", 2) - 2));
  for (const OptionRow& row : bmt_train::option_table()) EXPECT_EQ(listed.count(row.flag), 1u) << row.flag;
}

TEST(OptionTable, EveryChangeOnResumeIsExplained) {
  TrainOptions base;
  base.lr = 1.0f;  // room for --min-lr to change below the peak
  const nlohmann::json saved = trajectory_of(base);
  EXPECT_TRUE(bmt_train::trajectory_changes(saved, saved, 10).empty());
  int recorded = 0;
  for (const OptionRow& row : bmt_train::option_table()) {
    const nlohmann::json now = trajectory_of(changed(base, row));
    if (row.effect == Effect::none) {
      EXPECT_EQ(now, saved) << row.flag << " has no effect on resume, yet changes the trajectory";
      continue;
    }
    ++recorded;
    EXPECT_TRUE(saved.contains(row.key)) << row.flag;
    const auto lines = bmt_train::trajectory_changes(saved, now, 10);
    ASSERT_EQ(lines.size(), 1u) << row.flag;
    EXPECT_EQ(lines[0].find(row.flag), 0u) << lines[0];
    // What follows from the step after the checkpoint, or that only the rounding differs.
    const bool from_next = lines[0].find("from step 11 on") != std::string::npos;
    EXPECT_EQ(from_next, row.effect != Effect::rounding) << lines[0];
  }
  // Every recorded option, the data files and the number of ranks, and nothing else.
  EXPECT_EQ(saved.size(), static_cast<std::size_t>(recorded + 2));
}

TEST(OptionTable, RanksAgreeOnTheOptionsThatSaySo) {
  TrainOptions base;
  const auto config = base.model_config();
  const std::string description = bmt_train::shared_description(base, config);
  for (const OptionRow& row : bmt_train::option_table()) {
    const bool differs = bmt_train::shared_description(changed(base, row), config) != description;
    EXPECT_EQ(differs, row.agree == Agree::value) << row.flag;
  }
  // The model itself is agreed on as its record: a different one differs.
  auto other = config;
  other.layers += 1;
  EXPECT_NE(bmt_train::shared_description(base, other), description);
}

}  // namespace
