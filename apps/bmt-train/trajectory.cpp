#include "trajectory.hpp"

#include <bmtrain/runtime/error.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "option_table.hpp"

namespace bmt_train {

namespace {

using nlohmann::json;

// A recorded value as a line shows it: strings bare unless they hold control characters.
std::string text(const json& v) {
  if (v.is_string()) {
    const auto& t = v.get_ref<const std::string&>();
    const bool plain = std::none_of(t.begin(), t.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
    return plain ? t : v.dump();
  }
  if (v.is_number_float()) {
    std::ostringstream os;
    os << v.get<double>();
    return os.str();
  }
  if (v.is_array()) {
    std::string files;
    for (const auto& f : v) files += (files.empty() ? "" : ", ") + (f.is_array() && !f.empty() ? text(f[0]) : f.dump());
    return "[" + files + "]";
  }
  return v.dump();
}

struct Setting {
  std::string key;
  std::string flag;
  Effect effect;
};

// The options a trajectory records (option_table's rows with an effect), then what no option holds:
// the files --data names, and the number of ranks.
const std::vector<Setting>& settings() {
  static const std::vector<Setting> all = [] {
    std::vector<Setting> s;
    for (const OptionRow& row : option_table())
      if (row.effect != Effect::none) s.push_back({row.key, row.flag, row.effect});
    s.push_back({"data_files", "--data", Effect::data});
    s.push_back({"world_size", "ranks", Effect::rounding});
    return s;
  }();
  return all;
}

}  // namespace

json trajectory(const TrainOptions& o, float peak_lr, int world_size, const DataFiles& files) {
  json t = json::object();
  for (const OptionRow& row : option_table())
    if (row.effect != Effect::none) t[row.key] = option_value(o, row);
  // What the run makes of three of them: the schedule's length (at least one step past the
  // warmup), the peak rate (the preset's without --lr), and no file format for synthetic data.
  t["schedule_steps"] = o.schedule_steps();
  t["lr"] = peak_lr;
  if (files.empty()) t["data_format"] = "";
  json data_files = json::array();
  for (const auto& [path, tokens] : files) data_files.push_back({path, tokens});
  t["data_files"] = data_files;
  t["world_size"] = world_size;
  return t;
}

std::vector<std::string> trajectory_changes(const json& saved, const json& now, std::int64_t step) {
  if (saved.is_null())
    return {"the checkpoint does not record what its run's trajectory depends on (schedule, data, ranks): whether this "
            "run continues it exactly is not checked"};
  BMT_REQUIRE(saved.is_object(), "training state: 'extra.trajectory': expected a JSON object, found " << saved.dump());
  const std::string from = " from step " + std::to_string(step + 1) + " on";
  std::vector<std::string> lines;
  bool data_path_changed = false;
  for (const Setting& s : settings()) {
    const auto it = saved.find(s.key);
    const json& here = now.at(s.key);
    const bool ranks = s.flag == "ranks";
    // A setting the checkpoint does not record (another version or program wrote it) goes unchecked.
    if (it == saved.end()) {
      lines.push_back((ranks ? std::string("the number of ranks") : s.flag) + ": not recorded in the checkpoint "
                      "('extra.trajectory." + s.key + "'): whether this run continues it exactly is not checked for it");
      continue;
    }
    BMT_REQUIRE(here.is_number() ? it->is_number() : it->type() == here.type(),
                "training state: 'extra.trajectory." << s.key << "': expected a JSON " << here.type_name()
                                                     << ", found " << it->dump());
    // f32 settings went through JSON as doubles: equal when the same float.
    const auto same_float = [](double a, double b) {
      return std::abs(a) <= std::numeric_limits<float>::max() && static_cast<float>(a) == static_cast<float>(b);
    };
    const bool same = here.is_number_float() || it->is_number_float() ? same_float(it->get<double>(), here.get<double>())
                                                                       : *it == here;
    if (same) continue;
    const std::string schedule = now.at("schedule").get<std::string>();
    const bool planned = schedule == "linear" || schedule == "cosine";  // the schedules with a length and a floor
    if ((s.effect == Effect::length || s.key == "min_lr") && !planned) continue;
    const auto count = [](const json& v) { return text(v) + (v == 1 ? " rank" : " ranks"); };
    const auto setting = [&](const json& v) {
      if (ranks) return count(v);
      if (v.is_boolean()) return std::string(v.get<bool>() ? "" : "no ") + s.flag;
      return s.flag + " " + text(v);
    };
    const std::string flag = setting(here);
    const std::string was =
        " (the checkpoint's run: " + (here.is_boolean() ? setting(*it) : ranks ? count(*it) : text(*it)) + "): ";
    switch (s.effect) {
      case Effect::length:
        lines.push_back(flag + was + "the " + schedule + " schedule is re-planned for " + text(here) + " steps:" + from +
                        " the learning rates are those of a " + text(here) + "-step run, while steps 1-" +
                        std::to_string(step) + " followed a " + text(*it) + "-step plan");
        break;
      case Effect::learning_rates:
        lines.push_back(flag + was + "the learning rates" + from + " follow the new setting (a run with it from the "
                        "start would have had other rates before too)");
        break;
      case Effect::data:
        if (s.key == "data") data_path_changed = true;
        else if (s.key == "data_files" && data_path_changed) continue;  // said with --data
        lines.push_back(flag + was + "the sequences" + from + " are neither those of the checkpoint's run nor those of "
                        "a run with the new setting from the start");
        break;
      case Effect::updates:
        lines.push_back(flag + was + "the updates" + from + " follow the new setting");
        break;
      case Effect::moments:
        lines.push_back(flag + was + "the updates" + from + " follow the new setting; the moments are converted");
        break;
      case Effect::none:  // not among the settings
        break;
      case Effect::rounding:
        lines.push_back(flag + was + "the same steps, with sums added in another order: the run continues within "
                        "rounding of the checkpoint's, not bit for bit");
        break;
    }
  }
  return lines;
}

}  // namespace bmt_train
