// io/input_file.hpp: the check a reader of a random-access input (a checkpoint, a token file, a
// safetensors file, a `latest` pointer, a Hugging Face config) makes before it opens the path.
//
// Layer: io. Why: opening a FIFO for reading blocks until some process writes to it, and HDF5's
// signature probe and std::ifstream both open the path, so a FIFO (or a character device that
// never ends) planted at such a name hung the command instead of failing. Local.
#pragma once

#include <cstdint>
#include <string>

namespace trident {

/// Throws IoError "<what> '<path>' is a FIFO, device or socket, not a file" when `path` exists
/// (following links) and is neither a regular file nor a directory; returns without a word
/// otherwise (a missing path or a directory is the caller's to name, in its own words). Never
/// opens the path. Local.
void reject_special_file(const std::string& path, const std::string& what);

/// The whole of small text file `path` (a config.json, a safetensors index): IoError naming
/// `what` and the path when it is not a regular file, cannot be read (errno's reason), or holds
/// more than `max_bytes` bytes (nothing of it is read then). Local.
std::string read_small_text_file(const std::string& path, const std::string& what, std::uintmax_t max_bytes);

}  // namespace trident
