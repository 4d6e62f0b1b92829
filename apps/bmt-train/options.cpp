#include "options.hpp"

#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <tuple>
#include <type_traits>
#include <variant>

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/models/hf_config.hpp>

#include "config_file.hpp"
#include "option_table.hpp"

namespace bmt_train {

namespace {

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
  m.fp8 = fp8;
  return m;
}

float TrainOptions::peak_lr(const ModelConfig& c) const {
  const float peak = lr > 0 ? lr : c.default_lr;
  BMT_REQUIRE(min_lr <= peak, "--min-lr " << min_lr << ": expected at most the peak learning rate " << peak
                                          << (lr > 0 ? " (--lr)" : " (the preset's; --lr sets it)") << ", found "
                                          << min_lr);
  return peak;
}

std::string TrainOptions::model_name() const {
  if (!model.empty()) return model;
  return init_from.empty() ? "tiny" : init_from;
}

ModelConfig TrainOptions::model_config() const {
  // The command line's values are checked as they are parsed; options set in code are checked here.
  constexpr std::int64_t max_size = bmt::models::kMaxModelSize;
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
  std::string description;
  const auto item = [&description](const std::string& key, const nlohmann::json& value) {
    description += (description.empty() ? "" : "; ") + key + "=";
    description += value.is_string() ? value.get<std::string>() : value.dump();
  };
  const nlohmann::json model = bmt::models::to_json(c);  // items() below refers to it
  for (const auto& [key, value] : model.items()) item(key, value);
  for (const OptionRow& row : option_table())
    if (row.agree == Agree::value) item(row.key, option_value(o, row));
  return description;
}

bool parse_options(int argc, char** argv, TrainOptions& o, int& exit_code) {
  CLI::App app{"bmt-train: train a GPT with ZeRO-3 on any number of ranks.\n"
               "Launch with mpirun -np N bmt-train ... or srun bmt-train ...; topology comes from MPI."};
  app.set_config("--config", "", "TOML file of options: one key = value a line, keys are the long flag names "
                                 "(numbers bare, strings quoted, switches true or false)");
  // A flag given twice (in the config file and on the command line, say): the last one wins.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::map<std::string, ConfigValue> keys;  // what each option takes in a config file
  for (const OptionRow& row : option_table()) {
    CLI::Option* option = std::visit(
        [&](auto member) -> CLI::Option* {
          auto& value = o.*member;
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, bool>) {
            keys[row.flag.substr(2)] = ConfigValue::flag;
            return app.add_flag((row.clears ? "!" : "") + row.flag, value, row.help);
          } else {
            keys[row.flag.substr(2)] = std::is_same_v<T, std::string> ? ConfigValue::text : ConfigValue::number;
            return app.add_option(row.flag, value, row.help);
          }
        },
        row.member);
    if (row.check)
      option->check(CLI::Validator([check = row.check](std::string& text) { return check(text); }, row.value_name));
    if (row.shows_default) option->capture_default_str();
    if (!row.needs.empty()) option->needs(row.needs);
  }

  // Every key of a config file is one of these options, set once, with a value of its type.
  auto config = std::make_shared<StrictConfig>(std::move(keys));
  config->set_path(config_path(argc, argv));
  app.config_formatter(config);
  app.allow_config_extras(CLI::config_extras_mode::error);

  try {
    app.parse(argc, argv);
    // --no-checkpointing and the keep flags say what blocks keep: given without --recompute, they
    // choose it (full) instead of being refused beside the default's planner.
    if (app.get_option("--recompute")->count() == 0 &&
        (!o.checkpointing || o.keep_attention || o.keep_residual || o.keep_blocks > 0))
      o.recompute = "full";
  } catch (const CLI::CallForHelp& e) {
    exit_code = 0;
    int mpi = 0, rank = 0;
    BMT_MPI_CHECK(MPI_Initialized(&mpi));
    if (mpi) BMT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    if (rank == 0) std::cout << app.help();
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
  BMT_REQUIRE(!o.offload || !o.update_in_forward,
              "--update-in-forward: expected the optimizer on the device, found --offload (whose update runs on the "
              "host as the gradients arrive)");
  // What a recompute keeps means nothing without one: asked for both, say so rather than ignore it.
  for (const auto& [flag, set] : {std::pair{"--keep-attention", o.keep_attention}, {"--keep-residual", o.keep_residual}})
    BMT_REQUIRE(!set || o.checkpointing,
                flag << ": expected blocks that recompute, found --no-checkpointing (every activation kept)");
  // --recompute auto chooses what the keep flags would say.
  BMT_REQUIRE(o.recompute != "auto" || (o.checkpointing && !o.keep_attention && !o.keep_residual && o.keep_blocks == 0),
              "--recompute auto: expected it to choose what blocks keep, found --no-checkpointing, --keep-attention, "
              "--keep-residual or --keep-blocks beside it (give those with --recompute full)");
  // Validation comes with synthetic data; token files have none unless --val-data names some.
  BMT_REQUIRE(o.eval_every == 0 || o.data == "synthetic" || !o.val_data.empty(),
              "--eval-every " << o.eval_every << ": expected validation data (--val-data token files), found none "
                              << "beside the token files of --data");
  // bf16 moments lose a smaller decay a step to rounding (bmt::optim::kMaxBf16MomentBeta).
  for (auto [flag, beta] : {std::pair{"--beta1", o.beta1}, std::pair{"--beta2", o.beta2}})
    BMT_REQUIRE(o.moments != "bf16" || beta <= bmt::optim::kMaxBf16MomentBeta,
                flag << ": expected at most " << bmt::optim::kMaxBf16MomentBeta << " with --moments bf16, found "
                     << beta);
  // Logits are whole rows of the vocabulary, which no rank of a tensor-parallel group holds.
  BMT_REQUIRE(o.tp == 1 || o.eval_logits.empty(),
              "--tp " << o.tp << ": expected no --eval-logits (whole logits need --tp 1), found --eval-logits "
                      << o.eval_logits);
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

bmt::InitOptions init_options(const TrainOptions& o) {
  bmt::InitOptions init;
  init.shard_group = bmt::parse_shard_group(o.shard_group, "--shard-group");
  init.tp_size = o.tp;
  return init;
}

}  // namespace bmt_train
