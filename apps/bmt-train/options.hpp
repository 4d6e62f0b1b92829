#pragma once
// bmt-train's options: command-line flags, optionally read from a TOML config file
// (--config run.toml; flags given on the command line win over the file). Each member is set by a
// row of option_table.hpp, which gives its flag, help, values and what ranks and checkpoints do with it.
#include <algorithm>
#include <cstdint>
#include <string>

#include <bmtrain/models/causal_lm.hpp>
#include <bmtrain/models/model_config.hpp>
#include <bmtrain/runtime/context.hpp>

namespace bmt_train {

using bmt::models::ModelConfig;

struct TrainOptions {
  // model
  std::string model;  // a preset; empty: tiny, or with --init-from the checkpoint's config.json
  std::int64_t layers = 0, heads = 0, kv_heads = 0, dim = 0, ffn = 0, vocab = 0;  // 0: the preset's
  float rope_theta = 0.0f;                                                        // 0: the preset's
  std::string init_from;  // a Hugging Face checkpoint directory: the model's shape and first weights
  std::string dtype;  // empty: f32, or with --resume the checkpoint's
  float dropout = 0.0f;
  bool fp8 = false;  // the blocks' linear layers in FP8 (bmt::models::CausalLMOptions::fp8)
  // distribution and memory
  int zero_level = 3;
  std::string shard_group = "world";  // the ZeRO shard group: world, or node (hybrid sharding)
  int tp = 1;  // tensor-parallel ranks (within a node): the mesh's tp group (runtime/mesh.hpp)
  bool checkpointing = true;  // recompute blocks in backward
  bool keep_attention = false;  // the recompute reuses the forward's attention outputs
  bool keep_residual = false;   // the recompute reuses the forward's residual sums
  std::int64_t keep_blocks = 0;  // the last blocks that keep their activations instead of recomputing
  // auto: the planner keeps what fits; full: as the keep flags say (what they mean when given alone)
  std::string recompute = "auto";
  int prefetch = 1;
  bool offload = false;
  bool offload_delayed = false;
  bool update_in_forward = false;  // each block's optimizer update runs when the next forward gathers it
  std::int64_t loss_chunk = 0;  // rows of the head and loss at a time (0: all at once)
  // data
  std::string data = "synthetic";
  std::string data_format = "auto";  // token files: auto (llm.c, or nanoGPT's train.bin/val.bin), llmc or raw
  std::string val_data;  // default: held-out synthetic sequences, or none for files
  std::int64_t batch = 16;       // global sequences per optimizer step
  std::int64_t micro_batch = 0;  // sequences per rank per forward; 0: the whole local batch
  std::int64_t seq = 64;
  std::uint64_t seed = 1;
  // optimization
  std::int64_t steps = 200;
  float lr = 0.0f;  // 0: the preset's default
  float min_lr = 0.0f;
  std::string schedule = "cosine";
  std::int64_t warmup = 5;
  float weight_decay = 0.1f;
  float beta1 = 0.9f, beta2 = 0.95f;
  std::string moments = "f32";  // AdamW's moments: f32 or bf16
  float grad_clip = 1.0f;
  float loss_scale = 0.0f;  // 0: 65536 dynamic for f16, 1 otherwise
  bool stop_on_nonfinite = false;
  // output and checkpoints
  std::string metrics;
  std::string plot;  // default: metrics path with .svg
  std::int64_t log_every = 1;
  std::int64_t eval_every = 0;
  std::int64_t eval_batches = 4;
  std::string save;
  std::int64_t save_every = 0;
  int keep_last = 3;
  std::string resume;
  bool progress = false;     // force the progress bar on
  bool no_progress = false;  // force it off (default: on for an interactive terminal)
  std::string timeline;      // per-stream Chrome trace, one file per rank (bmt::timeline)
  bool timeline_ops = false;  // the timeline also times each op (bmt::timeline::Detail::ops)
  std::string export_hf;      // a directory for the trained model as a Hugging Face checkpoint
  double export_shard_gb = 5.0;  // the largest safetensors file of an export
  // evaluation only
  bool eval_only = false;   // the loaded model's loss on --val-data; nothing trained or saved
  std::string eval_logits;  // with --eval-only: the first validation sequence's logits, f32 [seq, vocab]

  // The model the options describe: a preset with overrides, or --init-from's config.json (a flag
  // that disagrees with it is an error naming both values). Reads config.json on every call.
  ModelConfig model_config() const;
  // How the model runs its blocks and loss: --prefetch, the recompute flags, --loss-chunk, --fp8.
  bmt::models::CausalLMOptions model_options() const;
  // The schedule's peak learning rate: --lr, or the model's default (the preset's); a --min-lr
  // above it, which would make the schedule rise, is a bmt::Error.
  float peak_lr(const ModelConfig& config) const;
  // The preset's name, or what the model comes from.
  std::string model_name() const;
  // The learning-rate schedule's length in steps: --steps, and at least one step past the warmup.
  std::int64_t schedule_steps() const { return std::max<std::int64_t>(steps, warmup + 1); }
};

// The options every rank must share, with the model they describe, as `key=value` items for
// bmt::agree_on_configuration: the model's record (bmt::models::to_json), then every option whose
// row says Agree::value. Options that only shape one rank's output (progress, log, metrics, plot
// and timeline paths) are left out.
std::string shared_description(const TrainOptions& options, const ModelConfig& config);

// Parses argv. On --help, prints the help on rank 0 of MPI's world (every process, without MPI)
// and returns false with exit_code 0; on bad input throws bmt::Error with a one-line message. Needs
// no runtime: the runtime starts with what the options say (init_options).
bool parse_options(int argc, char** argv, TrainOptions& out, int& exit_code);

// The runtime's options that bmt-train's flags set: the process mesh (--tp, --shard-group).
bmt::InitOptions init_options(const TrainOptions& options);

}  // namespace bmt_train
