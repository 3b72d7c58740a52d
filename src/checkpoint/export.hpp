// checkpoint/export.hpp: a checkpoint's parameters as a Hugging Face model directory (`trident
// ckpt export --format safetensors`): model-0000k-of-0000n.safetensors shards, the
// model.safetensors.index.json that maps each tensor to its shard, and a config.json.
//
// Layer: checkpoint (reads through io's CheckpointReader and checkpoint/tensor_read.hpp; what the
// model family calls its tensors, which weights Hugging Face stores transposed and its
// config.json come from the ModelSchema the caller passes -- for GPT-2, model/gpt2/hf_gpt2.hpp). Writes
// plain files on world rank 0 only, each through an AtomicFile (io/output_file.hpp: a temporary
// file renamed into place once all are written).
//
// Safetensors format (https://github.com/huggingface/safetensors, "Format"): an 8-byte
// little-endian unsigned header length N, N bytes of UTF-8 JSON
// {"__metadata__": {"format": "pt", ...}, NAME: {"dtype": "F32"|"BF16", "shape": [...],
// "data_offsets": [begin, end]}, ...} padded with spaces so the data starts at a multiple of 8
// bytes, then the tensors' raw little-endian bytes, row-major, back to back with no gaps
// (offsets relative to the start of the data).
//
// Invariants: any layout (each tensor is joined from its tp partitions); every byte of every
// tensor written exactly once; float32 export is bitwise the checkpoint's float32 parameters.
#pragma once

#include "checkpoint/model_schema.hpp"
#include "parallel/communicator.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

struct SafetensorsExportOptions {
  /// Created if missing, or an empty directory. A directory with anything in it is refused unless
  /// `force`; then files of the same names are replaced, and once they are, the shards of an
  /// earlier export with another file count (model-NNNNN-of-MMMMM.safetensors) are removed. A
  /// directory of a run or of checkpoints is refused even with `force`.
  std::string output_dir;
  bool force = false;             ///< write into a non-empty directory (an earlier export's)
  double shard_size_mb = 5000.0;  ///< MiB of tensor data per file at most (a larger tensor gets a file of its own)
  std::string dtype = "float32";  ///< float32 | bfloat16 (round to nearest even)
};

struct SafetensorsExportResult {
  std::string checkpoint;           ///< the file exported
  std::int64_t step = 0;
  std::vector<std::string> files;   ///< every file written, model shards first
  std::int64_t n_tensors = 0;
  std::int64_t total_size = 0;      ///< bytes of tensor data (the index's metadata.total_size)
};

/// Bits of the bfloat16 nearest to `x` (ties to even; NaN stays a quiet NaN). Local.
std::uint16_t to_bfloat16(float x);

/// Writes the parameters of checkpoint `path` (a file, or a run/checkpoint directory meaning its
/// latest checkpoint) to opt.output_dir as described above, named and laid out as `schema` says.
/// Collective over comm (the file is opened through MPI-IO); world rank 0 reads and writes
/// everything, showing its progress by bytes of tensor data written (core/progress.hpp; the
/// checksum verification before it shows its own). Same result on every rank.
/// A checkpoint written at any tp size exports whole tensors (its tp partitions joined).
/// Throws ConfigError (collective) for bad options, CheckpointError (collective) when the
/// checkpoint cannot be read or does not match its model fingerprint, IoError (collective) when a
/// file cannot be written.
SafetensorsExportResult export_safetensors(const std::string& path, Communicator& comm,
                                           const SafetensorsExportOptions& opt, const ModelSchema& schema);

}  // namespace trident
