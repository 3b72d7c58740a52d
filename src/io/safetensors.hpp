// io/safetensors.hpp: reading Hugging Face safetensors files and sharded model directories (the
// input of `trident ckpt import --format hf`; the writer is checkpoint/export.hpp).
//
// Layer: io. Local, read-only, std::ifstream (no MPI-IO: one rank reads a model directory).
// Format (https://github.com/huggingface/safetensors, "Format"): an 8-byte little-endian header
// length N, N bytes of JSON {"__metadata__": {...}, NAME: {"dtype", "shape", "data_offsets":
// [begin, end]}}, then the data; a sharded model has model.safetensors.index.json whose
// "weight_map" names each tensor's file. The JSON is parsed with Boost.PropertyTree.
// Invariants: every tensor's byte range lies inside its file and matches dtype x shape; values
// are converted exactly (F16, BF16, F32 widen without rounding; F64 rounds to the caller's type).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trident {

/// One tensor of a safetensors file.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;                 ///< "F32", "F16", "BF16", "F64"
  std::vector<std::int64_t> shape;
  std::string file;                  ///< the file holding it
  std::uint64_t offset = 0;          ///< absolute byte offset of its data in `file`
  std::uint64_t bytes = 0;
  std::int64_t numel() const;
};

/// The tensors of a Hugging Face model directory: model.safetensors.index.json when present (every
/// shard it names), else every *.safetensors file in `dir`. Throws IoError for a missing directory,
/// no safetensors file, an unreadable or damaged file (header, offsets beyond the file size or
/// overlapping, a size that does not match dtype and shape, an unsupported dtype, a name given
/// twice), a tensor in two files, or an index naming a file outside `dir` or a file or tensor
/// that is not there.
std::map<std::string, SafetensorsTensor> read_safetensors_dir(const std::string& dir);

/// The values of `t`, converted to double (F16, BF16, F32, F64). Throws IoError when the file
/// cannot be read.
std::vector<double> read_safetensors_values(const SafetensorsTensor& t);

/// The top-level keys of a JSON object file (config.json) whose values are scalars: strings
/// unquoted, numbers and true/false/null as written; nested objects and arrays are given as "{...}"
/// and "[...]" (so a caller can refuse what it does not support), and the scalars of a nested
/// object also as "key.inner". Throws IoError when the file is missing or not a JSON object.
std::map<std::string, std::string> read_json_object_scalars(const std::string& path);

/// The top-level array `key` of a JSON object file as integers; empty when absent. Throws IoError
/// when the file is unreadable, `key` is not an array or an element is not an integer.
std::vector<std::int64_t> read_json_int_array(const std::string& path, const std::string& key);

}  // namespace trident
