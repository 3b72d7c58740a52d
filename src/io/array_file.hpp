// io/array_file.hpp: a plain HDF5 file of named float64 arrays, for debug dumps and reference tests
// (e.g. tests/reference/gpt_dump.cpp writes logits and gradients that tools/torch_reference.py reads
// with h5py).
//
// Layer: io. Local (serial HDF5: one process writes or reads the whole file; no MPI-IO).
// Format: one float64 dataset per array at /<name>, of the array's shape (a scalar dataset for an
// empty shape); a '/' in a name makes intermediate groups ("grad/transformer.wte.weight").
// Root attrs format = "trident-arrays", format_version = 1.
// Invariants: a NamedArray's data holds exactly prod(shape) elements (1 for a scalar), row-major;
// names are unique within a file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

struct NamedArray {
  std::string name;                  ///< HDF5 path below the root, e.g. "loss" or "grad/lm_head"
  std::vector<std::int64_t> shape;   ///< row-major; empty for a scalar
  std::vector<double> data;          ///< prod(shape) elements
};

/// Writes `arrays` to a new file at `path` (truncating it). Local. Throws IoError when a shape does
/// not match its data, a name is empty or repeated, or HDF5 fails (the message names path and array).
void write_arrays(const std::string& path, const std::vector<NamedArray>& arrays);

/// Reads every dataset of a file written by write_arrays(), in HDF5 link order (names sorted
/// within each group), converted to float64. Local. Throws IoError when the file is missing, not
/// HDF5, or holds something other than numeric datasets and groups.
std::vector<NamedArray> read_arrays(const std::string& path);

}  // namespace trident
