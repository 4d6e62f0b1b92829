#include "resume_state.hpp"

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/io/json_file.hpp>
#include <bmtrain/runtime/agreement.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
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

// A number the trajectory records (`extra.trajectory.<key>`), when present: at least `low`.
void trajectory_at_least(const json& trajectory, const std::string& where, const char* key, double low) {
  const auto it = trajectory.find(key);
  if (it == trajectory.end() || !it->is_number()) return;  // absent or of another kind: trajectory_changes says so
  const double v = it->get<double>();
  BMT_REQUIRE(std::isfinite(v) && v >= low, where << "'extra.trajectory." << key << "': expected a finite number >= "
                                                  << low << ", found " << it->dump());
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
  if (const json* name = member(state.lr_scheduler, where, "lr_scheduler", "name")) {
    const auto& names = {"constant", "linear", "cosine", "noam", "exponential"};
    BMT_REQUIRE(name->is_string() && std::find(names.begin(), names.end(), name->get<std::string>()) != names.end(),
                where << "'lr_scheduler.name': expected constant, linear, cosine, noam or exponential, found "
                      << name->dump());
  }
  // The dropout RNG's position: without it the run would continue with other dropout masks.
  BMT_REQUIRE(member(state.rng, where, "rng", "key_counter"),
              where << "'rng.key_counter': expected the dropout RNG's position, found none");
  r.key_counter = unsigned_member(state.rng, where, "rng", "key_counter", 0, std::numeric_limits<std::uint64_t>::max());
  unsigned_member(state.rng, where, "rng", "seed", 0, std::numeric_limits<std::uint64_t>::max());
  const std::string data_problem = bmt::error_of([&] { r.data = state.data.get<bmt::data::LoaderState>(); });
  BMT_REQUIRE(data_problem.empty(), where << "'data': " << data_problem);
  // Each step takes one batch, and starts at most one new epoch.
  BMT_REQUIRE(r.data.epoch <= step, where << "'data.epoch': expected at most the step " << step
                                          << " (a step starts at most one epoch), found " << r.data.epoch);
  if (state.extra.is_object()) {
    unsigned_member(state.extra, where, "extra", "world_size", 1, std::numeric_limits<int>::max());
    if (const json* w = member(state.extra, where, "extra", "world_size"))
      BMT_REQUIRE(*w != 0, where << "'extra.world_size': expected a number of ranks >= 1, found 0");
    if (member(state.extra, where, "extra", "optimizer_steps"))
      r.optimizer_steps = static_cast<std::int64_t>(unsigned_member(state.extra, where, "extra", "optimizer_steps", 0, step));
    if (const json* t = member(state.extra, where, "extra", "trajectory"); t && t->is_object()) {
      for (const char* key : {"lr", "min_lr", "warmup", "micro_batch", "weight_decay", "grad_clip", "dropout"})
        trajectory_at_least(*t, where, key, 0);
      for (const char* key : {"schedule_steps", "batch", "seq", "world_size"}) trajectory_at_least(*t, where, key, 1);
    }
  }
  return r;
}

ResumedModel resumed_model(const TrainOptions& o, const bmt::io::TrainingState& state, const std::string& dir) {
  const std::string state_path = dir + "/training_state.json";
  const std::string where = "training state '" + state_path + "': ";
  const json* saved = member(state.extra, where, "extra", "model");
  if (!saved || !o.model.empty() || !o.init_from.empty()) return {o.model_config(), o.model_name()};
  ResumedModel r{bmt::models::model_config_from_json(*saved, where + "'extra.model'"), "the checkpoint's model"};
  const auto preset = saved->find("preset");
  if (preset != saved->end() && preset->is_string() && !preset->get<std::string>().empty()) r.name = *preset;
  ModelConfig& c = r.config;
  // Given anyway, a shape must be the record's: set here, check_checkpoint_model names both.
  for (auto [given, field] : {std::pair{o.layers, &c.layers}, std::pair{o.heads, &c.heads},
                              std::pair{o.kv_heads, &c.kv_heads}, std::pair{o.dim, &c.dim}, std::pair{o.ffn, &c.ffn},
                              std::pair{o.vocab, &c.vocab}})
    if (given > 0) *field = given;
  BMT_REQUIRE(o.rope_theta == 0.0f || o.rope_theta == c.rope.theta,
              "--rope-theta " << o.rope_theta << ": expected " << c.rope.theta << " as the checkpoint's model has ("
                              << state_path << " 'extra.model.rope'), found " << o.rope_theta);
  if (!o.dtype.empty()) c.dtype = bmt::parse_dtype(o.dtype);
  c.dropout = o.dropout;  // a setting of the run (its trajectory notes a change), not of the tensors
  // The keys of the Hugging Face config.json the model came from, which an export writes back.
  const std::string hf = dir + "/config.json";
  if (std::filesystem::is_regular_file(hf)) c.hf_source = bmt::io::read_json(hf);
  BMT_REQUIRE(o.seq <= c.max_seq, "--seq: expected at most " << c.max_seq << " tokens for the checkpoint's model "
                                                             << r.name << ", found " << o.seq);
  return r;
}

json checkpoint_model(const std::string& name, const ModelConfig& c) {
  json j = bmt::models::to_json(c);
  j["preset"] = name;
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
                                       << (flags.empty() ? std::string() : " (resume with" + flags + ")")
                                       << ", or leave out --model, --init-from and the shape flags: the checkpoint "
                                          "gives the model");
}

}  // namespace bmt_train
