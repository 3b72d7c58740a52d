// train/metrics.hpp: the run directory's metrics.csv.
//
// Layer: train. Local; only world rank 0 creates a MetricsCsv.
// Columns: step,train_loss,val_loss,lr,grad_norm,tokens_per_sec,ms_per_step,mfu,peak_mem_mib,
// then the per-rank peak MiB of each tracked memory category (mem_params, mem_grads,
// mem_optimizer, mem_gathered, mem_activations, mem_comm) and comm_mib, the MiB this rank sent
// over all axes during the step (ring model, see parallel/communicator.hpp), and bubble, the
// measured pipeline bubble fraction (mean over stages; 0 with pp = 1). val_loss is empty
// where the step was not evaluated (or its evaluation was abandoned for a stop). peak_mem_mib is
// the process's peak resident set size. Then leg, the invocation of `trident train` that trained
// the step (see Lineage below), and mem_checkpoint, the per-rank peak MiB of checkpoint host
// memory (a save's snapshot or staging buffer), then the numerics policy's columns: skipped (1
// when [train] nonfinite = skip dropped the step's update; its train_loss and grad_norm are then
// nan), skipped_steps (the run's skipped steps so far, all legs) and loss_z (the loss's z-score
// against the spike detector's window, train/numerics.hpp; empty until the window is full or with
// the detector off), then fp16 loss scaling's (train/numerics.hpp LossScaler): loss_scale (the
// scale this step's backward used; 1 without fp16) and overflow_steps (steps skipped for a
// gradient overflow so far, all legs; such a step has skipped = 1, its real train_loss and
// grad_norm inf, and does not count in skipped_steps), then the step-time breakdown in milliseconds
// (train/step_timers.hpp, step_breakdown_columns(): t_step, t_fwd, t_bwd, t_opt,
// t_comm_<axis>_exposed and _hidden for dp, tp, pp, world, t_bubble, t_data, t_ckpt, t_eval,
// t_other; world rank 0's view; empty with [train] timers = off), then the optimizer-state
// offload's columns ([parallel] offload_optimizer = nvme; zeros without offload): offload_read_mib
// and offload_write_mib, the MiB this rank read from and wrote to its offload file during the step
// (a save's reads are not counted), and offload_wait_ms, the time the step waited for them.
// Columns are only ever appended, so older files
// still parse (their rows end at leg). Every row is flushed when written, so a killed job keeps
// its metrics up to the last completed step.
//
// Lineage: every invocation of `trident train` is a *leg* of the run, with a random id; a
// checkpoint records the legs that led to it ("id@first_step;id@first_step;...", attribute
// `lineage`). On resume, metrics.csv keeps exactly the rows of the resumed checkpoint's lineage
// (from metrics.csv and metrics.superseded.csv together), so that after branches, abandoned
// branches and crashes it always describes the history of the state being trained; every other
// row is kept in metrics.superseded.csv. Files written before the column was called `leg` (it
// was `segment`) are read the same way: the id is field 18 of a longer row, else the last field.
#pragma once

#include "train/step_timers.hpp"

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace trident {

struct MetricsRow {
  std::int64_t step = 0;
  double train_loss = 0, val_loss = 0;
  bool has_val = false;
  double lr = 0, grad_norm = 0, tokens_per_sec = 0, ms_per_step = 0, mfu = 0, peak_mem_mib = 0;
  /// MemoryLedger peaks in MiB: params, grads, optimizer, gathered, activations, comm, checkpoint
  double mem_mib[7] = {};
  double comm_mib = 0;
  double bubble = 0;  ///< pipeline bubble fraction of the step (0 without pipeline parallelism)
  bool skipped = false;           ///< the step's update was skipped (non-finite loss or gradient norm)
  std::int64_t skipped_steps = 0; ///< skipped steps of the run so far
  double loss_z = 0;              ///< the loss's spike z-score; NaN: none (written as an empty cell)
  double loss_scale = 1;          ///< fp16: the loss scale of the step's backward (1 without loss scaling)
  std::int64_t overflow_steps = 0;///< fp16: steps skipped for a gradient overflow so far
  StepBreakdown breakdown;        ///< the t_* columns (empty cells when the timers are off)
  double offload_read_mib = 0, offload_write_mib = 0;  ///< offload traffic of the step (this rank)
  double offload_wait_ms = 0;     ///< time the step waited for offload I/O
};

class MetricsCsv {
 public:
  /// Opens `path`. keep_until_step < 0: a new file (rows of an existing one are set aside as
  /// below). Otherwise (a resumed run) rows of steps
  /// <= keep_until_step are kept and later ones (from the interrupted run, or a branch the run
  /// abandoned) are moved to <name>.superseded.csv (appended). Throws IoError.
  MetricsCsv(const std::string& path, std::int64_t keep_until_step);
  /// A resumed run's metrics with lineage (above): `lineage` is the resumed checkpoint's
  /// ("" for a checkpoint without one: then the rule of the constructor above), `leg` this
  /// invocation's id, written in the leg column of every new row. Throws IoError.
  MetricsCsv(const std::string& path, std::int64_t keep_until_step, const std::string& lineage,
             const std::string& leg);
  /// Appends one row and flushes it.
  void write(const MetricsRow& r);
  /// Fills the val_loss cell of the last row of `step` (written without one: its evaluation was
  /// abandoned at a stop and run by the resumed job), through a temporary file and a rename.
  /// Returns false (and changes nothing) when there is no such row. Throws IoError.
  bool record_val_loss(std::int64_t step, double loss);

 protected:
  /// The same for a CSV file with another header whose rows start with the step.
  MetricsCsv(const std::string& path, std::int64_t keep_until_step, const std::string& header);
  /// Appends `lines` (each ending in a newline) and flushes them.
  void append(const std::string& lines);

 private:
  std::string path_;
  std::string leg_;
};

/// A new leg id: 8 hex digits from the clock and the process id. Local.
std::string new_leg_id();
/// `lineage` extended by leg `id` starting after step `step` ("" -> "id@step"); at most the
/// newest 200 entries are kept (older rows then fall back to the step rule).
std::string extend_lineage(const std::string& lineage, const std::string& id, std::int64_t step);

/// <out_dir>/samples.csv ([data] sample_log): columns step,sample,offset, one row per training
/// window of the step: its global sample index and the token offset of the window the ranks
/// loaded (data/sampler.hpp). On resume, the step rule of MetricsCsv's first constructor (rows
/// past the resume step go to samples.superseded.csv; no lineage).
class SampleLogCsv : public MetricsCsv {
 public:
  SampleLogCsv(const std::string& path, std::int64_t keep_until_step);
  /// Appends the rows of `step`; `pairs` = (sample, offset) pairs, written in sample order.
  void write(std::int64_t step, std::vector<std::int64_t> pairs);
};

}  // namespace trident
