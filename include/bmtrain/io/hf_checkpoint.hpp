#pragma once
// Hugging Face checkpoint directories in and out, in parallel, with no rank ever holding the
// whole model: a directory with config.json and either model.safetensors or the sharded
// model-0000N-of-0000M.safetensors with model.safetensors.index.json, in the hub's tensor names
// and layouts, as transformers' save_pretrained writes and from_pretrained reads them.
//
// This file knows no model: an HfLayout says which hub tensor holds which parameter of a module
// tree. bmtrain's GPT-2 and Llama declare theirs (bmt::models::hf_layout, which also reads and
// writes their config.json); any other model passes a layout of its own.
//
//   bmt::io::load_hf_checkpoint(model, "gpt2/", layout);                 // collective
//   bmt::io::save_hf_checkpoint(model, "export/", layout, config_json);  // collective
//
// Reading: every rank opens the checkpoint's files (rank 0 reads each header and shares it) and
// reads only the elements of its own shards, converting bf16/f16/f32 on disk to the model's dtype
// (rounding where the model's is narrower). A weight stored transposed (GPT-2's Conv1D: [in, out]
// for the model's [out, in]) is read, of each stored row, the run of columns the rank's shard
// covers (at most two model rows more than its shard). Before reading, the whole checkpoint is
// checked against the model on every rank alike: a missing or unexpected tensor, another shape or
// a non-floating dtype ends the load with one line naming the tensor, what was expected and what
// was found; so do a missing or invalid index or safetensors file.
//
// Writing: one file, or files of at most max_shard_bytes each (a larger tensor alone in its file)
// with the index, each written by all ranks at once through MPI-IO (each rank its own elements);
// then config.json. Files of an earlier export that this one does not write are removed, so that
// from_pretrained cannot pick them up.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bmtrain/runtime/dtype.hpp"
#include "bmtrain/nn/module.hpp"

namespace bmt::io {

// One model parameter and the hub tensor that holds it.
struct HfTensor {
  std::string parameter;    // the model's dotted name: "blocks.0.attn.weight"
  std::string hub;          // the checkpoint's: "transformer.h.0.attn.c_attn.weight"
  bool transposed = false;  // stored [in, out] for the parameter's [out, in] (GPT-2's Conv1D)
};

// How a model's parameters map to a hub checkpoint's tensors.
struct HfLayout {
  std::string model;  // what the checkpoint holds, for messages: "GPT2LMHeadModel of 12 layers"
  std::vector<HfTensor> tensors;  // every parameter of the model, in the order an export writes them
  // A prefix that the hub's names may lack on disk ("transformer.": the hub's original gpt2 files
  // were saved from GPT2Model); a load accepts either spelling.
  std::string optional_prefix;
  // Tensors a checkpoint may hold that are no weight of the model (attention mask buffers, rotary
  // frequencies, a tied head saved anyway): ignored by a load rather than refused.
  std::function<bool(const std::string& hub)> ignored = [](const std::string&) { return false; };
};

// Collective. Fills every parameter of `model` from the checkpoint in `dir` (config.json is not
// read: the caller built the model it describes).
void load_hf_checkpoint(Module& model, const std::string& dir, const HfLayout& layout);

struct HfExportOptions {
  std::uint64_t max_shard_bytes = 5'000'000'000;  // transformers' default max_shard_size, "5GB"
};

// Collective. Writes `dir` (created if needed): the weights in the model's dtype, then
// `config` as config.json with torch_dtype set to that dtype (set_torch_dtype). An earlier export's
// config.json is removed first and the new one written last, so a directory with a config.json
// holds a whole export.
void save_hf_checkpoint(Module& model, const std::string& dir, const HfLayout& layout, nlohmann::json config,
                        const HfExportOptions& options = {});

// "float32", "bfloat16", "float16" (torch's names) for a floating dtype.
const char* torch_dtype_name(DType dtype);
// The dtype of a torch name; `where` names the file in the error for any other name.
DType parse_torch_dtype(const std::string& name, const std::string& where);
// Sets a config.json's "torch_dtype" (and "dtype", which transformers 4.56 and later write, when
// present) to `dtype`.
void set_torch_dtype(nlohmann::json& config, DType dtype);

}  // namespace bmt::io
