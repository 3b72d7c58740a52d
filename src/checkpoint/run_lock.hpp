// checkpoint/run_lock.hpp: one job per run directory.
//
// Layer: checkpoint (POSIX; the run directory is where checkpoints are committed, and `ckpt
// reshard` into a run directory takes the same lock as training). Two jobs writing the same
// out_dir (a double sbatch, a requeue while the old job still runs) would interleave metrics rows
// and move each other's checkpoints aside. World rank 0 holds an exclusive lock on
// <out_dir>/.trident.lock for the life of the process: flock(), or where the file system refuses
// flock (some NFS and Lustre mounts) an fcntl write lock on the whole file. The kernel releases
// either when the process ends in any way (also SIGKILL), so a crashed job never blocks its
// successor. The holder writes "host <name> pid <pid>" into the file, which a refused job names.
// Invariant: a RunLock object exists only while the lock is held; a file system that grants no
// lock at all is refused, never silently accepted ([checkpoint] run_lock = off is the caller's
// explicit way around it: train/run_dir.hpp).
#pragma once

#include "core/error.hpp"

#include <string>

namespace trident {

/// The ConfigError of a file system that grants neither kind of lock (as opposed to a lock held
/// by another job): [checkpoint] run_lock = off goes on without a lock after this one only.
class RunLockUnsupported : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

class RunLock {
 public:
  /// Takes the lock of run directory `dir` (which must exist). Local. Throws ConfigError (exit
  /// status 2) "run directory '<dir>' is in use by another Trident job (host H pid P); <busy_advice>"
  /// when another process holds it, RunLockUnsupported (a ConfigError) naming the errno and
  /// `unsupported_advice` when the file system grants neither kind of lock, IoError when the lock
  /// file cannot be created.
  explicit RunLock(const std::string& dir,
                   const std::string& busy_advice = "wait for it to end or choose another [train] out_dir",
                   const std::string& unsupported_advice =
                       "put [train] out_dir on a file system with locks (NFS: run lockd; Lustre: mount with "
                       "-o flock), or set [checkpoint] run_lock = off if you make sure that no other job uses it");
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  /// "flock" or "fcntl": which kind of lock is held. Local.
  const char* kind() const { return kind_; }

 private:
  int fd_ = -1;
  const char* kind_ = "flock";
};

}  // namespace trident
