#include "resume_state.hpp"

#include <bmtrain/bmtrain.hpp>

#include <cmath>
#include <limits>
#include <string>

namespace bmt_train {

namespace {

using nlohmann::json;

// The member `key` of the component `part` ("lr_scheduler", ...), or nullptr when absent.
const json* member(const json& component, const char* part, const char* key) {
  BMT_REQUIRE(component.is_object(), "training state: '" << part << "': expected a JSON object, found a JSON "
                                                         << component.type_name() << " " << component.dump());
  const auto it = component.find(key);
  return it == component.end() ? nullptr : &*it;
}

std::uint64_t unsigned_member(const json& component, const char* part, const char* key, std::uint64_t fallback,
                              std::uint64_t max) {
  const json* v = member(component, part, key);
  if (!v) return fallback;
  BMT_REQUIRE(v->is_number_unsigned() && v->get<std::uint64_t>() <= max,
              "training state: '" << part << "." << key << "': expected an integer in [0, " << max << "], found "
                                  << v->dump());
  return v->get<std::uint64_t>();
}

}  // namespace

ResumePoint resume_point(const bmt::io::TrainingState& state) {
  ResumePoint r;
  r.step = state.step;
  constexpr auto max_step = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  r.scheduler_step = static_cast<std::int64_t>(
      unsigned_member(state.lr_scheduler, "lr_scheduler", "step", static_cast<std::uint64_t>(state.step), max_step));
  if (const json* scale = member(state.loss_scaler, "loss_scaler", "scale")) {
    const double s = scale->is_number() ? scale->get<double>() : -1.0;
    BMT_REQUIRE(scale->is_number() && std::isfinite(s) && s > 0 && s <= std::numeric_limits<float>::max(),
                "training state: 'loss_scaler.scale': expected a positive finite number, found " << scale->dump());
    r.loss_scale = static_cast<float>(s);
  }
  r.clean_steps = static_cast<int>(unsigned_member(state.loss_scaler, "loss_scaler", "clean_steps", 0,
                                                   static_cast<std::uint64_t>(std::numeric_limits<int>::max())));
  r.key_counter = unsigned_member(state.rng, "rng", "key_counter", 0, std::numeric_limits<std::uint64_t>::max());
  r.data = state.data.get<bmt::io::LoaderState>();
  return r;
}

}  // namespace bmt_train
