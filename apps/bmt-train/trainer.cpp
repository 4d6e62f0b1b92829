#include "trainer.hpp"

#include <bmtrain/models/hf_config.hpp>
#include <bmtrain/io/json_file.hpp>
#include <bmtrain/io/model_checkpoint.hpp>
#include <bmtrain/io/training_state.hpp>
#include <bmtrain/runtime/configuration_check.hpp>
#include <bmtrain/runtime/timeline.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "checkpoint_paths.hpp"
#include "data_file_stamps.hpp"
#include "output_files.hpp"
#include "peak_flops.hpp"
#include "progress_bar.hpp"
#include "recompute_choice.hpp"
#include "units.hpp"

namespace bmt_train {

namespace {

using Clock = std::chrono::steady_clock;

// The mean of a step's micro-batch losses (device scalars), read with one transfer; summed in
// double on the host in micro-batch order.
float mean_loss(const std::vector<bmt::Tensor>& losses) {
  std::vector<float> values;
  if (losses.size() == 1) {
    values = losses.front().to_host_floats();
  } else {
    bmt::Tensor all = bmt::Tensor::empty({static_cast<std::int64_t>(losses.size())}, bmt::DType::f32);
    for (std::size_t k = 0; k < losses.size(); ++k)
      bmt::copy_into(all.slice(0, static_cast<std::int64_t>(k), static_cast<std::int64_t>(k) + 1), losses[k].view({1}));
    values = all.to_host_floats();
  }
  double sum = 0;
  for (float v : values) sum += v;
  return static_cast<float>(sum / static_cast<double>(losses.size()));
}

}  // namespace

Trainer::Trainer(const TrainOptions& options) : o_(options), world_(bmt::context().topology().world_size) {
  // From the start: a signal during the setup stops the run after its first step.
  if (!o_.eval_only) stop_signal_.emplace();
  configure();
  read_checkpoint();
  build_model();
  if (!o_.eval_only) {
    build_optimizer();
    resume();
  }
  print_banner(o_, cfg_, plan_);
  if (!o_.eval_only) open_outputs();
  else
    bmt::run_on_every_rank(MPI_COMM_NULL, [&] {  // what an evaluation writes, checked before it starts
      if (bmt::rank() != 0) return;
      if (!o_.metrics.empty()) check_output_file("--metrics", o_.metrics);
      if (!o_.eval_logits.empty()) check_output_file("--eval-logits", o_.eval_logits);
    });
}

Trainer::~Trainer() = default;

// The configuration every rank must share, checked on every rank; the checkpoint root, claimed.
void Trainer::configure() {
  bmt::run_on_every_rank(MPI_COMM_NULL, [&] {
    if (o_.resume.empty()) return;
    plan_.resumed_from = resolve_resume(o_.resume);
    resumed_marked_step_ = bmt::io::CheckpointDir::marked_step(plan_.resumed_from);
  });
  // A resumed run's model is the checkpoint's.
  if (!plan_.resumed_from.empty())
    resumed_state_ = bmt::io::load_training_state(plan_.resumed_from + "/training_state.json");  // collective
  bmt::run_on_every_rank(MPI_COMM_NULL, [&] {
    if (resumed_state_) {
      ResumedModel m = resumed_model(o_, *resumed_state_, plan_.resumed_from);
      cfg_ = std::move(m.config);
      plan_.model_name = std::move(m.name);
    } else {
      cfg_ = o_.model_config();
      plan_.model_name = o_.model_name();
    }
    // The ranks of a tensor-parallel group share their sequences: the batch is split over the
    // data-parallel groups.
    const int dp = bmt::dp_size();
    BMT_REQUIRE(o_.batch % dp == 0, "--batch " << o_.batch << ": expected a global batch divisible by the " << dp
                                               << (bmt::tp_size() > 1 ? " data-parallel groups (--tp " +
                                                                            std::to_string(bmt::tp_size()) + ")"
                                                                      : std::string(" ranks")));
    cfg_.check_tensor_parallel(bmt::tp_size());
    plan_.local_batch = o_.batch / dp;
    plan_.micro_batch = o_.micro_batch ? o_.micro_batch : plan_.local_batch;
    BMT_REQUIRE(plan_.micro_batch > 0 && plan_.local_batch % plan_.micro_batch == 0,
                "--micro-batch " << plan_.micro_batch << ": expected a divisor of the " << plan_.local_batch
                                 << " sequences per rank");
    plan_.accumulation = plan_.local_batch / plan_.micro_batch;
    plan_.peak_lr = o_.peak_lr(cfg_);
    data_ = open_training_data(o_, cfg_);
    plan_.entropy_rate = data_.entropy_rate;
  });
  // Every rank must train the same model the same way with the same library, from the same
  // checkpoint: a rank started differently (an MPMD launch, another build on some nodes) stops the
  // job here with a message naming it, instead of hanging or diverging later.
  bmt::agree_on_configuration(shared_description(o_, cfg_) + "; resume_from=" + plan_.resumed_from + "; " +
                              bmt::build_description());
  bmt::run_on_every_rank(MPI_COMM_NULL, [&] { fault_ = FaultInjection::from_environment(); });
  // The checkpoint root first: a job that would share it with another is told so before anything
  // else. The lock is held until the job ends: a second job saving into the root would delete
  // this one's steps.
  if (!o_.save.empty()) {
    bmt::run_on_every_rank(MPI_COMM_NULL, [&] {
      checkpoints_.emplace(o_.save, o_.keep_last);
      if (bmt::rank() == 0) {
        check_writable_root(o_.save);
        save_lock_ = std::make_unique<bmt::io::DirectoryLock>(o_.save, "--save");
        check_own_root(o_.save, plan_.resumed_from);
      }
    });
  }
}

// Where the --resume checkpoint stands, checked against its marker and this run before any tensor
// is read: its training state's fields on their own and against one another, and its model.
void Trainer::read_checkpoint() {
  if (plan_.resumed_from.empty()) return;
  ResumeContext context;
  context.state_path = plan_.resumed_from + "/training_state.json";
  context.marked_step = resumed_marked_step_;
  context.run_steps = o_.steps;
  bmt::run_on_every_rank(MPI_COMM_NULL, [&] {
    const auto& state = *resumed_state_;
    resumed_ = resume_point(state, context);
    check_checkpoint_model(state, checkpoint_model(plan_.model_name, cfg_), context);
    const auto saved = state.extra.find("trajectory");
    plan_.resume_notes = trajectory_changes(saved == state.extra.end() ? nlohmann::json() : *saved,
                                             run_trajectory(), resumed_.step);
    const auto stamps = state.extra.find("data_file_stamps");
    if (stamps != state.extra.end())
      for (auto& note : data_file_changes(*stamps, data_file_stamps(data_.files), resumed_.step))
        plan_.resume_notes.push_back(std::move(note));
  });
  plan_.start_step = resumed_.step;
}

// The model (initialized, or with the weights it resumes from), its data loaders and schedule.
void Trainer::build_model() {
  plan_.model_options = o_.model_options();
  // What the model will take is known before any of it is allocated: a configuration that cannot
  // fit is refused here, not by the kernel's out-of-memory killer halfway through initialization.
  // The state is sharded over the shard group (the world, or the node under node sharding).
  const int shard = bmt::context().mesh().shard_size;
  bmt::run_on_every_rank(MPI_COMM_NULL, [&] {
    plan_.memory = estimate_memory(o_, cfg_, plan_.model_options, shard, plan_.accumulation);
    require_memory(plan_.memory);
  });
  // --recompute auto keeps what fits of the activations beside that; every rank plans from the
  // least free memory among them, so all choose alike.
  if (o_.recompute == "auto" && !o_.eval_only)
    bmt::run_on_every_rank(MPI_COMM_NULL, [&] {
      const auto choice = choose_recompute(cfg_, plan_.model_options, shard, plan_.micro_batch * o_.seq, plan_.memory);
      plan_.model_options = choice.options;
      plan_.recompute_plan = choice.summary + " (activations about " + bytes_text(choice.activation_bytes) + " of the " +
                             bytes_text(choice.budget_bytes) + " left)";
      plan_.memory = estimate_memory(o_, cfg_, plan_.model_options, shard, plan_.accumulation);
    });
  bmt::run_on_every_rank(MPI_COMM_NULL,
                         [&] { model_ = std::make_unique<bmt::models::CausalLM>(cfg_, plan_.model_options); });
  bmt::run_on_every_rank(MPI_COMM_NULL, [&] {
    bmt::init_parameters(*model_);
    // A run resumes from its own checkpoint; --init-from's weights start a fresh one.
    if (!plan_.resumed_from.empty())
      bmt::load(*model_, plan_.resumed_from + "/model.safetensors");
    else if (!o_.init_from.empty())
      bmt::models::load_hf_checkpoint(*model_, o_.init_from);
    loader_.emplace(make_loader(data_.train, o_, cfg_, o_.seed));
    if (o_.eval_only)
      val_loader_.emplace(make_loader(data_.val, o_, cfg_, o_.seed, /*shuffle=*/false));
    else if (data_.val && o_.eval_every > 0)
      val_loader_.emplace(make_loader(data_.val, o_, cfg_, o_.seed + 1000003));
    schedule_ = bmt::optim::make_scheduler(o_.schedule, plan_.peak_lr, o_.warmup,
                                           o_.schedule_steps(), o_.min_lr);
  });
}

// AdamW over the model's weights as they are now, and the OptimManager that steps it.
void Trainer::build_optimizer() {
  bmt::optim::AdamWOptions ao;
  ao.beta1 = o_.beta1;
  ao.beta2 = o_.beta2;
  ao.weight_decay = o_.weight_decay;
  ao.offload = o_.offload;
  ao.delayed_update = o_.offload_delayed;
  ao.update_in_forward = o_.update_in_forward;
  ao.moments = bmt::parse_dtype(o_.moments);
  bmt::run_on_every_rank(MPI_COMM_NULL, [&] { adamw_ = std::make_unique<bmt::optim::AdamW>(*model_, ao); });
  plan_.host_threads = adamw_->host_threads();
  bmt::optim::OptimManagerOptions mo;
  const bool f16 = cfg_.dtype == bmt::DType::f16;
  mo.loss_scale = o_.loss_scale > 0 ? o_.loss_scale : (f16 ? 65536.0f : 1.0f);
  mo.dynamic_loss_scale = f16;
  mo.clip_grad_norm = o_.grad_clip;
  mo.accumulation_steps = static_cast<int>(plan_.accumulation);
  mo.stop_on_nonfinite = o_.stop_on_nonfinite;
  // No host wait in a step for the gradient norm: it is read on the steps that log (or record) the
  // loss, before a checkpoint, and otherwise when the next step's backward needs the loss scale.
  mo.defer_norm_read = true;
  manager_ = std::make_unique<bmt::optim::OptimManager>(mo);
  manager_->add_optimizer(*adamw_, schedule_.get());
}

// The optimizer's state and where training stood (schedule, loss scale, RNG, data position) from
// the --resume checkpoint, when there is one; its weights were loaded with the model.
void Trainer::resume() {
  if (plan_.resumed_from.empty()) return;
  const std::string path = plan_.resumed_from + "/optimizer.safetensors";
  bmt::run_on_every_rank(MPI_COMM_NULL, [&] {
    bmt::io::load_optimizer(*adamw_, path);
    // The optimizer counts the updates it applied: never more than the steps taken.
    BMT_REQUIRE(adamw_->step_count() <= resumed_.step,
                "optimizer state '" << path << "': metadata 'step': expected at most the checkpoint's step "
                                    << resumed_.step << ", found " << adamw_->step_count());
    // The training state says how many it applied (skipped steps apply none): another save's
    // optimizer file, an earlier step's, does not pass for this one's.
    if (resumed_.optimizer_steps)
      BMT_REQUIRE(adamw_->step_count() == *resumed_.optimizer_steps,
                  "optimizer state '" << path << "': metadata 'step': expected " << *resumed_.optimizer_steps
                                      << ", the updates the training state says were applied ('extra.optimizer_steps'), "
                                      << "found " << adamw_->step_count() << " (the optimizer file of another save?)");
    // The position must lie within this run's data.
    const std::string problem = bmt::error_of([&] { loader_->restore(resumed_.data); });
    BMT_REQUIRE(problem.empty(), "training state '" << plan_.resumed_from << "/training_state.json': 'data': " << problem);
  });
  schedule_->set_step(resumed_.scheduler_step);
  if (resumed_.loss_scale) manager_->set_loss_scale(*resumed_.loss_scale);
  manager_->set_clean_steps(resumed_.clean_steps);
  bmt::random::set_key_counter(resumed_.key_counter);
}

// The metrics file, the loss curve's and the timeline's paths, checked before the first step; the token
// staging ring.
void Trainer::open_outputs() {
  bmt::run_on_every_rank(MPI_COMM_NULL, [&] {
    log_ = std::make_unique<StepLog>(o_, plan_.start_step);
    // Each rank writes its own trace at the end; whether it can is known now.
    if (!o_.timeline.empty())
      check_output_file("--timeline", bmt::timeline::rank_path(o_.timeline, bmt::rank()), /*create_parents=*/true);
    // The export is written at the end; whether its directory takes files is known now.
    if (!o_.export_hf.empty() && bmt::rank() == 0)
      check_output_file("--export-hf", o_.export_hf + "/config.json", /*create_parents=*/true);
  });
  // The loss is read from the device (a host wait) and averaged over ranks (a collective) only on
  // steps that print or record it. Rank 0 prints and writes the metrics, so its --log-every and
  // --metrics decide which steps those are, for every rank.
  // Rank 0's metrics writes are agreed on (a full disk ends every rank at once): every rank must
  // know whether there are any.
  std::int64_t from_root[2] = {o_.metrics.empty() ? o_.log_every : 1, log_->records() ? 1 : 0};
  auto& ctx = bmt::context();
  ctx.host_comm().broadcast(from_root, 2, bmt::DType::i64, 0, ctx.compute_stream());
  loss_every_ = from_root[0];
  records_metrics_ = from_root[1] != 0;
  staging_ = std::make_unique<TokenStaging>(2 * static_cast<std::size_t>(plan_.accumulation),
                                            static_cast<std::size_t>(plan_.micro_batch * o_.seq) * sizeof(std::int32_t));
  if (!o_.timeline.empty())
    bmt::timeline::enable(o_.timeline, o_.timeline_ops ? bmt::timeline::Detail::ops : bmt::timeline::Detail::blocks);
}

StepRecord Trainer::step(std::int64_t step, bool read_loss) {
  auto& ctx = bmt::context();
  StepRecord r;
  r.step = step + 1;
  const auto batch = loader_->next();
  {
    bmt::timeline::Span step_span(ctx.compute_stream(), "step");
    manager_->zero_grad();
    losses_.clear();
    for (const auto& mb : batch.split(static_cast<std::size_t>(plan_.accumulation))) {
      auto tokens = staging_->upload(mb.inputs, static_cast<std::int64_t>(mb.rows), o_.seq);
      auto targets = staging_->upload(mb.targets, static_cast<std::int64_t>(mb.rows), o_.seq);
      bmt::Tensor loss = model_->loss(tokens, targets);
      if (fault_.active()) {
        const float factor = fault_.loss_factor(step + 1);
        if (factor != 1.0f) loss = bmt::scale(loss, factor);
      }
      manager_->backward(loss);
      losses_.push_back(loss.detach());
    }
    fault_.at(FaultInjection::Point::after_backward, step + 1);
    r.lr = schedule_->current_lr();
    manager_->step();
  }
  r.loss = std::nanf("");  // not read on this step
  if (read_loss) {
    r.applied = manager_->settle();  // the gradient norm, for the log: read with the loss
    r.grad_norm = manager_->last_grad_norm();
    r.loss_scale = manager_->loss_scale();
    r.loss = mean_loss(losses_);
    ctx.host_comm().all_reduce(&r.loss, &r.loss, 1, bmt::DType::f32, bmt::ReduceOp::avg, ctx.compute_stream());
  }
  return r;
}

// The mean loss over --eval-batches held-out batches, the same batches every time.
double Trainer::evaluate() {
  auto& ctx = bmt::context();
  bmt::NoGradGuard no_grad;
  model_->eval();
  double sum = 0;
  const auto saved = val_loader_->state();
  for (std::int64_t b = 0; b < o_.eval_batches; ++b) {
    const auto batch = val_loader_->next();
    for (const auto& mb : batch.split(static_cast<std::size_t>(plan_.accumulation))) {
      auto tokens = bmt::Tensor::from_host(mb.inputs.data(), {static_cast<std::int64_t>(mb.rows), o_.seq}, bmt::DType::i32);
      auto targets = bmt::Tensor::from_host(mb.targets.data(), {static_cast<std::int64_t>(mb.rows), o_.seq}, bmt::DType::i32);
      sum += model_->loss(tokens, targets).to_host_floats()[0];
    }
  }
  val_loader_->restore(saved);
  model_->train();
  float mean = static_cast<float>(sum / static_cast<double>(o_.eval_batches * plan_.accumulation));
  ctx.host_comm().all_reduce(&mean, &mean, 1, bmt::DType::f32, bmt::ReduceOp::avg, ctx.compute_stream());
  return mean;
}

int Trainer::evaluate_only() {
  bmt::NoGradGuard no_grad;
  model_->eval();
  const std::uint64_t batches = val_loader_->steps_per_epoch();
  double sum = 0, count = 0;  // micro-batch mean losses (each of the same number of tokens)
  for (std::uint64_t b = 0; b < batches; ++b) {
    const auto batch = val_loader_->next();
    for (const auto& mb : batch.split(static_cast<std::size_t>(plan_.accumulation))) {
      auto tokens = bmt::Tensor::from_host(mb.inputs.data(), {static_cast<std::int64_t>(mb.rows), o_.seq}, bmt::DType::i32);
      auto targets = bmt::Tensor::from_host(mb.targets.data(), {static_cast<std::int64_t>(mb.rows), o_.seq}, bmt::DType::i32);
      if (b == 0 && count == 0 && !o_.eval_logits.empty()) {
        // In the source's order, rank 0's first row is the file's first sequence. Every rank runs
        // the forward (its blocks gather collectively); rank 0 writes.
        const auto logits = model_->logits(tokens).to_host_floats();
        bmt::run_on_every_rank(MPI_COMM_NULL, [&] {  // a failed write ends every rank
          if (bmt::rank() != 0) return;
          write_output_file("--eval-logits", o_.eval_logits, "the logits",
                            {reinterpret_cast<const char*>(logits.data()), o_.seq * cfg_.vocab * sizeof(float)});
        });
      }
      sum += model_->loss(tokens, targets).to_host_floats()[0];
      count += 1;
    }
  }
  auto& ctx = bmt::context();
  const auto all = bmt::all_gather_f64(ctx.host_comm(), {sum, count}, ctx.compute_stream());
  double totals[2] = {0, 0};
  for (std::size_t r = 0; r < all.size(); r += 2) totals[0] += all[r], totals[1] += all[r + 1];
  const double loss = totals[0] / totals[1];
  const std::uint64_t sequences = batches * static_cast<std::uint64_t>(o_.batch);
  char line[256];
  std::snprintf(line, sizeof line, "eval: loss %.7f  perplexity %.4f  (%llu sequences of %lld tokens)", loss,
                std::exp(loss), static_cast<unsigned long long>(sequences), static_cast<long long>(o_.seq));
  bmt::print_rank(line);
  const std::uint64_t left = val_loader_->sequences_per_epoch() - sequences;
  if (left > 0)
    bmt::print_rank("eval: ", left, " sequence(s) at the end of --val-data left out (fewer than a --batch)");
  bmt::run_on_every_rank(MPI_COMM_NULL, [&] {  // a failed write ends every rank
    if (o_.metrics.empty() || bmt::rank() != 0) return;
    const nlohmann::json record = {{"eval_loss", loss},
                                   {"perplexity", std::exp(loss)},
                                   {"sequences", sequences},
                                   {"tokens", sequences * static_cast<std::uint64_t>(o_.seq)}};
    write_output_file("--metrics", o_.metrics, "the evaluation's record", record.dump() + "\n");
  });
  return 0;
}

void Trainer::export_hf() {
  bmt::io::HfExportOptions options;
  options.max_shard_bytes = static_cast<std::uint64_t>(o_.export_shard_gb * 1e9);
  bmt::models::save_hf_checkpoint(*model_, o_.export_hf, options);
  bmt::print_rank("exported ", o_.export_hf, " (Hugging Face ", bmt::models::hf_model_class(cfg_), ")");
}

nlohmann::json Trainer::run_trajectory() const {
  return trajectory(o_, plan_.peak_lr, world_, data_.files);
}

void Trainer::save(std::int64_t step) {
  manager_->settle();  // step counts, schedule and loss scale as of the last step's outcome
  adamw_->flush();     // the model's values as of the last update (an offloaded one may be in flight)
  const std::string dir = checkpoints_->begin_save(step);
  fault_.at(FaultInjection::Point::save_begun, step);
  const nlohmann::json model_json = checkpoint_model(plan_.model_name, cfg_);
  bmt::save(*model_, dir + "/model.safetensors", {{"format", "bmtrain"}, {"model", model_json.dump()}});
  // The Hugging Face config.json of the model (with the keys of the one it came from, which a
  // resumed run's --export-hf writes back).
  bmt::run_on_root(MPI_COMM_NULL, [&] { bmt::io::write_json_atomic(dir + "/config.json", bmt::models::hf_config_json(cfg_)); });
  fault_.at(FaultInjection::Point::save_model_written, step);
  bmt::io::save_optimizer(*adamw_, dir + "/optimizer.safetensors");
  bmt::io::TrainingState st;
  st.step = step;
  st.lr_scheduler = {{"name", schedule_->name()}, {"step", schedule_->current_step()}};
  st.loss_scaler = {{"scale", manager_->loss_scale()}, {"clean_steps", manager_->clean_steps()}};
  st.rng = {{"seed", o_.seed}, {"key_counter", bmt::random::key_counter()}};
  st.data = loader_->state();
  st.extra = {{"model", model_json},
              {"world_size", world_},
              {"trajectory", run_trajectory()},
              {"optimizer_steps", adamw_->step_count()},
              {"data_file_stamps", data_file_stamps(data_.files)}};
  bmt::io::save_training_state(dir + "/training_state.json", st);
  fault_.at(FaultInjection::Point::save_files_written, step);
  const std::string published = checkpoints_->commit_save(step);
  bmt::print_rank("saved checkpoint ", published);
}

int Trainer::stop(std::int64_t step, bool saved) {
  manager_->settle();  // the last step's outcome (a skip is reported)
  const std::string why = std::string("stopped after step ") + std::to_string(step) + " of " +
                          std::to_string(o_.steps) + " on " + stop_signal_->name();
  if (!checkpoints_) {
    bmt::print_rank(why, ": nothing saved (no --save); exit status ", kStoppedUnsaved);
    return kStoppedUnsaved;
  }
  if (!saved) save(step);
  bmt::print_rank(why, ": continue with --resume ", o_.save, " (exit status ", kStoppedSaved, ")");
  return kStoppedSaved;
}

int Trainer::run() {
  if (o_.eval_only) return evaluate_only();
  const std::int64_t start = plan_.start_step;
  const std::int64_t tokens_per_step = o_.batch * o_.seq;
  const auto peak = peak_flops(cfg_.dtype);
  ProgressBar bar(o_.progress, o_.no_progress);
  double seconds_per_step = 0;
  const auto run_start = Clock::now();
  for (std::int64_t s = start; s < o_.steps; ++s) {
    const auto t0 = Clock::now();
    const bool last = s + 1 == o_.steps;
    const bool eval_now = val_loader_ && o_.eval_every > 0 && ((s + 1) % o_.eval_every == 0 || last);
    const bool read_loss = (s + 1) % loss_every_ == 0 || last || eval_now;
    StepRecord r = step(s, read_loss);
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    seconds_per_step = s == start ? r.seconds : 0.9 * seconds_per_step + 0.1 * r.seconds;
    r.tokens_per_s = static_cast<double>(tokens_per_step) / r.seconds;
    if (peak) r.mfu = cfg_.flops_per_token(o_.seq) * r.tokens_per_s / world_ / *peak;
    const auto mem = bmt::memory_stats();
    r.mem_bytes = mem.allocated_bytes;
    r.mem_peak_bytes = mem.peak_allocated_bytes;
    if (eval_now) r.eval_loss = evaluate();
    if (records_metrics_) {
      fault_.at(FaultInjection::Point::metrics_record, r.step);
      bmt::run_on_every_rank(MPI_COMM_NULL, [&] { log_->record(r); });
    }
    if (log_->prints(r)) bar.clear();
    log_->print(r);
    bar.show(s + 1, o_.steps, seconds_per_step);
    const bool saved = checkpoints_ && o_.save_every > 0 && (s + 1) % o_.save_every == 0 && !last;
    if (saved) {
      bar.clear();
      save(s + 1);
    }
    // The last step ends the run anyway, as a completed one.
    if (!last && stop_signal_->agreed()) {
      bar.clear();
      return stop(s + 1, saved);
    }
  }
  bar.clear();
  manager_->settle();  // the last step's outcome (a skip is reported)
  if (checkpoints_ && o_.steps > start) save(o_.steps);
  if (!o_.export_hf.empty()) {
    fault_.at(FaultInjection::Point::export_hf, o_.steps);
    export_hf();
  }
  const double total = std::chrono::duration<double>(Clock::now() - run_start).count();
  bmt::print_rank("trained ", o_.steps - start, " steps in ", seconds_text(total));
  if (!o_.timeline.empty()) {
    fault_.at(FaultInjection::Point::timeline, o_.steps);
    bmt::run_on_every_rank(MPI_COMM_NULL, [&] { bmt::timeline::write(); });
    bmt::print_rank("timeline: ", bmt::timeline::rank_path(o_.timeline, 0), " (one file per rank)");
  }
  if (o_.steps > start) {
    fault_.at(FaultInjection::Point::plot, o_.steps);
    bmt::run_on_every_rank(MPI_COMM_NULL, [&] {
      log_->finish("bmt-train " + plan_.model_name + " (" + bmt::dtype_name(cfg_.dtype) + ", " + std::to_string(world_) + " ranks)",
                   data_.entropy_rate);
    });
  }
  return 0;
}

int train(const TrainOptions& options) {
  Trainer trainer(options);
  return trainer.run();
}

}  // namespace bmt_train
