// io/checkpoint_file.hpp: one sharded checkpoint file in parallel HDF5, written by all ranks at once.
//
// Layer: io. It stores named, sharded arrays and an index; it knows nothing of the model's classes
// (docs/design.md, Layers), so adding a layer never touches this file. The full specification is
// docs/checkpoint-format.md; in short (format_version 1):
//
//   /                      attrs: format = "trident-checkpoint", format_version, dtype, kinds, n_shards,
//                          plus the caller's restart metadata (step, seed, lr, ...)
//   /shards/<kind>/<shard> 1-D array of one rank's shard of kind <kind> ("param", "exp_avg", ...);
//                          <shard> = "pp<i>_dp<j>_tp<k>", the writing rank's grid coordinates
//   /index/tensors         compound table: name, ndim, shape[4], split_dim, split_groups (global tensors)
//   /index/shards          compound table: world_rank, pp, dp, tp, length (one row per shard)
//   /index/segments        compound table: tensor, tp_rank, shard, tensor_offset, shard_offset, count:
//                          elements [tensor_offset, +count) of tensor's tp partition (row-major) sit at
//                          [shard_offset, +count) of every /shards/<kind>/<shard>
//   /index/checksums       (n_shards, n_kinds) uint64: XXH64 (seed 0) of each shard dataset's bytes
//   /rank_state            (n_shards, K) int64 per-rank restart state, attr "columns"
//   /<text>, /<array>      caller's replicated texts (e.g. /config), int32 arrays (e.g. /tokenizer/vocab)
//                          and uint8 byte arrays (e.g. /tokenizer/model, attr xxh64: 16 hex digits of the
//                          XXH64 (seed 0) of its bytes: opaque blobs get a checksum of their own)
//
// Cost at R ranks, K tensors: R x kinds shard datasets (not R x K x kinds), index rows ~ K*tp + R*units,
// every dataset created collectively once (collective metadata writes on). See docs/design.md.
// Invariants: a file is only ever written under a temporary name by write_checkpoint_file(); the
// caller commits it by rename after the function returned on every rank.
#pragma once

#include "core/progress.hpp"
#include "parallel/communicator.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trident {

struct CkptTensor {
  std::string name;
  std::vector<std::int64_t> shape;  ///< global shape, at most 4 dimensions
  int split_dim = -1;               ///< tensor-parallel split dimension (-1: replicated over tp)
  int split_groups = 1;             ///< blocks of split_dim split separately over tp (3 for qkv)
};

struct CkptSegment {
  std::int32_t tensor = 0;         ///< row of /index/tensors
  std::int32_t tp_rank = 0;        ///< which tp partition of the tensor (0 when not split)
  std::int32_t shard = 0;          ///< row of /index/shards
  std::int64_t tensor_offset = 0;  ///< first element within the tp partition
  std::int64_t shard_offset = 0;   ///< first element within the shard datasets
  std::int64_t count = 0;
};

struct CkptShard {
  std::int32_t world_rank = 0, pp = 0, dp = 0, tp = 0;
  std::int64_t length = 0;
  /// Dataset name of this shard below /shards/<kind>/: "pp0_dp1_tp0".
  std::string name() const;
};

/// What one rank contributes to a checkpoint. Fields marked "same on all ranks" must be equal.
struct CheckpointWrite {
  std::vector<CkptTensor> tensors;                       ///< same on all ranks
  std::vector<std::string> kinds;                        ///< same on all ranks
  DataType dtype = DataType::f32;                        ///< same on all ranks (f32 or f64)
  std::map<std::string, std::int64_t> int_attrs;         ///< same on all ranks
  std::map<std::string, double> double_attrs;            ///< same on all ranks
  std::map<std::string, std::string> string_attrs;       ///< same on all ranks
  std::map<std::string, std::string> texts;              ///< same on all ranks (written by rank 0)
  std::map<std::string, std::vector<std::int32_t>> int_arrays;  ///< same on all ranks (written by rank 0)
  std::map<std::string, std::vector<std::uint8_t>> byte_arrays;  ///< same on all ranks (written by rank 0)
  std::map<std::string, std::vector<double>> double_arrays;     ///< same on all ranks (written by rank 0), f64 with xxh64
  std::vector<std::string> rank_state_columns;           ///< same on all ranks
  CkptShard shard;                                       ///< this rank: coordinates and length
  std::vector<CkptSegment> segments;                     ///< this rank (their `shard` field is ignored)
  std::vector<const void*> arrays;                       ///< this rank: one per kind, shard.length elements
  /// This rank, instead of `arrays` (then empty): hands out its shard block by block, so a save
  /// can write from live buffers or through one bounded staging buffer instead of a full copy.
  /// read_block(kind, first, max_count, &data) points `data` at elements [first, first + n) of
  /// kind `kind`'s shard, valid until the next call, and returns n in [1, max_count]. The writer
  /// asks for each kind's elements in order, twice (finite check, then write), on the calling
  /// thread; an exception fails the save on every rank like a write error. The file
  /// holds the same data and checksums as with `arrays`.
  std::function<std::int64_t(std::size_t kind, std::int64_t first, std::int64_t max_count, const void** data)>
      read_block;
  std::vector<std::int64_t> rank_state;                  ///< this rank: one value per column
  bool file_locking = true;                              ///< same on all ranks: HDF5 file locking while writing
  /// World rank 0 shows the progress of writing its own shard under this label
  /// (core/progress.hpp; the other ranks write theirs meanwhile); empty: none. Set it only for
  /// saves on the main thread, never for the asynchronous writer's (its lines would interleave
  /// with the step log).
  std::string progress_label;
  ProgressEnd progress_end = ProgressEnd::summary;
};

