// The numerics policy of `trident train` (train/numerics.hpp): the agreement on a step's health
// across ranks (at 2 ranks with a non-finite value on one rank only), the skip/stop verdicts and
// their counting, the spike detector's z-score against a direct two-pass computation, its window
// across a restore, and the rollback budget.
#include "test_env.hpp"
#include "train/numerics.hpp"

#include <gtest/gtest.h>

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
