#pragma once
// What tells a data file rewritten since a checkpoint from the one its run read, when its token
// count stayed the same: its size and modification time, which a checkpoint records
// (training_state.json, 'extra.data_file_stamps') and a resumed run compares with its own files'.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trajectory.hpp"

namespace bmt_train {

// [{"path": ..., "bytes": N, "mtime_ns": T}, ...] for the files, in order; a bmt::Error for a file
// that cannot be examined.
nlohmann::json data_file_stamps(const DataFiles& files);

// One line per file of the same path and size whose modification time differs between the
// checkpoint's stamps (`saved`) and this run's (`now`), naming both times, for the steps after
// `step`. Another path or size (another token count) is the trajectory's to name (its
// 'data_files'). A bmt::Error for stamps of the wrong shape.
std::vector<std::string> data_file_changes(const nlohmann::json& saved, const nlohmann::json& now, std::int64_t step);

}  // namespace bmt_train
