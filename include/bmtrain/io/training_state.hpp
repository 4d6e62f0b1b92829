#pragma once
// The small, rank-independent part of a training run's state, kept as JSON next to the weights in a
// checkpoint: the step, and each component's own serialized state (the LR scheduler, the loss
// scaler, the RNG, the data loader's position). Components serialize themselves to JSON; this file
// only carries them, so the io layer needs no knowledge of their types.
//
//   bmt::io::TrainingState s;
//   s.step = step;
//   s.data = loader.state();                  // TokenLoader's LoaderState converts to JSON
//   bmt::io::save_training_state(dir + "/training_state.json", s);   // collective
#include <mpi.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace bmt::io {

struct TrainingState {
  std::int64_t step = 0;
  nlohmann::json lr_scheduler = nlohmann::json::object();
  nlohmann::json loss_scaler = nlohmann::json::object();
  nlohmann::json rng = nlohmann::json::object();
  nlohmann::json data = nlohmann::json::object();
  nlohmann::json extra = nlohmann::json::object();  // anything else the program keeps
};

// {"format": 1, "step": ..., "lr_scheduler": {...}, ...}. from_json throws bmt::Error for a missing
// or ill-typed field or another format version.
void to_json(nlohmann::json& j, const TrainingState& s);
void from_json(const nlohmann::json& j, TrainingState& s);

// Collective over `comm` (MPI_COMM_NULL: the runtime's world): rank 0 writes `path` atomically
// (write_json_atomic); every rank returns, or every rank throws the same bmt::Error.
void save_training_state(const std::string& path, const TrainingState& state, MPI_Comm comm = MPI_COMM_NULL);
// Collective: rank 0 reads `path` and shares it; every rank returns the same state or throws.
TrainingState load_training_state(const std::string& path, MPI_Comm comm = MPI_COMM_NULL);

}  // namespace bmt::io
