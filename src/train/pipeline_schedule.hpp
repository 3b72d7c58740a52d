// train/pipeline_schedule.hpp: the order in which one pipeline stage runs the forward and backward
// passes of its micro-batches within a training step.
//
// Layer: train (pure: no MPI, no Kokkos, no deck). Trainer::train_step walks actions() and does
// the sends, receives and kernels of each; this file only decides the order, so the order can be
// tested without a pipeline.
//
// Schedules for stage s of p stages and M micro-batches:
//  - GPipe (Huang et al. 2019): forward 0..M-1, then backward 0..M-1; M micro-batches in flight.
//  - 1F1B (PipeDream-Flush, Narayanan et al. 2021, sec. 2.2): w = min(p - s - 1, M) warm-up
//    forwards, then M - w rounds of (forward w + i, backward i) (steady state), then the w
//    backwards left (cool-down); at most min(M, p - s) micro-batches in flight, which bounds the
//    activation memory of early stages by p - s micro-batches instead of M.
//
// Invariants: every micro-batch 0..M-1 is forwarded exactly once and backwarded exactly once;
// forwards and backwards each run in increasing micro-batch order; the backward of m comes after
// the forward of m; at most stashes() micro-batches are in flight (forwarded, not yet backwarded)
// at any point, and they are consecutive, so stash_of(m) = m % stashes() gives every micro-batch
// in flight its own activation stash.
#pragma once

#include "core/config.hpp"

#include <vector>

namespace trident {

/// One step of a stage's schedule: the forward or the backward pass of one micro-batch.
struct PipelineAction {
  enum class Pass { forward, backward };
  Pass pass = Pass::forward;
  int micro_batch = 0;  ///< index among this dp rank's micro-batches of the step, 0..M-1

  bool operator==(const PipelineAction& o) const { return pass == o.pass && micro_batch == o.micro_batch; }
  bool operator!=(const PipelineAction& o) const { return !(*this == o); }
};

class PipelineSchedule {
 public:
  /// The schedule of stage `pp_rank` of `pp_size` stages for `num_micro_batches` micro-batches
  /// per step. Local. Throws Error unless num_micro_batches >= 1 and 0 <= pp_rank < pp_size.
  PipelineSchedule(PipelineScheduleKind kind, int num_micro_batches, int pp_size, int pp_rank);

  /// The 2 M passes of this stage in the order they run (header comment). Local.
  const std::vector<PipelineAction>& actions() const { return actions_; }
  int num_micro_batches() const { return num_micro_batches_; }
  /// Most micro-batches in flight at once on this stage: M for GPipe, min(M, pp_size - pp_rank)
  /// for 1F1B. The number of activation stashes the stage needs. Local.
  int stashes() const { return stashes_; }
  /// The stash that holds micro-batch `micro_batch`'s activations between its forward and its
  /// backward. Local.
  int stash_of(int micro_batch) const { return micro_batch % stashes_; }

 private:
  int num_micro_batches_;
  int stashes_;
  std::vector<PipelineAction> actions_;
};

}  // namespace trident
