#include "options.hpp"

#include <CLI/CLI.hpp>

#include <iostream>

namespace bmt_train {

ModelConfig TrainOptions::model_config() const {
  ModelConfig c = preset(model);
  if (layers) c.layers = layers;
  if (heads) c.heads = heads;
  if (dim) c.dim = dim;
  if (ffn) c.ffn = ffn;
  else if (dim) c.ffn = c.arch == "gpt2" ? 4 * dim : c.ffn * dim / preset(model).dim;
  if (vocab) c.vocab = vocab;
  c.dtype = bmt::parse_dtype(dtype);
  BMT_REQUIRE(bmt::is_floating(c.dtype), "--dtype: expected f32, bf16 or f16, found '" << dtype << "'");
  c.dropout = dropout;
  c.validate();
  BMT_REQUIRE(seq <= c.max_seq, "--seq: expected at most " << c.max_seq << " tokens for model " << model << ", found "
                                                           << seq);
  return c;
}

bool parse_options(int argc, char** argv, TrainOptions& o, int& exit_code) {
  CLI::App app{"bmt-train: train a GPT with ZeRO-3 on any number of ranks.\n"
               "Launch with mpirun -np N bmt-train ... or srun bmt-train ...; topology comes from MPI."};
  app.set_config("--config", "", "TOML file of options (keys are the long flag names)");
  // A flag given twice (in the config file and on the command line, say): the last one wins.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string presets;
  for (const auto& n : preset_names()) presets += (presets.empty() ? "" : ", ") + n;

  app.add_option("--model", o.model, "Model preset: " + presets)->capture_default_str();
  app.add_option("--layers", o.layers, "Override the preset's number of blocks");
  app.add_option("--heads", o.heads, "Override the preset's attention heads");
  app.add_option("--dim", o.dim, "Override the preset's model width");
  app.add_option("--ffn", o.ffn, "Override the preset's MLP hidden size");
  app.add_option("--vocab", o.vocab, "Override the preset's vocabulary size");
  app.add_option("--dtype", o.dtype, "Parameter and compute dtype: f32, bf16 or f16")->capture_default_str();
  app.add_option("--dropout", o.dropout, "Dropout probability in the blocks")->capture_default_str();

  app.add_option("--zero-level", o.zero_level, "3: gather parameters in forward and backward; 2: keep them from "
                                               "forward to backward")
      ->capture_default_str()
      ->check(CLI::IsMember({2, 3}));
  app.add_flag("!--no-checkpointing", o.checkpointing, "Keep block activations instead of recomputing them");
  app.add_option("--prefetch", o.prefetch, "Blocks whose parameters are gathered ahead of use")->capture_default_str();
  app.add_flag("--offload", o.offload, "Keep optimizer state in host memory and update it there");

  app.add_option("--data", o.data, "synthetic, or a file or glob of token files (llm.c shards or raw uint16)")
      ->capture_default_str();
  app.add_option("--val-data", o.val_data, "Validation token files (default: held-out synthetic data, or none)");
  app.add_option("--batch", o.batch, "Global batch: sequences per optimizer step over all ranks")->capture_default_str();
  app.add_option("--micro-batch", o.micro_batch, "Sequences per rank per forward (gradient accumulation); "
                                                 "default the whole local batch");
  app.add_option("--seq", o.seq, "Tokens per sequence")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of initialization, data order and dropout")->capture_default_str();

  app.add_option("--steps", o.steps, "Optimizer steps")->capture_default_str();
  app.add_option("--lr", o.lr, "Peak learning rate (default: the preset's: 1e-2 tiny, 6e-4 gpt2-*, 3e-4 llama-1b)");
  app.add_option("--min-lr", o.min_lr, "Final learning rate of linear/cosine schedules")->capture_default_str();
  app.add_option("--schedule", o.schedule, "constant, linear, cosine, noam or exponential")
      ->capture_default_str()
      ->check(CLI::IsMember({"constant", "linear", "cosine", "noam", "exponential"}));
  app.add_option("--warmup", o.warmup, "Linear warmup steps")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay (matrices only)")->capture_default_str();
  app.add_option("--beta1", o.beta1, "AdamW beta1")->capture_default_str();
  app.add_option("--beta2", o.beta2, "AdamW beta2")->capture_default_str();
  app.add_option("--grad-clip", o.grad_clip, "Clip the global gradient norm to this (0: off)")->capture_default_str();
  app.add_option("--loss-scale", o.loss_scale, "Initial loss scale (default 65536, dynamic, for f16; 1 otherwise)");
  app.add_flag("--stop-on-nonfinite", o.stop_on_nonfinite, "Stop instead of skipping a step with inf/nan gradients");

  app.add_option("--metrics", o.metrics, "Write one JSON object per step to this .jsonl file (rank 0)");
  app.add_option("--plot", o.plot, "Loss curve picture (SVG); default: the metrics path with .svg");
  app.add_option("--log-every", o.log_every, "Print a line every N steps")->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "Evaluate the validation loss every N steps (0: never)");
  app.add_option("--eval-batches", o.eval_batches, "Global batches per evaluation")->capture_default_str();
  app.add_option("--save", o.save, "Checkpoint directory (step-N subdirectories, the last --keep-last kept)");
  app.add_option("--save-every", o.save_every, "Save every N steps (0: only at the end)");
  app.add_option("--keep-last", o.keep_last, "Complete checkpoints to keep")->capture_default_str();
  app.add_option("--resume", o.resume, "Resume from a checkpoint directory (its newest complete step) or a step-N directory");
  app.add_flag("--progress", o.progress, "Show the live progress bar (default: only on an interactive terminal "
                                         "outside an MPI launcher)");
  app.add_flag("--no-progress", o.no_progress, "Never show the progress bar");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    exit_code = 0;
    if (!bmt::is_initialized() || bmt::rank() == 0) std::cout << app.help();
    return false;
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    BMT_REQUIRE(false, what);
  }
  BMT_REQUIRE(o.batch > 0 && o.seq > 0 && o.steps >= 0, "expected positive --batch and --seq and --steps >= 0, found "
                                                             << o.batch << ", " << o.seq << ", " << o.steps);
  BMT_REQUIRE(o.prefetch >= 0, "--prefetch: expected >= 0, found " << o.prefetch);
  BMT_REQUIRE(o.log_every > 0, "--log-every: expected > 0, found " << o.log_every);
  return true;
}

}  // namespace bmt_train
