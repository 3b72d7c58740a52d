// The checkpoint and stop policies of `trident train` (train/checkpoint_policy.hpp,
// train/stop_policy.hpp): every save, failure and stop path with its exit status, driven by a
// saver that fails on request instead of a training run. Runs at any rank count: the collective
// decisions are checked with rank-dependent inputs (a signal on the last rank only, clocks that
// disagree), so at 2 ranks they also show that every rank follows the same decision.
#include "core/error.hpp"
#include "test_env.hpp"
#include "train/checkpoint_policy.hpp"
#include "train/signals.hpp"
#include "train/stop_policy.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace trident {
namespace {

/// Saves nothing; records each call ("save 5", "start 5", "wait 5") and fails the steps in `fail`
/// with a collective CheckpointError, synchronously or when the background save is waited for.
class FakeSaver : public CheckpointSaver {
 public:
  explicit FakeSaver(bool background = false, std::set<std::int64_t> fail = {})
      : background(background), fail(std::move(fail)) {}

  bool background;                  // can_start()
  std::set<std::int64_t> fail;      // steps whose save fails
  double save_seconds = 0.0;        // how long a synchronous save takes
  std::vector<std::string> calls;

  std::string save(std::int64_t step) override {
    calls.push_back("save " + std::to_string(step));
    if (save_seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(save_seconds));
    if (fail.count(step)) throw CheckpointError("disk full at step " + std::to_string(step), /*collective=*/true);
    return path_for(step);
  }
  bool can_start() const override { return background; }
  void start(std::int64_t step) override {
    calls.push_back("start " + std::to_string(step));
    in_flight_ = step;
  }
  bool busy() const override { return in_flight_ >= 0; }
  BackgroundSaveResult wait() override {
    const std::int64_t step = in_flight_;
    in_flight_ = -1;
    calls.push_back("wait " + std::to_string(step));
    if (abandoned_) {
      abandoned_ = false;
      return BackgroundSaveResult{path_for(step), step, 0.25, 1 << 20, /*abandoned=*/true};
    }
    if (fail.count(step)) throw CheckpointError("disk full at step " + std::to_string(step), /*collective=*/true);
    return BackgroundSaveResult{path_for(step), step, 0.25, 1 << 20};
  }
  void abandon() override {
    calls.push_back("abandon " + std::to_string(in_flight_));
    abandoned_ = true;
  }
  std::string path_for(std::int64_t step) const override { return "ckpt/step_" + std::to_string(step) + ".h5"; }

