// checkpoint/run_lock.hpp: one job per run directory.
//
// Layer: checkpoint (POSIX; the run directory is where checkpoints are committed, and `ckpt
// reshard` into a run directory takes the same lock as training). Two jobs writing the same out_dir (a double sbatch, a requeue while the
// old job still runs) would interleave metrics rows and checkpoints. World rank 0 holds an
// exclusive flock on <out_dir>/.trident.lock for the life of the process; the kernel releases it
// when the process ends in any way (also SIGKILL), so a crashed job never blocks its successor.
// On file systems without flock support the lock is skipped with a warning.
#pragma once

#include <string>

namespace trident {

class RunLock {
 public:
  /// Takes the lock of run directory `dir` (which must exist). Local. Throws IoError naming the
  /// directory, the holder ("host pid") and `advice` when another process holds it.
  explicit RunLock(const std::string& dir,
                   const std::string& advice = "wait for it to end or choose another [train] out_dir");
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace trident
