// The numerics policy of `trident train` (train/numerics.hpp): the agreement on a step's health
// across ranks (at 2 ranks with a non-finite value on one rank only), the skip/stop verdicts and
// their counting, the fp16 loss scaler's state machine against hand-computed sequences, the spike
// detector's z-score against a direct two-pass computation, its window across a restore, and the
// rollback budget.
#include "test_env.hpp"
#include "train/numerics.hpp"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace trident {
namespace {

Communicator& world() { return test::runtime().world(); }

TEST(StepHealth, AllFiniteAgreesOnTheLoss) {
  const StepHealth h = agree_step_health(world(), world().rank(), 2.5, 0.75);
  EXPECT_TRUE(h.finite);
  EXPECT_EQ(h.loss, 2.5);
  EXPECT_EQ(h.first_bad_rank, -1);
}

TEST(StepHealth, NonFiniteOnTheLastRankOnlyIsSeenByEveryRank) {
  const int last = world().size() - 1;
  const bool mine = world().rank() == last;
  const StepHealth h = agree_step_health(world(), world().rank(), mine ? std::nan("") : 3.0, 1.0);
  EXPECT_FALSE(h.finite);
  EXPECT_EQ(h.first_bad_rank, last);
  if (world().size() > 1) EXPECT_EQ(h.loss, 3.0);  // the finite losses of the other ranks
  else EXPECT_TRUE(std::isnan(h.loss));
  // An infinite gradient norm on every rank: the lowest rank is named.
  const StepHealth g = agree_step_health(world(), world().rank(), 3.0, std::numeric_limits<double>::infinity());
  EXPECT_FALSE(g.finite);
  EXPECT_EQ(g.first_bad_rank, 0);
}

TEST(StepHealth, RanksThatDisagreeOnTheLossTakeTheLargest) {
  const StepHealth h = agree_step_health(world(), world().rank(), 1.0 + world().rank(), 1.0);
  EXPECT_TRUE(h.finite);
  EXPECT_EQ(h.loss, static_cast<double>(world().size()));
}

TEST(NonfinitePolicy, StopStopsAtTheFirstNonFiniteStep) {
  NonfinitePolicy p(NonfiniteAction::stop, 5);
  EXPECT_EQ(p.decide(true), NonfiniteVerdict::apply);
  EXPECT_EQ(p.decide(false), NonfiniteVerdict::stop);
}

TEST(NonfinitePolicy, SkipCountsAndStopsAtTheLimitOfConsecutiveSkips) {
  NonfinitePolicy p(NonfiniteAction::skip, 3);
  EXPECT_EQ(p.decide(false), NonfiniteVerdict::skip);
  EXPECT_EQ(p.decide(false), NonfiniteVerdict::skip);
  EXPECT_EQ(p.consecutive(), 2);
  EXPECT_EQ(p.decide(true), NonfiniteVerdict::apply);  // a good step resets the run of skips
  EXPECT_EQ(p.consecutive(), 0);
  EXPECT_EQ(p.skipped_total(), 2);
  EXPECT_EQ(p.decide(false), NonfiniteVerdict::skip);
  EXPECT_EQ(p.decide(false), NonfiniteVerdict::skip);
  EXPECT_EQ(p.decide(false), NonfiniteVerdict::stop);  // the third in a row
  EXPECT_EQ(p.skipped_total(), 5);
  // Restored counters continue the count (a resumed run stops where the uninterrupted one would).
  NonfinitePolicy q(NonfiniteAction::skip, 3);
  q.restore(2, 7);
  EXPECT_EQ(q.decide(false), NonfiniteVerdict::stop);
  EXPECT_EQ(q.skipped_total(), 8);
}

TEST(StepHealth, ANonFiniteNormWithFiniteLossesIsNotALossProblem) {
  // An overflow under loss scaling: the gradient norm is inf on the last rank only, every loss finite.
  const bool mine = world().rank() == world().size() - 1;
  const StepHealth h = agree_step_health(world(), world().rank(), 2.0,
                                         mine ? std::numeric_limits<double>::infinity() : 1.0);
  EXPECT_FALSE(h.finite);
  EXPECT_TRUE(h.loss_finite);
  EXPECT_EQ(h.loss, 2.0);
  // A NaN loss on the last rank: not loss_finite on every rank.
  const StepHealth g = agree_step_health(world(), world().rank(), mine ? std::nan("") : 2.0, 1.0);
  EXPECT_FALSE(g.finite);
  EXPECT_FALSE(g.loss_finite);
}

// The scaler against sequences computed by hand from torch.cuda.amp.GradScaler's rules (growth
// after `interval` good steps, backoff on an overflow, growth tracker reset by both) plus
// Megatron-LM's floor.
TEST(LossScaler, GrowsAfterIntervalGoodStepsAndBacksOffOnOverflow) {
  LossScaler s(true, 65536.0, 3, 2.0, 0.5, 1.0);
  // good good good -> x2; good overflow -> /2 (tracker reset); good good good -> x2.
  const bool finite[] = {true, true, true, true, false, true, true, true, true};
  const double want_scale[] = {65536, 65536, 131072, 131072, 65536, 65536, 65536, 131072, 131072};
  const std::int64_t want_good[] = {1, 2, 0, 1, 0, 1, 2, 0, 1};
  for (int i = 0; i < 9; ++i) {
    const ScaleVerdict v = s.update(finite[i]);
    EXPECT_EQ(v, finite[i] ? ScaleVerdict::apply : ScaleVerdict::overflow) << i;
    EXPECT_EQ(s.scale(), want_scale[i]) << i;
    EXPECT_EQ(s.good_steps(), want_good[i]) << i;
  }
  EXPECT_EQ(s.overflows(), 1);
}

TEST(LossScaler, BackoffIsClampedAtTheMinimumAndAnOverflowThereStops) {
  LossScaler s(true, 8.0, 100, 2.0, 0.25, 1.0);
  EXPECT_EQ(s.update(false), ScaleVerdict::overflow);
  EXPECT_EQ(s.scale(), 2.0);
  EXPECT_EQ(s.update(false), ScaleVerdict::overflow);
  EXPECT_EQ(s.scale(), 1.0);  // 0.5 clamped to the minimum
  EXPECT_EQ(s.update(true), ScaleVerdict::apply);
  EXPECT_EQ(s.update(false), ScaleVerdict::stop);  // an overflow at the minimum
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.overflows(), 2);
  // A non-power-of-two minimum is reached exactly, too.
  LossScaler t(true, 10.0, 100, 2.0, 0.5, 3.0);
  EXPECT_EQ(t.update(false), ScaleVerdict::overflow);
  EXPECT_EQ(t.scale(), 5.0);
  EXPECT_EQ(t.update(false), ScaleVerdict::overflow);
  EXPECT_EQ(t.scale(), 3.0);
  EXPECT_EQ(t.update(false), ScaleVerdict::stop);
}

