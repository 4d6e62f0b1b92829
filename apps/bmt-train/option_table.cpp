#include "option_table.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <type_traits>
#include <utility>

#include <bmtrain/models/model_config.hpp>
#include <bmtrain/optim/adamw.hpp>
#include <bmtrain/runtime/error.hpp>

namespace bmt_train {

namespace {

std::string text_of(__int128 v) {
  std::string digits;
  const bool negative = v < 0;
  unsigned __int128 m = negative ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
  do digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(m % 10)));
  while ((m /= 10) != 0);
  return (negative ? "-" : "") + digits;
}

// A whole number in [lo, hi], in decimal digits with an optional minus sign: CLI11 alone would
// clamp 99999999999999999999 to the type's largest value, wrap -1 around an unsigned type and take
// 0x10 as 16. `what` says what is expected; by default "a whole number in [lo, hi]".
Check whole_number(__int128 lo, __int128 hi, std::string what = "") {
  if (what.empty()) what = "a whole number in [" + text_of(lo) + ", " + text_of(hi) + "]";
  return [lo, hi, what](const std::string& text) -> std::string {
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
  };
}

// A whole number of at least `lo`, up to int64's largest; `note` says what a special value means.
Check at_least(std::int64_t lo, const std::string& note = "") {
  const std::int64_t hi = std::numeric_limits<std::int64_t>::max();
  return whole_number(lo, hi, "a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]" +
                                  (note.empty() ? "" : " (" + note + ")"));
}

// A number an f32 option can hold, and of the option's range: all of the text is a number, a
// finite one within single precision (rather than becoming inf), and finite and in [lo, hi] (`lo`
// itself excluded when `open_low`, `hi` when `open_high`). `what` says what is expected.
Check real_number(double lo, double hi, bool open_low, bool open_high, std::string what) {
  return [=](const std::string& text) -> std::string {
    char* end = nullptr;
    errno = 0;
    const double v = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || std::isspace(static_cast<unsigned char>(text[0])))
      return "expected a number, found '" + text + "'";
    if (std::isfinite(v) && (errno == ERANGE || std::fabs(v) > std::numeric_limits<float>::max()))
      return "expected a number within single precision (below 3.4e38 in magnitude), found '" + text + "'";
    if (!std::isfinite(v) || v < lo || (open_low && v == lo) || v > hi || (open_high && v == hi))
      return "expected " + what + ", found '" + text + "'";
    return std::string();
  };
}

// A finite number >= lo (> lo when `open_low`).
Check real_at_least(double lo, bool open_low, const std::string& note = "") {
  std::ostringstream what;
  what << "a finite number " << (open_low ? "> " : ">= ") << lo << (note.empty() ? "" : " (" + note + ")");
  return real_number(lo, std::numeric_limits<double>::infinity(), open_low, false, what.str());
}

// The floating dtypes a model can be trained in, under every spelling parse_dtype accepts.
Check training_dtype() {
  return [](const std::string& text) -> std::string {
    for (const char* name : {"f32", "fp32", "float32", "bf16", "bfloat16", "f16", "fp16", "float16"})
      if (text == name) return std::string();
    return "expected f32, bf16 or f16 (or fp32, float32, bfloat16, fp16, float16), found '" + text + "'";
  };
}

// One of `names`.
Check one_of(std::vector<std::string> names) {
  std::string list;
  for (std::size_t i = 0; i < names.size(); ++i)
    list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return [names, list](const std::string& text) -> std::string {
    for (const auto& n : names)
      if (text == n) return std::string();
    return "expected " + list + ", found '" + text + "'";
  };
}

