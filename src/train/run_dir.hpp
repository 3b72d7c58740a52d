// train/run_dir.hpp: the run directory of `trident train` ([train] out_dir): its checks before a
// run starts, and what the run holds open in it while it trains.
//
// Layer: train. World rank 0 does all the file work; every rank agrees on the outcome
// (run_agreed), so a problem is the same collective error everywhere.
// Layout: <out_dir>/deck.ini (the resolved deck), metrics.csv, samples.csv ([data] sample_log),
// checkpoints/ (checkpoint/commit.hpp), .trident.lock (checkpoint/run_lock.hpp).
// Invariants: a RunDir exists only after check_run_dir() passed; while it lives, world rank 0
// holds the run lock, so no second job writes the directory; metrics() and sample_log() are null
// on every other rank.
#pragma once

#include "parallel/communicator.hpp"
#include "checkpoint/run_lock.hpp"
#include "train/metrics.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace trident {

class CheckpointDir;

/// Checks, on world rank 0, that run directory `out_dir` can take this run: `out_dir` is a
/// directory or absent; `latest` in `ckdir` is a file or absent; without `resume`, `ckdir` holds no
/// committed checkpoint (a new run must not mix with an old one). Collective over world. Throws
/// (collective, prefixed "cannot set up the run directory") IoError for the first two, ConfigError
/// (exit status 2) for the third.
void check_run_dir(Communicator& world, const std::string& out_dir, const CheckpointDir& ckdir, bool resume);

/// What a run writes into its directory when it opens it.
struct RunDirOptions {
  std::string out_dir;             ///< [train] out_dir
  std::string deck_ini;            ///< the resolved deck (Config::to_ini), written to deck.ini
  std::int64_t resumed_step = -1;  ///< step of the resumed checkpoint, -1 for a run from step 0
  std::string lineage;             ///< the resumed checkpoint's lineage (train/metrics.hpp)
  std::string leg;                 ///< this invocation's leg id (train/metrics.hpp)
  bool sample_log = false;         ///< [data] sample_log: also open samples.csv
  bool file_locking = true;        ///< [checkpoint] file_locking, for the checkpoint directory probe
};

class RunDir {
 public:
  /// Opens the run directory on world rank 0: creates `opt.out_dir`, takes its RunLock, writes
  /// deck.ini, opens metrics.csv (rows after `resumed_step` outside the lineage set aside, see
  /// MetricsCsv) and samples.csv, creates `ckdir` and probes it with a small HDF5 file
  /// (probe_checkpoint_dir), so an unwritable directory or a file system without locks fails now,
  /// not at the first save. Collective over world. Throws (collective, prefixed "cannot set up the
  /// run directory") IoError when any of this fails or another job holds the lock.
  RunDir(Communicator& world, const RunDirOptions& opt, const CheckpointDir& ckdir);

  /// metrics.csv, on world rank 0 (null elsewhere). Local.
  MetricsCsv* metrics() const { return metrics_.get(); }
  /// samples.csv, on world rank 0 with [data] sample_log (null otherwise). Local.
  SampleLogCsv* sample_log() const { return sample_log_.get(); }

 private:
  std::unique_ptr<RunLock> lock_;
  std::unique_ptr<MetricsCsv> metrics_;
  std::unique_ptr<SampleLogCsv> sample_log_;
};

}  // namespace trident
