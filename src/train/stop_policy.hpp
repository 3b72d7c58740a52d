// train/stop_policy.hpp: when a training run stops, and with which exit status.
//
// Layer: train. `trident train` asks the policy before the first step whether there is anything
// to do, and after every step whether to go on; the loop then saves the final checkpoint
// (train/checkpoint_policy.hpp) and ends with finish()'s exit status.
//
// Decisions after a step, in this order (the first that holds wins):
//  1. a SIGUSR1/SIGTERM reached any rank (max-reduced over world)    -> signal, exit kExitRequeue (3)
//  2. the step is [train] max_steps                                   -> end of run, exit 0
//  3. [train] stop_at_step > 0 and the step is at or past it           -> stop_at_step, exit 0
//  4. [train] time_limit_min > 0 and another step and save would not fit
//     (elapsed + 1.1 * (average step + last save) + 1 s > the limit;
//     world rank 0 decides, everyone follows)                          -> time limit, exit 0
//  otherwise the run goes on. Any stop whose final checkpoint failed exits 1 instead.
// Invariants: every rank reaches the same decision after the same step (one all-reduce per step,
// one broadcast per step only when a time limit is set and rules 1-3 did not stop the run).
// Rule 1 is also checked (agree_signal) between evaluation batches, where a stop abandons the
// evaluation, and before the first step: from a signal to exit 3 it takes at most the rest of a
// step and one save.
#pragma once

#include "parallel/communicator.hpp"

#include <cstdint>
#include <functional>

namespace trident {

/// Why a run stops (none: it goes on).
enum class StopReason { none, signal, end_of_run, stop_at_step, time_limit };

/// The word for `r` in log lines and checkpoint messages: "signal", "end of run", "stop_at_step",
/// "time limit" ("none" for none). Local.
const char* stop_reason_name(StopReason r);

/// What to do after a step.
struct StopDecision {
  StopReason reason = StopReason::none;
  std::int64_t step = 0;  ///< the step just completed
  int signal = 0;         ///< the agreed stop signal (SIGUSR1 or SIGTERM) when reason is signal, else 0
  bool stop() const { return reason != StopReason::none; }
};

/// What to do before the first step.
enum class StartDecision {
  train,            ///< there are steps to run
  at_stop_step,     ///< the run is already at (or past) [train] stop_at_step: nothing to do, exit 0
  complete,         ///< the run is already at [train] max_steps: nothing to do, exit 0
};

/// The deck keys the policy follows.
struct StopLimits {
  std::int64_t max_steps = 0;     ///< [train] max_steps
  std::int64_t stop_at_step = 0;  ///< [train] stop_at_step (0: none)
  double time_limit_min = 0.0;    ///< [train] time_limit_min (0: none)
};

class StopPolicy {
 public:
  /// `elapsed_seconds` returns the wall time the job has used so far (the time limit counts from
  /// the start of the process, not of the loop). Local.
  StopPolicy(const StopLimits& limits, std::function<double()> elapsed_seconds);

  /// Whether a run resumed at `step` has steps to run; logs the reason when it has not. Local
  /// (every rank has the same step).
  StartDecision at_start(std::int64_t step) const;

  /// Records the wall time of a step for the time-limit rule: the first step's time, then an
  /// exponential average (0.9 old + 0.1 new). Local.
  void record_step_seconds(double seconds);
  double step_seconds_avg() const { return step_seconds_avg_; }

  /// Rule 4 of the header on this rank's clock: true when `elapsed_s` plus 1.1 * (average step +
  /// `last_save_seconds`) + 1 s exceeds time_limit_min (false when there is no limit). Local.
  bool time_limit_near(double elapsed_s, double last_save_seconds) const;

  /// The decision after step `step` (rules of the header). `local_signal` is this rank's received
  /// stop signal or 0; `last_save_seconds` the duration of the last save. Collective over world:
  /// one all-reduce (max of the signals), then, only when rule 4 is reached, a broadcast of rank
  /// 0's time-limit verdict.
  StopDecision after_step(Communicator& world, std::int64_t step, int local_signal, double last_save_seconds) const;

  /// The stop signal any rank received (max of `local_signal` over world), 0 when none: rule 1,
  /// also asked between evaluation batches and before the first step so that a stop never waits
  /// for a whole evaluation. Collective over world (one all-reduce); call it at a point every
  /// rank reaches alike.
  static int agree_signal(Communicator& world, int local_signal);

  /// Exit status of a run ending for `reason`: 1 when its final checkpoint failed
  /// (`final_saved` false), else kExitRequeue for a signal and 0 otherwise. Local.
  static int exit_status(StopReason reason, bool final_saved);

  /// Ends a stop decided by after_step (not end of run: the loop reports that itself) once its
  /// final checkpoint was attempted: logs "stopping after step N ..." when it was saved, and on a
  /// signal world rank `world_rank` 0 records it in TRIDENT_STOP_FILE (train/signals.hpp).
  /// Returns exit_status(d.reason, final_saved). Local.
  int finish(const StopDecision& d, bool final_saved, int world_rank) const;

 private:
  StopLimits limits_;
  std::function<double()> elapsed_seconds_;
  double step_seconds_avg_ = 0.0;
  bool has_step_seconds_ = false;
};

}  // namespace trident
