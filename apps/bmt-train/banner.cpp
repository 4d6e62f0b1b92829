#include "banner.hpp"

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/kernels/gemm.hpp>
#include <bmtrain/models/causal_lm.hpp>
#include <bmtrain/models/memory_plan.hpp>

#include "step_traffic.hpp"
#include "units.hpp"

namespace bmt_train {

namespace {

// The banner's account of what backward recomputes.
std::string recompute_description(const bmt::models::CausalLMOptions& o, std::int64_t layers) {
  if (!o.checkpoint.use_checkpoint || o.keep_blocks >= layers) return "  recompute off";
  std::string text = "  recompute on";
  if (o.checkpoint.keep_attention) text += ", attention kept";
  if (o.checkpoint.keep_residual) text += ", residual sums kept";
  if (o.keep_blocks > 0)
    text += ", last " + std::to_string(o.keep_blocks) + " block" + (o.keep_blocks > 1 ? "s" : "") + " kept";
  return text;
}

// The tensor-parallel group's all-gathers and reduce-scatters of a micro-batch's activations: a
// block's two of each in forward (before its column-parallel and after its row-parallel layers), as
// many again in backward and in a recompute (counted as a whole forward), and the embedding's
// reduce-scatter and the loss's all-gather with their backward.
double tp_collectives(const bmt::models::CausalLMOptions& options, std::int64_t layers, bool eval_only) {
  constexpr double kForward = 4, kEnds = 2;
  if (eval_only) return kForward * static_cast<double>(layers) + kEnds;
  double n = 2 * kEnds;
  for (std::int64_t i = 0; i < layers; ++i)
    n += 2 * kForward + (bmt::models::block_options(options, layers, i).use_checkpoint ? kForward : 0);
  return n;
}

// The banner's account of the shard group and of what a rank sends a step (step_traffic.hpp).
std::string traffic_description(const TrainOptions& o, const ModelConfig& cfg, const RunPlan& f) {
  const auto& ctx = bmt::context();
  const bmt::Mesh& mesh = ctx.mesh();
  TrafficPlan p;
  // The parameters this rank's shard group gathers: its tp rank's parts (all of them at tp 1), the
  // blocks' FP8 weights as 1-byte codes.
  const auto parameters = static_cast<double>(cfg.parameter_count(mesh.tp_size));
  const auto float8 = static_cast<double>(cfg.layers * bmt::models::block_float8_elements(cfg, o.model_options()));
  p.parameter_bytes = (parameters - float8) * static_cast<double>(bmt::dtype_size(cfg.dtype)) + float8;
  p.gradient_bytes = o.eval_only ? 0.0 : parameters * static_cast<double>(sizeof(float));
  p.shard_size = mesh.shard_size;
  p.shard_ranks_on_node = mesh.shard_group == bmt::ShardGroup::node
                              ? mesh.shard_size
                              : std::min(mesh.shard_size, ctx.topology().local_size / mesh.tp_size);
  p.replicas = mesh.replica_count;
  p.gathers_per_pass = o.eval_only || o.zero_level == 2 ? 1 : 2;
  p.micro_batches = f.accumulation;
  p.tp_size = mesh.tp_size;
  if (mesh.tp_size > 1) {
    const auto element = static_cast<std::int64_t>(bmt::dtype_size(cfg.dtype));
    p.activation_bytes = static_cast<double>(f.micro_batch * o.seq * cfg.dim * element);
    p.activation_collectives = tp_collectives(f.model_options, cfg.layers, o.eval_only);
  }
  const StepTraffic t = step_traffic(p);
  const StepTraffic activations = step_traffic([&] {
    TrafficPlan a = p;
    a.parameter_bytes = a.gradient_bytes = 0;
    return a;
  }());
  return "mesh tp " + std::to_string(mesh.tp_size) + " x dp " + std::to_string(mesh.dp_size) + "  shard group " +
         bmt::shard_group_name(mesh.shard_group) + " (" +
         std::to_string(mesh.shard_size) + " rank" + (mesh.shard_size > 1 ? "s" : "") +
         (mesh.replica_count > 1 ? ", " + std::to_string(mesh.replica_count) + " replicas" : std::string()) +
         ")  a rank sends " + bytes_text(t.inside_node) + " inside its node and " + bytes_text(t.outside_node) +
         " to other nodes a step" +
         (mesh.tp_size > 1 ? " (tensor-parallel activations " + bytes_text(activations.inside_node) + " of it)"
                           : std::string());
}

}  // namespace

void print_banner(const TrainOptions& o, const ModelConfig& cfg, const RunPlan& f) {
  auto& ctx = bmt::context();
  const int world = ctx.topology().world_size;
  const std::int64_t tokens_per_step = o.batch * o.seq;
  bmt::print_rank("+--------------------------------------------------------------");
  const std::string kv_heads =
      cfg.kv_head_count() != cfg.heads ? " (" + std::to_string(cfg.kv_head_count()) + " key/value)" : "";
  bmt::print_rank("| bmt-train  model ", f.model_name, " (", cfg.arch, ", ", cfg.layers, " layers, ", cfg.heads,
                  " heads", kv_heads, ", dim ", cfg.dim, ", vocab ", cfg.vocab, ")");
  bmt::print_rank("| parameters ", count_text(static_cast<double>(cfg.parameter_count())), "  world size ", world, " (",
                  ctx.topology().node_count, " node", ctx.topology().node_count > 1 ? "s" : "", ", ",
                  ctx.world_comm().backend(), ")  dtype ", bmt::dtype_name(cfg.dtype), "  zero level ", o.zero_level,
                  recompute_description(f.model_options, cfg.layers), "  prefetch ", o.prefetch,
                  o.offload ? (o.offload_delayed ? "  optimizer offloaded (delayed update)" : "  optimizer offloaded")
                            : (o.update_in_forward ? "  optimizer updates in the next forward" : ""),
                  o.loss_chunk > 0 ? "  loss in chunks of " + std::to_string(o.loss_chunk) + " rows" : std::string(),
                  o.fp8 ? "  blocks' linear layers in FP8" : "",
                  bmt::kernels::gemm_autotune() ? "  GEMMs autotuned" : "");
  bmt::print_rank("| batch ", o.batch, " x ", o.seq, " = ", tokens_per_step, " tokens/step  (", f.local_batch,
                  " sequences/rank, ", f.accumulation, " micro-batch", f.accumulation > 1 ? "es" : "", " of ",
                  f.micro_batch, ")");
  bmt::print_rank("| data ", o.data,
                  f.entropy_rate >= 0 ? "  (lowest achievable loss " + std::to_string(f.entropy_rate) + ")" : std::string(),
                  "  steps ", o.steps, "  lr ", f.peak_lr, " ", o.schedule, " warmup ", o.warmup);
  bmt::print_rank("| state per parameter (", o.moments, " moments", o.offload ? ", offloaded" : "", "): ",
                  f.memory.forward_device_bytes_per_parameter,
                  // The blocks' gradients then live until their updates, as the forward gathers them.
                  o.update_in_forward ? " bytes on the device during forward once its blocks are updated, "
                                      : " bytes on the device during forward, ",
                  f.memory.device_bytes_per_parameter, " at the peak, ", f.memory.host_bytes_per_parameter,
                  " on the host; each / ", ctx.mesh().shard_size, " ranks");
  bmt::print_rank("| ", traffic_description(o, cfg, f));
  bmt::print_rank("| estimated memory per rank: ", bytes_text(f.memory.sharded_state), " sharded state (",
                  bytes_text(f.memory.forward_sharded_state), " during forward) + ", bytes_text(f.memory.buffers),
                  " gather/gradient buffers + activations");
  if (!f.recompute_plan.empty()) bmt::print_rank("| recompute auto: ", f.recompute_plan);
  if (o.offload)
    bmt::print_rank("| host memory per rank: ", bytes_text(f.memory.host_state), " optimizer state (",
                    f.memory.host_bytes_per_parameter, " bytes a parameter / ", ctx.mesh().shard_size, "), updated by ",
                    f.host_threads, " thread", f.host_threads == 1 ? "" : "s");
  const std::string weights = !f.resumed_from.empty() ? f.resumed_from
                              : !o.init_from.empty()   ? o.init_from + " (Hugging Face checkpoint)"
                                                       : std::string("a fresh initialization");
  if (o.eval_only)
    bmt::print_rank("| evaluating ", weights, " on ", o.val_data, "; nothing trained or saved");
  else if (!f.resumed_from.empty()) {
    bmt::print_rank("| resumed from ", f.resumed_from, " at step ", f.start_step,
                    f.resume_notes.empty() ? ": continues that run exactly" : "");
    for (const auto& note : f.resume_notes) bmt::print_rank("| resume: ", note);
  } else if (!o.init_from.empty())
    bmt::print_rank("| weights from ", weights);
  bmt::print_rank("+--------------------------------------------------------------");
}

}  // namespace bmt_train
