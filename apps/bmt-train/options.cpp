#include "options.hpp"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <vector>

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/models/hf_config.hpp>

#include "config_file.hpp"

namespace bmt_train {

namespace {

// A whole number in [lo, hi], in decimal digits with an optional minus sign: CLI11 alone would
// clamp 99999999999999999999 to the type's largest value, wrap -1 around an unsigned type and take
// 0x10 as 16. `what` says what is expected; by default "a whole number in [lo, hi]".
CLI::Validator whole_number(__int128 lo, __int128 hi, std::string what = "") {
  const auto text_of = [](__int128 v) {
    std::string digits;
    const bool negative = v < 0;
    unsigned __int128 m = negative ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
    do digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(m % 10)));
    while ((m /= 10) != 0);
    return (negative ? "-" : "") + digits;
  };
  if (what.empty()) what = "a whole number in [" + text_of(lo) + ", " + text_of(hi) + "]";
  return CLI::Validator(
      [lo, hi, what](std::string& text) -> std::string {
        const std::size_t first = !text.empty() && text[0] == '-' ? 1 : 0;
        bool ok = text.size() > first && text.size() - first <= 30;
        __int128 v = 0;
        for (std::size_t i = first; ok && i < text.size(); ++i) {
          ok = text[i] >= '0' && text[i] <= '9';
          v = v * 10 + (text[i] - '0');
        }
        if (first) v = -v;
        if (!ok || v < lo || v > hi) return "expected " + what + ", found '" + text + "'";
        return std::string();
      },
      "INT");
}

template <class T>
CLI::Validator any_whole(std::string what = "") {
  return whole_number(std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), std::move(what));
}

// A number an f32 option can hold: all of the text is a number (or inf/nan, which the option's own
// check then refuses), and a finite one is within single precision rather than becoming inf.
CLI::Validator real_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || std::isspace(static_cast<unsigned char>(text[0])))
          return "expected a number, found '" + text + "'";
        if (std::isfinite(v) && (errno == ERANGE || std::fabs(v) > std::numeric_limits<float>::max()))
          return "expected a number within single precision (below 3.4e38 in magnitude), found '" + text + "'";
        return std::string();
      },
      "FLOAT");
}

// The floating dtypes a model can be trained in, under every spelling parse_dtype accepts.
CLI::Validator training_dtype() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        for (const char* name : {"f32", "fp32", "float32", "bf16", "bfloat16", "f16", "fp16", "float16"})
          if (text == name) return std::string();
        return "expected f32, bf16 or f16 (or fp32, float32, bfloat16, fp16, float16), found '" + text + "'";
      },
      "DTYPE");
}

// One of `names`.
CLI::Validator one_of(std::vector<std::string> names) {
  std::string list;
  for (std::size_t i = 0; i < names.size(); ++i)
    list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return CLI::Validator(
      [names, list](std::string& text) -> std::string {
        for (const auto& n : names)
          if (text == n) return std::string();
        return "expected " + list + ", found '" + text + "'";
      },
      "NAME");
}

// Adds options to the app and notes what each takes, for the config file reader.
class OptionTable {
 public:
  explicit OptionTable(CLI::App& app) : app_(app) {}

  // A text or floating option.
  template <class T>
  CLI::Option* add(const std::string& flag, T& value, const std::string& description) {
    static_assert(std::is_same_v<T, std::string> || std::is_floating_point_v<T>, "whole numbers: add_whole");
    keys_[flag.substr(2)] = std::is_same_v<T, std::string> ? ConfigValue::text : ConfigValue::number;
    CLI::Option* o = app_.add_option(flag, value, description);
    if constexpr (std::is_floating_point_v<T>) o->check(real_number());
    return o;
  }
  // A whole-number option and the values it takes.
  template <class T>
  CLI::Option* add_whole(const std::string& flag, T& value, const std::string& description, CLI::Validator range) {
    keys_[flag.substr(2)] = ConfigValue::number;
    return app_.add_option(flag, value, description)->check(std::move(range));
  }
  // A switch; `spec` may start with '!' (the flag sets the value to false).
  CLI::Option* add_flag(const std::string& spec, bool& value, const std::string& description) {
    keys_[spec.substr(spec[0] == '!' ? 3 : 2)] = ConfigValue::flag;
    return app_.add_flag(spec, value, description);
  }
  const std::map<std::string, ConfigValue>& keys() const { return keys_; }

