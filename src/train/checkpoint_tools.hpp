// train/checkpoint_tools.hpp: inspecting checkpoints without resuming a run: the listing of
// `trident ckpt ls`, the full check of `trident ckpt verify` and the per-tensor comparison of
// `trident ckpt diff`. The safetensors export is train/checkpoint_export.hpp.
//
// Layer: train. The file is read through io's CheckpointReader only (no HDF5 here), the directory
// through CheckpointDir, and the model fingerprint is checked against model's ParamLayout::gpt.
// Nothing here writes a file.
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

// ---- checks shared by ls and verify ----------------------------------------------------------

/// Index consistency: every segment names an existing tensor and shard, lies within the shard's
/// length and its tensor's tp-local piece; the segments of every tp piece of every tensor cover it
/// exactly once (no gap, no overlap); no two segments share shard elements; shard coordinates lie
/// within the dp x tp x pp layout. Local (deterministic: every rank finds the same). Returns the
/// problems, empty when consistent.
std::vector<std::string> check_checkpoint_index(const CheckpointReader& rd);

/// Every shard dataset /shards/<kind>/<shard> exists and holds at least the elements its segments
/// need (one element read per dataset; the exact length and contents are what verify's checksums
/// cover). Collective over comm: shard s is checked by rank s % comm.size(). Same list on every rank.
std::vector<std::string> check_checkpoint_datasets(const CheckpointReader& rd, Communicator& comm);

/// Restart metadata: required attributes present, layout attributes consistent with the shard
/// table, /config parses as a deck (parse_deck_text) and agrees with the model fingerprint
/// attributes, the fingerprint reproduces the indexed tensor names, shapes and tp splits
/// (ParamLayout::gpt), /tokenizer/vocab fits the vocabulary. Local (deterministic).
std::vector<std::string> check_checkpoint_metadata(const CheckpointReader& rd);

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
  std::vector<std::string> problems;  ///< empty for a complete committed checkpoint

  /// "ok", "incomplete (uncommitted)" or "BAD: <first problem>".
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

// ---- verify -----------------------------------------------------------------------------------

struct VerifyResult {
  std::string file;                   ///< the checkpoint checked (a directory resolved to its latest)
  std::vector<std::string> problems;  ///< empty when the file is intact
};

/// Full check of one checkpoint file (a directory means its latest checkpoint): format and
/// version (opening it), check_checkpoint_index, check_checkpoint_metadata, and presence, exact
/// length and XXH64 checksum of every shard dataset (CheckpointReader::verify, the work spread
/// over comm's ranks). Collective over comm; the same result on every rank. Throws
/// CheckpointError (collective) only when `path` names no file at all.
VerifyResult verify_checkpoint(const std::string& path, Communicator& comm);

/// The checks of verify_checkpoint on an open file: check_checkpoint_index,
/// check_checkpoint_metadata, then CheckpointReader::verify. Collective over comm; the same list
/// on every rank.
std::vector<std::string> checkpoint_problems(const CheckpointReader& rd, Communicator& comm);

// ---- diff -------------------------------------------------------------------------------------

struct DiffOptions {
  std::vector<std::string> kinds = {"param", "exp_avg", "exp_avg_sq"};
  double tolerance = 0.0;  ///< arrays with max |a - b| <= tolerance count as equal
};

/// Comparison of one array (tensor x kind x tp piece) present in both files.
struct TensorDiff {
  std::string name;          ///< tensor name, with " [tp r]" for a tp piece when tp > 1
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
  bool identical() const;
};

/// Compares `a` and `b` array by array, reading both through their indexes (so the dp layouts may
/// differ) in double precision, chunk by chunk; arrays are spread over comm's ranks. Collective
/// over comm. At equal tp the tp pieces are compared one by one, otherwise whole tensors joined
/// from each file's pieces. Throws CheckpointError (collective) when a file cannot be opened.
CheckpointDiff diff_checkpoints(const std::string& a, const std::string& b, Communicator& comm,
                                const DiffOptions& opt);

/// The differences, one line each; arrays that differ (all arrays with `all`). Local.
std::string format_diff(const CheckpointDiff& d, bool all);

}  // namespace trident
