#include "trainer.hpp"

#include <bmtrain/bmtrain.hpp>
#include <bmtrain/io/checkpoint_dir.hpp>
#include <bmtrain/io/model_checkpoint.hpp>
#include <bmtrain/io/synthetic_markov.hpp>
#include <bmtrain/io/token_dataset.hpp>
#include <bmtrain/io/token_loader.hpp>
#include <bmtrain/io/training_state.hpp>
#include <bmtrain/kernels/gemm.hpp>
#include <bmtrain/runtime/configuration_check.hpp>
#include <bmtrain/runtime/timeline.hpp>
#include <bmtrain/tensor/memory.hpp>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "fault_injection.hpp"
#include "loss_plot.hpp"
#include "resume_state.hpp"

#ifdef BMT_ENABLE_CUDA
#include <cuda_runtime.h>
#endif

namespace bmt_train {

namespace {

using Clock = std::chrono::steady_clock;

// Dense bf16/f16 tensor-core peak of the GPU this rank runs on, for MFU; nullopt when unknown.
std::optional<double> peak_flops(bmt::DType dtype) {
#ifdef BMT_ENABLE_CUDA
  if (dtype == bmt::DType::f32) return std::nullopt;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, bmt::context().topology().device) != cudaSuccess) return std::nullopt;
  const std::string name = prop.name;
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) return 989e12;
  if (name.find("A100") != std::string::npos) return 312e12;
  return std::nullopt;
#else
  (void)dtype;
  return std::nullopt;
#endif
}

// "1.25 GiB", "312 MiB", "40.2 KiB"
std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  std::ostringstream os;
  os.precision(3);
  os << bytes << ' ' << units[u];
  return os.str();
}

std::string human(double n) {
  std::ostringstream os;
  os.precision(3);
  if (n >= 1e9) os << n / 1e9 << "B";
  else if (n >= 1e6) os << n / 1e6 << "M";
  else if (n >= 1e3) os << n / 1e3 << "K";
  else os << n;
  return os.str();
}

// The banner's account of what backward recomputes.
std::string recompute_description(const TrainOptions& o, std::int64_t layers) {
  if (!o.checkpointing || o.keep_blocks >= layers) return "  recompute off";
  std::string text = "  recompute on";
  if (o.keep_attention) text += ", attention kept";
  if (o.keep_residual) text += ", residual sums kept";
  if (o.keep_blocks > 0)
    text += ", last " + std::to_string(o.keep_blocks) + " block" + (o.keep_blocks > 1 ? "s" : "") + " kept";
  return text;
}

bool is_complete_step_dir(const std::string& dir) {
  struct stat st {};
  return ::stat((dir + "/" + bmt::io::CheckpointDir::kMarker).c_str(), &st) == 0;
}

// A step directory to resume from: `path` itself, or the newest complete step under it.
std::string resolve_resume(const std::string& path) {
  if (is_complete_step_dir(path)) return path;
  const auto last = bmt::io::CheckpointDir::latest_complete(path);
  BMT_REQUIRE(last, "--resume: expected a complete checkpoint (a directory with a COMPLETE marker, or a root holding "
                    "step-N directories), found none at '"
                        << path << "'");
  return path + "/step-" + std::to_string(*last);
}

// Hours of training must not end in a save that cannot happen: the checkpoint root is created and
// written to once at startup (rank 0; every rank sees the same root).
void check_writable_root(const std::string& root) {
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  BMT_REQUIRE(!ec, "--save '" << root << "': expected a directory checkpoints can be written to, cannot create it: "
                              << ec.message());
  const std::string probe = root + "/.bmt-train-write-test";
  {
    std::ofstream f(probe, std::ios::trunc);
    f << "probe\n";
    f.flush();
    BMT_REQUIRE(f, "--save '" << root << "': expected a directory checkpoints can be written to, cannot write '"
                              << probe << "'");
  }
  std::filesystem::remove(probe, ec);
}

struct Data {
  std::shared_ptr<const bmt::io::SequenceSource> train, val;
  double entropy_rate = -1;  // lowest achievable loss, when known (synthetic data)
};

