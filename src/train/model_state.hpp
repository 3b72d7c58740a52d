// train/model_state.hpp: one rank's part of the model state -- its layout (pipeline stage and
// tensor-parallel partition), its communicators and its ZeRO engine -- and the conversion of that
// state to and from checkpoints.
//
// Layer: train. Used by the Trainer (with a model and data around it) and, as the checkpoint
// layer's CheckpointState, by `trident ckpt reshard` (without either).
// Invariants: a snapshot is a host copy taken at a step boundary and owns its memory, so it can be
// written by a background thread while training changes the live state; each element of the model
// is in exactly one rank's snapshot (canonical elements of the pieces the rank writes).
#pragma once

#include "checkpoint/model_schema.hpp"
#include "core/config.hpp"
#include "model/gpt.hpp"
#include "parallel/process_grid.hpp"
#include "train/zero.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace trident {

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

  /// A host copy of this rank's part of a checkpoint at `run`, in the buffers of the last
  /// recycled snapshot when there is one of the right size (else newly allocated). Local.
  CheckpointSnapshot snapshot(const RunState& run) const override;
  /// Keeps the buffers of a written snapshot for the next one: allocating and first touching
  /// 12 bytes per parameter again costs more than the copy itself (page faults). Local.
  void recycle(CheckpointSnapshot&& done) const;
  /// Restores master weights, moments and the optimizer step from `path`, written at any layout
  /// and ZeRO stage, and rebuilds the working parameters. Returns the run state recorded there.
  /// Collective over the grid. Throws CheckpointError (collective) for another model.
  RunState load(const std::string& path) override;

 private:
  Config cfg_;
  const ProcessGrid& grid_;
  ParamLayout layout_;
  std::unique_ptr<Communicator> shard_comm_, replicate_comm_, tied_comm_;
  std::unique_ptr<ZeroEngine<T>> engine_;
  mutable std::vector<HostBytes> spare_;  // buffers of a recycled snapshot
};

}  // namespace trident
