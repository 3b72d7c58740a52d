// checkpoint/snapshot.hpp: one rank's part of a checkpoint in host memory it owns.
//
// Layer: checkpoint. A snapshot is taken at a step boundary (train/model_state.hpp fills it from
// the live device buffers) and then written, possibly by a background thread
// (checkpoint/async_writer.hpp) while training changes the live state. It knows nothing of the
// model: it is the CheckpointWrite of io/checkpoint_file.hpp plus the storage its arrays point to.
// Invariants: write.arrays[k] points into storage[k] and stays valid as long as the snapshot
// lives; moving a snapshot keeps the pointers valid (the vectors' buffers move with it).
#pragma once

#include "io/checkpoint_file.hpp"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace trident {

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
  /// Bytes of storage (this rank's arrays). Local.
  std::int64_t bytes() const;
};

}  // namespace trident
