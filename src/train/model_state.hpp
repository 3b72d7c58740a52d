// train/model_state.hpp: one rank's part of the model state -- its layout (pipeline stage and
// tensor-parallel partition), its communicators and its ZeRO engine -- and the conversion of that
// state to and from checkpoints.
//
// Layer: train. Used by the Trainer (with a model and data around it) and, as the checkpoint
// layer's CheckpointState, by `trident ckpt reshard` (without either).
// Invariants: a snapshot is a host copy taken at a step boundary and owns its memory, so it can be
// written by a background thread while training changes the live state; a live view writes the
// same bytes from the live state with at most kSaveStagingBytes of extra host memory; each
// element of the model is in exactly one rank's snapshot (canonical elements of the pieces the
// rank writes). All host memory of saves counts as MemCategory::checkpoint, and
// plan_save_bytes() predicts it exactly.
#pragma once

#include "checkpoint/model_schema.hpp"
#include "core/config.hpp"
#include "io/token_file.hpp"
#include "model/gpt.hpp"
#include "parallel/process_grid.hpp"
#include "train/zero.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace trident {

class CheckpointReader;

template <class T>
class ModelState final : public CheckpointState {
 public:
  /// Builds this rank's layout, communicators and ZeRO engine for `cfg` (validated, vocab
  /// resolved) and initialises the parameters from [train] seed. Collective over the grid.
  ModelState(const Config& cfg, const ProcessGrid& grid);

  const ParamLayout& layout() const { return layout_; }
  ZeroEngine<T>& engine() { return *engine_; }
  const ZeroEngine<T>& engine() const { return *engine_; }
  /// Bytes this rank sent over all communicators it uses (ring model).
  std::int64_t comm_bytes() const;
  /// The communicators this state split off the grid's (dp_shard, dp_replicate, pp_tied), e.g. to
  /// time them (train/step_timers.hpp). Local.
  std::vector<Communicator*> own_comms() const {
    return {shard_comm_.get(), replicate_comm_.get(), tied_comm_.get()};
  }

  /// A host copy of this rank's part of a checkpoint at `run` (3 x shard elements x sizeof(T):
  /// master weights and both moments), in the buffers of the last recycled snapshot when there is
  /// one of the right size (else newly allocated). For a background writer. Local.
  CheckpointSnapshot snapshot(const RunState& run) const override;
  /// The same as a live view, for a synchronous save: runs of the shard of at least
  /// kInPlaceBytes are written in place when the state is in host memory; shorter runs, and
  /// everything when it is in device memory, go through one staging buffer of at most
  /// staging_bytes(). Frees a recycled snapshot's buffers first (the save that needs no copy
  /// does not keep one). Valid until the state changes. Local.
  CheckpointSnapshot live_view(const RunState& run) const override;
  /// Keeps the buffers of a written snapshot for the next one: allocating and first touching
  /// 12 bytes per parameter again costs more than the copy itself (page faults). Local.
  void recycle(CheckpointSnapshot&& done) const;

  /// Host bytes (MemCategory::checkpoint) a save of `cfg` allocates on dp rank 0 of the pipeline
  /// stage `layout` describes, the rank with the largest shard: with [checkpoint] async the
  /// snapshot, kept for the next save; else the largest staging buffer of a live view (0 when
  /// every run is written in place). The --dry-run prediction. Local, allocates nothing.
  static std::int64_t plan_save_bytes(const Config& cfg, const ParamLayout& layout, const GptSchedule& sched);
  /// Runs of at least this many bytes are written in place from host memory.
  static constexpr std::int64_t kInPlaceBytes = 256 << 10;
  /// The default bound of a live view's staging buffer.
  static constexpr std::int64_t kSaveStagingBytes = 16 << 20;
  std::int64_t staging_bytes() const { return staging_bytes_; }
  /// Lowers (or raises) the staging bound, so tests can cross it with small models. Local.
  void set_staging_bytes(std::int64_t bytes) { staging_bytes_ = bytes; }
  /// Restores master weights, moments and the optimizer step from `path`, written at any layout
  /// and ZeRO stage, and rebuilds the working parameters. Returns the run state recorded there.
  /// Collective over the grid. Throws CheckpointError (collective) for another model. World rank
  /// 0 shows the progress of reading its own pieces ("checkpoint load", core/progress.hpp).
  RunState load(const std::string& path) override;
  /// Where set_weights() finds parameter values: elements [first, first + count) of this rank's
  /// tp partition (tp_size, tp_rank) of tensor `t`, into dst (count values). May throw.
  using WeightSource = std::function<void(const CkptTensor& t, int tp_size, int tp_rank, std::int64_t first,
                                          std::int64_t count, T* dst)>;
  /// Replaces the weights by `src`'s values, zeroes both AdamW moments and the optimizer step (a
  /// fresh optimizer), and rebuilds the working parameters. Collective over the grid (the refresh).
  void set_weights(const WeightSource& src);
  /// The weights of checkpoint `path` (any layout, any ZeRO stage; its model must be this one:
  /// family and every tensor's global shape) with a fresh optimizer: [train] init_from,
  /// fine-tuning. Returns the checkpoint's metadata. Collective over the grid. Throws ConfigError
  /// (collective) for another model, CheckpointError for an unreadable file.
  /// `check(meta)` runs first (on every rank: a tokenizer check), then the file is verified (every
  /// checksum) and its model compared; a llama's block_size may differ (no tensor depends on it).
  CheckpointMeta load_weights(const std::string& path, const std::function<void(const CheckpointMeta&)>& check = {});

  /// Whether load() compares the checkpoint's deck with this run's (train/resume_check.hpp: lists,
  /// refuses). On by default; `trident eval` turns it off, as it reads a model, not a run to
  /// continue (the model's shape is checked either way). Local.
  void set_resume_deck_check(bool on) { resume_deck_check_ = on; }
  /// What this run reads (TokenFileInfo: content_hash, "" unknown, and n_train): load() then takes
  /// a [data] path spelled otherwise, or a copy, with the checkpoint's hash and train split size
  /// (same_training_data) as the same data, not a change to refuse. Local.
  void set_data_identity(const TokenFileInfo& data) {
    data_.content_hash = data.content_hash;
    data_.n_train = data.n_train;
  }

 private:
  bool resume_deck_check_ = true;
  TokenFileInfo data_;  ///< only content_hash and n_train (set_data_identity)
  Config cfg_;
  const ProcessGrid& grid_;
  ParamLayout layout_;
  std::unique_ptr<Communicator> shard_comm_, replicate_comm_, tied_comm_;
  std::unique_ptr<ZeroEngine<T>> engine_;
  mutable std::vector<HostBytes> spare_;  // buffers of a recycled snapshot
  std::int64_t staging_bytes_ = kSaveStagingBytes;

  // The header of this rank's part of a checkpoint (tensors, kinds, metadata, shard, segments)
  // and the runs of its shard: canonical elements, in shard order, local offsets.
  CheckpointWrite describe(const RunState& run, std::vector<Piece>& runs) const;
  // Throws ConfigError unless `rd` holds this model (family, the fingerprint, every tensor's shape).
  // `hint`: what to do about it, appended in brackets.
  void require_same_model(const CheckpointReader& rd, const CheckpointMeta& meta, const std::string& hint,
                          bool weights_only = false) const;
  // load() with the optimizer state offloaded: the checkpoint's pieces written to the offload
  // file unit by unit. Local (inside load's agreement).
  void load_offloaded(CheckpointReader& rd, std::int64_t adam_step);
};

}  // namespace trident
