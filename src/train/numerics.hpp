// train/numerics.hpp: the numerics policy of `trident train`: what a non-finite step does
// ([train] nonfinite, max_consecutive_skips), dynamic loss scaling for fp16 ([train]
// loss_scale_*), and the loss-spike detector with its optional rollback ([train] spike_window,
// spike_zscore, spike_rollback, spike_max_rollbacks).
//
// Layer: train. Each decision is a small type with a unit test (tests/unit/test_numerics.cpp);
// the Trainer and train_loop only wire them.
//
// Agreement: a step's health is decided by one all-reduce (max) of four doubles over the world
// communicator (agree_step_health): "some rank saw a non-finite loss or gradient norm", "some
// rank saw a non-finite loss", the loss (the largest any rank has, finite ones only) and the
// lowest world rank that saw a non-finite value. Every rank then takes the same decision from the same numbers: skip or stop together,
// push the same loss into the same spike window, roll back together.
//
// Invariants: a skipped step changes no parameter, moment or AdamW step count; the spike window
// holds only finite losses of applied steps, oldest first, and is what a checkpoint stores
// (RunState::loss_window), so a resumed run computes the same z-scores bitwise.
#pragma once

#include "core/config.hpp"
#include "parallel/communicator.hpp"

#include <cstdint>
#include <vector>

namespace trident {

/// A step's loss and gradient norm as every rank agrees on them.
struct StepHealth {
  bool finite = true;      ///< no rank saw a non-finite loss or gradient norm
  bool loss_finite = true; ///< no rank saw a non-finite loss (a non-finite norm with finite losses: an overflow under loss scaling)
  double loss = 0.0;       ///< the largest finite loss of any rank (the same on every rank in a healthy step)
  int first_bad_rank = -1; ///< the lowest world rank that saw a non-finite value, -1 when none did
};

/// Agrees on this step's health from each rank's `loss` and `grad_norm`. Collective over `world`:
/// one all-reduce (max) of four doubles. `world_rank` is this rank's rank in `world`.
StepHealth agree_step_health(Communicator& world, int world_rank, double loss, double grad_norm);

/// What follows a step whose health is agreed.
enum class NonfiniteVerdict {
  apply,  ///< the step is finite: update the parameters
  skip,   ///< nonfinite = skip: no update; step, LR schedule and data position advance
  stop,   ///< nonfinite = stop, or too many consecutive skips: the run stops with exit 1
};

/// [train] nonfinite and max_consecutive_skips. Counts consecutive skipped steps (a finite step
/// resets the count) and the run's total; both are part of a checkpoint's restart state.
class NonfinitePolicy {
 public:
  NonfinitePolicy(NonfiniteAction action, std::int64_t max_consecutive_skips)
      : action_(action), max_consecutive_(max_consecutive_skips) {}
  /// The verdict for a step of agreed health `finite`; counts it. Local (deterministic).
  NonfiniteVerdict decide(bool finite);
  std::int64_t consecutive() const { return consecutive_; }
  std::int64_t skipped_total() const { return total_; }
  std::int64_t max_consecutive() const { return max_consecutive_; }
  NonfiniteAction action() const { return action_; }
  /// Restores the counters of a checkpoint. Local.
  void restore(std::int64_t consecutive, std::int64_t total) {
    consecutive_ = consecutive;
    total_ = total;
  }