/// Writes `w` from every rank of `comm` into a new file at `path` (truncating it). Collective over
/// comm. All dataset and attribute creation is done by every rank in the same order
/// (docs/design.md, "Toolchain facts"); data is written independently. Success is agreed by all-reduce, so either every
/// rank returns or every rank throws CheckpointError (collective) naming the failure of the first
/// failing rank's view (e.g. "No space left on device").
void write_checkpoint_file(const std::string& path, Communicator& comm, const CheckpointWrite& w);

/// Read access to a checkpoint file. Each rank reads independently what it needs.
class CheckpointReader {
 public:
  /// Opens `path` read-only through MPI-IO on `comm` and reads the index. Collective over comm.
  /// Throws IoError/CheckpointError (agreed: collective) when the file is missing, truncated, not
  /// a Trident checkpoint or of an unknown format version.
  CheckpointReader(const std::string& path, Communicator& comm);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& path() const { return path_; }
  /// True when the root attribute `name` exists, false when it is missing. Local; never throws.
  bool has_attr(const std::string& name) const;
  /// Root attribute `name`. Local. Throws CheckpointError (naming the file) when it is missing or unreadable.
  std::int64_t attr_int(const std::string& name) const;
  /// Root attribute `name`. Local. Throws CheckpointError (naming the file) when it is missing or unreadable.
  double attr_double(const std::string& name) const;
  /// Root attribute `name`. Local. Throws CheckpointError (naming the file) when it is missing, unreadable or not a string.
  std::string attr_string(const std::string& name) const;
  /// The string dataset `/name`. Local. Throws IoError ("dataset '/name' is missing") when it is missing.
  std::string text(const std::string& name) const;
  /// The int32 dataset `/name`. Local. Throws CheckpointError when it is missing, IoError when unreadable.
  std::vector<std::int32_t> int_array(const std::string& name) const;
  /// The byte array `name`. Local. Throws CheckpointError when it is missing or its bytes do not
  /// match its xxh64 attribute, IoError when it cannot be read.
  std::vector<std::uint8_t> byte_array(const std::string& name) const;
  /// An f64 array written from CheckpointWrite::double_arrays, checked against its xxh64
  /// attribute (of the little-endian bytes). Throws CheckpointError when absent or damaged.
  std::vector<double> double_array(const std::string& name) const;
  /// True when the file has a dataset (or group) at "/" + name.
  bool has(const std::string& name) const;

  DataType dtype() const { return dtype_; }
  const std::vector<std::string>& kinds() const { return kinds_; }
  const std::vector<CkptTensor>& tensors() const { return tensors_; }
  const std::vector<CkptShard>& shards() const { return shards_; }
  const std::vector<CkptSegment>& segments() const { return segments_; }
  /// Row of tensor `name` in tensors(), or -1.
  int find_tensor(const std::string& name) const;
  const std::vector<std::string>& rank_state_columns() const { return rank_state_columns_; }
  /// The rank-state row of shard `shard_row`. Local.
  std::vector<std::int64_t> rank_state(int shard_row) const;

  /// Reads elements [offset, offset + count) of the tp partition tp_rank of tensor `tensor`, array
  /// `kind`, into `out` converted to `out_type` (f32/f64). Local. Throws CheckpointError if the
  /// index does not cover the whole range, IoError if a read fails.
  void read(const std::string& kind, int tensor, int tp_rank, std::int64_t offset, std::int64_t count,
            DataType out_type, void* out) const;

