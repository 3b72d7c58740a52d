// train/checkpoint_policy.hpp: when `trident train` saves a checkpoint, and what a failed save
// does to the run.
//
// Layer: train. The policy decides; a CheckpointSaver does the saving (in trainer.cpp: a snapshot
// of the Trainer committed through CheckpointDir, in the background with [checkpoint] async), so
// every decision can be tested with a saver that fails on request.
//
// Rules:
//  - Interval saves: after every step that is a multiple of [checkpoint] interval; in the
//    background when the saver can, after the previous background save has finished.
//  - A failed save (CheckpointError, raised on every rank alike) ends the run ([checkpoint]
//    on_error = stop: the error propagates), or with on_error = continue is warned about and
//    training goes on. The previous checkpoint is intact either way (CheckpointDir's commit).
//  - A background save's outcome is learned at the next finish_async(): before the next save and
//    before the final one; its failure is handled as above, for the step it was saving.
//  - On a stop signal a background save of an older step still in flight is abandoned (it would
//    make the stop wait for a whole save before the one that matters; the previous checkpoint
//    stays intact), one of the stop's own step is finished: from the signal to the exit it takes
//    at most one save. The final save is synchronous.
//  - The final save (the run ends or stops early) must leave a checkpoint of the last step:
//    final_save() returns false (the run exits 1) when it has none, unless [checkpoint]
//    save_final = false and the stop is not a signal. save_final = false skips the end-of-run and
//    early-stop saves, never a signal's: exit status 3 promises a checkpoint of the step the run
//    stopped at. A step whose save already failed is not retried.
// Invariants: last_saved() is the newest step with a committed checkpoint of this run (or the
// resumed one), -1 when there is none; at most one background save is in flight.
#pragma once

#include "core/error.hpp"
#include "train/stop_policy.hpp"

#include <cstdint>
#include <string>

namespace trident {

/// What a finished background save reports.
struct BackgroundSaveResult {
  std::string path;        ///< the committed checkpoint
  std::int64_t step = 0;   ///< the step it holds
  double seconds = 0;      ///< wall time of the background write and commit
  std::int64_t bytes = 0;  ///< this rank's snapshot bytes
  bool abandoned = false;  ///< stopped by abandon(): nothing committed, not a failure
};

/// The saving the policy drives. Every call is collective over the communicator the saver
/// writes with (world) unless it says otherwise; a failure is a CheckpointError raised on every
/// rank alike.
class CheckpointSaver {
 public:
  virtual ~CheckpointSaver() = default;
  /// Writes and commits a checkpoint of the current state as step `step` and returns its path.
  /// Collective. Throws CheckpointError (collective); the previous checkpoint stays intact.
  virtual std::string save(std::int64_t step) = 0;
  /// True when start() may be used: saves can run in the background. Local.
  virtual bool can_start() const = 0;
  /// Takes a snapshot of the current state and starts committing it as step `step` in the
  /// background. Only when can_start() and !busy(). Local. Throws CheckpointError when the
  /// snapshot cannot be taken.
  virtual void start(std::int64_t step) = 0;
  /// True while a background save is started and not yet waited for. Local.
  virtual bool busy() const = 0;
  /// Waits for the background save in flight and returns its result; rethrows its
  /// CheckpointError (every rank alike) unless abandon() was called. Only when busy(); afterwards
  /// !busy(). Local wait.
  virtual BackgroundSaveResult wait() = 0;
  /// Asks the background save in flight to stop soon; the next wait() reports it abandoned (or
  /// finished, when it was already past its writes). Call on every rank at the same point. Local.
  virtual void abandon() = 0;
  /// The path checkpoint `step` has (or would have), for messages. Local.
  virtual std::string path_for(std::int64_t step) const = 0;
};

/// The deck keys the policy follows.
struct CheckpointPolicyOptions {
  std::int64_t interval = 0;       ///< [checkpoint] interval (0: no interval saves)
  bool save_final = true;          ///< [checkpoint] save_final
  bool continue_on_error = false;  ///< [checkpoint] on_error = continue (else stop)
};

class CheckpointPolicy {
 public:
  /// `last_saved`: the step of the checkpoint the run resumed from, or -1. `world_rank` decides
  /// who reports a failed final save (rank 0). Local; `saver` must outlive the policy.
  CheckpointPolicy(CheckpointSaver& saver, const CheckpointPolicyOptions& opt, std::int64_t last_saved,
                   int world_rank);

  /// True when step `step` is a multiple of the interval. Local.
  bool interval_due(std::int64_t step) const;
  /// After step `step`: the interval save when it is due (in the background when the saver can).
  /// Collective (the saver's). Throws CheckpointError when the save fails and on_error = stop.
  void after_step(std::int64_t step);
  /// Learns the outcome of a background save in flight, if any (logged; a failure handled as the
  /// header says). Collective (the saver's). Throws CheckpointError when it failed and on_error = stop.
  void finish_async();
  /// The save that ends a run stopping for `why` after step `step` (header rules). Returns true
  /// when the run may end as planned: a checkpoint of `step` exists, or save_final = false excused
  /// it (not for a signal). On false the failure was reported on world rank 0 and the run exits 1.
  /// Collective (the saver's). Throws CheckpointError when a save fails and on_error = stop.
  bool final_save(StopReason why, std::int64_t step);

  /// Newest step with a committed checkpoint, or -1. Local.
  std::int64_t last_saved() const { return last_saved_; }
  /// The step whose save failed last, or -1. Local.
  std::int64_t last_failed() const { return last_failed_; }
  /// Wall time of the last save (a synchronous save, or the snapshot of a background one). Local.
  double last_save_seconds() const { return last_save_seconds_; }

 private:
  // `required`: saves that save_final = false does not skip (interval and signal saves).
  void save(const char* why, bool required, std::int64_t step, bool sync);
  // Called inside a catch block: rethrows (on_error = stop) or records and warns (continue).
  void handle_failure(const CheckpointError& e, std::int64_t step);

  CheckpointSaver& saver_;
  CheckpointPolicyOptions opt_;
  int world_rank_;
  std::int64_t last_saved_;
  std::int64_t last_failed_ = -1;  // the step whose save failed last (not retried at a stop)
  std::int64_t async_step_ = -1;   // the step the background save is (or was last) saving
  double last_save_seconds_ = 0.0;
};

}  // namespace trident
