// train/trainer.hpp: one training run: data-parallel GPT training with gradient accumulation,
// AdamW, clipping, evaluation and sharded checkpoints.
//
// Layer: train.
// Data parallelism: each dp rank runs its micro-batches of the global batch; the ZeroEngine
// (train/zero.hpp) holds parameters, gradients and optimizer state replicated or sharded as
// [parallel] zero_stage says and does all dp communication. The objective is the mean token loss
// of the whole global batch (each micro-batch's backward is scaled by 1 / (global_batch_size * T)),
// so a dp = N run computes the same loss and gradient as one rank with the same global batch, up
// to summation order, at every ZeRO stage.
//
// Invariants: step() optimizer steps are done; consumed_samples() = sum of global batch sizes of
// those steps, the position of the data stream; a checkpoint taken after step s and loaded into a
// fresh Trainer continues bit-identically (same parameters, moments, step count, data position;
// dropout and data order are keyed by global indices).
#pragma once

#include "core/config.hpp"
#include "data/sampler.hpp"
#include "data/token_dataset.hpp"
#include "model/gpt.hpp"
#include "parallel/process_grid.hpp"
#include "train/lr_schedule.hpp"
#include "train/metrics.hpp"
#include "train/model_state.hpp"
#include "train/numerics.hpp"
#include "train/pipeline_schedule.hpp"
#include "train/step_timers.hpp"
#include "train/zero.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace trident {

struct StepResult {
  std::int64_t step = 0;     ///< step number just completed (1-based)
  double loss = 0;           ///< mean token loss of the global batch (before the update), the same on every rank
  double lr = 0;             ///< learning rate used by the update
  double grad_norm = 0;      ///< global gradient norm before clipping (of the unscaled gradient; inf for an fp16 overflow), the same on every rank
  double seconds = 0;        ///< wall time of the step on this rank
  double bubble = 0;         ///< pipeline: share of the step a stage spends outside forward/backward (mean over stages)
  double bubble_theory = 0;  ///< (p - 1) / (m + p - 1) for p stages and m micro-batches
  bool skipped = false;      ///< the update was dropped: [train] nonfinite = skip (loss and norm are then NaN) or a gradient overflow
  bool overflow = false;     ///< skipped for a gradient overflow under fp16 loss scaling (the loss is finite, the norm not)
  double loss_scale = 1;     ///< the loss scale this step's backward used (1 without fp16 loss scaling)
  int first_bad_rank = -1;   ///< skipped: the lowest world rank that saw a non-finite loss or gradient norm
  double loss_z = 0;         ///< z-score of the loss against the spike window (NaN: window not full, off, or skipped)
};

struct EvalResult {
  double loss = 0;            ///< mean token loss on the validation split (NaN if it is too short or stopped)
  std::int64_t tokens = 0;    ///< tokens evaluated (over all dp ranks; 0 when stopped)
  double seconds = 0;
  bool stopped = false;       ///< abandoned on a stop request before its last batch: no loss
  std::int64_t batches = 0;   ///< forward passes run (on every rank the same)
  std::int64_t batches_planned = 0;
};

template <class T>
class Trainer {
 public:
  /// Builds this rank's part of the model (its pipeline stage, its tensor-parallel partition) and its
  /// ZeRO engine for `cfg` (validated; model.vocab_size resolved) on `grid`, and initialises the
  /// parameters from the seed (the same model at any layout). Collective over the grid.
  Trainer(const Config& cfg, const ProcessGrid& grid, const TokenDataset& data);

  std::int64_t step() const { return step_; }
  std::int64_t consumed_samples() const { return consumed_samples_; }
  const Config& config() const { return cfg_; }
  const ParamLayout& layout() const { return state_.layout(); }
  ZeroEngine<T>& engine() { return state_.engine(); }
  /// This rank's master weights, AdamW moments (local arrays of the engine), for tests.
  std::vector<T> master_copy() const;
  std::vector<T> exp_avg_copy() const;
  std::vector<T> exp_avg_sq_copy() const;
  /// (global sample index, window offset) pairs this rank loaded in the last train_step, on the
  /// first pipeline stage (empty elsewhere); [data] sample_log gathers them over dp. Local.
  const std::vector<std::int64_t>& loaded_samples() const { return loaded_samples_; }
  /// Bytes this rank sent over all its communicators (dp, shard and replica groups, tp, pp, tied
  /// embedding, model-parallel) since construction (ring model). Local.
  std::int64_t comm_bytes() const;
  /// The step-time breakdown ([train] timers): train_step times its parts in it, the driver adds
  /// evaluation and checkpoints and takes one lap() per metrics row. It watches every communicator
  /// of the grid and of the model state. Local.
  StepTimers& timers() { return timers_; }