 private:
  CLI::App& app_;
  std::map<std::string, ConfigValue> keys_;
};

// The path given to --config on the command line (the last one), or "".
std::string config_path(int argc, char** argv) {
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) path = argv[++i];
    else if (a.compare(0, 9, "--config=") == 0) path = a.substr(9);
  }
  return path;
}

// The model of a Hugging Face checkpoint directory; a shape flag or preset that disagrees with its
// config.json is an error naming both values.
ModelConfig init_from_model(const TrainOptions& o) {
  const std::string where = "config.json '" + o.init_from + "/config.json'";
  ModelConfig c = bmt::models::read_hf_config(o.init_from);
  for (auto [flag, given, has] : {std::tuple{"--layers", o.layers, c.layers}, std::tuple{"--heads", o.heads, c.heads},
                                  std::tuple{"--kv-heads", o.kv_heads, c.kv_head_count()},
                                  std::tuple{"--dim", o.dim, c.dim}, std::tuple{"--ffn", o.ffn, c.ffn},
                                  std::tuple{"--vocab", o.vocab, c.vocab}})
    BMT_REQUIRE(given == 0 || given == has, flag << " " << given << ": expected " << has << " as --init-from's "
                                                 << where << " says, found " << given);
  BMT_REQUIRE(o.rope_theta == 0.0f || o.rope_theta == c.rope.theta,
              "--rope-theta " << o.rope_theta << ": expected " << c.rope.theta << " as --init-from's " << where
                              << " says, found " << o.rope_theta);
  if (!o.model.empty()) {
    const ModelConfig p = bmt::models::preset(o.model);
    for (auto [what, want, has] : {std::tuple{"layers", p.layers, c.layers}, std::tuple{"heads", p.heads, c.heads},
                                   std::tuple{"key/value heads", p.kv_head_count(), c.kv_head_count()},
                                   std::tuple{"dim", p.dim, c.dim}, std::tuple{"ffn", p.ffn, c.ffn},
                                   std::tuple{"vocab", p.vocab, c.vocab}})
      BMT_REQUIRE(p.arch == c.arch && want == has,
                  "--model " << o.model << ": expected a " << p.arch << " of " << want << " " << what << " as the preset "
                             << "has, found a " << c.arch << " of " << has << " in --init-from's " << where);
  }
  return c;
}

}  // namespace

bmt::models::CausalLMOptions TrainOptions::model_options() const {
  bmt::models::CausalLMOptions m;
  m.prefetch_depth = prefetch;
  m.checkpoint.use_checkpoint = checkpointing;
  m.checkpoint.zero_level = zero_level;
  m.checkpoint.keep_attention = keep_attention;
  m.checkpoint.keep_residual = keep_residual;
  m.keep_blocks = keep_blocks;
  m.loss_chunk_rows = loss_chunk;
  return m;
}

std::string TrainOptions::model_name() const {
  if (!model.empty()) return model;
  return init_from.empty() ? "tiny" : init_from;
}

