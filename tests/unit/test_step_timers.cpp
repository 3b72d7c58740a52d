// The step-time breakdown's ledger (train/step_timers.hpp) and the communicators' time accounts
// (Communicator::set_timing), without a training run. The multi-rank cases make one rank late on
// purpose (a sleep of 30 ms), so the other rank's exposed time has a known lower bound; tolerances
// are one-sided (a loaded machine only adds time).
#include "parallel/runtime.hpp"
#include "test_env.hpp"
#include "train/step_timers.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <sstream>
#include <thread>

using namespace trident;

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

double parts_sum(const StepBreakdown& b) {
  double s = std::accumulate(b.part.begin(), b.part.end(), 0.0);
  for (double e : b.exposed) s += e;
  return s;
}

int count_fields(const std::string& csv) { return static_cast<int>(std::count(csv.begin(), csv.end(), ',')) + 1; }

}  // namespace

TEST(StepTimers, AxesOfCommunicatorLabels) {
  EXPECT_EQ(comm_axis_of("dp"), CommAxis::dp);
  EXPECT_EQ(comm_axis_of("dp_shard"), CommAxis::dp);
  EXPECT_EQ(comm_axis_of("dp_replicate"), CommAxis::dp);
  EXPECT_EQ(comm_axis_of("tp"), CommAxis::tp);
  EXPECT_EQ(comm_axis_of("pp"), CommAxis::pp);
  EXPECT_EQ(comm_axis_of("pp_tied"), CommAxis::pp);
  EXPECT_EQ(comm_axis_of("mp"), CommAxis::world);
  EXPECT_EQ(comm_axis_of("world"), CommAxis::world);
}

TEST(StepTimers, ColumnsAndFieldsAgree) {
  const std::string cols = step_breakdown_columns();
  EXPECT_EQ(cols.rfind("t_step,t_fwd,t_bwd,t_opt,t_comm_dp_exposed,t_comm_dp_hidden,", 0), 0u) << cols;
  EXPECT_NE(cols.find(",t_bubble,t_data,t_ckpt,t_eval,t_other"), std::string::npos) << cols;
  StepBreakdown on;
  on.on = true;
  StepBreakdown off;
  EXPECT_EQ(count_fields(cols), count_fields(on.csv_fields()));
  EXPECT_EQ(count_fields(cols), count_fields(off.csv_fields()));
  EXPECT_EQ(off.csv_fields().find_first_not_of(','), std::string::npos) << "timers off: empty cells";
}

TEST(StepTimers, PartsAndOtherSumToTheInterval) {
  StepTimers t(TimerMode::coarse);
  t.start();
  { const auto p = t.time(StepPart::fwd); sleep_ms(5); }
  { const auto p = t.claim(StepPart::bubble); sleep_ms(3); }
  sleep_ms(2);  // nobody's: other
  const StepBreakdown b = t.lap();
  ASSERT_TRUE(b.on);
  EXPECT_GE(b.part[static_cast<size_t>(StepPart::fwd)], 0.005);
  EXPECT_GE(b.part[static_cast<size_t>(StepPart::bubble)], 0.003);
  EXPECT_GE(b.other, 0.002);
  EXPECT_NEAR(b.step, parts_sum(b) + b.other, 1e-12);
  // The next interval starts where the last one ended, with nothing carried over.
  const StepBreakdown b2 = t.lap();
  EXPECT_EQ(b2.part[static_cast<size_t>(StepPart::fwd)], 0.0);
  EXPECT_LT(b2.step, 0.002);
}

TEST(StepTimers, OffTimesNothing) {
  StepTimers t(TimerMode::off);
  t.start();
  { const auto p = t.time(StepPart::fwd); sleep_ms(1); }
  EXPECT_FALSE(t.lap().on);
  Communicator& world = test::runtime().world();
  t.watch(world);
  EXPECT_FALSE(world.timing());
}

TEST(StepTimers, SummaryLeavesTheFirstStepOut) {
  BreakdownSummary s;
  StepBreakdown a, b;
  a.on = b.on = true;
  a.step = 1.0;  // the warm-up: 1000 ms
  b.step = 0.010;
  b.part[static_cast<size_t>(StepPart::fwd)] = 0.006;
  b.other = 0.004;
  s.add(1, a);
  s.add(2, b);
  s.add(3, b);
  const std::string line = s.line();
  EXPECT_NE(line.find("mean of steps 2-3"), std::string::npos) << line;
  EXPECT_NE(line.find("step 1 left out as warm-up"), std::string::npos) << line;
  EXPECT_NE(line.find("step 10.00 = fwd 6.00"), std::string::npos) << line;
  BreakdownSummary one;
  one.add(7, a);
  EXPECT_NE(one.line().find("step 7 only"), std::string::npos) << one.line();
}

// Collective over world: every rank runs the same sequence; rank 1 arrives 30 ms late.
TEST(CommTiming, BlockingWaitOnALateRankIsExposedAndChargedToItsAxis) {
  Communicator& world = test::runtime().world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto dp = world.split(0, world.rank(), "dp_shard");
  StepTimers t(TimerMode::coarse);
  t.watch(*dp);
  ASSERT_TRUE(dp->timing());
  t.start();
  double v = 1.0;
  {
    const auto p = t.time(StepPart::opt);
    if (dp->rank() == 1) sleep_ms(30);
    dp->all_reduce(&v, 1);
  }
  const StepBreakdown b = t.lap();
  EXPECT_EQ(v, dp->size());
  if (dp->rank() == 0) {
    EXPECT_GE(b.exposed[static_cast<size_t>(CommAxis::dp)], 0.025) << "waited for rank 1";
    EXPECT_LT(b.part[static_cast<size_t>(StepPart::opt)], b.exposed[static_cast<size_t>(CommAxis::dp)])
        << "the wait is not the part's own time";
  }
  EXPECT_EQ(b.exposed[static_cast<size_t>(CommAxis::tp)], 0.0);
  EXPECT_NEAR(b.step, parts_sum(b) + b.other, 1e-12);
  EXPECT_GE(b.other, -1e-6);
}

TEST(CommTiming, NonBlockingOperationIsHiddenUntilItsWaitAndClaimsTakeExposedTime) {
  Communicator& world = test::runtime().world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto pp = world.split(0, world.rank(), "pp");
  StepTimers t(TimerMode::coarse);
  t.watch(*pp);
  t.start();
  std::vector<float> in(1024, 1.0f), out(1024);
  Request r = pp->iall_reduce(in.data(), out.data(), in.size(), DataType::f32, ReduceOp::sum);
  sleep_ms(20);  // "compute" while the operation is in flight
  r.wait();
  double v = 0.0;
  {
    const auto p = t.claim(StepPart::bubble);  // a pipeline receive: bubble, not pp exposed
    if (pp->rank() == 1) sleep_ms(30);
    pp->all_reduce(&v, 1);
  }
  const StepBreakdown b = t.lap();
  const auto ppa = static_cast<size_t>(CommAxis::pp);
  EXPECT_GE(b.hidden[ppa], 0.019);
  EXPECT_LE(b.exposed[ppa], b.exposed[ppa] + b.hidden[ppa]);
  if (pp->rank() == 0) {
    EXPECT_GE(b.part[static_cast<size_t>(StepPart::bubble)], 0.025);
    EXPECT_LT(b.exposed[ppa], 0.025) << "the claimed wait left the pp column";
  }
  EXPECT_NEAR(b.step, parts_sum(b) + b.other, 1e-12);
  EXPECT_GE(b.other, -1e-6);
}
