#pragma once
// Crash-safe checkpoint directories. docs/CHECKPOINTS.md describes the layout and the protocol:
//
//   <root>/step-<N>.tmp/     a save in progress: never loaded
//   <root>/step-<N>/         a published save: loaded only once it holds COMPLETE
//   <root>/step-<N>/COMPLETE {"step": N, "world_size": W, "time": "2026-11-30T11:39:04Z", "format": 1}
//
// A save writes every file into step-<N>.tmp/ (each flushed to storage), then rank 0 renames the
// directory to step-<N>/, flushes the root directory, and writes COMPLETE atomically. A run killed
// at any moment therefore leaves the previous complete checkpoint loadable.
//
//   bmt::io::CheckpointDir ckpt("ckpt", /*keep_last=*/3);
//   std::string dir = ckpt.begin_save(step);                  // collective
//   ... SafetensorsWriter(dir + "/model.safetensors", ...) ... save_training_state(dir + "/training_state.json", s);
//   ckpt.commit_save(step);                                   // collective
//   if (auto last = ckpt.latest()) resume_from(ckpt.step_path(*last));
//
// Every collective call agrees on failures across ranks (bmtrain/runtime/agreement.hpp): an unwritable root
// or a full disk is the same bmt::Error on every rank, and no rank is left waiting.
#include <mpi.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace bmt::io {

class CheckpointDir {
 public:
  static constexpr const char* kMarker = "COMPLETE";

  // `keep_last`: how many complete checkpoints to keep; older ones are deleted after a new one
  // completes (0 keeps all). `comm`: the ranks that save together (MPI_COMM_NULL: the runtime's world).
  explicit CheckpointDir(std::string root, int keep_last = 0, MPI_Comm comm = MPI_COMM_NULL);

  const std::string& root() const { return root_; }
  std::string step_path(std::int64_t step) const;  // <root>/step-<N>
  std::string temp_path(std::int64_t step) const;  // <root>/step-<N>.tmp

  // Collective. Creates the root if needed and an empty step-<N>.tmp/ (removing what an interrupted
  // save of the same step left there); returns its path, into which every rank then writes.
  std::string begin_save(std::int64_t step);

  // Collective, once every file of the save is written and closed. Rank 0 flushes every file and
  // the directory, renames step-<N>.tmp/ to step-<N>/ (replacing an older save of the same step),
  // flushes the root, writes COMPLETE, then deletes complete checkpoints beyond keep_last and the
  // leftovers of interrupted saves. Returns the published path.
  std::string commit_save(std::int64_t step);

  // Collective: the newest complete step as rank 0 sees it, the same on every rank.
  std::optional<std::int64_t> latest() const;

  // Local: the complete steps under `root`, ascending (none if `root` does not exist). A step counts
  // only if step-<N>/ is a directory holding a COMPLETE marker that parses and names step N.
  static std::vector<std::int64_t> complete_steps(const std::string& root);
  static std::optional<std::int64_t> latest_complete(const std::string& root);
  // Local: the parsed COMPLETE marker of a step; throws bmt::Error if the step is not complete.
  static nlohmann::json completion(const std::string& root, std::int64_t step);
  // Local: the step a step directory's COMPLETE marker names, for a directory given by path (it
  // need not be named step-<N>; if it is, the marker must name N). Throws bmt::Error naming the
  // marker and what is wrong with it when it is missing, not JSON, or names no step or another.
  static std::int64_t marked_step(const std::string& step_dir);

 private:
  void prune(std::int64_t just_saved) const;
  std::string root_;
  int keep_last_ = 0;
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace bmt::io