 private:
  std::int64_t in_flight_ = -1;
  bool abandoned_ = false;
};

using Calls = std::vector<std::string>;

CheckpointPolicyOptions options(std::int64_t interval, bool continue_on_error, bool save_final = true) {
  CheckpointPolicyOptions o;
  o.interval = interval;
  o.continue_on_error = continue_on_error;
  o.save_final = save_final;
  return o;
}

int world_rank() { return test::runtime().world().rank(); }

// ---- CheckpointPolicy ----------------------------------------------------------------------

TEST(CheckpointPolicy, IntervalSavesOnMultiplesOfTheIntervalOnly) {
  FakeSaver saver;
  CheckpointPolicy p(saver, options(5, false), -1, world_rank());
  for (std::int64_t step = 1; step <= 12; ++step) p.after_step(step);
  EXPECT_EQ(saver.calls, (Calls{"save 5", "save 10"}));
  EXPECT_EQ(p.last_saved(), 10);
  EXPECT_EQ(p.last_failed(), -1);
  EXPECT_TRUE(p.interval_due(15));
  EXPECT_FALSE(p.interval_due(16));

  FakeSaver none;
  CheckpointPolicy off(none, options(0, false), -1, world_rank());
  for (std::int64_t step = 1; step <= 12; ++step) off.after_step(step);
  EXPECT_TRUE(none.calls.empty());
  EXPECT_FALSE(off.interval_due(10));
}

TEST(CheckpointPolicy, LastSaveSecondsIsTheDurationOfTheSave) {
  FakeSaver saver;
  saver.save_seconds = 0.05;
  CheckpointPolicy p(saver, options(1, false), -1, world_rank());
  EXPECT_EQ(p.last_save_seconds(), 0.0);
  p.after_step(1);
  EXPECT_GE(p.last_save_seconds(), 0.05);
  EXPECT_LT(p.last_save_seconds(), 5.0);
}

TEST(CheckpointPolicy, FailedSaveWithOnErrorStopRethrowsTheSameError) {
  FakeSaver saver(/*background=*/false, {5});
  CheckpointPolicy p(saver, options(5, /*continue_on_error=*/false), 3, world_rank());
  try {
    p.after_step(5);
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_STREQ(e.what(), "disk full at step 5");
    EXPECT_TRUE(e.collective());  // rethrown as it was, so main() still exits cleanly on every rank
    EXPECT_EQ(e.exit_code(), 1);
  }
  EXPECT_EQ(p.last_saved(), 3);  // the resumed checkpoint is still the last good one
  // A failed final save also ends the run with the error.
  EXPECT_THROW(p.final_save(StopReason::signal, 5), CheckpointError);
}

TEST(CheckpointPolicy, OnErrorContinueGoesOnAndTheFinalSaveOfTheFailedStepFails) {
  FakeSaver saver(/*background=*/false, {10});
  CheckpointPolicy p(saver, options(10, /*continue_on_error=*/true), -1, world_rank());
  for (std::int64_t step = 1; step <= 10; ++step) EXPECT_NO_THROW(p.after_step(step));
  EXPECT_EQ(p.last_failed(), 10);
  EXPECT_EQ(p.last_saved(), -1);
  // The run ends at step 10: that step's save failed already and is not retried.
  EXPECT_FALSE(p.final_save(StopReason::end_of_run, 10));
  EXPECT_EQ(saver.calls, (Calls{"save 10"}));
  EXPECT_EQ(StopPolicy::exit_status(StopReason::end_of_run, false), 1);
}

TEST(CheckpointPolicy, OnErrorContinueRecoversAtTheNextSave) {
  FakeSaver saver(/*background=*/false, {5});
  CheckpointPolicy p(saver, options(5, true), -1, world_rank());
  for (std::int64_t step = 1; step <= 12; ++step) p.after_step(step);
  EXPECT_EQ(p.last_failed(), 5);
  EXPECT_EQ(p.last_saved(), 10);
  EXPECT_TRUE(p.final_save(StopReason::stop_at_step, 12));
  EXPECT_EQ(saver.calls, (Calls{"save 5", "save 10", "save 12"}));
  EXPECT_EQ(p.last_saved(), 12);
}

TEST(CheckpointPolicy, FinalSaveOfAStepTheIntervalSavedWritesNothingMore) {
  FakeSaver saver;
  CheckpointPolicy p(saver, options(10, false), -1, world_rank());
  p.after_step(10);
  EXPECT_TRUE(p.final_save(StopReason::time_limit, 10));
  EXPECT_EQ(saver.calls, (Calls{"save 10"}));
  // A run resumed at step 8 that stops there has its checkpoint already.
  FakeSaver resumed_saver;
  CheckpointPolicy resumed(resumed_saver, options(10, false), 8, world_rank());
  EXPECT_TRUE(resumed.final_save(StopReason::signal, 8));
  EXPECT_TRUE(resumed_saver.calls.empty());
}

TEST(CheckpointPolicy, FinalSaveFailureWithContinueReturnsFalseAndLeavesTheLastGoodStep) {
  FakeSaver saver(/*background=*/false, {12});
  CheckpointPolicy p(saver, options(5, true), -1, world_rank());
  for (std::int64_t step = 1; step <= 12; ++step) p.after_step(step);
  EXPECT_FALSE(p.final_save(StopReason::stop_at_step, 12));
  EXPECT_EQ(saver.calls, (Calls{"save 5", "save 10", "save 12"}));
  EXPECT_EQ(p.last_saved(), 10);
  EXPECT_EQ(p.last_failed(), 12);
}

TEST(CheckpointPolicy, SaveFinalFalseSkipsEndAndEarlyStopSavesButNotIntervalOrSignalSaves) {
  for (StopReason why : {StopReason::end_of_run, StopReason::stop_at_step, StopReason::time_limit}) {
    FakeSaver saver;
    CheckpointPolicy p(saver, options(5, false, /*save_final=*/false), -1, world_rank());
    p.after_step(5);  // interval saves go on
    EXPECT_TRUE(p.final_save(why, 7)) << stop_reason_name(why);
    EXPECT_EQ(saver.calls, (Calls{"save 5"})) << stop_reason_name(why);
    EXPECT_EQ(p.last_saved(), 5);
  }
  FakeSaver saver;
  CheckpointPolicy p(saver, options(5, false, /*save_final=*/false), -1, world_rank());
  EXPECT_TRUE(p.final_save(StopReason::signal, 7));  // exit status 3 promises a checkpoint
  EXPECT_EQ(saver.calls, (Calls{"save 7"}));
  EXPECT_EQ(p.last_saved(), 7);
}

TEST(CheckpointPolicy, SaveFinalFalseDoesNotExcuseAFailedSignalSave) {
  FakeSaver saver(/*background=*/false, {7});
  CheckpointPolicy p(saver, options(0, /*continue_on_error=*/true, /*save_final=*/false), -1, world_rank());
  EXPECT_FALSE(p.final_save(StopReason::signal, 7));
  EXPECT_EQ(saver.calls, (Calls{"save 7"}));
  // The same failure at the end of a run is excused: no final save was asked for.
  FakeSaver end_saver(/*background=*/false, {7});
  CheckpointPolicy end(end_saver, options(0, true, false), -1, world_rank());
  EXPECT_TRUE(end.final_save(StopReason::end_of_run, 7));
  EXPECT_TRUE(end_saver.calls.empty());
}

TEST(CheckpointPolicy, BackgroundSavesFinishBeforeTheNextAndBeforeTheFinalSave) {
  FakeSaver saver(/*background=*/true);
  CheckpointPolicy p(saver, options(5, false), -1, world_rank());
  p.after_step(5);
  EXPECT_TRUE(saver.busy());
  EXPECT_EQ(p.last_saved(), -1);  // not committed until it is waited for
  p.after_step(10);
  EXPECT_EQ(p.last_saved(), 5);
  // The final save of the step the background save holds waits for it instead of saving again.
  EXPECT_TRUE(p.final_save(StopReason::end_of_run, 10));
  EXPECT_EQ(saver.calls, (Calls{"start 5", "wait 5", "start 10", "wait 10"}));
  EXPECT_EQ(p.last_saved(), 10);
  EXPECT_FALSE(saver.busy());
}

TEST(CheckpointPolicy, FinalSavesAreSynchronousEvenWithABackgroundSaver) {
  FakeSaver saver(/*background=*/true);
  CheckpointPolicy p(saver, options(5, false), -1, world_rank());
  p.after_step(5);
  EXPECT_TRUE(p.final_save(StopReason::stop_at_step, 7));
  EXPECT_EQ(saver.calls, (Calls{"start 5", "wait 5", "save 7"}));
  EXPECT_EQ(p.last_saved(), 7);
}

TEST(CheckpointPolicy, ASignalAbandonsABackgroundSaveOfAnOlderStep) {
  // A stop signal is one save away from its exit: the save of step 5 still in flight gives way to
  // the synchronous save of step 7; being abandoned is no failure, even with on_error = stop.
  FakeSaver saver(/*background=*/true);
  CheckpointPolicy p(saver, options(5, false), -1, world_rank());
  p.after_step(5);
  EXPECT_TRUE(p.final_save(StopReason::signal, 7));
  EXPECT_EQ(saver.calls, (Calls{"start 5", "abandon 5", "wait 5", "save 7"}));
  EXPECT_EQ(p.last_saved(), 7);
  EXPECT_EQ(p.last_failed(), -1);
}

TEST(CheckpointPolicy, ASignalFinishesTheBackgroundSaveOfItsOwnStep) {
  FakeSaver saver(/*background=*/true);
  CheckpointPolicy p(saver, options(5, false), -1, world_rank());
  p.after_step(5);
  EXPECT_TRUE(p.final_save(StopReason::signal, 5));
  EXPECT_EQ(saver.calls, (Calls{"start 5", "wait 5"}));
  EXPECT_EQ(p.last_saved(), 5);
}

TEST(CheckpointPolicy, BackgroundFailureIsReportedAtTheNextFinishWithOnErrorStop) {
  FakeSaver saver(/*background=*/true, {5});
  CheckpointPolicy p(saver, options(5, false), -1, world_rank());
  EXPECT_NO_THROW(p.after_step(5));  // the failure is not known yet
  EXPECT_THROW(p.after_step(10), CheckpointError);
  EXPECT_EQ(saver.calls, (Calls{"start 5", "wait 5"}));  // no save started after the failure
  EXPECT_EQ(p.last_saved(), -1);
}

TEST(CheckpointPolicy, BackgroundFailureWithContinueIsRecordedForTheStepItWasSaving) {
  FakeSaver saver(/*background=*/true, {5});
  CheckpointPolicy p(saver, options(5, true), -1, world_rank());
  p.after_step(5);
  EXPECT_EQ(p.last_failed(), -1);
  p.finish_async();
  EXPECT_EQ(p.last_failed(), 5);  // the step of the background save, not the current one
  p.after_step(10);
  EXPECT_TRUE(p.final_save(StopReason::end_of_run, 10));
  EXPECT_EQ(saver.calls, (Calls{"start 5", "wait 5", "start 10", "wait 10"}));
  EXPECT_EQ(p.last_saved(), 10);
}

TEST(CheckpointPolicy, BackgroundFailureOfTheLastStepMakesTheFinalSaveFail) {
  FakeSaver saver(/*background=*/true, {10});
  CheckpointPolicy p(saver, options(5, true), -1, world_rank());
  for (std::int64_t step = 1; step <= 10; ++step) p.after_step(step);
  EXPECT_FALSE(p.final_save(StopReason::end_of_run, 10));  // not retried synchronously
  EXPECT_EQ(saver.calls, (Calls{"start 5", "wait 5", "start 10", "wait 10"}));
  EXPECT_EQ(p.last_saved(), 5);
  EXPECT_EQ(p.last_failed(), 10);
}

// ---- StopPolicy ----------------------------------------------------------------------------

StopPolicy policy(std::int64_t max_steps, std::int64_t stop_at_step, double time_limit_min, double elapsed_s = 0) {
  return StopPolicy(StopLimits{max_steps, stop_at_step, time_limit_min}, [elapsed_s] { return elapsed_s; });
}

TEST(StopPolicy, NothingToDoAtStart) {
  EXPECT_EQ(policy(100, 50, 0).at_start(49), StartDecision::train);
  EXPECT_EQ(policy(100, 50, 0).at_start(50), StartDecision::at_stop_step);
  EXPECT_EQ(policy(100, 50, 0).at_start(70), StartDecision::at_stop_step);
  EXPECT_EQ(policy(100, 0, 0).at_start(0), StartDecision::train);
  EXPECT_EQ(policy(100, 0, 0).at_start(99), StartDecision::train);
  EXPECT_EQ(policy(100, 0, 0).at_start(100), StartDecision::complete);
  EXPECT_EQ(policy(100, 150, 0).at_start(100), StartDecision::complete);
  EXPECT_EQ(policy(100, 100, 0).at_start(100), StartDecision::at_stop_step);  // stop_at_step is asked first
}

TEST(StopPolicy, GoesOnBetweenStops) {
  Communicator& world = test::runtime().world();
  const StopDecision d = policy(100, 50, 0).after_step(world, 20, 0, 0.0);
  EXPECT_EQ(d.reason, StopReason::none);
  EXPECT_FALSE(d.stop());
  EXPECT_EQ(d.step, 20);
  EXPECT_EQ(d.signal, 0);
}

TEST(StopPolicy, ASignalOnAnyRankStopsEveryRankWithExitStatus3) {
  Communicator& world = test::runtime().world();
  const bool last_rank = world.rank() == world.size() - 1;
  const StopDecision d = policy(100, 0, 0).after_step(world, 20, last_rank ? SIGTERM : 0, 0.0);
  EXPECT_EQ(d.reason, StopReason::signal);
  EXPECT_EQ(d.signal, SIGTERM);
  EXPECT_EQ(d.step, 20);
  EXPECT_EQ(StopPolicy::exit_status(d.reason, true), kExitRequeue);
  EXPECT_EQ(kExitRequeue, 3);
  // A signal after the last step, or at stop_at_step, is still a signal (the job script requeues).
  EXPECT_EQ(policy(100, 0, 0).after_step(world, 100, SIGUSR1, 0.0).reason, StopReason::signal);
  EXPECT_EQ(policy(100, 100, 0).after_step(world, 100, SIGUSR1, 0.0).signal, SIGUSR1);
}

TEST(StopPolicy, AgreedSignalIsTheMaxOverRanks) {
  // What evaluation batches and the start of a run ask: one rank's signal is every rank's answer.
  Communicator& world = test::runtime().world();
  const bool last_rank = world.rank() == world.size() - 1;
  EXPECT_EQ(StopPolicy::agree_signal(world, 0), 0);
  EXPECT_EQ(StopPolicy::agree_signal(world, last_rank ? SIGUSR1 : 0), SIGUSR1);
  EXPECT_EQ(StopPolicy::agree_signal(world, last_rank ? SIGINT : 0), SIGINT);
}

TEST(StopPolicy, EndOfRunAtMaxStepsExits0) {
  Communicator& world = test::runtime().world();
  const StopDecision d = policy(100, 100, 1.0, 1e6).after_step(world, 100, 0, 0.0);
  EXPECT_EQ(d.reason, StopReason::end_of_run);  // before stop_at_step and the time limit
  EXPECT_EQ(StopPolicy::exit_status(d.reason, true), 0);
  EXPECT_EQ(policy(100, 0, 0).after_step(world, 99, 0, 0.0).reason, StopReason::none);
}

TEST(StopPolicy, StopAtStepExits0) {
  Communicator& world = test::runtime().world();
  EXPECT_EQ(policy(100, 50, 0).after_step(world, 49, 0, 0.0).reason, StopReason::none);
  const StopDecision d = policy(100, 50, 1.0, 1e6).after_step(world, 50, 0, 0.0);
  EXPECT_EQ(d.reason, StopReason::stop_at_step);  // before the time limit
  EXPECT_EQ(StopPolicy::exit_status(d.reason, true), 0);
  // A run resumed past stop_at_step that was told to go on anyway stops at once.
  EXPECT_EQ(policy(100, 50, 0).after_step(world, 51, 0, 0.0).reason, StopReason::stop_at_step);
}

TEST(StopPolicy, StepTimeIsTheFirstStepThenAnExponentialAverage) {
  StopPolicy p = policy(100, 0, 1.0);
  p.record_step_seconds(10.0);
  EXPECT_DOUBLE_EQ(p.step_seconds_avg(), 10.0);
  p.record_step_seconds(20.0);
  EXPECT_DOUBLE_EQ(p.step_seconds_avg(), 11.0);
  p.record_step_seconds(0.0);
  EXPECT_DOUBLE_EQ(p.step_seconds_avg(), 9.9);
}

// need = 1.1 * (average step + last save) + 1 s; stop when elapsed + need > time_limit_min * 60.
TEST(StopPolicy, TimeLimitRuleLeavesRoomForAStepAndASaveWithAMargin) {
  StopPolicy p = policy(100, 0, 1.0);  // 60 s
  p.record_step_seconds(2.0);
  // need = 1.1 * (2 + 3) + 1 = 6.5 s
  EXPECT_FALSE(p.time_limit_near(53.4, 3.0));
  EXPECT_TRUE(p.time_limit_near(53.6, 3.0));
  EXPECT_FALSE(p.time_limit_near(56.8, 0.0));  // need 3.2 s without a save
  EXPECT_TRUE(p.time_limit_near(56.9, 0.0));
  StopPolicy none = policy(100, 0, 0.0);
  none.record_step_seconds(2.0);
  EXPECT_FALSE(none.time_limit_near(1e9, 1e9));
}

TEST(StopPolicy, TimeLimitStopIsDecidedByRank0AndExits0) {
  Communicator& world = test::runtime().world();
  // Rank 0's clock says the limit is near; the others' say it is far: everyone stops.
  StopPolicy near(StopLimits{100, 0, 1.0}, [&] { return world.rank() == 0 ? 59.5 : 0.0; });
  near.record_step_seconds(0.1);
  const StopDecision d = near.after_step(world, 20, 0, 0.0);
  EXPECT_EQ(d.reason, StopReason::time_limit);
  EXPECT_EQ(StopPolicy::exit_status(d.reason, true), 0);
  // Rank 0's clock says it is far; the others' say it is past: nobody stops.
  StopPolicy far(StopLimits{100, 0, 1.0}, [&] { return world.rank() == 0 ? 0.0 : 1e6; });
  far.record_step_seconds(0.1);
  EXPECT_EQ(far.after_step(world, 20, 0, 0.0).reason, StopReason::none);
  // The last save's duration counts: 50 s elapsed + 1.1 * (0.1 + 9) + 1 > 60.
  StopPolicy slow_save(StopLimits{100, 0, 1.0}, [] { return 50.0; });
  slow_save.record_step_seconds(0.1);
  EXPECT_EQ(slow_save.after_step(world, 20, 0, 0.0).reason, StopReason::none);
  EXPECT_EQ(slow_save.after_step(world, 20, 0, 9.0).reason, StopReason::time_limit);
}

TEST(StopPolicy, ExitStatusOfEveryStop) {
  EXPECT_EQ(StopPolicy::exit_status(StopReason::signal, true), 3);
  EXPECT_EQ(StopPolicy::exit_status(StopReason::end_of_run, true), 0);
  EXPECT_EQ(StopPolicy::exit_status(StopReason::stop_at_step, true), 0);
  EXPECT_EQ(StopPolicy::exit_status(StopReason::time_limit, true), 0);
  for (StopReason r : {StopReason::signal, StopReason::end_of_run, StopReason::stop_at_step, StopReason::time_limit})
    EXPECT_EQ(StopPolicy::exit_status(r, false), 1) << stop_reason_name(r);
}

TEST(StopPolicy, ReasonNamesAreTheWordsOfTheLog) {
  EXPECT_STREQ(stop_reason_name(StopReason::signal), "signal");
  EXPECT_STREQ(stop_reason_name(StopReason::end_of_run), "end of run");
  EXPECT_STREQ(stop_reason_name(StopReason::stop_at_step), "stop_at_step");
  EXPECT_STREQ(stop_reason_name(StopReason::time_limit), "time limit");
}

/// Sets TRIDENT_STOP_FILE for one test and reads what was written there.
class StopFile {
 public:
  explicit StopFile(const std::string& name)
      : path_(test::scratch_dir() + "/r" + std::to_string(test::runtime().world().rank()) + "_" + name) {
    std::filesystem::remove(path_);
    setenv("TRIDENT_STOP_FILE", path_.c_str(), 1);
  }
  ~StopFile() { unsetenv("TRIDENT_STOP_FILE"); }
  std::string text() const {
    std::ifstream in(path_);
    std::string s;
    std::getline(in, s);
    return in || !s.empty() ? s : "(none)";
  }

