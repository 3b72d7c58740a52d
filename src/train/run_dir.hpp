// train/run_dir.hpp: the run directory of `trident train` ([train] out_dir): its checks before a
// run starts, and what the run holds open in it while it trains.
//
// Layer: train. World rank 0 does all the file work; every rank agrees on the outcome
// (run_agreed), so a problem is the same collective error everywhere.
// Layout: <out_dir>/deck.ini (the resolved deck), metrics.csv, samples.csv ([data] sample_log),
// checkpoints/ (checkpoint/commit.hpp), .trident.lock (checkpoint/run_lock.hpp).
// Order of a run: RunDirClaim first, before any heavy work (loading data, building the model,
// verifying and loading a checkpoint), so a busy directory or a file system that cannot take
// checkpoints is refused in seconds; then, once the checkpoint to resume from is chosen,
// check_run_dir() and RunDir.
// Invariants: a RunDir exists only inside a RunDirClaim's life and after check_run_dir() passed;
// while the claim lives, world rank 0 holds the run lock (unless [checkpoint] run_lock = off), so
// no second job writes the directory; metrics() and sample_log() are null on every other rank.
#pragma once

#include "checkpoint/run_lock.hpp"
#include "core/config.hpp"
#include "parallel/communicator.hpp"
#include "train/metrics.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace trident {

class CheckpointDir;

/// This job's ownership of its run directory, taken before any heavy work.
class RunDirClaim {
 public:
  /// On world rank 0: refuses an `out_dir` that exists and is not a directory (ConfigError), creates
  /// it, takes its RunLock (with `run_lock` = off, where the file system grants no lock: takes
  /// none and warns that nothing keeps a second job out; a job holding the lock is still refused) and creates the checkpoint directory `ckdir`; then every rank runs the
  /// start-up probe of `ckdir` (probe_checkpoint_dir: the fcntl locks MPI-IO needs, and a small
  /// checkpoint written and read back the way saves write, with `file_locking`). Collective over
  /// world. Throws (collective, prefixed "cannot set up the run directory") ConfigError (exit
  /// status 2) when another job holds the directory (naming it: "host H pid P"), when the file
  /// system grants no lock and run_lock = required, or when locks are needed and refused; IoError
  /// when the directory cannot be created or written.
  RunDirClaim(Communicator& world, const std::string& out_dir, const CheckpointDir& ckdir, RunLockMode run_lock,
              bool file_locking);

  /// True on world rank 0 while it holds the run lock (false everywhere with run_lock = off). Local.
  bool locked() const { return lock_ != nullptr; }

 private:
  std::unique_ptr<RunLock> lock_;
};

/// Checks, on world rank 0, that run directory `out_dir` can take this run: `out_dir` is a
/// directory or absent; `latest` in `ckdir` is a file or absent; without `resume`, `ckdir` holds no
/// committed checkpoint (a new run must not mix with an old one). Collective over world. Throws
/// (collective, prefixed "cannot set up the run directory") ConfigError (exit status 2) for the
/// first and the third (the deck's out_dir is wrong for this run), IoError for the second.
void check_run_dir(Communicator& world, const std::string& out_dir, const CheckpointDir& ckdir, bool resume);

/// What a run writes into its directory when it opens it.
struct RunDirOptions {
  std::string out_dir;             ///< [train] out_dir
  std::string deck_ini;            ///< the resolved deck (Config::to_ini), written to deck.ini
  std::int64_t resumed_step = -1;  ///< step of the resumed checkpoint, -1 for a run from step 0
  std::string lineage;             ///< the resumed checkpoint's lineage (train/metrics.hpp)
  std::string leg;                 ///< this invocation's leg id (train/metrics.hpp)
  bool sample_log = false;         ///< [data] sample_log: also open samples.csv
};

class RunDir {
 public:
  /// Opens the run directory that `claim` owns, on world rank 0: writes deck.ini, opens
  /// metrics.csv (rows after `resumed_step` outside the lineage set aside, see MetricsCsv) and
  /// samples.csv. Collective over world. Throws (collective, prefixed "cannot set up the run
  /// directory") IoError when any of this fails.
  RunDir(Communicator& world, const RunDirOptions& opt, const RunDirClaim& claim);

  /// metrics.csv, on world rank 0 (null elsewhere). Local.
  MetricsCsv* metrics() const { return metrics_.get(); }
  /// samples.csv, on world rank 0 with [data] sample_log (null otherwise). Local.
  SampleLogCsv* sample_log() const { return sample_log_.get(); }

  /// After a loss-spike rollback to the checkpoint of step `step` (with lineage `lineage`): reopens
  /// metrics.csv and samples.csv as a resume from it would, so the rows of the abandoned steps move
  /// to their .superseded.csv files and new rows carry leg `leg`. Collective over world (agreed).
  void rollback(Communicator& world, std::int64_t step, const std::string& lineage, const std::string& leg);

 private:
  std::string out_dir_;
  std::unique_ptr<MetricsCsv> metrics_;
  std::unique_ptr<SampleLogCsv> sample_log_;
};

}  // namespace trident
