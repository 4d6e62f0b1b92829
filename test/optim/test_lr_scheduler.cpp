#include <gtest/gtest.h>

#include <cmath>

#include "bmtrain/optim/lr_scheduler.hpp"
#include "bmtrain/runtime/error.hpp"

using namespace bmt::optim;

TEST(LRScheduler, WarmupIsLinearToBase) {
  ConstantLR s(1.0f, 4);
  EXPECT_FLOAT_EQ(s.lr_at(0), 0.25f);
  EXPECT_FLOAT_EQ(s.lr_at(3), 1.0f);
  EXPECT_FLOAT_EQ(s.lr_at(100), 1.0f);
}

TEST(LRScheduler, SchedulesMatchTheirFormulas) {
  CosineLR cos(2.0f, 10, 110, 0.2f);
  EXPECT_FLOAT_EQ(cos.lr_at(10), 2.0f);
  EXPECT_NEAR(cos.lr_at(60), 0.2f + 0.5f * 1.8f, 1e-6);
  EXPECT_NEAR(cos.lr_at(110), 0.2f, 1e-6);
  EXPECT_NEAR(cos.lr_at(500), 0.2f, 1e-6);
  LinearLR lin(1.0f, 0, 100, 0.0f);
  EXPECT_NEAR(lin.lr_at(25), 0.75f, 1e-6);
  NoamLR noam(1.0f, 16);
  EXPECT_NEAR(noam.lr_at(16 + 48), std::sqrt(16.0 / 64.0), 1e-6);
  ExponentialLR ex(1.0f, 0, 0.5f);
  EXPECT_NEAR(ex.lr_at(3), 0.125f, 1e-7);
}

TEST(LRScheduler, StepStateRoundTrips) {
  auto a = make_scheduler("cosine", 1.0f, 5, 50);
  for (int i = 0; i < 17; ++i) a->step();
  auto b = make_scheduler("cosine", 1.0f, 5, 50);
  b->set_step(a->current_step());
  EXPECT_EQ(a->current_lr(), b->current_lr());
}

TEST(LRScheduler, BadInputIsReported) {
  EXPECT_THROW(make_scheduler("triangle", 1.0f, 0, 10), bmt::Error);
  EXPECT_THROW(CosineLR(1.0f, 10, 10), bmt::Error);
}
