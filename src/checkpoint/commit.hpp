// checkpoint/commit.hpp: the directory of a run's committed checkpoints and the commit protocol.
//
// Layer: checkpoint (filesystem work only; the file contents are io/checkpoint_file.hpp's).
// Protocol of commit(): (1) every rank writes <dir>/step_NNNNNNNN.h5.tmp together; (2) success is
// agreed by all-reduce (inside the writer); (3) world rank 0 fsyncs the file, renames it to
// step_NNNNNNNN.h5 and fsyncs the directory; (4) only then `latest` is replaced (write
// latest.tmp, fsync, rename); (5) checkpoints beyond `keep` are deleted, oldest first, never the
// one `latest` names nor, with keep_best, the keep_best older ones of lowest validation loss. Between the fsync and the rename of (3), committed checkpoints of this step
// or later ones (an abandoned branch: the run was resumed from an older file) are moved to
// superseded/. A crash at any point leaves the previous checkpoint and pointer intact; a leftover
// *.tmp is ignored and overwritten later.
#pragma once

#include "checkpoint/model_schema.hpp"
#include "parallel/communicator.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trident {

/// NNNNNNNN of a committed checkpoint's name "step_NNNNNNNN.h5", else nothing. Local.
std::optional<std::int64_t> step_of_name(const std::string& name);

/// Steps (1)-(3) of the protocol for one file anywhere: creates its directory, lets `write` write
/// `final_path`.tmp (collectively over comm, throwing on every rank on failure; the .tmp is then
/// removed), then world rank 0 fsyncs it, renames it to `final_path` and fsyncs the directory. An
/// existing `final_path` is replaced only by a complete file. Collective over comm. Throws
/// CheckpointError (collective) when any step fails.
/// `before_rename`, when given, runs on world rank 0 after the fsync and before the rename; an
/// exception from it fails the commit like any other step (the .tmp is removed).
void commit_file(const std::string& final_path, Communicator& comm,
                 const std::function<void(const std::string&)>& write,
                 const std::function<void()>& before_rename = {});

class CheckpointDir {
 public:
  /// `keep_best` > 0: rotation also keeps the keep_best checkpoints with the lowest validation
  /// loss they record ([checkpoint] keep_best), besides the newest `keep`.
  explicit CheckpointDir(std::string dir, std::int64_t keep_best = 0) : dir_(std::move(dir)), keep_best_(keep_best) {}

  const std::string& dir() const { return dir_; }
  /// <dir>/step_NNNNNNNN.h5
  std::string path_for(std::int64_t step) const;
  /// Committed checkpoints (step, path), oldest first. Local.
  std::vector<std::pair<std::int64_t, std::string>> list() const;
  /// The checkpoint `latest` names, else the newest committed one, else nothing. Local.
  std::optional<std::string> latest() const;
  /// The first line of <dir>/latest as written there, "" when there is none or it is not a
  /// regular file (a FIFO there is never opened: reading it would block). Local.
  std::string latest_name() const;

  /// The newest committed checkpoint that opens and (with verify) passes require_intact (index,
  /// metadata against `schema`, checksums), trying newer files first; each one skipped is reported
  /// with its reason on rank 0. Nothing when there is none. Collective over comm (the files are
  /// opened and verified by all ranks).
  /// `tried`, when given, receives how many committed checkpoints were tried (the same on every
  /// rank): nothing returned with tried > 0 means every one of them is damaged.
  std::optional<std::string> newest_complete(Communicator& comm, bool verify, const ModelSchema& schema,
                                             std::size_t* tried = nullptr) const;

  /// Moves the committed checkpoints of `step` and later steps to a new folder
  /// <dir>/superseded/before_step_<step>[.n]/ (never replacing anything). Local (rank 0's work).
  /// Throws CheckpointError when the folder cannot be created or a file cannot be moved.
  void supersede_from(std::int64_t step) const;

  /// Runs the protocol above; `write(tmp_path)` must write the file collectively over comm and
  /// throw on every rank on failure. Collective over comm. Returns the committed path. Throws
  /// CheckpointError (collective) when the write or the commit fails; the previous checkpoint
  /// and `latest` are then untouched.
  std::string commit(std::int64_t step, Communicator& comm, const std::function<void(const std::string&)>& write,
                     std::int64_t keep) const;

 private:
  std::string dir_;
  std::int64_t keep_best_ = 0;
};

}  // namespace trident
