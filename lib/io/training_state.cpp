#include "bmtrain/io/training_state.hpp"

#include "bmtrain/runtime/agreement.hpp"
#include "bmtrain/runtime/context.hpp"
#include "bmtrain/io/json_file.hpp"
#include "bmtrain/runtime/error.hpp"

namespace bmt::io {

namespace {
constexpr int kFormat = 1;
}

void to_json(nlohmann::json& j, const TrainingState& s) {
  j = {{"format", kFormat},          {"step", s.step}, {"lr_scheduler", s.lr_scheduler}, {"loss_scaler", s.loss_scaler},
       {"rng", s.rng},               {"data", s.data}, {"extra", s.extra}};
}

void from_json(const nlohmann::json& j, TrainingState& s) {
  BMT_REQUIRE(j.is_object(), "training state: expected a JSON object, found a JSON " << j.type_name());
  BMT_REQUIRE(j.contains("format") && j.at("format").is_number_integer() && j.at("format").get<int>() == kFormat,
              "training state: expected format " << kFormat << ", found "
                                                 << (j.contains("format") ? j.at("format").dump() : "none"));
  BMT_REQUIRE(j.contains("step") && j.at("step").is_number_integer() && j.at("step").get<std::int64_t>() >= 0,
              "training state: expected a non-negative integer 'step', found "
                  << (j.contains("step") ? j.at("step").dump() : "none"));
  s.step = j.at("step").get<std::int64_t>();
  auto part = [&](const char* name, nlohmann::json& out) {
    out = j.contains(name) ? j.at(name) : nlohmann::json::object();
  };
  part("lr_scheduler", s.lr_scheduler);
  part("loss_scaler", s.loss_scaler);
  part("rng", s.rng);
  part("data", s.data);
  part("extra", s.extra);
}

void save_training_state(const std::string& path, const TrainingState& state, MPI_Comm comm) {
  run_on_root(comm, [&] { write_json_atomic(path, state); });
}

TrainingState load_training_state(const std::string& path, MPI_Comm comm) {
  comm = comm_or_world(comm);
  int rank = 0;
  BMT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  std::string text;
  if (rank == 0) {
    const std::string error = error_of([&] {
      TrainingState parsed = read_json(path).get<TrainingState>();  // validate before sharing
      text = nlohmann::json(parsed).dump();
    });
    agree_on_errors(comm, error.empty() ? "" : "load_training_state '" + path + "': " + error);
  } else {
    agree_on_errors(comm, "");
  }
  broadcast_text(comm, text, 0);
  return nlohmann::json::parse(text).get<TrainingState>();
}

}  // namespace bmt::io