  /// Optimizer-state offload traffic and wait time so far (zeros without offload). Local.
  OffloadCounters offload_counters() const;

  /// One optimizer step over the next global batch: this dp rank's micro-batches through the
  /// pipeline stages ([parallel] pp_schedule: gpipe, or 1f1b with at most pp - stage micro-batches
  /// in flight), stage inputs/outputs and their gradients sent over pp_comm, then the ZeRO engine's
  /// reduction, clipping and update. The loss is normalised once by the global token count and
  /// broadcast from the last stage; the step's health is agreed over world (train/numerics.hpp:
  /// one all-reduce of four doubles). With fp16 loss scaling (LossScaler) the backward's seed is
  /// multiplied by the scale and the gradient divided by it (in the norm and AdamW's gradient
  /// factor, in double/fp32) before clipping; a non-finite gradient norm with finite losses on
  /// every rank is an overflow: no update, the scale backs off, the step is reported as skipped
  /// and overflowed (an overflow at loss_scale_min throws Error, collective, exit 1).
  /// Otherwise a non-finite loss or gradient norm on any rank: no update;
  /// with [train] nonfinite = skip the step still counts (step, LR schedule and data position
  /// advance) and is reported as skipped, else, or at max_consecutive_skips skipped steps in a
  /// row, throws Error (collective, exit 1). A finite loss is scored against the spike window and
  /// pushed into it. Collective over the grid and world.
  StepResult train_step();

  /// Mean validation loss: the whole split in consecutive windows (eval_iters = 0), or eval_iters
  /// batches of global_batch_size windows at fixed random offsets. `stop_requested`, when given,
  /// is asked before every forward pass, by every rank at the same pass, and must answer the same
  /// on every rank (an agreed stop request, e.g. a max all-reduce of the signal flag over world):
  /// on true the evaluation is abandoned there (EvalResult::stopped, no loss), so a stop never
  /// waits for a whole evaluation; an abandoned evaluation changes nothing of the training state.
  /// Collective over the grid (and whatever stop_requested does).
  /// `split` is the token file's split evaluated ("val", or "train" for `trident eval --split train`).
  EvalResult evaluate(const std::function<bool()>& stop_requested = {}, const std::string& split = "val");

  /// Writes this run's state into a new checkpoint file at `path`: each rank its shard of master
  /// weights and AdamW moments, plus the index and restart metadata, from a live view (no copy of
  /// the state). Collective over the grid.
  void write_checkpoint(const std::string& path);
  /// This rank's part of a checkpoint of the current step, in host memory it owns (for a
  /// background writer). Local.
  CheckpointSnapshot snapshot() const;
  /// The same as a live view (ModelState::live_view), for a synchronous save. Local.
  CheckpointSnapshot live_view() const;
  /// This rank's model state (its layout, engine, checkpoint conversions). Local.
  ModelState<T>& state() { return state_; }
  /// Hands a written snapshot's buffers back for the next snapshot (ModelState::recycle). Local.
  void recycle(CheckpointSnapshot&& done) { state_.recycle(std::move(done)); }
  /// Step, data position, last LR and tokenizer: what a checkpoint records besides the model.
  RunState run_state() const;

  /// The legs of training (invocations of `trident train`) that led to the current state
  /// (RunState::lineage).
  const std::string& lineage() const { return lineage_; }
  /// Records the validation loss just measured after the current step; checkpoints carry it (and
  /// [checkpoint] keep_best ranks them by it). Local.
  void record_val_loss(double loss) {
    val_loss_ = loss;
    val_loss_step_ = step_;
  }
  /// The step whose validation loss was last recorded (record_val_loss; restored from a
  /// checkpoint), -1 when none. Local.
  std::int64_t val_loss_step() const { return val_loss_step_; }
  /// The run state of the checkpoint load_checkpoint() read (its data hash and tokenizer are what
  /// a resume checks the token file against); default-constructed when none was loaded. Local.
  const RunState& loaded_run_state() const { return loaded_run_; }

  /// Records that leg `id` (this invocation) trains from the current step on. Local.
  void begin_leg(const std::string& id) { lineage_ = extend_lineage(lineage_, id, step_); }

  /// Restores parameters, moments, step and data position from `path`. Collective over the grid.
  /// Throws CheckpointError (collective) when the file belongs to another model or layout.
  void load_checkpoint(const std::string& path);