Data open_data(const TrainOptions& o, const ModelConfig& c) {
  Data d;
  if (o.data == "synthetic") {
    bmt::io::MarkovOptions m;
    m.vocab_size = static_cast<std::int32_t>(c.vocab);
    m.seed = o.seed;
    auto chain = std::make_shared<bmt::io::SyntheticMarkovDataset>(m);
    d.entropy_rate = chain->entropy_rate();
    d.train = chain;
    d.val = chain;  // evaluated in another order (see make_loader)
  } else {
    d.train = std::make_shared<bmt::io::TokenDataset>(o.data);
    if (!o.val_data.empty()) d.val = std::make_shared<bmt::io::TokenDataset>(o.val_data);
  }
  if (!o.val_data.empty() && o.data == "synthetic") d.val = std::make_shared<bmt::io::TokenDataset>(o.val_data);
  return d;
}

bmt::io::TokenLoader make_loader(std::shared_ptr<const bmt::io::SequenceSource> source, const TrainOptions& o,
                                 const ModelConfig& c, std::uint64_t seed) {
  bmt::io::LoaderOptions lo;
  lo.global_batch = static_cast<std::size_t>(o.batch);
  lo.seq_len = static_cast<std::size_t>(o.seq);
  lo.seed = seed;
  lo.vocab_size = c.vocab;
  return bmt::io::TokenLoader(std::move(source), lo);
}

