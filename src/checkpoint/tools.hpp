// checkpoint/tools.hpp: inspecting checkpoints without resuming a run: the listing of `trident
// ckpt ls` and the per-tensor comparison of `trident ckpt diff`. The checks of `trident ckpt
// verify` are checkpoint/verify.hpp, the safetensors export checkpoint/export.hpp and the
// re-layout checkpoint/reshard.hpp.
//
// Layer: checkpoint. The file is read through io's CheckpointReader only (no HDF5 here), its
// metadata through CheckpointMeta, the directory through CheckpointDir. Nothing here writes a file.
// Invariants: every function taking a Communicator is collective over it and returns the same
// result on every rank (problems are gathered, never left rank-local), so a driver prints from
// rank 0 and every rank exits with the same status. Problems found *in* a file are returned as
// text; exceptions are thrown only when the request cannot be carried out at all (a path that
// does not exist, two checkpoints that cannot be compared), always collectively.
#pragma once

#include "parallel/communicator.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

class CheckpointReader;

// ---- ls ---------------------------------------------------------------------------------------

/// One checkpoint file of a listing.
struct CheckpointSummary {
  std::string path;
  std::string file_name;
  std::int64_t step = -1;        ///< from the file name step_NNNNNNNN.h5[.tmp]
  std::int64_t size_bytes = 0;
  bool committed = true;         ///< false: a *.tmp leftover of an interrupted save (never opened)
  bool latest = false;           ///< the file the directory's `latest` pointer names
  bool opened = false;           ///< the fields below were read from the file
  std::int64_t dp = 0, tp = 0, pp = 0, zero_stage = 0;
  std::string dtype;
  std::int64_t created_unix_time = 0;
  double val_loss = 0.0;              ///< the run's last validation loss when saved ...
  std::int64_t val_loss_step = -1;    ///< ... measured after this step (-1: none recorded)
  std::vector<std::string> problems;  ///< empty for a complete committed checkpoint
  /// Gone when it was to be opened: removed since the directory was read (the rotation of a
  /// running job), not damaged. Not a problem; listed as such.
  bool removed = false;

  /// "ok", "incomplete (uncommitted)", "removed while listed" or "BAD: <first problem>".
  std::string status() const;
};

struct CheckpointListing {
  std::string dir;           ///< the checkpoint directory listed
  std::string latest_name;   ///< contents of <dir>/latest, "" when there is none
  std::string latest_note;   ///< a warning about `latest` (names a missing file), "" when fine
  std::vector<CheckpointSummary> entries;  ///< by step, committed file before its .tmp
  /// True when every committed checkpoint is complete and `latest` is sound.
  bool ok() const;
};

/// Lists the checkpoints of `path`: a run directory (its checkpoints/), a checkpoint directory,
/// or one file. Each committed file is opened and checked (check_checkpoint_index,
/// check_checkpoint_datasets, and with `checksums` CheckpointReader::verify); *.tmp leftovers are
/// listed without being opened. Collective over comm (the directory is scanned by rank 0 and the
/// names broadcast). Throws CheckpointError (collective) when `path` does not exist.
CheckpointListing list_checkpoints(const std::string& path, Communicator& comm, bool checksums);

/// The listing as a table, one line per checkpoint, then one line per problem. Local.
std::string format_listing(const CheckpointListing& listing);

// ---- show -------------------------------------------------------------------------------------

/// One tensor of a checkpoint as `trident ckpt show` lists it.
struct TensorInfo {
  std::string name;
  std::vector<std::int64_t> shape;  ///< global shape
  int split_dim = -1;               ///< tp split dimension (-1: replicated)
  int split_groups = 1;
  std::int64_t numel = 0;
};

struct ShowResult {
  std::string file;                   ///< the checkpoint read (a directory resolved to its latest)
  std::int64_t step = 0;
  std::string dtype;                  ///< float32 | float64 (the file's)
  std::vector<std::string> kinds;     ///< the arrays each tensor has (param, exp_avg, exp_avg_sq)
  std::vector<TensorInfo> tensors;    ///< every tensor, in index order
  /// With a tensor asked for: its values (global shape, row-major, as double) of `kind`.
  std::string tensor, kind;
  std::vector<double> values;
};

/// The tensor list of checkpoint `path` (a file, or a run/checkpoint directory's latest) and, when
/// `tensor` is not empty, that tensor's values of array `kind`, joined from whatever layout wrote
/// the file (read by rank 0, broadcast). Collective over comm. Throws CheckpointError
/// (collective) when the file cannot be read, or names the tensors that exist when `tensor` is not
/// one of them, or the kinds when `kind` is not one.
ShowResult show_checkpoint(const std::string& path, Communicator& comm, const std::string& tensor,
                           const std::string& kind);

/// The listing (name, shape, tp split, elements), or for one tensor its statistics (min, max,
/// mean, std, NaN/inf counts) and its values (all when `all`, else the first and last few). Local.
std::string format_show(const ShowResult& r, bool all);

/// Writes `values` of `shape` as a NumPy .npy file (format 1.0, little-endian float64 or float32
/// as `dtype` "float64" | "float32"), streamed through an AtomicFile (io/output_file.hpp; an
/// existing `path` is replaced only when `replace`: callers check_output_file first). Local.
/// Throws IoError (naming errno's reason) when it cannot be written, leaving no temporary file.
void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const std::vector<double>& values,
               const std::string& dtype, bool replace);

// ---- diff -------------------------------------------------------------------------------------

struct DiffOptions {
  std::vector<std::string> kinds = {"param", "exp_avg", "exp_avg_sq"};
  double tolerance = 0.0;  ///< arrays with max |a - b| <= tolerance count as equal
};

/// Comparison of one array (tensor x kind x tp partition) present in both files.
struct TensorDiff {
  std::string name;          ///< tensor name, with " [tp r]" for a tp partition when tp > 1
  std::string kind;
  std::int64_t numel = 0;
  double max_abs = 0.0;      ///< max |a - b| (inf where exactly one side is NaN)
  double max_rel = 0.0;      ///< max |a - b| / max |b| (0 when equal, inf when b is all zero)
  bool differs = false;      ///< max_abs > tolerance
};

struct CheckpointDiff {
  std::string path_a, path_b;
  double tolerance = 0.0;                ///< DiffOptions::tolerance used
  std::vector<std::string> differences;  ///< attributes (step, consumed_samples, ...), missing tensors/kinds, shapes
  std::vector<TensorDiff> arrays;        ///< every compared array, in index order of A
  /// True when `differences` is empty and no array differs; honours the tolerance (an array differs
  /// only when max_abs > tolerance), so with tolerance > 0 it means "equal within tolerance".
  bool identical() const;
};

/// Compares `a` and `b` array by array, reading both through their indexes (so the dp layouts may
/// differ) in double precision, chunk by chunk; arrays are spread over comm's ranks. Collective
/// over comm. At equal tp the tp partitions are compared one by one, otherwise whole tensors joined
/// from each file's partitions. Throws CheckpointError (collective) when a file cannot be opened.
CheckpointDiff diff_checkpoints(const std::string& a, const std::string& b, Communicator& comm,
                                const DiffOptions& opt);

/// The differences, one line each; arrays that differ (all arrays with `all`). Local.
std::string format_diff(const CheckpointDiff& d, bool all);

}  // namespace trident