// A row as the table writes it: the flag, the member and the help, then what differs from the
// defaults (a number takes its type's range, agreed on by the ranks, not in the trajectory).
class Row {
 public:
  template <class T>
  Row(const char* flag, T TrainOptions::*member, std::string help) {
    r_.flag = flag;
    r_.member = member;
    r_.help = std::move(help);
    r_.key = r_.flag.substr(2);
    for (char& c : r_.key) c = c == '-' ? '_' : c;
    if constexpr (std::is_floating_point_v<T>)
      takes(real_number(-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(), false,
                        false, "a finite number"));
    else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
      takes(whole_number(std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
  }
  Row& takes(Check check, const char* value_name = nullptr) {
    r_.check = std::move(check);
    const bool real = std::holds_alternative<float TrainOptions::*>(r_.member) ||
                      std::holds_alternative<double TrainOptions::*>(r_.member);
    r_.value_name = value_name ? value_name : real ? "FLOAT" : "INT";
    return *this;
  }
  Row& named(const char* key) { return r_.key = key, *this; }
  Row& shows_default() { return r_.shows_default = true, *this; }
  Row& needs(const char* flag) { return r_.needs = flag, *this; }
  Row& clears() { return r_.clears = true, *this; }
  Row& agree(Agree a) { return r_.agree = a, *this; }
  Row& on_resume(Effect e, const char* key = nullptr) {
    r_.effect = e;
    if (key) r_.key = key;
    return *this;
  }
  Row& sets_model(const char* field) {
    r_.model_field = field;
    return agree(Agree::model);
  }
  OptionRow row() && { return std::move(r_); }

 private:
  OptionRow r_;
};

std::vector<OptionRow> make_table() {
  std::vector<OptionRow> t;
  const auto add = [&t](Row r) { t.push_back(std::move(r).row()); };
  using O = TrainOptions;
  std::string presets;
  for (const auto& n : bmt::models::preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  const std::string max_size = std::to_string(bmt::models::kMaxModelSize);
  const auto size = [&] {
    return whole_number(0, bmt::models::kMaxModelSize, "a size in [1, " + max_size + "] (or 0: the preset's)");
  };

  // model
  add(Row("--model", &O::model, "Model preset: " + presets + " (default tiny, or --init-from's, or --resume's)").agree(Agree::model));
  add(Row("--init-from", &O::init_from,
          "Start from a Hugging Face checkpoint directory (config.json and model.safetensors, or its sharded files "
          "and index): GPT2LMHeadModel or LlamaForCausalLM, bf16, f16 or f32; the model's shape comes from its "
          "config.json, and the optimizer starts fresh (--resume still continues a bmt-train checkpoint)"));
  add(Row("--layers", &O::layers, "Override the preset's number of blocks").takes(size()).sets_model("layers"));
  add(Row("--heads", &O::heads, "Override the preset's attention heads").takes(size()).sets_model("heads"));
  add(Row("--kv-heads", &O::kv_heads, "Override the preset's key/value heads (Llama's grouped-query attention; "
                                      "a divisor of --heads)").takes(size()).sets_model("kv_heads"));
  add(Row("--rope-theta", &O::rope_theta, "Override the preset's rotary base theta (Llama)")
          .takes(real_at_least(0, false, "0: the preset's"))
          .sets_model("rope"));
  add(Row("--dim", &O::dim, "Override the preset's model width").takes(size()).sets_model("dim"));
  add(Row("--ffn", &O::ffn, "Override the preset's MLP hidden size").takes(size()).sets_model("ffn"));
  add(Row("--vocab", &O::vocab, "Override the preset's vocabulary size").takes(size()).sets_model("vocab"));
  add(Row("--dtype", &O::dtype,
          "Parameter and compute dtype: f32, bf16 or f16 (default f32; with --resume, the checkpoint's)")
          .takes(training_dtype(), "DTYPE")
          .sets_model("dtype"));
  add(Row("--dropout", &O::dropout, "Dropout probability in the blocks")
          .takes(real_number(0, 1, false, true, "a probability in [0, 1)"))
          .shows_default()
          .on_resume(Effect::updates)
          .sets_model("dropout"));
  add(Row("--fp8", &O::fp8,
          "Run the blocks' linear layers (attention projections and MLP) in FP8: e4m3 activations and weights, "
          "e5m2 gradients, per-tensor scales, f32 sums, the weights gathered as e4m3 codes (half bf16's bytes); "
          "the embedding, final norm and head stay in --dtype")
          .on_resume(Effect::updates));

  // distribution and memory
  add(Row("--zero-level", &O::zero_level, "3: gather parameters in forward and backward; 2: keep them from "
                                          "forward to backward")
          .takes(whole_number(2, 3, "2 or 3"))
          .shows_default());
  add(Row("--shard-group", &O::shard_group,
          "world: shard parameters, gradients and optimizer state over every data-parallel rank; node: shard them "
          "within each node and replicate them across nodes (hybrid sharding: gathers and reduce-scatters stay "
          "inside the node, and each gradient shard is averaged across the nodes by an all-reduce)")
          .takes(one_of({"world", "node"}), "NAME")
          .shows_default()
          .on_resume(Effect::rounding));
  add(Row("--tp", &O::tp,
          "Tensor-parallel ranks: each block's attention heads and MLP width, the vocabulary and the loss are split "
          "over groups of N consecutive ranks of a node, and the batch over the world size / N data-parallel groups "
          "(N must divide the ranks of a node, the heads, the MLP width and the vocabulary; Llama's key/value heads "
          "must be divisible by N or divide it)")
          .takes(whole_number(1, 1024, "a whole number in [1, 1024]"), "N")
          .shows_default()
          .on_resume(Effect::rounding));
  add(Row("--no-checkpointing", &O::checkpointing, "Keep block activations instead of recomputing them")
          .clears()
          .named("checkpointing"));
  add(Row("--keep-attention", &O::keep_attention, "Recompute blocks except their attention: keep its output "
                                                  "from forward (batch x seq x dim elements more per block)"));
  add(Row("--keep-residual", &O::keep_residual,
          "Recompute blocks except their residual sums: keep the attention branch's sum from forward, so "
          "that the recompute skips it and the attention projection (batch x seq x dim elements more per block)"));
  add(Row("--keep-blocks", &O::keep_blocks,
          "The last N blocks keep their activations from forward instead of recomputing them (all blocks "
          "when N is at least their number)")
          .takes(at_least(0))
          .shows_default());
  add(Row("--recompute", &O::recompute,
          "auto: keep as much of the blocks' activations as fits in this rank's free memory after the estimated "
          "state and buffers (first the attention outputs, then the residual sums, then whole blocks from the last), "
          "as the startup table says; full: blocks recompute their activations in backward, but for what "
          "--keep-attention, --keep-residual and --keep-blocks keep (those flags and --no-checkpointing, given "
          "without --recompute, choose full)")
          .takes(one_of({"full", "auto"}), "NAME")
          .shows_default());
  add(Row("--prefetch", &O::prefetch, "Blocks whose parameters are gathered ahead of use")
          .takes(whole_number(0, bmt::models::kMaxModelSize, "a number of blocks in [0, " + max_size + "]"))
          .shows_default());
  add(Row("--offload", &O::offload,
          "Keep the optimizer's master weights and moments in host memory (16 bytes a parameter, 12 with "
          "--moments bf16) and update them there on a pool of threads, as each block's gradient arrives during "
          "the backward")
          .on_resume(Effect::rounding));
  add(Row("--offload-delayed", &O::offload_delayed,
          "With --offload: copy each update to the device during the next step's backward, so that the host "
          "update runs beside the whole next step; each gradient is then taken one update behind")
          .on_resume(Effect::updates));
  add(Row("--update-in-forward", &O::update_in_forward,
          "Run each block's optimizer update when the next forward gathers the block, on the gather stream "
          "beside the compute of the blocks before it, instead of all at once after the backward (the same "
          "updates; each block's gradient shard lives until its update); not with --offload"));
  add(Row("--loss-chunk", &O::loss_chunk,
          "Run the head and loss this many token rows at a time, never holding all the logits "
          "(bmt::linear_cross_entropy; the head's gradients made as the loss is, held in f32 to the "
          "backward); 0: all rows at once")
          .takes(at_least(0, "0: all rows"))
          .shows_default());

  // data
  add(Row("--data", &O::data, "synthetic, or a file or glob of token files (llm.c shards of uint16 or uint32 "
                              "tokens, or raw uint16)")
          .shows_default()
          .on_resume(Effect::data));
  add(Row("--data-format", &O::data_format,
          "Token files of --data and --val-data: auto (llm.c shards by their header; headerless uint16 only when "
          "named train.bin or val.bin, as nanoGPT writes them), llmc, or raw (headerless uint16)")
          .takes(one_of({"auto", "llmc", "raw"}), "NAME")
          .shows_default()
          .on_resume(Effect::data));
  add(Row("--val-data", &O::val_data, "Validation token files (default: held-out synthetic data with --data "
                                      "synthetic; none with token files)"));
  add(Row("--batch", &O::batch, "Global batch: sequences per optimizer step over all ranks")
          .takes(at_least(1))
          .shows_default()
          .on_resume(Effect::data));
  add(Row("--micro-batch", &O::micro_batch, "Sequences per rank per forward (gradient accumulation); "
                                            "default the whole local batch")
          .takes(at_least(0, "0: the whole local batch"))
          .on_resume(Effect::rounding));
  add(Row("--seq", &O::seq, "Tokens per sequence").takes(at_least(1)).shows_default().on_resume(Effect::data));
  add(Row("--seed", &O::seed, "Seed of initialization, data order and dropout").shows_default().on_resume(Effect::data));

  // optimization
  add(Row("--steps", &O::steps, "Optimizer steps").takes(at_least(0)).shows_default()
          .on_resume(Effect::length, "schedule_steps"));
  add(Row("--lr", &O::lr, "Peak learning rate, above 0 (default: the preset's: 1e-2 tiny, 6e-4 gpt2-*, 3e-4 "
                          "llama-1b)")
          .takes(real_at_least(0, true, "leave it out for the preset's"))
          .on_resume(Effect::learning_rates));
  add(Row("--min-lr", &O::min_lr, "Final learning rate of linear/cosine schedules, at most --lr")
          .takes(real_at_least(0, false))
          .shows_default()
          .on_resume(Effect::learning_rates));
  add(Row("--schedule", &O::schedule, "constant, linear, cosine, noam or exponential")
          .takes(one_of({"constant", "linear", "cosine", "noam", "exponential"}), "NAME")
          .shows_default()
          .on_resume(Effect::learning_rates));
  add(Row("--warmup", &O::warmup, "Linear warmup steps").takes(at_least(0)).shows_default()
          .on_resume(Effect::learning_rates));
  add(Row("--weight-decay", &O::weight_decay, "AdamW weight decay (matrices only)")
          .takes(real_at_least(0, false))
          .shows_default()
          .on_resume(Effect::updates));
  for (auto [flag, member] : {std::pair{"--beta1", &O::beta1}, std::pair{"--beta2", &O::beta2}})
    add(Row(flag, member, std::string("AdamW ") + (flag + 2))
            .takes(real_number(0, 1, false, true, "a number in [0, 1)"))
            .shows_default()
            .on_resume(Effect::updates));
  add(Row("--moments", &O::moments,
          "AdamW's moments: f32, or bf16 (4 bytes a parameter fewer; betas of at most 0.99); master weights and "
          "the update's arithmetic stay f32, and a resume converts the checkpoint's moments")
          .takes(one_of({"f32", "bf16"}), "NAME")
          .shows_default()
          .on_resume(Effect::moments));
  add(Row("--grad-clip", &O::grad_clip, "Clip the global gradient norm to this (0: off)")
          .takes(real_at_least(0, false, "0: off"))
          .shows_default()
          .on_resume(Effect::updates));
  add(Row("--loss-scale", &O::loss_scale, "Initial loss scale, above 0 (default: 65536, dynamic, for f16; 1 "
                                          "otherwise)")
          .takes(real_at_least(0, true, "leave it out for 65536 with f16, 1 otherwise")));
  add(Row("--stop-on-nonfinite", &O::stop_on_nonfinite, "Stop instead of skipping a step with inf/nan gradients"));

  // output and checkpoints
  add(Row("--metrics", &O::metrics, "Write one JSON object per step to this .jsonl file (rank 0)").agree(Agree::no));
  add(Row("--plot", &O::plot, "Loss curve picture (SVG); default: the metrics path with .svg").agree(Agree::no));
  add(Row("--log-every", &O::log_every, "Print a line every N steps").takes(at_least(1)).shows_default()
          .agree(Agree::no));
  add(Row("--eval-every", &O::eval_every, "Evaluate the validation loss every N steps (0: never; needs "
                                          "validation data: --val-data, or --data synthetic)")
          .takes(at_least(0, "0: never")));
  add(Row("--eval-batches", &O::eval_batches, "Global batches per evaluation").takes(at_least(1)).shows_default());
  add(Row("--save", &O::save, "Checkpoint directory (step-N subdirectories, the last --keep-last kept); it may hold "
                              "no other run's checkpoints"));
  add(Row("--save-every", &O::save_every, "Save every N steps (0: only at the end)")
          .takes(at_least(0, "0: only at the end")));
  add(Row("--keep-last", &O::keep_last, "Complete checkpoints to keep")
          .takes(whole_number(0, std::numeric_limits<int>::max(),
                              "a whole number in [0, " + std::to_string(std::numeric_limits<int>::max()) +
                                  "] (0: keep all)"))
          .shows_default());
  add(Row("--resume", &O::resume, "Resume from a checkpoint directory (its newest complete step) or a step-N "
                                  "directory; the model is the checkpoint's (model and shape flags, if given, must "
                                  "agree with it)"));
  add(Row("--progress", &O::progress, "Show the live progress bar (default: only on an interactive terminal "
                                      "outside an MPI launcher)")
          .agree(Agree::no));
  add(Row("--no-progress", &O::no_progress, "Never show the progress bar").agree(Agree::no));
  add(Row("--timeline", &O::timeline, "Write a per-stream timeline of the blocks' compute, gathers and "
                                      "reduce-scatters as a Chrome trace (one file per rank: trace.json -> "
                                      "trace.rank0.json; open in ui.perfetto.dev)")
          .agree(Agree::no));
  add(Row("--timeline-ops", &O::timeline_ops, "With --timeline: also one span per op's forward and backward "
                                              "(bench/timeline_summary.py adds them up)")
          .needs("--timeline")
          .agree(Agree::no));
  add(Row("--export-hf", &O::export_hf,
          "After training, write the model to this directory as a Hugging Face checkpoint that transformers' "
          "from_pretrained loads (config.json and safetensors in the hub's names)"));
  add(Row("--export-shard-gb", &O::export_shard_gb,
          "Largest safetensors file of --export-hf, in GB (10^9 bytes; at least 1e-06, a kilobyte); larger exports "
          "are sharded with an index")
          .takes(real_number(1e-6, 1e9, false, false, "a size in [1e-06, 1e+09] GB (1 KB to 1 PB)"))
          .shows_default());
  add(Row("--eval-only", &O::eval_only,
          "Evaluate the model (--init-from's, or --resume's) on every sequence of --val-data once and print the "
          "loss and perplexity; nothing is trained or saved"));
  add(Row("--eval-logits", &O::eval_logits, "With --eval-only: write the logits of the first validation sequence "
                                            "to this file (raw little-endian f32, [seq, vocab]; needs --tp 1: above it no rank "
                                            "holds whole rows of logits)")
          .needs("--eval-only")
          .agree(Agree::no));
  return t;
}

}  // namespace

const std::vector<OptionRow>& option_table() {
  static const std::vector<OptionRow> table = make_table();
  return table;
}

nlohmann::json option_value(const TrainOptions& options, const OptionRow& row) {
  return std::visit([&](auto member) { return nlohmann::json(options.*member); }, row.member);
}

std::string flag_of_model_field(const std::string& field) {
  for (const OptionRow& r : option_table())
    if (r.model_field == field) return r.flag;
  return std::string();
}

}  // namespace bmt_train
