#include "bmtrain/optim/lr_scheduler.hpp"

#include <algorithm>
#include <cmath>

#include "bmtrain/runtime/error.hpp"

namespace bmt::optim {

float LRScheduler::lr_at(std::int64_t step) const {
  if (step < warmup_) return base_lr_ * static_cast<float>(step + 1) / static_cast<float>(warmup_);
  return decayed(step - warmup_);
}

LinearLR::LinearLR(float base_lr, std::int64_t warmup, std::int64_t total_steps, float min_lr)
    : LRScheduler(base_lr, warmup), total_(total_steps), min_lr_(min_lr) {
  BMT_REQUIRE(total_steps > warmup, "LinearLR: expected total steps > warmup steps, found " << total_steps
                                                                                            << " <= " << warmup);
}

float LinearLR::decayed(std::int64_t t) const {
  const float frac = std::min(1.0f, static_cast<float>(t) / static_cast<float>(total_ - warmup_));
  return base_lr_ + (min_lr_ - base_lr_) * frac;
}

CosineLR::CosineLR(float base_lr, std::int64_t warmup, std::int64_t total_steps, float min_lr)
    : LRScheduler(base_lr, warmup), total_(total_steps), min_lr_(min_lr) {
  BMT_REQUIRE(total_steps > warmup, "CosineLR: expected total steps > warmup steps, found " << total_steps
                                                                                            << " <= " << warmup);
}

float CosineLR::decayed(std::int64_t t) const {
  const double frac = std::min(1.0, static_cast<double>(t) / static_cast<double>(total_ - warmup_));
  return min_lr_ + 0.5f * (base_lr_ - min_lr_) * static_cast<float>(1.0 + std::cos(M_PI * frac));
}

float NoamLR::decayed(std::int64_t t) const {
  const double w = static_cast<double>(std::max<std::int64_t>(warmup_, 1));
  return base_lr_ * static_cast<float>(std::sqrt(w / (w + static_cast<double>(t))));
}

float ExponentialLR::decayed(std::int64_t t) const {
  return base_lr_ * static_cast<float>(std::pow(static_cast<double>(gamma_), static_cast<double>(t)));
}

std::unique_ptr<LRScheduler> make_scheduler(const std::string& name, float base_lr, std::int64_t warmup,
                                            std::int64_t total_steps, float min_lr, float gamma) {
  if (name == "constant") return std::make_unique<ConstantLR>(base_lr, warmup);
  if (name == "linear") return std::make_unique<LinearLR>(base_lr, warmup, total_steps, min_lr);
  if (name == "cosine") return std::make_unique<CosineLR>(base_lr, warmup, total_steps, min_lr);
  if (name == "noam") return std::make_unique<NoamLR>(base_lr, warmup);
  if (name == "exponential") return std::make_unique<ExponentialLR>(base_lr, warmup, gamma);
  BMT_REQUIRE(false, "unknown LR schedule '" << name << "': expected constant, linear, cosine, noam or exponential");
  return nullptr;
}

}  // namespace bmt::optim
