#pragma once
// The training loop of bmt-train, in the parts a run goes through: setup (configuration, data,
// model, optimizer), resume, then per step the step itself, evaluation, the log and checkpoints.
#include <bmtrain/bmtrain.hpp>
#include <bmtrain/io/checkpoint_dir.hpp>
#include <bmtrain/io/directory_lock.hpp>
#include <bmtrain/data/token_loader.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "banner.hpp"
#include "fault_injection.hpp"
#include <bmtrain/models/causal_lm.hpp>
#include "options.hpp"
#include "resume_state.hpp"
#include "step_log.hpp"
#include "stop_signal.hpp"
#include "token_staging.hpp"
#include "training_data.hpp"

namespace bmt_train {

class Trainer {
 public:
  // Sets the run up on every rank: the configuration every rank must share, data, model,
  // optimizer, the checkpoint to resume from and the outputs. Bad input throws the same bmt::Error
  // on every rank (bmtrain/runtime/agreement.hpp).
  explicit Trainer(const TrainOptions& options);
  ~Trainer();

  // Trains from the resumed (or first) step to --steps, or with --eval-only evaluates; returns the
  // process exit code: 0, or after SIGUSR1 or SIGTERM kStoppedSaved / kStoppedUnsaved (stop_signal.hpp).
  int run();

 private:
  void configure();
  void read_checkpoint();
  void build_model();
  void build_optimizer();
  void resume();
  void open_outputs();
  // One optimizer step over the next batch; fills the record's loss (when read), lr and outcome.
  StepRecord step(std::int64_t step, bool read_loss);
  double evaluate();
  // --eval-only: the loss over every --val-data sequence once, printed (and in --metrics).
  int evaluate_only();
  void save(std::int64_t step);
  // Ends a run stopped by a signal after `step`: its checkpoint (unless `saved` already), a line
  // saying how to continue, and the exit status.
  int stop(std::int64_t step, bool saved);
  // What this run's trajectory depends on, as its checkpoints record it.
  nlohmann::json run_trajectory() const;
  void export_hf();

  const TrainOptions& o_;
  std::optional<StopSignal> stop_signal_;  // training only: an evaluation ends as signals say
  int world_ = 1;
  ModelConfig cfg_;
  TrainingData data_;
  RunPlan plan_;
  std::int64_t resumed_marked_step_ = 0;  // the step the resumed checkpoint's COMPLETE marker names
  std::optional<bmt::io::TrainingState> resumed_state_;  // the --resume checkpoint's, as read
  ResumePoint resumed_;                    // where the resumed checkpoint stands (checked)
  FaultInjection fault_;
  std::unique_ptr<bmt::models::CausalLM> model_;
  std::unique_ptr<bmt::optim::AdamW> adamw_;
  std::unique_ptr<bmt::optim::LRScheduler> schedule_;
  std::unique_ptr<bmt::optim::OptimManager> manager_;
  std::optional<bmt::data::TokenLoader> loader_, val_loader_;
  std::optional<bmt::io::CheckpointDir> checkpoints_;
  std::unique_ptr<bmt::io::DirectoryLock> save_lock_;  // rank 0: this job alone saves into --save
  std::unique_ptr<StepLog> log_;
  std::unique_ptr<TokenStaging> staging_;
  std::int64_t loss_every_ = 1;  // steps between reads of the loss (a host wait and a collective)
  bool records_metrics_ = false;  // rank 0 writes --metrics (every rank knows)
  std::vector<bmt::Tensor> losses_;  // the current step's micro-batch losses, on the device
};

// Runs the training the options describe; returns the process exit code.
int train(const TrainOptions& options);

}  // namespace bmt_train
