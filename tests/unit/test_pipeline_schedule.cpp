// Pipeline schedules (train/pipeline_schedule.hpp): the exact order of GPipe and 1F1B
// (PipeDream-Flush, Narayanan et al. 2021, sec. 2.2) for small cases written out by hand, and the
// invariants of the header checked over a grid of (M, pp, stage).
#include "core/error.hpp"
#include "train/pipeline_schedule.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace trident {
namespace {

using Pass = PipelineAction::Pass;
constexpr auto kGpipe = PipelineScheduleKind::gpipe;
constexpr auto k1f1b = PipelineScheduleKind::one_f_one_b;

// "F0 F1 B0 B1": a schedule as text, so that a failure prints the order.
std::string text(const PipelineSchedule& s) {
  std::string out;
  for (const PipelineAction& a : s.actions())
    out += (out.empty() ? "" : " ") + std::string(a.pass == Pass::forward ? "F" : "B") + std::to_string(a.micro_batch);
  return out;
}

TEST(PipelineSchedule, GpipeRunsAllForwardsThenAllBackwards) {
  for (int stage = 0; stage < 3; ++stage) {
    const PipelineSchedule s(kGpipe, 4, 3, stage);
    EXPECT_EQ(text(s), "F0 F1 F2 F3 B0 B1 B2 B3") << "stage " << stage;
    EXPECT_EQ(s.stashes(), 4);
    EXPECT_EQ(s.num_micro_batches(), 4);
  }
}

// The 4-stage, 8-micro-batch example of the PipeDream-Flush figure: stage s runs 3 - s warm-up
// forwards, then alternates, then drains.
TEST(PipelineSchedule, OneFOneBWarmUpSteadyStateCoolDown) {
  EXPECT_EQ(text(PipelineSchedule(k1f1b, 8, 4, 0)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(text(PipelineSchedule(k1f1b, 8, 4, 1)), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(text(PipelineSchedule(k1f1b, 8, 4, 2)), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(text(PipelineSchedule(k1f1b, 8, 4, 3)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  EXPECT_EQ(PipelineSchedule(k1f1b, 8, 4, 0).stashes(), 4);
  EXPECT_EQ(PipelineSchedule(k1f1b, 8, 4, 1).stashes(), 3);
  EXPECT_EQ(PipelineSchedule(k1f1b, 8, 4, 2).stashes(), 2);
  EXPECT_EQ(PipelineSchedule(k1f1b, 8, 4, 3).stashes(), 1);
}

// Fewer micro-batches than the warm-up would take: the stage forwards them all, then backwards
// them all, like GPipe, with M stashes.
TEST(PipelineSchedule, OneFOneBWithFewMicroBatchesIsAllForwardsFirst) {
  EXPECT_EQ(text(PipelineSchedule(k1f1b, 2, 4, 0)), "F0 F1 B0 B1");
  EXPECT_EQ(PipelineSchedule(k1f1b, 2, 4, 0).stashes(), 2);
  EXPECT_EQ(text(PipelineSchedule(k1f1b, 3, 4, 1)), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(PipelineSchedule(k1f1b, 3, 4, 1).stashes(), 3);
  EXPECT_EQ(text(PipelineSchedule(k1f1b, 1, 2, 0)), "F0 B0");
  EXPECT_EQ(PipelineSchedule(k1f1b, 1, 2, 0).stashes(), 1);
}

TEST(PipelineSchedule, OneStageOneFOneBAlternates) {
  const PipelineSchedule s(k1f1b, 3, 1, 0);
  EXPECT_EQ(text(s), "F0 B0 F1 B1 F2 B2");
  EXPECT_EQ(s.stashes(), 1);
  EXPECT_EQ(s.stash_of(2), 0);
}

// The header's invariants, for both schedules over every stage of 1..6 stages and 1..9 micro-batches.
TEST(PipelineSchedule, EveryMicroBatchOnceInOrderWithinTheStashes) {
  int cases = 0;
  for (auto kind : {kGpipe, k1f1b})
    for (int pp = 1; pp <= 6; ++pp)
      for (int stage = 0; stage < pp; ++stage)
        for (int M = 1; M <= 9; ++M) {
          const PipelineSchedule s(kind, M, pp, stage);
          const std::string where = (kind == kGpipe ? "gpipe" : "1f1b") + std::string(" M=") + std::to_string(M) +
                                    " pp=" + std::to_string(pp) + " stage=" + std::to_string(stage) + ": " + text(s);
          ASSERT_EQ(s.actions().size(), static_cast<size_t>(2 * M)) << where;
          EXPECT_EQ(s.stashes(), kind == kGpipe ? M : std::min(M, pp - stage)) << where;
          int next_forward = 0, next_backward = 0, peak = 0;
          std::set<int> in_flight;
          for (const PipelineAction& a : s.actions()) {
            if (a.pass == Pass::forward) {
              ASSERT_EQ(a.micro_batch, next_forward++) << where;  // forwards in order, each once
              // The new micro-batch's stash is not held by another one in flight.
              for (int m : in_flight) ASSERT_NE(s.stash_of(m), s.stash_of(a.micro_batch)) << where;
              in_flight.insert(a.micro_batch);
            } else {
              ASSERT_EQ(a.micro_batch, next_backward++) << where;  // backwards in order, each once
              ASSERT_EQ(in_flight.count(a.micro_batch), 1u) << where;  // after its forward
              in_flight.erase(a.micro_batch);
            }
            peak = std::max(peak, static_cast<int>(in_flight.size()));
            ASSERT_LE(static_cast<int>(in_flight.size()), s.stashes()) << where;
          }
          EXPECT_EQ(next_forward, M) << where;
          EXPECT_EQ(next_backward, M) << where;
          EXPECT_TRUE(in_flight.empty()) << where;
          EXPECT_EQ(peak, s.stashes()) << where;  // the stash count is tight, no stash is wasted
          ++cases;
        }
  EXPECT_EQ(cases, 2 * 21 * 9);
}

TEST(PipelineSchedule, RejectsImpossibleArguments) {
  EXPECT_THROW(PipelineSchedule(k1f1b, 0, 2, 0), Error);
  EXPECT_THROW(PipelineSchedule(k1f1b, 4, 2, 2), Error);
  EXPECT_THROW(PipelineSchedule(kGpipe, 4, 2, -1), Error);
  EXPECT_THROW(PipelineSchedule(kGpipe, 4, 0, 0), Error);
}

}  // namespace
}  // namespace trident
