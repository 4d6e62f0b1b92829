#pragma once
// Model weights and optimizer state in safetensors files, written and read in parallel with no
// rank ever holding the whole model: every rank writes and reads only the elements of its shards.
// Names come from the module tree ("blocks.3.attn.weight"); optimizer state tensors are named
// "<parameter>.<state>" ("blocks.3.attn.weight.exp_avg") and have the parameter's shape, so both
// files load into any world size.
//
//   bmt::save(model, "ckpt/step-100/model.safetensors");
//   bmt::load(model, "model.safetensors");                 // strict: names and shapes must match
//   bmt::io::save_optimizer(adamw, dir + "/optimizer.safetensors");
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "bmtrain/io/safetensors_file.hpp"
#include "bmtrain/nn/module.hpp"
#include "bmtrain/optim/optimizer.hpp"

namespace bmt {

// Collective. Writes every parameter in its own dtype.
void save(Module& model, const std::string& path, const std::map<std::string, std::string>& metadata = {});

// Collective. Fills every parameter found in the file, converting dtypes where lossless (or where
// `rounding` allows). Strict: the file must hold exactly the model's parameters with the same
// shapes; otherwise missing parameters keep their values and extra tensors are ignored, and the
// names of both are returned.
struct LoadReport {
  std::vector<std::string> missing;     // in the model, not in the file
  std::vector<std::string> unexpected;  // in the file, not in the model
};
LoadReport load(Module& model, const std::string& path, bool strict = true,
                io::Rounding rounding = io::Rounding::forbid);

namespace io {

// Collective. The optimizer's per-parameter state (f32 master weights, moments, ...), each tensor
// in the dtype the optimizer holds it in (AdamW's bf16 moments as bf16).
void save_optimizer(const optim::Optimizer& optimizer, const std::string& path);
// Collective. Strict: every state tensor must be present with the right shape, and the step
// count in the metadata a whole number (optimizer_step). A state saved in another floating dtype
// than the optimizer holds is converted: widened exactly, or rounded to nearest even (f32 moments
// into an AdamW with bf16 moments), so a run may resume with its moments' dtype changed.
void load_optimizer(optim::Optimizer& optimizer, const std::string& path);
// The optimizer's step count in a file's metadata ("step": the updates it has applied), or
// nullopt when there is none; throws bmt::Error naming `path` unless it is a whole number in
// [0, 2^53] (any run's step count, and exact in a double).
std::optional<std::int64_t> optimizer_step(const std::map<std::string, std::string>& metadata, const std::string& path);

}  // namespace io
}  // namespace bmt
