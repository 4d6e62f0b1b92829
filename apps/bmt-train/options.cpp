#include "options.hpp"

#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <sstream>

namespace bmt_train {

namespace {

// A whole number >= 0 of `what`, with a message naming what was found (CLI11's NonNegativeNumber
// prints its range up to the largest double).
CLI::Validator count_of(const std::string& what) {
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        std::size_t end = 0;
        long long v = -1;
        try {
          v = std::stoll(text, &end);
        } catch (const std::exception&) {
          end = 0;
        }
        if (end == 0 || end != text.size() || v < 0)
          return "expected a whole number of " + what + " >= 0, found '" + text + "'";
        return std::string();
      },
      "NONNEGATIVE");
}

}  // namespace

ModelConfig TrainOptions::model_config() const {
  // Far beyond any real model, and small enough that products of two sizes cannot overflow.
  constexpr std::int64_t max_size = std::int64_t{1} << 24;
  for (auto [flag, v] : {std::pair{"--layers", layers}, std::pair{"--heads", heads}, std::pair{"--dim", dim},
                         std::pair{"--ffn", ffn}, std::pair{"--vocab", vocab}})
    BMT_REQUIRE(v >= 0 && v <= max_size, flag << ": expected a size in [1, " << max_size
                                              << "] (or 0: the preset's), found " << v);
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

std::string shared_description(const TrainOptions& o, const ModelConfig& c) {
  std::ostringstream os;
  os.precision(9);  // floats round-trip
  os << "model=" << o.model << "; arch=" << c.arch << "; layers=" << c.layers << "; heads=" << c.heads
     << "; dim=" << c.dim << "; ffn=" << c.ffn << "; vocab=" << c.vocab << "; max_seq=" << c.max_seq
     << "; dtype=" << bmt::dtype_name(c.dtype) << "; dropout=" << c.dropout << "; zero_level=" << o.zero_level
     << "; checkpointing=" << o.checkpointing << "; keep_attention=" << o.keep_attention
     << "; keep_residual=" << o.keep_residual << "; keep_blocks=" << o.keep_blocks << "; prefetch=" << o.prefetch
     << "; offload=" << o.offload << "; loss_chunk=" << o.loss_chunk
     << "; data=" << o.data << "; val_data=" << o.val_data << "; batch=" << o.batch
     << "; micro_batch=" << o.micro_batch << "; seq=" << o.seq << "; seed=" << o.seed << "; steps=" << o.steps
     << "; lr=" << o.lr << "; min_lr=" << o.min_lr << "; schedule=" << o.schedule << "; warmup=" << o.warmup
     << "; weight_decay=" << o.weight_decay << "; beta1=" << o.beta1 << "; beta2=" << o.beta2
     << "; grad_clip=" << o.grad_clip << "; loss_scale=" << o.loss_scale
     << "; stop_on_nonfinite=" << o.stop_on_nonfinite << "; eval_every=" << o.eval_every
     << "; eval_batches=" << o.eval_batches << "; save=" << o.save << "; save_every=" << o.save_every
     << "; keep_last=" << o.keep_last << "; resume=" << o.resume;
  return os.str();
}

namespace {

// CLI11's TOML reader turns an empty or unterminated array (`model = []`, `model = ["`) into an
// entry without values, and CLI11 2.3 then reads the first value of a scalar option anyway (a crash
// found by fuzz_mutate_train_config). Every bmt-train option takes a value, so such an entry is
// refused here with its key. (Entries named "--" mark the end of a TOML section: they carry none.)
class ConfigWithValues : public CLI::ConfigTOML {
 public:
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::vector<CLI::ConfigItem> items = CLI::ConfigTOML::from_config(input);
    for (const auto& item : items)
      if (item.inputs.empty() && item.name != "--" && item.name != "++")
        throw CLI::ConversionError("--config: expected a value for '" + item.fullname() + "', found none");
    return items;
  }
};

}  // namespace