 private:
  std::string path_;
};

TEST(StopPolicy, FinishOfASignalStopRecordsItInTheStopFileOnRank0) {
  StopFile file("stop_signal");
  StopDecision d;
  d.reason = StopReason::signal;
  d.step = 7;
  d.signal = SIGUSR1;
  EXPECT_EQ(policy(100, 0, 0).finish(d, true, world_rank()), 3);
  EXPECT_EQ(file.text(), world_rank() == 0 ? "step=7 signal=SIGUSR1" : "(none)");
}

TEST(StopPolicy, FinishOfOtherStopsWritesNoStopFile) {
  StopFile file("stop_other");
  for (StopReason r : {StopReason::end_of_run, StopReason::stop_at_step, StopReason::time_limit}) {
    StopDecision d;
    d.reason = r;
    d.step = 7;
    EXPECT_EQ(policy(100, 0, 1.0).finish(d, true, 0), 0) << stop_reason_name(r);
  }
  EXPECT_EQ(file.text(), "(none)");
}

// ---- Both: a stop whose final checkpoint fails exits 1 --------------------------------------

TEST(StopAndCheckpointPolicies, AFailedFinalSaveTurnsEveryStopIntoExit1) {
  Communicator& world = test::runtime().world();
  struct Case {
    StopPolicy stops;
    std::int64_t step;
    int signal;
    StopReason want;
  };
  std::vector<Case> cases;
  cases.push_back({policy(100, 0, 0), 20, SIGTERM, StopReason::signal});
  cases.push_back({policy(100, 20, 0), 20, 0, StopReason::stop_at_step});
  cases.push_back({policy(100, 0, 1.0, 1e6), 20, 0, StopReason::time_limit});
  cases.push_back({policy(20, 0, 0), 20, 0, StopReason::end_of_run});
  for (Case& c : cases) {
    for (bool fails : {false, true}) {
      StopFile file("stop_combined");
      FakeSaver saver;
      if (fails) saver.fail = {c.step};
      CheckpointPolicy checkpoints(saver, options(0, /*continue_on_error=*/true), 10, world_rank());
      const StopDecision d = c.stops.after_step(world, c.step, c.signal, checkpoints.last_save_seconds());
      ASSERT_EQ(d.reason, c.want);
      const int status = c.stops.finish(d, checkpoints.final_save(d.reason, d.step), world_rank());
      const std::string what = std::string(stop_reason_name(c.want)) + (fails ? ", save fails" : ", save works");
      EXPECT_EQ(status, fails ? 1 : c.want == StopReason::signal ? 3 : 0) << what;
      EXPECT_EQ(saver.calls, (Calls{"save 20"})) << what;
      EXPECT_EQ(checkpoints.last_saved(), fails ? 10 : 20) << what;
      // A failed signal stop must not tell the job script that a checkpoint was written.
      const bool stop_file = c.want == StopReason::signal && !fails && world_rank() == 0;
      EXPECT_EQ(file.text() != "(none)", stop_file) << what;
    }
  }
}

// One Ctrl-C at a terminal reaches each rank twice (the terminal signals mpiexec's whole process
// group, and mpiexec forwards the interrupt again): within the merge window the second SIGINT is
// the same interrupt, a stop request, not the "second interrupt" that aborts the process. (Were it
// taken as the second, raise() below would kill this test: SIG_DFL for SIGINT terminates.)
TEST(StopSignals, ASigintArrivingTwiceWithinTheMergeWindowIsOneInterrupt) {
  struct sigaction old_int {}, old_term {}, old_usr1 {};
  sigaction(SIGINT, nullptr, &old_int);
  sigaction(SIGTERM, nullptr, &old_term);
  sigaction(SIGUSR1, nullptr, &old_usr1);
  setenv("TRIDENT_INTERRUPT_MERGE_MS", "60000", 1);
  install_stop_signal_handlers();
  set_stop_signal_quiet(true);
  clear_stop_signal();
  std::raise(SIGINT);
  std::raise(SIGINT);  // the forwarded copy, well within 60 s
  EXPECT_EQ(stop_signal_received(), SIGINT);
  std::raise(SIGTERM);  // a batch system's signal still registers after the interrupt
  EXPECT_EQ(stop_signal_received(), SIGTERM);
  clear_stop_signal();
  set_stop_signal_quiet(false);
  unsetenv("TRIDENT_INTERRUPT_MERGE_MS");
  install_stop_signal_handlers();  // back to the default window for whatever runs next
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGUSR1, &old_usr1, nullptr);
}

}  // namespace
}  // namespace trident