TEST(LossScaler, GrowthStopsAtTheEndOfFloatsRangeAndDisabledIsOne) {
  LossScaler s(true, 0x1p127, 1, 2.0, 0.5, 1.0);
  EXPECT_EQ(s.update(true), ScaleVerdict::apply);
  EXPECT_EQ(s.scale(), 0x1p127);  // 2^128 is not a float: the scale stays
  EXPECT_EQ(s.good_steps(), 0);
  LossScaler off(false, 65536.0, 1, 2.0, 0.5, 1.0);
  EXPECT_EQ(off.scale(), 1.0);
  EXPECT_EQ(off.update(false), ScaleVerdict::apply);
  EXPECT_EQ(off.overflows(), 0);
  // From a deck: enabled by fp16 parameters or reduction only.
  TrainConfig t;
  EXPECT_FALSE(LossScaler(t).enabled());
  t.param_dtype = Precision::bf16;
  EXPECT_FALSE(LossScaler(t).enabled());
  t.reduce_dtype = Precision::fp16;
  EXPECT_TRUE(LossScaler(t).enabled());
  t.reduce_dtype = Precision::f32;
  t.param_dtype = Precision::fp16;
  EXPECT_EQ(LossScaler(t).scale(), 65536.0);
}

TEST(LossScaler, InterruptResetsTheGoodStepsAndRestoreContinues) {
  LossScaler a(true, 4.0, 3, 2.0, 0.5, 1.0);
  a.update(true);
  a.update(true);
  a.interrupt();  // a step with a non-finite loss (the nonfinite policy's)
  EXPECT_EQ(a.good_steps(), 0);
  EXPECT_EQ(a.scale(), 4.0);
  // A restored scaler continues exactly as the one it was saved from.
  LossScaler b(true, 65536.0, 3, 2.0, 0.5, 1.0);
  a.update(true);
  a.update(false);
  a.update(true);
  b.restore(a.scale(), a.good_steps(), a.overflows());
  for (bool f : {true, true, false, true, true, true, true}) {
    EXPECT_EQ(a.update(f), b.update(f));
    EXPECT_EQ(a.scale(), b.scale());
    EXPECT_EQ(a.good_steps(), b.good_steps());
    EXPECT_EQ(a.overflows(), b.overflows());
  }
}