bool parse_options(int argc, char** argv, TrainOptions& o, int& exit_code) {
  CLI::App app{"bmt-train: train a GPT with ZeRO-3 on any number of ranks.\n"
               "Launch with mpirun -np N bmt-train ... or srun bmt-train ...; topology comes from MPI."};
  app.set_config("--config", "", "TOML file of options (keys are the long flag names)");
  app.config_formatter(std::make_shared<ConfigWithValues>());
  // A misspelled key in a config file is an error, not an option silently left at its default.
  app.allow_config_extras(CLI::config_extras_mode::error);
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
  app.add_flag("--keep-attention", o.keep_attention, "Recompute blocks except their attention: keep its output "
                                                     "from forward (batch x seq x dim elements more per block)");
  app.add_flag("--keep-residual", o.keep_residual,
               "Recompute blocks except their residual sums: keep the attention branch's sum from forward, so "
               "that the recompute skips it and the attention projection (batch x seq x dim elements more per "
               "block)");
  app.add_option("--keep-blocks", o.keep_blocks,
                 "The last N blocks keep their activations from forward instead of recomputing them (all blocks "
                 "when N is at least their number)")
      ->capture_default_str()
      ->check(count_of("blocks"));
  app.add_option("--prefetch", o.prefetch, "Blocks whose parameters are gathered ahead of use")->capture_default_str();
  app.add_flag("--offload", o.offload, "Keep optimizer state in host memory and update it there");
  app.add_option("--loss-chunk", o.loss_chunk,
                 "Run the head and loss this many token rows at a time, never holding all the logits "
                 "(bmt::linear_cross_entropy; one more head GEMM); 0: all rows at once")
      ->capture_default_str()
      ->check(count_of("rows"));

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
  app.add_option("--timeline", o.timeline, "Write a per-stream timeline of the blocks' compute, gathers and "
                                           "reduce-scatters as a Chrome trace (one file per rank: trace.json -> "
                                           "trace.rank0.json; open in ui.perfetto.dev)");
  app.add_flag("--timeline-ops", o.timeline_ops, "With --timeline: also one span per op's forward and backward "
                                                 "(bench/timeline_summary.py adds them up)")
      ->needs("--timeline");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    exit_code = 0;
    if (!bmt::is_initialized() || bmt::rank() == 0) std::cout << app.help();
    return false;
  } catch (const CLI::ConfigError& e) {
    BMT_REQUIRE(false, "--config: " << e.what());
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    BMT_REQUIRE(false, what);
  }
  BMT_REQUIRE(o.batch > 0 && o.seq > 0 && o.steps >= 0, "expected positive --batch and --seq and --steps >= 0, found "
                                                             << o.batch << ", " << o.seq << ", " << o.steps);
  constexpr std::int64_t max_tokens = std::int64_t{1} << 40;
  BMT_REQUIRE(o.batch <= max_tokens / o.seq, "--batch and --seq: expected at most " << max_tokens
                                                << " tokens per step, found " << o.batch << " x " << o.seq);
  BMT_REQUIRE(o.prefetch >= 0, "--prefetch: expected >= 0, found " << o.prefetch);
  // What a recompute keeps means nothing without one: asked for both, say so rather than ignore it.
  for (const auto& [flag, set] : {std::pair{"--keep-attention", o.keep_attention}, {"--keep-residual", o.keep_residual}})
    BMT_REQUIRE(!set || o.checkpointing,
                flag << ": expected blocks that recompute, found --no-checkpointing (every activation kept)");
  BMT_REQUIRE(o.log_every > 0, "--log-every: expected > 0, found " << o.log_every);
  // Numbers that would train nothing useful, or only NaN, are refused before any work starts.
  auto finite_at_least = [](const char* flag, float v, float low) {
    BMT_REQUIRE(std::isfinite(v) && v >= low, flag << ": expected a finite number >= " << low << ", found " << v);
  };
  finite_at_least("--lr", o.lr, 0.0f);
  finite_at_least("--min-lr", o.min_lr, 0.0f);
  finite_at_least("--weight-decay", o.weight_decay, 0.0f);
  finite_at_least("--grad-clip", o.grad_clip, 0.0f);
  finite_at_least("--loss-scale", o.loss_scale, 0.0f);
  finite_at_least("--dropout", o.dropout, 0.0f);
  for (auto [flag, beta] : {std::pair{"--beta1", o.beta1}, std::pair{"--beta2", o.beta2}})
    BMT_REQUIRE(beta >= 0.0f && beta < 1.0f, flag << ": expected a number in [0, 1), found " << beta);
  BMT_REQUIRE(o.micro_batch >= 0, "--micro-batch: expected >= 0 (0: the whole local batch), found " << o.micro_batch);
  BMT_REQUIRE(o.warmup >= 0, "--warmup: expected >= 0, found " << o.warmup);
  BMT_REQUIRE(o.eval_every >= 0 && o.eval_batches > 0, "--eval-every/--eval-batches: expected >= 0 and > 0, found "
                                                           << o.eval_every << " and " << o.eval_batches);
  BMT_REQUIRE(o.save_every >= 0, "--save-every: expected >= 0 (0: only at the end), found " << o.save_every);
  BMT_REQUIRE(o.keep_last >= 0, "--keep-last: expected >= 0 (0: keep all), found " << o.keep_last);
  return true;
}

}  // namespace bmt_train
