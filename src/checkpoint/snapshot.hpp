// checkpoint/snapshot.hpp: one rank's part of a checkpoint, ready to be written.
//
// Layer: checkpoint. It knows nothing of the model: it is the CheckpointWrite of
// io/checkpoint_file.hpp plus the host memory its arrays live in. Two forms (train/model_state.hpp
// makes both from the live state at a step boundary):
//  - a *copy* owns a host copy of the shard (12 bytes per element of fp32 master weights and two
//    moments), so a background thread (checkpoint/async_writer.hpp) can write it while training
//    changes the live state;
//  - a *live view* owns no copy: its write.read_block hands the shard out block by block from the
//    live buffers (in place when they are host memory, else through one bounded staging buffer),
//    so it is only valid until the state changes -- a synchronous save.
// Both write the same data and checksums (only HDF5's object time stamps can differ). Their host memory counts against MemCategory::checkpoint.
// Invariants: write.arrays / write.read_block point into `storage` or the live state and stay valid
// as long as the snapshot lives (and, for a live view, the state is unchanged); moving a snapshot
// keeps them valid (the vectors' buffers move with it).
#pragma once

#include "core/memory.hpp"
#include "io/checkpoint_file.hpp"

#include <cstdint>
#include <vector>

namespace trident {

/// Host bytes of a save, uninitialised when allocated and counted as MemCategory::checkpoint.
using HostBytes = std::vector<char, TrackedHostAllocator<char, MemCategory::checkpoint>>;

/// A checkpoint's worth of one rank: a copy (`write.arrays` point into `storage`) or a live view
/// (`write.read_block` reads the live state; `storage` is its staging buffer, if any).
struct CheckpointSnapshot {
  CheckpointWrite write;
  std::vector<HostBytes> storage;
  /// Bytes of storage (the copy, or the staging buffer). Local.
  std::int64_t bytes() const;
  /// A live view: valid only until the state it reads changes (never for a background writer).
  bool live = false;
};

}  // namespace trident