ModelConfig TrainOptions::model_config() const {
  // Far beyond any real model, and small enough that products of two sizes cannot overflow.
  constexpr std::int64_t max_size = std::int64_t{1} << 24;
  for (auto [flag, v] : {std::pair{"--layers", layers}, std::pair{"--heads", heads}, std::pair{"--kv-heads", kv_heads},
                         std::pair{"--dim", dim}, std::pair{"--ffn", ffn}, std::pair{"--vocab", vocab}})
    BMT_REQUIRE(v >= 0 && v <= max_size, flag << ": expected a size in [1, " << max_size
                                              << "] (or 0: the preset's), found " << v);
  BMT_REQUIRE(std::isfinite(rope_theta) && rope_theta >= 0.0f,
              "--rope-theta: expected a positive number (or 0: the preset's), found " << rope_theta);
  ModelConfig c;
  if (!init_from.empty()) {
    c = init_from_model(*this);
  } else {
    const std::string name = model_name();
    c = bmt::models::preset(name);
    if (layers) c.layers = layers;
    if (heads) c.heads = heads;
    if (kv_heads) c.kv_heads = kv_heads;
    if (dim) c.dim = dim;
    if (ffn) c.ffn = ffn;
    else if (dim) c.ffn = c.arch == "gpt2" ? 4 * dim : c.ffn * dim / bmt::models::preset(name).dim;
    if (vocab) c.vocab = vocab;
    BMT_REQUIRE(rope_theta == 0.0f || c.arch == "llama",
                "--rope-theta: expected a Llama model (rotary embeddings), found " << c.arch);
    if (rope_theta > 0.0f) c.rope.theta = rope_theta;
  }
  c.dtype = bmt::parse_dtype(dtype.empty() ? "f32" : dtype);
  BMT_REQUIRE(bmt::is_floating(c.dtype), "--dtype: expected f32, bf16 or f16, found '" << dtype << "'");
  c.dropout = dropout;
  c.validate();
  BMT_REQUIRE(seq <= c.max_seq, "--seq: expected at most " << c.max_seq << " tokens for model " << model_name()
                                                           << ", found " << seq);
  return c;
}

std::string shared_description(const TrainOptions& o, const ModelConfig& c) {
  std::ostringstream os;
  os.precision(9);  // floats round-trip
  os << "model=" << o.model << "; init_from=" << o.init_from << "; arch=" << c.arch << "; layers=" << c.layers
     << "; heads=" << c.heads << "; kv_heads=" << c.kv_head_count() << "; dim=" << c.dim << "; ffn=" << c.ffn
     << "; vocab=" << c.vocab << "; max_seq=" << c.max_seq << "; tie_embeddings=" << c.tie_embeddings
     << "; rope=" << c.rope.theta << "," << c.rope.factor << "," << c.rope.low_freq_factor << ","
     << c.rope.high_freq_factor << "," << c.rope.original_max_positions << "; norm_eps=" << c.norm_eps
     << "; dtype=" << bmt::dtype_name(c.dtype) << "; dropout=" << c.dropout << "; zero_level=" << o.zero_level
     << "; checkpointing=" << o.checkpointing << "; keep_attention=" << o.keep_attention
     << "; keep_residual=" << o.keep_residual << "; keep_blocks=" << o.keep_blocks << "; prefetch=" << o.prefetch
     << "; offload=" << o.offload << "; offload_delayed=" << o.offload_delayed << "; loss_chunk=" << o.loss_chunk
     << "; data=" << o.data << "; data_format=" << o.data_format << "; val_data=" << o.val_data << "; batch=" << o.batch
     << "; micro_batch=" << o.micro_batch << "; seq=" << o.seq << "; seed=" << o.seed << "; steps=" << o.steps
     << "; lr=" << o.lr << "; min_lr=" << o.min_lr << "; schedule=" << o.schedule << "; warmup=" << o.warmup
     << "; weight_decay=" << o.weight_decay << "; beta1=" << o.beta1 << "; beta2=" << o.beta2
     << "; grad_clip=" << o.grad_clip << "; loss_scale=" << o.loss_scale
     << "; stop_on_nonfinite=" << o.stop_on_nonfinite << "; eval_every=" << o.eval_every
     << "; eval_batches=" << o.eval_batches << "; save=" << o.save << "; save_every=" << o.save_every
     << "; keep_last=" << o.keep_last << "; resume=" << o.resume << "; export_hf=" << o.export_hf
     << "; export_shard_gb=" << o.export_shard_gb << "; eval_only=" << o.eval_only;
  return os.str();
}