// One JSON value that is null when absent.
nlohmann::json number_or_null(std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

// A live bar with ETA on rank 0. Under an MPI launcher stdout is often a forwarded pseudo-terminal
// that ends up in a log, so there the bar is shown only when asked for.
class ProgressBar {
 public:
  ProgressBar(bool asked, bool refused)
      : on_(bmt::rank() == 0 && !refused && (asked || (isatty(fileno(stdout)) && !under_launcher()))) {}
  static bool under_launcher() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"})
      if (std::getenv(v)) return true;
    return false;
  }
  void show(std::int64_t step, std::int64_t total, double seconds_per_step) {
    if (!on_) return;
    const int width = 30;
    const int done = total ? static_cast<int>(width * step / total) : width;
    const double eta = seconds_per_step * static_cast<double>(total - step);
    std::printf("\r[%s%s] %lld/%lld ETA %02d:%02d ", std::string(static_cast<std::size_t>(done), '=').c_str(),
                std::string(static_cast<std::size_t>(width - done), ' ').c_str(), static_cast<long long>(step),
                static_cast<long long>(total), static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
    std::fflush(stdout);
    shown_ = true;
  }
  void clear() {
    if (!shown_) return;
    std::printf("\r%*s\r", 60, "");
    shown_ = false;
  }

 private:
  bool on_;
  bool shown_ = false;
};

// Copies token ids to the device without a host wait. Tensor::from_host returns only once the
// compute stream has drained (on CUDA it synchronizes the stream after the copy), so each upload
// would hold the host until the previous step's optimizer had run, and the device would idle while
// the host queued the next step. Ids are staged in pinned buffers and copied on the compute stream
// instead; a buffer is refilled only once the copy that read it has completed. The ring holds two
// steps of uploads, and every step reads the gradient norm (which waits for that step's backward),
// so that wait is for a copy long finished.
class TokenStaging {
 public:
  TokenStaging(std::size_t uploads_per_step, std::size_t bytes) : slots_(2 * uploads_per_step) {
    for (auto& slot : slots_) slot.buffer = std::make_unique<bmt::memory::PinnedBuffer>(bytes);
  }

  bmt::Tensor upload(const std::vector<std::int32_t>& ids, std::int64_t rows, std::int64_t seq) {
    Slot& slot = slots_[next_++ % slots_.size()];
    const std::size_t bytes = ids.size() * sizeof(std::int32_t);
    BMT_REQUIRE(bytes <= slot.buffer->bytes() && static_cast<std::int64_t>(ids.size()) == rows * seq,
                "token upload: expected " << rows << " x " << seq << " ids, found " << ids.size());
    slot.copied.synchronize();
    std::memcpy(slot.buffer->data(), ids.data(), bytes);
    bmt::Tensor t = bmt::Tensor::empty({rows, seq}, bmt::DType::i32);
    auto& compute = bmt::context().compute_stream();
    bmt::memory::copy_from_host_async(t.data(), slot.buffer->data(), bytes, compute);
    slot.copied = compute.record();
    return t;
  }

 private:
  struct Slot {
    std::unique_ptr<bmt::memory::PinnedBuffer> buffer;
    bmt::Event copied;
  };
  std::vector<Slot> slots_;
  std::size_t next_ = 0;
};

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

int train(const TrainOptions& o) {
  auto& ctx = bmt::context();
  const int world = ctx.topology().world_size;
  ModelConfig cfg;
  Data data;
  std::int64_t local = 0, micro = 0, accumulation = 1;
  std::string resumed_from;
  agreed([&] {
    cfg = o.model_config();
    BMT_REQUIRE(o.batch % world == 0, "--batch " << o.batch << ": expected a global batch divisible by the " << world
                                                 << " ranks");
    local = o.batch / world;
    micro = o.micro_batch ? o.micro_batch : local;
    BMT_REQUIRE(micro > 0 && local % micro == 0, "--micro-batch " << micro << ": expected a divisor of the "
                                                                  << local << " sequences per rank");
    accumulation = local / micro;
    data = open_data(o, cfg);
    if (!o.resume.empty()) resumed_from = resolve_resume(o.resume);
  });
  // Every rank must train the same model the same way with the same library, from the same
  // checkpoint: a rank started differently (an MPMD launch, another build on some nodes) stops the
  // job here with a message naming it, instead of hanging or diverging later.
  bmt::agree_on_configuration(shared_description(o, cfg) + "; resume_from=" + resumed_from + "; " +
                              bmt::build_description());
  FaultInjection fault;
  agreed([&] { fault = FaultInjection::from_environment(); });

  std::unique_ptr<GPT> model;
  std::unique_ptr<bmt::optim::AdamW> adamw;
  std::unique_ptr<bmt::optim::LRScheduler> schedule;
  std::optional<bmt::io::TokenLoader> loader, val_loader;
  bmt::CheckpointOptions checkpoint;
  checkpoint.use_checkpoint = o.checkpointing;
  checkpoint.zero_level = o.zero_level;
  checkpoint.keep_attention = o.keep_attention;
  checkpoint.keep_residual = o.keep_residual;
  const float peak_lr = o.lr > 0 ? o.lr : cfg.default_lr;
  agreed([&] {
    model = std::make_unique<GPT>(cfg, o.prefetch, checkpoint, o.loss_chunk, o.keep_blocks);
    bmt::init_parameters(*model);
    loader.emplace(make_loader(data.train, o, cfg, o.seed));
    if (data.val && o.eval_every > 0) val_loader.emplace(make_loader(data.val, o, cfg, o.seed + 1000003));
    schedule = bmt::optim::make_scheduler(o.schedule, peak_lr, o.warmup, std::max<std::int64_t>(o.steps, o.warmup + 1),
                                          o.min_lr);
  });

  bmt::optim::OptimManagerOptions mo;
  const bool f16 = cfg.dtype == bmt::DType::f16;
  mo.loss_scale = o.loss_scale > 0 ? o.loss_scale : (f16 ? 65536.0f : 1.0f);
  mo.dynamic_loss_scale = f16;
  mo.clip_grad_norm = o.grad_clip;
  mo.accumulation_steps = static_cast<int>(accumulation);
  mo.stop_on_nonfinite = o.stop_on_nonfinite;
  // No host wait in a step for the gradient norm: it is read on the steps that log (or record) the
  // loss, before a checkpoint, and otherwise when the next step's backward needs the loss scale.
  mo.defer_norm_read = true;

  std::int64_t start = 0;
  bmt::optim::AdamWOptions ao;
  ao.beta1 = o.beta1;
  ao.beta2 = o.beta2;
  ao.weight_decay = o.weight_decay;
  ao.offload = o.offload;
  ResumePoint resumed;
  agreed([&] {
    if (!resumed_from.empty()) bmt::load(*model, resumed_from + "/model.safetensors");
    adamw = std::make_unique<bmt::optim::AdamW>(*model, ao);
    if (!resumed_from.empty()) {
      bmt::io::load_optimizer(*adamw, resumed_from + "/optimizer.safetensors");
      resumed = resume_point(bmt::io::load_training_state(resumed_from + "/training_state.json"));
    }
  });
  bmt::optim::OptimManager manager(mo);
  manager.add_optimizer(*adamw, schedule.get());
  if (!resumed_from.empty()) {
    start = resumed.step;
    schedule->set_step(resumed.scheduler_step);
    if (resumed.loss_scale) manager.set_loss_scale(*resumed.loss_scale);
    manager.set_clean_steps(resumed.clean_steps);
    bmt::random::set_key_counter(resumed.key_counter);
    loader->restore(resumed.data);
  }

  // Startup table.
  const double params = static_cast<double>(cfg.parameter_count());
  const double state_bytes = (cfg.dtype == bmt::DType::f32 ? 16.0 : 18.0) * params / world;
  std::size_t largest_block = 0;
  for (auto* s : bmt::sharded_storages(*model))
    largest_block = std::max(largest_block, static_cast<std::size_t>(s->total()));
  // One rank gathers and reduces in place: no buffers. Otherwise the gather ring's prefetch + 1
  // slots and the gradient ring's two, and a gathered copy of its own for every block that keeps its
  // parameters from forward to backward (zero level 2, or a block that keeps its activations).
  const std::int64_t kept = o.zero_level == 2 || !o.checkpointing ? cfg.layers : std::min(o.keep_blocks, cfg.layers);
  const double buffers = world == 1 ? 0.0
                                    : static_cast<double>(largest_block) *
                                          (static_cast<double>(o.prefetch + 1 + kept) * bmt::dtype_size(cfg.dtype) +
                                           2 * sizeof(float));
  const std::int64_t tokens_per_step = o.batch * o.seq;
  const auto peak = peak_flops(cfg.dtype);
  bmt::print_rank("+--------------------------------------------------------------");
  bmt::print_rank("| bmt-train  model ", o.model, " (", cfg.arch, ", ", cfg.layers, " layers, ", cfg.heads, " heads, dim ",
                  cfg.dim, ", vocab ", cfg.vocab, ")");
  bmt::print_rank("| parameters ", human(params), "  world size ", world, " (", ctx.topology().node_count, " node",
                  ctx.topology().node_count > 1 ? "s" : "", ", ", ctx.world_comm().backend(), ")  dtype ",
                  bmt::dtype_name(cfg.dtype), "  zero level ", o.zero_level,
                  recompute_description(o, cfg.layers),
                  "  prefetch ", o.prefetch,
                  o.offload ? "  optimizer offloaded" : "",
                  o.loss_chunk > 0 ? "  loss in chunks of " + std::to_string(o.loss_chunk) + " rows" : std::string(),
                  bmt::kernels::gemm_autotune() ? "  GEMMs autotuned" : "");
  bmt::print_rank("| batch ", o.batch, " x ", o.seq, " = ", tokens_per_step, " tokens/step  (", local,
                  " sequences/rank, ", accumulation, " micro-batch", accumulation > 1 ? "es" : "", " of ", micro, ")");
  bmt::print_rank("| data ", o.data, data.entropy_rate >= 0 ? "  (lowest achievable loss " + std::to_string(data.entropy_rate) + ")" : std::string(),
                  "  steps ", o.steps, "  lr ", peak_lr, " ", o.schedule, " warmup ", o.warmup);
  bmt::print_rank("| estimated memory per rank: ", bytes_text(state_bytes), " sharded state + ", bytes_text(buffers),
                  " gather/gradient buffers + activations");
  if (!resumed_from.empty()) bmt::print_rank("| resumed from ", resumed_from, " at step ", start);
  bmt::print_rank("+--------------------------------------------------------------");

  std::ofstream metrics;
  std::optional<bmt::io::CheckpointDir> ckpt;
  agreed([&] {
    if (!o.metrics.empty() && bmt::rank() == 0) {
      metrics.open(o.metrics, start > 0 ? std::ios::app : std::ios::trunc);
      BMT_REQUIRE(metrics, "--metrics: cannot write '" << o.metrics << "'");
    }
    if (!o.save.empty()) {
      ckpt.emplace(o.save, o.keep_last);
      if (bmt::rank() == 0) check_writable_root(o.save);
    }
  });

  auto save_checkpoint = [&](std::int64_t step) {
    manager.settle();  // step counts, schedule and loss scale as of the last step's outcome
    const std::string dir = ckpt->begin_save(step);
    fault.at(FaultInjection::Point::save_begun, step);
    nlohmann::json model_json = {{"preset", o.model}, {"arch", cfg.arch}, {"layers", cfg.layers}, {"heads", cfg.heads},
                                 {"dim", cfg.dim}, {"ffn", cfg.ffn}, {"vocab", cfg.vocab}, {"max_seq", cfg.max_seq},
                                 {"dtype", bmt::dtype_name(cfg.dtype)}};
    bmt::save(*model, dir + "/model.safetensors", {{"format", "bmtrain"}, {"model", model_json.dump()}});
    fault.at(FaultInjection::Point::save_model_written, step);
    bmt::io::save_optimizer(*adamw, dir + "/optimizer.safetensors");
    bmt::io::TrainingState st;
    st.step = step;
    st.lr_scheduler = {{"name", schedule->name()}, {"step", schedule->current_step()}};
    st.loss_scaler = {{"scale", manager.loss_scale()}, {"clean_steps", manager.clean_steps()}};
    st.rng = {{"seed", o.seed}, {"key_counter", bmt::random::key_counter()}};
    st.data = loader->state();
    st.extra = {{"model", model_json}, {"world_size", world}};
    bmt::io::save_training_state(dir + "/training_state.json", st);
    fault.at(FaultInjection::Point::save_files_written, step);
    const std::string published = ckpt->commit_save(step);
    bmt::print_rank("saved checkpoint ", published);
  };

  auto evaluate = [&]() -> double {
    bmt::NoGradGuard no_grad;
    model->eval();
    double sum = 0;
    const auto saved = val_loader->state();
    for (std::int64_t b = 0; b < o.eval_batches; ++b) {
      const auto batch = val_loader->next();
      for (const auto& mb : batch.split(static_cast<std::size_t>(accumulation))) {
        auto tokens = bmt::Tensor::from_host(mb.inputs.data(), {static_cast<std::int64_t>(mb.rows), o.seq}, bmt::DType::i32);
        auto targets = bmt::Tensor::from_host(mb.targets.data(), {static_cast<std::int64_t>(mb.rows), o.seq}, bmt::DType::i32);
        sum += model->loss(tokens, targets).to_host_floats()[0];
      }
    }
    val_loader->restore(saved);  // the same held-out batches every time
    model->train();
    float mean = static_cast<float>(sum / static_cast<double>(o.eval_batches * accumulation));
    ctx.host_comm().all_reduce(&mean, &mean, 1, bmt::DType::f32, bmt::ReduceOp::avg, ctx.compute_stream());
    return mean;
  };

  // The loss is read from the device (a host wait) and averaged over ranks (a collective) only on
  // steps that print or record it. Rank 0 prints and writes the metrics, so its --log-every and
  // --metrics decide which steps those are, for every rank.
  std::int64_t loss_every = o.metrics.empty() ? o.log_every : 1;
  BMT_MPI_CHECK(MPI_Bcast(&loss_every, 1, MPI_INT64_T, 0, ctx.mpi_comm()));
  TokenStaging staging(2 * static_cast<std::size_t>(accumulation),
                       static_cast<std::size_t>(micro * o.seq) * sizeof(std::int32_t));
  std::vector<bmt::Tensor> losses;
  if (!o.timeline.empty())
    bmt::timeline::enable(o.timeline, o.timeline_ops ? bmt::timeline::Detail::ops : bmt::timeline::Detail::blocks);

  ProgressBar bar(o.progress, o.no_progress);
  double seconds_per_step = 0;
  const auto run_start = Clock::now();
  for (std::int64_t step = start; step < o.steps; ++step) {
    const auto t0 = Clock::now();
    const bool eval_now = val_loader && o.eval_every > 0 && ((step + 1) % o.eval_every == 0 || step + 1 == o.steps);
    const bool read_loss = (step + 1) % loss_every == 0 || step + 1 == o.steps || eval_now;
    const auto batch = loader->next();
    bool applied = true;  // known on steps that read the loss (settle())
    float lr = 0;
    {
      bmt::timeline::Span step_span(ctx.compute_stream(), "step");
      manager.zero_grad();
      losses.clear();
      for (const auto& mb : batch.split(static_cast<std::size_t>(accumulation))) {
        auto tokens = staging.upload(mb.inputs, static_cast<std::int64_t>(mb.rows), o.seq);
        auto targets = staging.upload(mb.targets, static_cast<std::int64_t>(mb.rows), o.seq);
        bmt::Tensor loss = model->loss(tokens, targets);
        if (fault.active()) {
          const float factor = fault.loss_factor(step + 1);
          if (factor != 1.0f) loss = bmt::scale(loss, factor);
        }
        manager.backward(loss);
        losses.push_back(loss.detach());
      }
      fault.at(FaultInjection::Point::after_backward, step + 1);
      lr = schedule->current_lr();
      manager.step();
    }
    float loss = std::nanf("");  // not read on this step
    if (read_loss) {
      applied = manager.settle();  // the gradient norm, for the log: read with the loss
      loss = mean_loss(losses);
      ctx.host_comm().all_reduce(&loss, &loss, 1, bmt::DType::f32, bmt::ReduceOp::avg, ctx.compute_stream());
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    seconds_per_step = step == start ? seconds : 0.9 * seconds_per_step + 0.1 * seconds;
    const double tokens_per_s = static_cast<double>(tokens_per_step) / seconds;
    std::optional<double> mfu;
    if (peak) mfu = cfg.flops_per_token(o.seq) * tokens_per_s / world / *peak;
    const auto mem = bmt::memory_stats();
    std::optional<double> eval_loss;
    if (eval_now) eval_loss = evaluate();

    if (metrics.is_open()) {
      nlohmann::json j = {{"step", step + 1},
                          {"loss", loss},
                          {"lr", lr},
                          {"grad_norm", manager.last_grad_norm()},
                          {"tokens_per_s", tokens_per_s},
                          {"mfu", number_or_null(mfu)},
                          {"mem_peak_bytes", mem.peak_allocated_bytes},
                          {"mem_bytes", mem.allocated_bytes},
                          {"step_ms", seconds * 1e3},
                          {"loss_scale", manager.loss_scale()},
                          {"skipped", !applied}};
      if (eval_loss) j["eval_loss"] = *eval_loss;
      metrics << j.dump() << '\n';
      metrics.flush();
    }
    if ((step + 1) % o.log_every == 0 || step + 1 == o.steps || eval_loss) {
      bar.clear();
      char line[512];
      std::snprintf(line, sizeof line,
                    "step %lld/%lld | loss %.4f | norm %.3f | lr %.2e | %.0f ms | %s MFU | %.0f tok/s | mem %s / peak %s%s",
                    static_cast<long long>(step + 1), static_cast<long long>(o.steps), loss, manager.last_grad_norm(), lr,
                    seconds * 1e3, mfu ? (std::to_string(*mfu * 100).substr(0, 4) + "%").c_str() : "-", tokens_per_s,
                    bytes_text(static_cast<double>(mem.allocated_bytes)).c_str(),
                    bytes_text(static_cast<double>(mem.peak_allocated_bytes)).c_str(), applied ? "" : " | step skipped");
      bmt::print_rank(line);
      if (eval_loss) bmt::print_rank("eval loss ", *eval_loss, " at step ", step + 1);
    }
    bar.show(step + 1, o.steps, seconds_per_step);
    if (ckpt && o.save_every > 0 && (step + 1) % o.save_every == 0 && step + 1 != o.steps) {
      bar.clear();
      save_checkpoint(step + 1);
    }
  }
  bar.clear();
  manager.settle();  // the last step's outcome (a skip is reported)
  if (ckpt && o.steps > start) save_checkpoint(o.steps);
  const double total = std::chrono::duration<double>(Clock::now() - run_start).count();
  bmt::print_rank("trained ", o.steps - start, " steps in ", total, " s");
  if (!o.timeline.empty()) {
    bmt::timeline::write();
    bmt::print_rank("timeline: ", bmt::timeline::rank_path(o.timeline, 0), " (one file per rank)");
  }

  if (metrics.is_open() && o.steps > start) {
    metrics.close();
    const std::string svg = !o.plot.empty() ? o.plot
                            : o.metrics.size() > 6 && o.metrics.substr(o.metrics.size() - 6) == ".jsonl"
                                ? o.metrics.substr(0, o.metrics.size() - 6) + ".svg"
                                : o.metrics + ".svg";
    plot_loss_curve(o.metrics, svg, "bmt-train " + o.model + " (" + bmt::dtype_name(cfg.dtype) + ", " +
                                        std::to_string(world) + " ranks)",
                    data.entropy_rate);
    bmt::print_rank("loss curve: ", svg);
  }
  return 0;
}

}  // namespace bmt_train