 private:
  NonfiniteAction action_;
  std::int64_t max_consecutive_;
  std::int64_t consecutive_ = 0, total_ = 0;
};

/// What the loss scaler makes of a step.
enum class ScaleVerdict {
  apply,     ///< the gradients are finite: update (the scale may have grown for the next step)
  overflow,  ///< a gradient overflowed on some rank: skip the update; the scale has backed off
  stop,      ///< an overflow at the minimum scale: the run stops with exit 1
};

/// Dynamic loss scaling for fp16 (Micikevicius et al. 2018, "Mixed precision training", sec. 3.2)
/// with torch.cuda.amp.GradScaler's state machine (torch/cuda/amp/grad_scaler.py, update(), and
/// the _amp_update_scale_ kernel): the loss's gradient is multiplied by scale(); a step whose
/// gradients are not finite on any rank is skipped and the scale multiplied by `backoff`; after
/// `growth_interval` finite steps in a row it is multiplied by `growth` (unless that leaves
/// float's range, as _amp_update_scale_ keeps the old scale when the new one is not finite).
/// From Megatron-LM's DynamicGradScaler (megatron/core/optimizer/grad_scaler.py) the floor
/// `min_scale`; unlike Megatron (no hysteresis), an overflow *at* the floor stops the run
/// (ScaleVerdict::stop): the gradients overflow without any scaling to blame.
/// A disabled scaler has scale 1 and always says apply. Local and deterministic: every rank
/// feeds it the same agreed verdicts, so every rank holds the same scale. Its state (scale,
/// good steps, overflow count) is part of a checkpoint's restart state.
class LossScaler {
 public:
  /// A scaler of [train] loss_scale_* (validated by core/config.cpp), enabled when
  /// uses_loss_scaling(t) (param_dtype or reduce_dtype = fp16). Local.
  explicit LossScaler(const TrainConfig& t);
  /// The same from its parameters (for tests): `enabled`, the first scale `init`, and
  /// GradScaler's growth_interval, growth_factor, backoff_factor plus Megatron's min_scale.
  LossScaler(bool enabled, double init, std::int64_t growth_interval, double growth, double backoff, double min_scale);
  bool enabled() const { return enabled_; }
  /// The factor of this step's loss gradient; 1 when disabled.
  double scale() const { return enabled_ ? scale_ : 1.0; }
  /// Finite steps since the last overflow or growth (GradScaler's growth tracker).
  std::int64_t good_steps() const { return good_; }
  /// Overflow steps of the run so far (all legs; a checkpoint records them).
  std::int64_t overflows() const { return overflows_; }
  /// The verdict for a step whose gradients are (`grads_finite`) or are not finite on every
  /// rank, with a finite loss; updates the scale for the next step. Local.
  ScaleVerdict update(bool grads_finite);
  /// A step the scaler did not judge (a non-finite loss: the nonfinite policy's case) breaks the
  /// run of good steps; the scale stays. Local.
  void interrupt() { good_ = 0; }
  /// Restores the state of a checkpoint. A scale below this scaler's minimum (a resume that
  /// raised [train] loss_scale_min) is raised to the minimum: the scale never lies below the
  /// floor, so the first overflow backs off or stops at the floor the user set. Returns whether
  /// it was raised. Local.
  bool restore(double scale, std::int64_t good_steps, std::int64_t overflows) {
    const bool raised = scale < min_;
    scale_ = raised ? min_ : scale;
    good_ = raised ? 0 : good_steps;
    overflows_ = overflows;
    return raised;
  }

 private:
  bool enabled_;
  double scale_;
  std::int64_t interval_;
  double growth_, backoff_, min_;
  std::int64_t good_ = 0, overflows_ = 0;
};

/// Loss-spike detector after llm.c's OutlierDetector (llmc/outlier_detector.h): the z-score of a
/// loss against the window of the previous `window` losses, (x - mean) / std with the window's
/// mean and population standard deviation. Unlike llm.c the new loss is not part of the window it
/// is scored against (a spike would otherwise inflate the deviation it is divided by, capping z
/// near sqrt(window)), and the statistics are recomputed from the stored values in a fixed order
/// rather than kept as running sums, so a window restored from a checkpoint scores bitwise alike.
class SpikeDetector {
 public:
  explicit SpikeDetector(std::int64_t window) : window_(window) {}
  /// The z-score of `loss` against the current window (NaN while the window is not full or the
  /// detector is off; 0 when every loss of the window is equal and `loss` too, +-inf when only
  /// `loss` differs). Does not change the window. Local.
  double zscore(double loss) const;
  /// Appends `loss` (dropping the oldest beyond the window). Local.
  void push(double loss);
  /// The window, oldest first (what a checkpoint stores). Local.
  const std::vector<double>& values() const { return values_; }
  /// Replaces the window with `values` (oldest first; only the newest `window` kept). Local.
  void restore(const std::vector<double>& values);
  std::int64_t window() const { return window_; }

 private:
  std::int64_t window_;
  std::vector<double> values_;  // oldest first, at most window_
};

/// What follows a scored loss.
enum class SpikeVerdict {
  none,      ///< no spike
  warn,      ///< a spike, reported; training goes on (spike_rollback = false, or nothing to roll back to)
  rollback,  ///< reload the last checkpoint and skip the batches since it
  stop,      ///< a spike after spike_max_rollbacks rollbacks to the same checkpoint: exit 1
};

/// [train] spike_zscore, spike_rollback and spike_max_rollbacks. Counts the rollbacks to each
/// checkpoint step in this invocation (a rollback to a newer checkpoint starts again at 0).
class SpikePolicy {
 public:
  SpikePolicy(double zscore, bool rollback, std::int64_t max_rollbacks)
      : zscore_(zscore), rollback_(rollback), max_rollbacks_(max_rollbacks) {}
  /// The verdict for z-score `z` (NaN: none) when the newest checkpoint is of step
  /// `last_checkpoint` (-1: none); a rollback verdict counts as one rollback to it. Local.
  SpikeVerdict decide(double z, std::int64_t last_checkpoint);
  /// Rollbacks done to `last_checkpoint` so far. Local.
  std::int64_t rollbacks_to(std::int64_t last_checkpoint) const {
    return last_checkpoint == checkpoint_ ? count_ : 0;
  }
  double threshold() const { return zscore_; }

 private:
  double zscore_;
  bool rollback_;
  std::int64_t max_rollbacks_;
  std::int64_t checkpoint_ = -1, count_ = 0;
};

}  // namespace trident
