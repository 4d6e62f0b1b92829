#include "resume_state.hpp"

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/runtime/agreement.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "option_table.hpp"

namespace bmt_train {

namespace {

using nlohmann::json;

// The member `key` of the component `part` ("lr_scheduler", ...), or nullptr when absent.
const json* member(const json& component, const std::string& where, const char* part, const char* key) {
  BMT_REQUIRE(component.is_object(), where << "'" << part << "': expected a JSON object, found a JSON "
                                           << component.type_name() << " " << component.dump());
  const auto it = component.find(key);
  return it == component.end() ? nullptr : &*it;
}

std::uint64_t unsigned_member(const json& component, const std::string& where, const char* part, const char* key,
                              std::uint64_t fallback, std::uint64_t max) {
  const json* v = member(component, where, part, key);
  if (!v) return fallback;
  BMT_REQUIRE(v->is_number_unsigned() && v->get<std::uint64_t>() <= max,
              where << "'" << part << "." << key << "': expected an integer in [0, " << max << "], found " << v->dump());
  return v->get<std::uint64_t>();
}

}  // namespace

ResumePoint resume_point(const bmt::io::TrainingState& state, const ResumeContext& context) {
  const std::string where = "training state '" + context.state_path + "': ";
  BMT_REQUIRE(state.step == context.marked_step,
              where << "'step': expected " << context.marked_step << ", the step of the checkpoint's COMPLETE marker, "
                    << "found " << state.step);
  BMT_REQUIRE(context.run_steps >= state.step,
              "--steps " << context.run_steps << ": expected at least the step of the checkpoint resumed from ("
                         << state.step << "), where the run continues");
  ResumePoint r;
  r.step = state.step;
  // Skipped steps take their count back from the schedule and the loss scaler never counts more
  // clean steps than there were steps: neither count is beyond the step.
  const auto step = static_cast<std::uint64_t>(state.step);
  r.scheduler_step = static_cast<std::int64_t>(unsigned_member(state.lr_scheduler, where, "lr_scheduler", "step", step, step));
  if (const json* scale = member(state.loss_scaler, where, "loss_scaler", "scale")) {
    const double s = scale->is_number() ? scale->get<double>() : -1.0;
    BMT_REQUIRE(scale->is_number() && std::isfinite(s) && s > 0 && s <= std::numeric_limits<float>::max(),
                where << "'loss_scaler.scale': expected a positive finite number, found " << scale->dump());
    r.loss_scale = static_cast<float>(s);
  }
  r.clean_steps = static_cast<int>(unsigned_member(
      state.loss_scaler, where, "loss_scaler", "clean_steps", 0,
      std::min<std::uint64_t>(step, static_cast<std::uint64_t>(std::numeric_limits<int>::max()))));
  r.key_counter = unsigned_member(state.rng, where, "rng", "key_counter", 0, std::numeric_limits<std::uint64_t>::max());
  const std::string data_problem = bmt::error_of([&] { r.data = state.data.get<bmt::data::LoaderState>(); });
  BMT_REQUIRE(data_problem.empty(), where << "'data': " << data_problem);
  return r;
}

json checkpoint_model(const TrainOptions& o, const ModelConfig& c) {
  json j = bmt::models::to_json(c);
  j["preset"] = o.model_name();
  return j;
}

void check_checkpoint_model(const bmt::io::TrainingState& state, const json& model, const ResumeContext& context) {
  const std::string where = "training state '" + context.state_path + "': ";
  const json* saved = member(state.extra, where, "extra", "model");
  if (!saved) return;  // written by another program: the strict load still checks names and shapes
  BMT_REQUIRE(saved->is_object(), where << "'extra.model': expected a JSON object, found " << saved->dump());
  // What defines the tensors and their values; the preset's name does not. A field a flag sets
  // (option_table's rows) names that flag in the hint.
  std::string differences, flags;
  const auto differs = [&](const char* key, const json& there, const json& here) {
    const auto text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    differences += (differences.empty() ? "" : "; ") + std::string(key) + " " + text(there) + " there, ";
    differences += text(here) + " here";
    if (const std::string flag = flag_of_model_field(key); !flag.empty()) flags += " " + flag + " " + text(there);
  };
  for (const char* key : {"arch", "layers", "heads", "dim", "ffn", "vocab", "max_seq", "dtype"}) {
    const json& here = model.at(key);
    const auto it = saved->find(key);
    BMT_REQUIRE(it != saved->end() && (here.is_string() ? it->is_string() : it->is_number_integer()),
                where << "'extra.model." << key << "': expected a " << (here.is_string() ? "string" : "whole number")
                      << ", found " << (it == saved->end() ? std::string("none") : it->dump()));
    if (*it != here) differs(key, *it, here);
  }
  // Recorded since grouped-query attention and tied Llama heads: absent from older checkpoints,
  // whose models had as many key/value heads as heads.
  for (const char* key : {"kv_heads", "tie_embeddings"}) {
    const auto it = saved->find(key);
    if (it != saved->end() && *it != model.at(key)) differs(key, *it, model.at(key));
  }
  BMT_REQUIRE(differences.empty(), "--resume: the checkpoint holds another model (" << differences
                                       << "): expected the same model"
                                       << (flags.empty() ? std::string() : " (resume with" + flags + ")"));
}

}  // namespace bmt_train
