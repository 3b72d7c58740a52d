// train/model_state.hpp: one rank's part of the model state -- its layout (pipeline stage and
// tensor-parallel piece), its communicators and its ZeRO engine -- and the conversion of that
// state to and from checkpoints.
//
// Layer: train. Used by the Trainer (with a model and data around it) and by `trident ckpt
// reshard` (without either).
// Invariants: a snapshot is a host copy taken at a step boundary and owns its memory, so it can be
// written by a background thread while training changes the live state; each element of the model
// is in exactly one rank's snapshot (canonical elements of the pieces the rank writes).
#pragma once

#include "core/config.hpp"
#include "io/checkpoint_file.hpp"
#include "model/gpt.hpp"
#include "parallel/process_grid.hpp"
#include "train/zero.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace trident {

/// What a checkpoint records about the run besides the model state.
struct RunState {
  std::int64_t step = 0;              ///< optimizer steps done
  std::int64_t consumed_samples = 0;  ///< position of the data stream
  double last_lr = 0.0;               ///< learning rate of the last update
  std::string tokenizer;              ///< char | byte | gpt2
  std::vector<std::int32_t> vocab;    ///< tokenizer vocabulary (empty for gpt2)
  std::string lineage;                ///< "segment@first_step;..." that led here (train/metrics.hpp)
};

/// An allocator that leaves new elements uninitialised: a snapshot buffer is overwritten right
/// away, and zeroing 12 bytes per parameter first would double the cost of the copy.
template <class T>
struct UninitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <class U>
  UninitAllocator(const UninitAllocator<U>&) {}
  template <class U>
  void construct(U*) noexcept {}  // default-initialisation: nothing for char
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using HostBytes = std::vector<char, UninitAllocator<char>>;

/// A checkpoint's worth of one rank, in host memory it owns. `write.arrays` point into `storage`.
struct CheckpointSnapshot {
  CheckpointWrite write;
  std::vector<HostBytes> storage;
  std::int64_t bytes() const;
};

template <class T>
class ModelState {
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
  CheckpointSnapshot snapshot(const RunState& run) const;
  /// Keeps the buffers of a written snapshot for the next one: allocating and first touching
  /// 12 bytes per parameter again costs more than the copy itself (page faults). Local.
  void recycle(CheckpointSnapshot&& done) const;
  /// Restores master weights, moments and the optimizer step from `path`, written at any layout
  /// and ZeRO stage, and rebuilds the working parameters. Returns the run state recorded there.
  /// Collective over the grid. Throws CheckpointError (collective) for another model.
  RunState load(const std::string& path);

 private:
  Config cfg_;
  const ProcessGrid& grid_;
  ParamLayout layout_;
  std::unique_ptr<Communicator> shard_comm_, replicate_comm_, tied_comm_;
  std::unique_ptr<ZeroEngine<T>> engine_;
  mutable std::vector<HostBytes> spare_;  // buffers of a recycled snapshot
};

}  // namespace trident
