#pragma once
// Learning-rate schedules as functions of the step, with a linear warmup in front of each.
// A scheduler is stateless apart from the step it is at, which checkpoints save and restore.
#include <cstdint>
#include <memory>
#include <string>

namespace bmt::optim {

class LRScheduler {
 public:
  LRScheduler(float base_lr, std::int64_t warmup_steps) : base_lr_(base_lr), warmup_(warmup_steps) {}
  virtual ~LRScheduler() = default;
  // The learning rate at `step` (0-based).
  float lr_at(std::int64_t step) const;
  float current_lr() const { return lr_at(step_); }
  void step() { ++step_; }
  std::int64_t current_step() const { return step_; }
  void set_step(std::int64_t step) { step_ = step; }
  virtual std::string name() const = 0;

 protected:
  // The schedule after warmup, for step >= warmup (t = step - warmup).
  virtual float decayed(std::int64_t t) const = 0;
  float base_lr_;
  std::int64_t warmup_;
  std::int64_t step_ = 0;
};

// lr constant after warmup.
class ConstantLR final : public LRScheduler {
 public:
  using LRScheduler::LRScheduler;
  std::string name() const override { return "constant"; }
 protected:
  float decayed(std::int64_t) const override { return base_lr_; }
};

// Linear from base_lr to min_lr over total_steps (including warmup), then min_lr.
class LinearLR final : public LRScheduler {
 public:
  LinearLR(float base_lr, std::int64_t warmup, std::int64_t total_steps, float min_lr = 0.0f);
  std::string name() const override { return "linear"; }
 protected:
  float decayed(std::int64_t t) const override;
 private:
  std::int64_t total_;
  float min_lr_;
};

// Cosine from base_lr to min_lr over total_steps (including warmup), then min_lr.
class CosineLR final : public LRScheduler {
 public:
  CosineLR(float base_lr, std::int64_t warmup, std::int64_t total_steps, float min_lr = 0.0f);
  std::string name() const override { return "cosine"; }
 protected:
  float decayed(std::int64_t t) const override;
 private:
  std::int64_t total_;
  float min_lr_;
};

// Noam (inverse square root): base_lr * sqrt(warmup / step) after warmup.
class NoamLR final : public LRScheduler {
 public:
  using LRScheduler::LRScheduler;
  std::string name() const override { return "noam"; }
 protected:
  float decayed(std::int64_t t) const override;
};

// base_lr * gamma^t after warmup.
class ExponentialLR final : public LRScheduler {
 public:
  ExponentialLR(float base_lr, std::int64_t warmup, float gamma) : LRScheduler(base_lr, warmup), gamma_(gamma) {}
  std::string name() const override { return "exponential"; }
 protected:
  float decayed(std::int64_t t) const override;
 private:
  float gamma_;
};

// Builds a scheduler by name: constant, linear, cosine, noam, exponential (gamma = `gamma`).
std::unique_ptr<LRScheduler> make_scheduler(const std::string& name, float base_lr, std::int64_t warmup,
                                            std::int64_t total_steps, float min_lr = 0.0f, float gamma = 0.999f);

}  // namespace bmt::optim