  /// Recomputes the XXH64 checksum of every shard dataset (the work spread over comm's ranks) and
  /// compares with /index/checksums. Collective over comm. Returns the problems found, the same
  /// list on every rank (empty when the file is intact). World rank 0 shows the progress of its
  /// share in bytes ("checkpoint verify", core/progress.hpp).
  std::vector<std::string> verify(Communicator& comm) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
  DataType dtype_ = DataType::f32;
  std::vector<std::string> kinds_;
  std::vector<CkptTensor> tensors_;
  std::vector<CkptShard> shards_;
  std::vector<CkptSegment> segments_;
  std::vector<std::string> rank_state_columns_;
  std::map<std::pair<int, int>, std::vector<int>> by_partition_;  // (tensor, tp_rank) -> segment rows by offset
};

/// Whether checkpoint files are written with HDF5 file locking: `file_locking` ([checkpoint]
/// file_locking) unless the environment sets HDF5_USE_FILE_LOCKING=FALSE (or 0), which HDF5
/// itself obeys and Trident takes as the same choice. Local.
bool checkpoint_file_locking(bool file_locking);

/// The MPI-IO hints (MPI_Info key, value) that checkpoint files are opened with: none when
/// checkpoint_file_locking(file_locking), else romio_ds_write = disable and romio_ds_read =
/// disable. ROMIO's data sieving (a read-modify-write of a whole file range for a noncontiguous
/// access, such as HDF5's metadata flush) is the one path of its generic (UFS) driver that takes
/// fcntl locks, and it calls MPI_Abort when one is refused; without it, a checkpoint is written
/// with plain positioned writes. Every rank writes disjoint byte ranges, so nothing needs the lock.
/// Local.
std::vector<std::pair<std::string, std::string>> checkpoint_romio_hints(bool file_locking);

/// What the kernel grants on files of one directory (probe_lock_support).
struct LockSupport {
  int flock_errno = 0;  ///< errno of an exclusive flock(), 0 when granted (the run lock, HDF5's file locking)
  int fcntl_errno = 0;  ///< errno of an fcntl byte-range write lock (F_SETLKW), 0 when granted (MPI-IO/ROMIO)
  bool nfs = false;     ///< the directory is on NFS, where ROMIO's NFS driver locks every access
};

/// statfs f_type of NFS (linux/magic.h), the file systems ROMIO gives its locking NFS driver.
constexpr long kNfsSuperMagic = 0x6969;

/// Tries both kinds of lock on a scratch file in `dir` (created and removed). Local. Throws
/// IoError when no file can be created there.
LockSupport probe_lock_support(const std::string& dir);

/// The start-up probe of a checkpoint directory: does at once what the first save would do hours
/// later, so that a directory or file system that cannot take checkpoints fails the run before
/// it trains. (1) World rank 0 tries an fcntl byte-range lock (probe_lock_support): where the
/// file system refuses it, ROMIO would MPI_Abort the job inside a save, so this throws
/// ConfigError (exit status 2) with advice: [checkpoint] file_locking = false when the hints of
/// checkpoint_romio_hints() avoid every lock, or another mount or file system on NFS, whose ROMIO
/// driver locks every access. (2) Every rank writes a small checkpoint `dir`/.trident_probe.h5
/// through the save path itself (same file access list, MPI-IO hints, hyperslab writes and
/// collective metadata flush), reads it back, verifies its checksums, and rank 0 removes it.
/// Collective over comm (the checkpoint writers' communicator). Throws IoError (collective)
/// "cannot write checkpoints in '<dir>': <reason>" when that fails. Cost: one small collective
/// file create (R datasets, as a save creates 3R) and one read of 4 KiB per rank.
void probe_checkpoint_dir(const std::string& dir, Communicator& comm, bool file_locking);

/// The double root attribute `name` of checkpoint file `path`, read by this process alone (a
/// serial, read-only open without file locking: no communicator needed), or nothing when the file
/// cannot be opened or has no such attribute. Local. For directory housekeeping (rotation) on
/// one rank; readers of checkpoint contents use CheckpointReader.
std::optional<double> peek_checkpoint_attr_double(const std::string& path, const std::string& name);

/// Checkpoint format version this build writes and reads.
constexpr std::int64_t kCheckpointFormatVersion = 1;

}  // namespace trident