TEST(LossScaler, RestoreBelowARaisedMinimumStartsAtTheMinimum) {
  // A resume that raised [train] loss_scale_min above the checkpoint's scale: the scale starts at
  // the new floor (was: it stayed below it, and the first overflow stopped the run "at the minimum
  // loss scale" of the checkpoint's value, not the floor the user set).
  LossScaler s(true, 65536.0, 3, 2.0, 0.5, 4096.0);
  EXPECT_TRUE(s.restore(1024.0, 2, 5));
  EXPECT_EQ(s.scale(), 4096.0);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_EQ(s.overflows(), 5);
  EXPECT_EQ(s.update(false), ScaleVerdict::stop);  // at the floor now: an overflow stops
  // A scale at or above the floor is restored as it was.
  LossScaler t(true, 65536.0, 3, 2.0, 0.5, 4096.0);
  EXPECT_FALSE(t.restore(8192.0, 2, 5));
  EXPECT_EQ(t.scale(), 8192.0);
  EXPECT_EQ(t.good_steps(), 2);
  EXPECT_EQ(t.update(false), ScaleVerdict::overflow);
  EXPECT_EQ(t.scale(), 4096.0);
}

TEST(SpikeDetector, ZScoreAgainstThePreviousWindow) {
  SpikeDetector d(4);
  const std::vector<double> losses = {3.0, 2.9, 3.1, 2.8};
  for (double l : losses) {
    EXPECT_TRUE(std::isnan(d.zscore(l)));  // not full yet
    d.push(l);
  }
  // Oracle: mean and population deviation of the four previous losses, computed directly.
  const double mean = (3.0 + 2.9 + 3.1 + 2.8) / 4.0;
  double ss = 0;
  for (double l : losses) ss += (l - mean) * (l - mean);
  const double sd = std::sqrt(ss / 4.0);
  EXPECT_NEAR(d.zscore(5.0), (5.0 - mean) / sd, 1e-12);
  EXPECT_GT(d.zscore(5.0), 10.0);
  d.push(5.0);  // the oldest (3.0) leaves the window
  ASSERT_EQ(d.values().size(), 4u);
  EXPECT_EQ(d.values().front(), 2.9);
  EXPECT_EQ(d.values().back(), 5.0);
}

TEST(SpikeDetector, EqualLossesAndAnOffDetector) {
  SpikeDetector d(2);
  d.push(1.0);
  d.push(1.0);
  EXPECT_EQ(d.zscore(1.0), 0.0);
  EXPECT_EQ(d.zscore(2.0), std::numeric_limits<double>::infinity());
  SpikeDetector off(0);
  off.push(1.0);
  EXPECT_TRUE(off.values().empty());
  EXPECT_TRUE(std::isnan(off.zscore(100.0)));
}

TEST(SpikeDetector, ARestoredWindowScoresBitwiseAlike) {
  SpikeDetector a(8), b(8);
  for (int i = 0; i < 13; ++i) a.push(2.0 + 0.1 * std::sin(0.7 * i) + 1e-3 * i);
  b.restore(a.values());
  for (int i = 13; i < 40; ++i) {
    const double l = 2.0 + 0.1 * std::sin(0.7 * i) + 1e-3 * i;
    const double za = a.zscore(l), zb = b.zscore(l);
    EXPECT_EQ(std::memcmp(&za, &zb, sizeof za), 0) << "step " << i;
    a.push(l);
    b.push(l);
  }
  // A restore keeps only the newest `window` values of a longer list.
  SpikeDetector c(3);
  c.restore({1, 2, 3, 4, 5});
  EXPECT_EQ(c.values(), (std::vector<double>{3, 4, 5}));
}

TEST(SpikePolicy, WarnsWithoutRollbackOrCheckpoint) {
  SpikePolicy warn_only(6.0, false, 3);
  EXPECT_EQ(warn_only.decide(std::nan(""), 10), SpikeVerdict::none);
  EXPECT_EQ(warn_only.decide(5.9, 10), SpikeVerdict::none);
  EXPECT_EQ(warn_only.decide(6.1, 10), SpikeVerdict::warn);
  SpikePolicy rollback(6.0, true, 3);
  EXPECT_EQ(rollback.decide(7.0, -1), SpikeVerdict::warn);  // nothing to roll back to
}

TEST(SpikePolicy, RollbacksToOneCheckpointAreLimited) {
  SpikePolicy p(6.0, true, 2);
  EXPECT_EQ(p.decide(7.0, 10), SpikeVerdict::rollback);
  EXPECT_EQ(p.decide(7.0, 10), SpikeVerdict::rollback);
  EXPECT_EQ(p.rollbacks_to(10), 2);
  EXPECT_EQ(p.decide(7.0, 10), SpikeVerdict::stop);
  // A newer checkpoint gets its own budget.
  EXPECT_EQ(p.decide(7.0, 20), SpikeVerdict::rollback);
  EXPECT_EQ(p.rollbacks_to(20), 1);
  EXPECT_EQ(p.rollbacks_to(10), 0);
}

}  // namespace
}  // namespace trident
