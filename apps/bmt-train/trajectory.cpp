#include "trajectory.hpp"

#include <bmtrain/runtime/error.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

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

// How a setting's change shows in the steps after the checkpoint.
enum class Effect {
  learning_rates,  // the schedule's rates from the step on
  length,          // the schedule is re-planned (linear and cosine only)
  data,            // which sequences later steps take
  updates,         // the optimizer's or the model's arithmetic from the step on
  moments,         // updates, and the checkpoint's moments are converted to the new dtype
  rounding,        // the same steps, added up in another order
};

struct Setting {
  const char* key;
  const char* flag;
  Effect effect;
};

constexpr Setting kSettings[] = {
    {"schedule", "--schedule", Effect::learning_rates},
    {"schedule_steps", "--steps", Effect::length},
    {"warmup", "--warmup", Effect::learning_rates},
    {"lr", "--lr", Effect::learning_rates},
    {"min_lr", "--min-lr", Effect::learning_rates},
    {"batch", "--batch", Effect::data},
    {"seq", "--seq", Effect::data},
    {"seed", "--seed", Effect::data},
    {"data", "--data", Effect::data},
    {"data_format", "--data-format", Effect::data},
    {"data_files", "--data", Effect::data},
    {"weight_decay", "--weight-decay", Effect::updates},
    {"beta1", "--beta1", Effect::updates},
    {"beta2", "--beta2", Effect::updates},
    {"grad_clip", "--grad-clip", Effect::updates},
    {"moments", "--moments", Effect::moments},
    {"dropout", "--dropout", Effect::updates},
    {"fp8", "--fp8", Effect::updates},
    {"offload_delayed", "--offload-delayed", Effect::updates},
    {"offload", "--offload", Effect::rounding},
    {"micro_batch", "--micro-batch", Effect::rounding},
    {"world_size", "ranks", Effect::rounding},
};
}  // namespace

json trajectory(const TrainOptions& o, float peak_lr, int world_size, const DataFiles& files) {
  json data_files = json::array();
  for (const auto& [path, tokens] : files) data_files.push_back({path, tokens});
  return {{"schedule", o.schedule},
          {"schedule_steps", o.schedule_steps()},
          {"warmup", o.warmup},
          {"lr", peak_lr},
          {"min_lr", o.min_lr},
          {"batch", o.batch},
          {"seq", o.seq},
          {"seed", o.seed},
          {"data", o.data},
          {"data_format", files.empty() ? std::string() : o.data_format},  // synthetic data has none
          {"data_files", data_files},
          {"weight_decay", o.weight_decay},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"grad_clip", o.grad_clip},
          {"moments", o.moments},
          {"dropout", o.dropout},
          {"fp8", o.fp8},
          {"offload", o.offload},
          {"offload_delayed", o.offload_delayed},
          {"micro_batch", o.micro_batch},
          {"world_size", world_size}};
}

std::vector<std::string> trajectory_changes(const json& saved, const json& now, std::int64_t step) {
  if (saved.is_null())
    return {"the checkpoint does not record what its run's trajectory depends on (schedule, data, ranks): whether this "
            "run continues it exactly is not checked"};
  BMT_REQUIRE(saved.is_object(), "training state: 'extra.trajectory': expected a JSON object, found " << saved.dump());
  const std::string from = " from step " + std::to_string(step + 1) + " on";
  std::vector<std::string> lines;
  bool data_path_changed = false;
  for (const Setting& s : kSettings) {
    const auto it = saved.find(s.key);
    const json& here = now.at(s.key);
    const bool ranks = std::string(s.flag) == "ranks";
    // A setting the checkpoint does not record (another version or program wrote it) goes unchecked.
    if (it == saved.end()) {
      lines.push_back(std::string(ranks ? "the number of ranks" : s.flag) + ": not recorded in the checkpoint "
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
    if ((s.effect == Effect::length || std::string(s.key) == "min_lr") && !planned) continue;
    const auto count = [](const json& v) { return text(v) + (v == 1 ? " rank" : " ranks"); };
    const auto setting = [&](const json& v) {
      if (ranks) return count(v);
      if (v.is_boolean()) return std::string(v.get<bool>() ? "" : "no ") + s.flag;
      return std::string(s.flag) + " " + text(v);
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
        if (std::string(s.key) == "data") data_path_changed = true;
        else if (std::string(s.key) == "data_files" && data_path_changed) continue;  // said with --data
        lines.push_back(flag + was + "the sequences" + from + " are neither those of the checkpoint's run nor those of "
                        "a run with the new setting from the start");
        break;
      case Effect::updates:
        lines.push_back(flag + was + "the updates" + from + " follow the new setting");
        break;
      case Effect::moments:
        lines.push_back(flag + was + "the updates" + from + " follow the new setting; the moments are converted");
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