  /// Takes the weights of checkpoint `path` (any layout; this model) with a fresh optimizer, at
  /// step 0 ([train] init_from). Collective over the grid. Throws ConfigError (collective) for
  /// another model or another tokenizer than the token file's.
  void init_weights_from(const std::string& path, const TokenFileInfo& data);

  /// Loss-spike rollback: restores the state of checkpoint `path` (an earlier step of this run)
  /// but keeps the current data position, so the batches since that checkpoint are skipped.
  /// Collective over the grid.
  void rollback(const std::string& path);

  /// Skipped steps of the run (all legs), skipped steps in a row now, and the spike window. Local.
  std::int64_t skipped_steps() const { return nonfinite_.skipped_total(); }
  std::int64_t consecutive_skips() const { return nonfinite_.consecutive(); }
  const SpikeDetector& spike_detector() const { return spikes_; }
  /// The fp16 loss scaler (scale 1 and never an overflow without fp16). Local.
  const LossScaler& loss_scaler() const { return scaler_; }

 private:
  void load_micro_batch(std::int64_t first_sample, int stash);
  Config cfg_;
  const ProcessGrid& grid_;
  const TokenDataset& data_;
  ModelState<T> state_;
  int n_micro_;                 // micro-batches per step on this dp rank
  bool eval_capped_warned_ = false;  // evaluate() said that eval_iters exceeds the split (once)
  PipelineSchedule pipeline_;   // this stage's forward/backward order and its stash count
  Gpt<T> gpt_;
  Sampler sampler_;
  LrSchedule schedule_;
  Kokkos::View<token_t*, MemSpace> tokens_, targets_;  // n_stash_ micro-batches
  TrackedBuffer<T> send_buf_;  // backward: the input gradient in flight to the previous stage
  std::int64_t step_ = 0;
  std::int64_t consumed_samples_ = 0;
  std::string lineage_;
  double val_loss_ = 0.0;
  std::int64_t val_loss_step_ = -1;
  RunState loaded_run_;
  std::vector<std::int64_t> loaded_samples_;
  NonfinitePolicy nonfinite_;
  SpikeDetector spikes_;
  LossScaler scaler_;
  StepTimers timers_;
};

/// Predicted per-rank memory (bytes by category) of a run of `cfg` (validated, vocab resolved):
/// the ZeroEngine's buffers for dp shard rank 0 plus the model's activations. Local, allocates nothing.
MemoryBytes predict_memory(const Config& cfg);
/// Bytes of the optimizer-state offload on the largest rank (its first or last pipeline stage,
/// shard rank 0): the offload file (on the disk under [parallel] offload_path) and the two host
/// staging buffers (already in predict_memory's optimizer category). Zeros without offload.
/// offload_optimizer = host: its buffers as a build with the state on a GPU (`gpu`, default: this
/// build) allocates them, host and device (ZeroEngine::plan_offload_host_split). Local, pure.
struct OffloadPlan {
  std::int64_t file_bytes = 0, staging_bytes = 0;
  std::int64_t host_bytes = 0;    ///< offload_optimizer = host: the host block and its gradient staging
  std::int64_t device_bytes = 0;  ///< offload_optimizer = host: the device staging (GPU builds)
};
OffloadPlan predict_offload(const Config& cfg, bool gpu = TRIDENT_HAVE_CUDA != 0);

/// How `trident train` was asked to start.
struct TrainRunOptions {
  bool resume = false;           ///< --resume given
  std::string resume_path;       ///< --resume PATH (empty: the run's latest checkpoint)
};

/// `trident train --dry-run`: prints the predicted per-rank memory by category for `cfg`
/// (validated for the layout of interest) next to the ZeRO paper's formula. Local, allocates nothing.
void print_memory_prediction(const Config& cfg);

/// The whole `trident train` job: run directory, data, (resumed) trainer, training loop with a log
/// line per step, metrics.csv, evaluation, periodic and final checkpoints, stop_at_step and
/// time_limit_min. `cfg` must be validated for world.size() ranks. Collective over world.
/// Returns the process exit status (0 when the run ended as planned or stopped early on request).
int run_train(Config cfg, Communicator& world, const TrainRunOptions& opt);

/// Resolves [model] vocab_size against a token file's vocabulary: 0 takes the file's; a smaller
/// value is a ConfigError; a larger one (padding, e.g. 50304 for GPT-2) is kept. Local.
void resolve_vocab(Config& cfg, const TokenFileInfo& info);

}  // namespace trident
