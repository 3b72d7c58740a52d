#include "train/run_dir.hpp"

#include "checkpoint/commit.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/checkpoint_file.hpp"
#include "io/output_file.hpp"
#include "parallel/agree.hpp"

#include <filesystem>
#include <fstream>

namespace trident {

namespace fs = std::filesystem;

namespace {

/// Creates [train] out_dir (and its parents) or throws a message naming the problem: ConfigError
/// for what stands in the way (a file, a symbolic link to nothing, a file among its parents),
/// IoError for what the file system refuses (permissions, a full disk, a loop of links).
void create_out_dir(const std::string& out_dir) {
  check_output_directory(out_dir, "[train] out_dir");
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (!ec) return;
  for (fs::path p = fs::path(out_dir).parent_path(); !p.empty() && p != p.parent_path(); p = p.parent_path()) {
    std::error_code e2;
    const fs::file_status link = fs::symlink_status(p, e2);
    if (link.type() == fs::file_type::not_found) continue;
    const fs::file_status st = fs::status(p, e2);
    if (link.type() == fs::file_type::symlink && st.type() == fs::file_type::not_found)
      throw ConfigError("[train] out_dir '" + out_dir + "' cannot be created: '" + p.string() +
                        "' is a symbolic link to nothing");
    if (!e2 && st.type() != fs::file_type::directory)
      throw ConfigError("[train] out_dir '" + out_dir + "' cannot be created: '" + p.string() +
                        "' is a file, not a directory");
    break;
  }
  throw IoError("cannot create [train] out_dir '" + out_dir + "': " + ec.message());
}

/// Throws ConfigError when `out_dir` is itself a run's checkpoints directory (a `latest` pointer
/// or step_*.h5 files directly in it): a run there would start at step 0 beside them and put its
/// own checkpoints one level down.
void refuse_checkpoints_dir(const std::string& out_dir) {
  std::error_code ec;
  if (!fs::is_directory(out_dir, ec)) return;
  if (!fs::exists(fs::path(out_dir) / "latest", ec) && CheckpointDir(out_dir).list().empty()) return;
  fs::path norm = fs::path(out_dir).lexically_normal();
  if (norm.filename().empty()) norm = norm.parent_path();  // a trailing slash
  const std::string parent = norm.parent_path().string();
  throw ConfigError("[train] out_dir '" + out_dir + "' holds checkpoints itself (a `latest` pointer or step_*.h5 " +
                    "files): it is a run's checkpoints directory; give the run directory" +
                    (parent.empty() ? std::string() : " ('" + parent + "')") + " as out_dir");
}

}  // namespace

void check_run_dir(Communicator& world, const std::string& out_dir, const CheckpointDir& ckdir, bool resume) {
  run_agreed(world, "cannot set up the run directory", [&] {
    if (world.rank() != 0) return;
    std::error_code ec;
    if (fs::exists(out_dir, ec) && !fs::is_directory(out_dir, ec))
      throw ConfigError("[train] out_dir '" + out_dir + "' exists and is not a directory");
    refuse_checkpoints_dir(out_dir);
    if (fs::exists(fs::path(ckdir.dir()) / "latest", ec) && !fs::is_regular_file(fs::path(ckdir.dir()) / "latest", ec))
      throw IoError("'" + (fs::path(ckdir.dir()) / "latest").string() + "' is not a file: remove it");
    if (!resume && !ckdir.list().empty())
      throw ConfigError("[train] out_dir '" + out_dir + "' already holds checkpoints (up to step " +
                        std::to_string(ckdir.list().back().first) +
                        "): pass --resume to continue that run, or choose another [train] out_dir");
  });
}

RunDirClaim::RunDirClaim(Communicator& world, const std::string& out_dir, const CheckpointDir& ckdir,
                         RunLockMode run_lock, bool file_locking) {
  run_agreed(world, "cannot set up the run directory", [&] {
    if (world.rank() != 0) return;
    std::error_code ec;
    if (fs::exists(out_dir, ec) && !fs::is_directory(out_dir, ec))
      throw ConfigError("[train] out_dir '" + out_dir + "' exists and is not a directory");
    refuse_checkpoints_dir(out_dir);
    create_out_dir(out_dir);
    if (run_lock == RunLockMode::required) {
      lock_ = std::make_unique<RunLock>(out_dir);
    } else {
      // off: go without a lock only where the file system grants none. Where it grants one, take
      // it: a job that holds the directory (a lock that is there to be seen) is still refused.
      try {
        lock_ = std::make_unique<RunLock>(out_dir);
      } catch (const RunLockUnsupported&) {
        log::warn("[checkpoint] run_lock = off: '%s' is not locked (the file system grants no lock); nothing stops "
                  "another job from writing the same run directory (interleaved metrics.csv rows, checkpoints moved "
                  "aside); make sure only this job uses it",
                  out_dir.c_str());
      }
    }
    fs::create_directories(ckdir.dir());
  });
  // Find a file system that cannot take checkpoints now, not at the first save hours later.
  run_agreed(world, "cannot set up the run directory", [&] { probe_checkpoint_dir(ckdir.dir(), world, file_locking); });
}

RunDir::RunDir(Communicator& world, const RunDirOptions& opt, const RunDirClaim& claim) : out_dir_(opt.out_dir) {
  (void)claim;  // its life bounds this object's: the directory is owned while metrics are written
  run_agreed(world, "cannot set up the run directory", [&] {
    if (world.rank() != 0) return;
    std::ofstream deck(fs::path(opt.out_dir) / "deck.ini", std::ios::trunc);
    deck << opt.deck_ini;
    if (!deck) throw IoError("cannot write " + (fs::path(opt.out_dir) / "deck.ini").string());
    metrics_ = std::make_unique<MetricsCsv>((fs::path(opt.out_dir) / "metrics.csv").string(), opt.resumed_step,
                                            opt.lineage, opt.leg);
    if (opt.sample_log)
      sample_log_ = std::make_unique<SampleLogCsv>((fs::path(opt.out_dir) / "samples.csv").string(), opt.resumed_step);
  });
}

void RunDir::rollback(Communicator& world, std::int64_t step, const std::string& lineage, const std::string& leg) {
  run_agreed(world, "cannot rewrite the run's metrics after the rollback", [&] {
    if (world.rank() != 0) return;
    metrics_.reset();
    metrics_ = std::make_unique<MetricsCsv>((fs::path(out_dir_) / "metrics.csv").string(), step, lineage, leg);
    if (sample_log_) {
      sample_log_.reset();
      sample_log_ = std::make_unique<SampleLogCsv>((fs::path(out_dir_) / "samples.csv").string(), step);
    }
  });
}

}  // namespace trident
