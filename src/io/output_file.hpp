// io/output_file.hpp: the checks and the write of a file a command creates at a user-given path
// (`ckpt show --npy`, `plan --csv`, `ckpt import`/`reshard` to a *.h5 file): what such a path may
// replace, and a write that never leaves half a file, never follows a link planted at a temporary
// name and never removes a file of the user's.
//
// Layer: io. Local (the callers decide which rank checks and writes: one, inside run_agreed, so
// that ranks on nodes with different local files cannot disagree).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace trident {

/// What may stand at an output path.
struct OutputRules {
  bool force = false;           ///< an existing regular file may be replaced
  /// ... even an HDF5 file, if it is a Trident checkpoint (format = "trident-checkpoint") outside a
  /// run; never a token file or another HDF5 file
  bool replace_checkpoint = false;
  std::vector<std::string> inputs;  ///< files the command reads: never replaced, even with force
  /// the command creates the file's missing parent directories (`ckpt import`, `reshard`); else
  /// the parent must be an existing directory now, not found missing after the command's work
  bool creates_parent = false;
};

/// Throws ConfigError (naming `what`, e.g. "--npy") unless `path` may be written under `rules`:
/// it is not empty; it does not name a run's checkpoint file (step_*.h5 or `latest` in a folder
/// that has a `latest`, a step_*.h5 file, or a run's lock beside it), whether or not that file
/// exists yet; nothing is there (a dangling symbolic link counts as something), or, with
/// rules.force, a regular file (a link to one counts; the link itself is what gets replaced) that
/// is none of rules.inputs and not an HDF5 file unless a checkpoint under rules.replace_checkpoint
/// (a token file never: the run that reads it would be lost). Directories, devices,
/// FIFOs and sockets are refused, and so is a parent that is not an existing directory unless
/// rules.creates_parent. Throws IoError when the file system cannot answer (a parent
/// without search permission, a loop of links).
void check_output_file(const std::string& path, const std::string& what, const OutputRules& rules);

/// Throws ConfigError (naming `what`, e.g. "the output") unless `path` may be a directory a command
/// writes files into: nothing is there (the command creates it) or a directory (a link to one
/// counts). A regular file, a symbolic link to nothing, a device, FIFO or socket is refused by
/// what it is, the message ending with `hint` when one is given. Throws IoError when the file
/// system cannot answer. Local.
void check_output_directory(const std::string& path, const std::string& what, const std::string& hint = "");

/// One writer at a time into a directory of outputs (`ckpt export`: two exports into one directory
/// would each remove the other's shards as those of an earlier export). Holds an exclusive flock
/// on <dir>/<name> from construction to destruction, which removes the file; a lock file removed
/// by a holder just before we locked it is noticed (another inode at the name) and taken anew.
/// The kernel releases the lock when the process ends in any way; a file left by a killed holder
/// is taken over. Local. Throws ConfigError "<what> is in use: another <who> is writing into
/// '<dir>'" when another process holds it, IoError when the file cannot be created. Where the file
/// system grants no flock (some NFS mounts) it warns and goes on without a lock.
class OutputDirLock {
 public:
  OutputDirLock(const std::string& dir, const std::string& name, const std::string& who);
  ~OutputDirLock();
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

/// Writes `bytes` to `path`: into a new temporary file of a unique name beside it (created
/// exclusively, so no link or file of that name is followed or replaced), flushed, then moved to
/// `path` -- replacing what is there when `replace`, else only if nothing is there (a file that
/// appeared since the check is never overwritten: ConfigError "already exists"). On failure the
/// temporary file is removed and `path` is as before. Throws IoError naming the file and errno's
/// reason.
void write_file_atomically(const std::string& path, const std::string& bytes, bool replace);

/// write_file_atomically for content written in pieces (a safetensors shard of gigabytes, a large
/// .npy): the constructor creates the temporary file beside `path` (a unique name, exclusively),
/// write() appends to it, commit() flushes it to disk and moves it to `path` as
/// write_file_atomically does (replace, or only where nothing is: ConfigError "already exists").
/// The destructor removes the temporary file unless commit() succeeded, so an exception (a full
/// disk, a failed read of the source) leaves neither half a file nor a temporary one. Errors:
/// IoError naming the file and errno's reason.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  /// Appends n bytes (retries short writes and EINTR).
  void write(const void* data, std::size_t n);
  /// Flushes the content to disk and closes the temporary file (it stays until commit() or the
  /// destructor): for a set of files that must appear together, all written and closed before
  /// any is moved into place. Idempotent.
  void close();
  /// close(), then moves the file to its path; at most once.
  void commit(bool replace);
  /// The temporary file's path (for messages and tests).
  const std::string& temp_path() const { return temp_; }

 private:
  std::string path_, temp_;
  int fd_ = -1;
  int slot_ = -1;  ///< its entry in the list remove_temporaries_on_signal() removes; -1: none
  bool closed_ = false, committed_ = false;
};

/// From now on SIGINT, SIGTERM and SIGHUP first remove the temporary files of the AtomicFiles
/// (and RemoveOnSignal paths) alive at that moment (unlink(2), async-signal-safe; at most 256 at a
/// time are tracked, paths under 4 KiB), then end the process as the signal would have (the
/// handler is reset to the default and the signal delivered again). A signal ignored now or at
/// record_ignored_signals() stays ignored (SIGHUP under nohup, SIGINT in a background job);
/// any other handler is replaced (UCX installs a debug handler on SIGHUP that would swallow it).
/// `train` never calls this: its own stop handlers stay. For commands
/// that write files and have no signal handling of their own (prep, ckpt export/import/reshard,
/// show --npy, plan --csv): a Ctrl-C mid-write leaves neither the new file nor a temporary one of
/// its size. Local; call once, after MPI_Init (which may install handlers of its own).
void remove_temporaries_on_signal();

/// Records which of SIGINT, SIGTERM and SIGHUP are ignored now: called before main, before
/// MPI_Init and its libraries change dispositions. Local.
void record_ignored_signals();

/// A path (a temporary file written by other means, e.g. a checkpoint's ".tmp" that MPI-IO
/// writes) removed by remove_temporaries_on_signal's handler while this object lives. Local.
class RemoveOnSignal {
 public:
  explicit RemoveOnSignal(const std::string& path);
  ~RemoveOnSignal();
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;

 private:
  int slot_ = -1;
};

/// The temporary files that AtomicFile wrote in `dir` for outputs whose file name `is_output`
/// accepts and that are still there: regular files named "." + that name + "." and 6 letters or
/// digits (what a write killed by a signal leaves), sorted. Local; empty where the directory
/// cannot be read.
std::vector<std::string> leftover_temporaries(const std::string& dir,
                                              const std::function<bool(const std::string&)>& is_output);
/// The same for the one output `path`.
std::vector<std::string> leftover_temporaries(const std::string& path);

/// Warns once per file of `leftovers` (leftover_temporaries) that it is the temporary file of an
/// interrupted `what` (e.g. "export"), with its size, to be removed if no other `what` is running.
/// Local.
void warn_leftover_temporaries(const std::vector<std::string>& leftovers, const std::string& what);

}  // namespace trident