bool parse_options(int argc, char** argv, TrainOptions& o, int& exit_code) {
  CLI::App app{"bmt-train: train a GPT with ZeRO-3 on any number of ranks.\n"
               "Launch with mpirun -np N bmt-train ... or srun bmt-train ...; topology comes from MPI."};
  app.set_config("--config", "", "TOML file of options: one key = value a line, keys are the long flag names "
                                 "(numbers bare, strings quoted, switches true or false)");
  // A flag given twice (in the config file and on the command line, say): the last one wins.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  OptionTable t(app);
  std::string presets;
  for (const auto& n : bmt::models::preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  constexpr std::int64_t max_size = std::int64_t{1} << 24;  // as model_config() checks
  const auto size = whole_number(0, max_size, "a size in [1, " + std::to_string(max_size) + "] (or 0: the preset's)");
  const auto at_least = [](std::int64_t lo, const std::string& note) {
    const std::int64_t hi = std::numeric_limits<std::int64_t>::max();
    return whole_number(lo, hi, "a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]" +
                                    (note.empty() ? "" : " (" + note + ")"));
  };

  t.add("--model", o.model, "Model preset: " + presets + " (default tiny, or --init-from's, or --resume's)");
  t.add("--init-from", o.init_from,
        "Start from a Hugging Face checkpoint directory (config.json and model.safetensors, or its sharded files "
        "and index): GPT2LMHeadModel or LlamaForCausalLM, bf16, f16 or f32; the model's shape comes from its "
        "config.json, and the optimizer starts fresh (--resume still continues a bmt-train checkpoint)");
  t.add_whole("--layers", o.layers, "Override the preset's number of blocks", size);
  t.add_whole("--heads", o.heads, "Override the preset's attention heads", size);
  t.add_whole("--kv-heads", o.kv_heads, "Override the preset's key/value heads (Llama's grouped-query attention; "
                                        "a divisor of --heads)", size);
  t.add("--rope-theta", o.rope_theta, "Override the preset's rotary base theta (Llama)");
  t.add_whole("--dim", o.dim, "Override the preset's model width", size);
  t.add_whole("--ffn", o.ffn, "Override the preset's MLP hidden size", size);
  t.add_whole("--vocab", o.vocab, "Override the preset's vocabulary size", size);
  t.add("--dtype", o.dtype, "Parameter and compute dtype: f32, bf16 or f16 (default f32; with --resume, the "
                            "checkpoint's)")
      ->check(training_dtype());
  t.add("--dropout", o.dropout, "Dropout probability in the blocks")->capture_default_str();

  t.add_whole("--zero-level", o.zero_level, "3: gather parameters in forward and backward; 2: keep them from "
                                            "forward to backward", whole_number(2, 3, "2 or 3"))
      ->capture_default_str();
  t.add_flag("!--no-checkpointing", o.checkpointing, "Keep block activations instead of recomputing them");
  t.add_flag("--keep-attention", o.keep_attention, "Recompute blocks except their attention: keep its output "
                                                   "from forward (batch x seq x dim elements more per block)");
  t.add_flag("--keep-residual", o.keep_residual,
             "Recompute blocks except their residual sums: keep the attention branch's sum from forward, so "
             "that the recompute skips it and the attention projection (batch x seq x dim elements more per "
             "block)");
  t.add_whole("--keep-blocks", o.keep_blocks,
              "The last N blocks keep their activations from forward instead of recomputing them (all blocks "
              "when N is at least their number)", at_least(0, ""))
      ->capture_default_str();
  t.add_whole("--prefetch", o.prefetch, "Blocks whose parameters are gathered ahead of use",
              whole_number(0, max_size, "a number of blocks in [0, " + std::to_string(max_size) + "]"))
      ->capture_default_str();
  t.add_flag("--offload", o.offload,
             "Keep the optimizer's master weights and moments in host memory (16 bytes a parameter) and update "
             "them there on a pool of threads, as each block's gradient arrives during the backward");
  t.add_flag("--offload-delayed", o.offload_delayed,
             "With --offload: copy each update to the device during the next step's backward, so that the host "
             "update runs beside the whole next step; each gradient is then taken one update behind");
  t.add_whole("--loss-chunk", o.loss_chunk,
              "Run the head and loss this many token rows at a time, never holding all the logits "
              "(bmt::linear_cross_entropy; one more head GEMM); 0: all rows at once", at_least(0, "0: all rows"))
      ->capture_default_str();

  t.add("--data", o.data, "synthetic, or a file or glob of token files (llm.c shards of uint16 or uint32 tokens, or raw uint16)")
      ->capture_default_str();
  t.add("--data-format", o.data_format,
        "Token files of --data and --val-data: auto (llm.c shards by their header; headerless uint16 only when "
        "named train.bin or val.bin, as nanoGPT writes them), llmc, or raw (headerless uint16)")
      ->capture_default_str()
      ->check(one_of({"auto", "llmc", "raw"}));
  t.add("--val-data", o.val_data, "Validation token files (default: held-out synthetic data, or none)");
  t.add_whole("--batch", o.batch, "Global batch: sequences per optimizer step over all ranks", at_least(1, ""))
      ->capture_default_str();
  t.add_whole("--micro-batch", o.micro_batch, "Sequences per rank per forward (gradient accumulation); "
                                              "default the whole local batch", at_least(0, "0: the whole local batch"));
  t.add_whole("--seq", o.seq, "Tokens per sequence", at_least(1, ""))->capture_default_str();
  t.add_whole("--seed", o.seed, "Seed of initialization, data order and dropout", any_whole<std::uint64_t>())
      ->capture_default_str();

  t.add_whole("--steps", o.steps, "Optimizer steps", at_least(0, ""))->capture_default_str();
  t.add("--lr", o.lr, "Peak learning rate (default: the preset's: 1e-2 tiny, 6e-4 gpt2-*, 3e-4 llama-1b)");
  t.add("--min-lr", o.min_lr, "Final learning rate of linear/cosine schedules")->capture_default_str();
  t.add("--schedule", o.schedule, "constant, linear, cosine, noam or exponential")
      ->capture_default_str()
      ->check(one_of({"constant", "linear", "cosine", "noam", "exponential"}));
  t.add_whole("--warmup", o.warmup, "Linear warmup steps", at_least(0, ""))->capture_default_str();
  t.add("--weight-decay", o.weight_decay, "AdamW weight decay (matrices only)")->capture_default_str();
  t.add("--beta1", o.beta1, "AdamW beta1")->capture_default_str();
  t.add("--beta2", o.beta2, "AdamW beta2")->capture_default_str();
  t.add("--grad-clip", o.grad_clip, "Clip the global gradient norm to this (0: off)")->capture_default_str();
  t.add("--loss-scale", o.loss_scale, "Initial loss scale (default 65536, dynamic, for f16; 1 otherwise)");
  t.add_flag("--stop-on-nonfinite", o.stop_on_nonfinite, "Stop instead of skipping a step with inf/nan gradients");

  t.add("--metrics", o.metrics, "Write one JSON object per step to this .jsonl file (rank 0)");
  t.add("--plot", o.plot, "Loss curve picture (SVG); default: the metrics path with .svg");
  t.add_whole("--log-every", o.log_every, "Print a line every N steps", at_least(1, ""))->capture_default_str();
  t.add_whole("--eval-every", o.eval_every, "Evaluate the validation loss every N steps (0: never)",
              at_least(0, "0: never"));
  t.add_whole("--eval-batches", o.eval_batches, "Global batches per evaluation", at_least(1, ""))
      ->capture_default_str();
  t.add("--save", o.save, "Checkpoint directory (step-N subdirectories, the last --keep-last kept); it may hold "
                          "no other run's checkpoints");
  t.add_whole("--save-every", o.save_every, "Save every N steps (0: only at the end)", at_least(0, "0: only at the end"));
  t.add_whole("--keep-last", o.keep_last, "Complete checkpoints to keep",
              whole_number(0, std::numeric_limits<int>::max(),
                           "a whole number in [0, " + std::to_string(std::numeric_limits<int>::max()) + "] (0: keep all)"))
      ->capture_default_str();
  t.add("--resume", o.resume, "Resume from a checkpoint directory (its newest complete step) or a step-N directory; "
                              "the model is the checkpoint's (model and shape flags, if given, must agree with it)");
  t.add_flag("--progress", o.progress, "Show the live progress bar (default: only on an interactive terminal "
                                       "outside an MPI launcher)");
  t.add_flag("--no-progress", o.no_progress, "Never show the progress bar");
  t.add("--timeline", o.timeline, "Write a per-stream timeline of the blocks' compute, gathers and "
                                  "reduce-scatters as a Chrome trace (one file per rank: trace.json -> "
                                  "trace.rank0.json; open in ui.perfetto.dev)");
  t.add_flag("--timeline-ops", o.timeline_ops, "With --timeline: also one span per op's forward and backward "
                                               "(bench/timeline_summary.py adds them up)")
      ->needs("--timeline");
  t.add("--export-hf", o.export_hf,
        "After training, write the model to this directory as a Hugging Face checkpoint that transformers' "
        "from_pretrained loads (config.json and safetensors in the hub's names)");
  t.add("--export-shard-gb", o.export_shard_gb,
        "Largest safetensors file of --export-hf, in GB (10^9 bytes); larger exports are sharded with an index")
      ->capture_default_str();
  t.add_flag("--eval-only", o.eval_only,
             "Evaluate the model (--init-from's, or --resume's) on every sequence of --val-data once and print the "
             "loss and perplexity; nothing is trained or saved");
  t.add("--eval-logits", o.eval_logits, "With --eval-only: write the logits of the first validation sequence to this "
                                        "file (raw little-endian f32, [seq, vocab])")
      ->needs("--eval-only");

  // Every key of a config file is one of these options, set once, with a value of its type.
  auto config = std::make_shared<StrictConfig>(t.keys());
  config->set_path(config_path(argc, argv));
  app.config_formatter(config);
  app.allow_config_extras(CLI::config_extras_mode::error);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    exit_code = 0;
    if (!bmt::is_initialized() || bmt::rank() == 0) std::cout << app.help();
    return false;
  } catch (const CLI::FileError& e) {
    BMT_REQUIRE(false, "--config: expected a readable TOML file, found none at '" << config_path(argc, argv) << "'");
  } catch (const CLI::ConfigError& e) {
    BMT_REQUIRE(false, "--config: " << e.what());
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    BMT_REQUIRE(false, what);
  }
  // The ranges of single values are checked as they are parsed (above); what remains relates several.
  constexpr std::int64_t max_tokens = std::int64_t{1} << 40;
  BMT_REQUIRE(o.batch <= max_tokens / o.seq, "--batch and --seq: expected at most " << max_tokens
                                                << " tokens per step, found " << o.batch << " x " << o.seq);
  BMT_REQUIRE(o.offload || !o.offload_delayed, "--offload-delayed: expected --offload with it, found it alone");
  // What a recompute keeps means nothing without one: asked for both, say so rather than ignore it.
  for (const auto& [flag, set] : {std::pair{"--keep-attention", o.keep_attention}, {"--keep-residual", o.keep_residual}})
    BMT_REQUIRE(!set || o.checkpointing,
                flag << ": expected blocks that recompute, found --no-checkpointing (every activation kept)");
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
  BMT_REQUIRE(std::isfinite(o.export_shard_gb) && o.export_shard_gb > 0.0,
              "--export-shard-gb: expected a positive size, found " << o.export_shard_gb);
  if (o.eval_only) {
    BMT_REQUIRE(!o.val_data.empty(), "--eval-only: expected --val-data token files to evaluate on, found none");
    for (const auto& [flag, value] : {std::pair{"--save", o.save}, std::pair{"--export-hf", o.export_hf}})
      BMT_REQUIRE(value.empty(), "--eval-only: expected nothing saved, found " << flag << " " << value);
    // Outputs of training: an evaluation would leave them unwritten.
    for (const auto& [flag, value] : {std::pair{"--plot", o.plot}, std::pair{"--timeline", o.timeline}})
      BMT_REQUIRE(value.empty(), "--eval-only: expected only the evaluation's outputs (--metrics, --eval-logits), found "
                                     << flag << " " << value);
  }
  return true;
}

}  // namespace bmt_train
