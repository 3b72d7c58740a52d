// checkpoint/async_writer.hpp: writing checkpoints in a background thread while training goes on.
//
// Layer: checkpoint. At a step boundary the trainer takes a snapshot (a host copy it owns,
// checkpoint/snapshot.hpp); the writer thread then runs the whole commit protocol of CheckpointDir on a
// communicator of its own (a duplicate of the world), so its collectives never mix with the
// training thread's. MPI must provide MPI_THREAD_MULTIPLE; HDF5 calls are serialised by the io
// layer's lock (token reads of an uncached dataset wait while a save runs). The snapshot is handed
// to the file writer in blocks of at most kBlockBytes, so that abandon() (a stop signal must not
// wait for a whole save of an older step) takes effect within one block.
// Invariants: at most one save in flight; start() and wait() are collective, so every rank learns
// the outcome of a save at the same step; a failed save raises the same CheckpointError everywhere;
// an abandoned save leaves no file and the previous checkpoint and `latest` untouched.
#pragma once

#include "parallel/communicator.hpp"
#include "checkpoint/commit.hpp"
#include "checkpoint/snapshot.hpp"

#include <atomic>
#include <exception>
#include <memory>
#include <string>
#include <thread>

namespace trident {

class AsyncCheckpointWriter {
 public:
  /// Duplicates `world` for the writer thread. Collective over world.
  explicit AsyncCheckpointWriter(const Communicator& world);
  /// Waits for a save in flight (its error, if any, is dropped: call wait() to see it).
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  struct Result {
    bool done = false;      ///< a save finished (false: none was in flight)
    std::string path;       ///< the committed checkpoint
    std::int64_t step = 0;
    double seconds = 0;     ///< wall time of the background write and commit
    std::int64_t bytes = 0; ///< this rank's snapshot bytes
    bool abandoned = false; ///< abandon() stopped it: nothing was committed
  };

  /// Largest block handed to the file writer at once (the latency of abandon()).
  static constexpr std::int64_t kBlockBytes = 16 << 20;

  /// Starts committing `snap` (a copy, or any snapshot whose read_block stays valid while training
  /// goes on; never a live view) as checkpoint `step` of `dir` in the background (keeping `keep`).
  /// Call wait() first if a save may be in flight. Local (the thread's collectives are over the
  /// duplicate, run by every rank's thread).
  void start(const CheckpointDir& dir, std::int64_t step, CheckpointSnapshot snap, std::int64_t keep);
  /// Asks the save in flight to stop at its next block; wait() then reports it abandoned, or done
  /// when it was already past its writes. Call it on every rank before wait(). Local.
  void abandon() { abandon_ = true; }
  /// Waits for the save in flight and returns its result; rethrows its CheckpointError (collective:
  /// every rank throws the same) unless abandon() was called (then Result::abandoned). Local wait;
  /// the outcome is the same on every rank.
  Result wait();
  bool busy() const { return thread_.joinable(); }
  /// The snapshot of the last finished save (empty when there is none), for reuse of its buffers
  /// (ModelState::recycle). Local; call after wait().
  CheckpointSnapshot release();

 private:
  std::unique_ptr<Communicator> comm_;
  std::thread thread_;
  std::exception_ptr error_;
  Result result_;
  CheckpointSnapshot snap_;
  std::vector<const void*> arrays_;  // the copy's arrays while they are handed out in blocks
  std::atomic<bool> abandon_{false};
};

}  // namespace trident
