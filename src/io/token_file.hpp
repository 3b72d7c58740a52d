// io/token_file.hpp: the HDF5 token file that `trident prep` writes and training reads.
//
// Layer: io. Local (serial HDF5 access; every rank opens the file read-only on its own).
// Format (version 1), readable with h5py or h5dump:
//   /            attrs  format = "trident-tokens", format_version = 1,
//                       tokenizer = "char" | "byte" | "gpt2" | "bpe", vocab_size (int64), source (text: input files)
//   /train       1-D uint16 (vocab_size <= 65536) or int32 token ids, the first 90% of the text
//   /val         same type, the last 10%
//   /vocab       1-D int32: the Unicode code point of each token id (char), 0..255 (byte); absent otherwise
//   /tokenizer_model  1-D uint8: the serialized SentencePiece model (bpe); absent otherwise
// Invariants: every token id in /train and /val is in [0, vocab_size); a file of a kind that stores a
// model (core/tokenizer_kind.hpp) has a non-empty /tokenizer_model (whether it loads is the data
// layer's check: data/tokenizer.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <functional>
#include <string>
#include <vector>

namespace trident {

struct TokenFileInfo {
  std::string tokenizer;       ///< a kind name of core/tokenizer_kind.hpp: "char", "byte", "gpt2" or "bpe"
  std::int64_t vocab_size = 0;
  std::vector<std::int32_t> vocab;  ///< code point (char) or byte value of each id; empty for gpt2 and bpe
  std::vector<std::uint8_t> model;  ///< the serialized tokenizer model (bpe: a SentencePiece ModelProto); else empty
  std::string source;          ///< provenance: input file names
  std::int64_t n_train = 0, n_val = 0;
  /// XXH64 (seed 0) of the train tokens then the val tokens as int32, 16 hex digits (attribute
  /// content_xxh64, written by prep); "" in files written before it. Checkpoints record it, so a
  /// resume notices another file's tokens under the same path. Ignored by write_token_file, which
  /// computes it.
  std::string content_hash;
};

/// Writes a token file at `path`: into a new temporary file beside it (io/output_file.hpp
/// AtomicFile), flushed to disk, then moved to `path`, replacing a file there when `replace`, else
/// only where nothing is (ConfigError "already exists" if a file appeared meanwhile). An
/// interrupted or failed write leaves `path` as it was; a process reading the old file keeps its
/// tokens. `progress`, when given, is called with the tokens written so far (of train.size() +
/// val.size()) after each piece of at most 16M tokens. Local. Throws IoError on any failure,
/// naming the path.
void write_token_file(const std::string& path, const TokenFileInfo& info, const std::vector<std::int32_t>& train,
                      const std::vector<std::int32_t>& val,
                      const std::function<void(std::int64_t)>& progress = {}, bool replace = true);

/// Read access to a token file. Local; open one per rank.
class TokenFileReader {
 public:
  /// Opens and validates the header. Throws IoError when the file is missing, not HDF5, not a
  /// Trident token file, of an unknown format version, or of a kind that stores a model without one.
  explicit TokenFileReader(const std::string& path);
  ~TokenFileReader();
  TokenFileReader(const TokenFileReader&) = delete;
  TokenFileReader& operator=(const TokenFileReader&) = delete;

  const TokenFileInfo& info() const { return info_; }
  const std::string& path() const { return path_; }
  /// Number of tokens in split "train" or "val".
  std::int64_t size(const std::string& split) const;
  /// Reads tokens [offset, offset + count) of `split` into `out` as int32. Throws IoError when the
  /// range lies outside the split or the read fails (e.g. a truncated file).
  void read(const std::string& split, std::int64_t offset, std::int64_t count, std::int32_t* out) const;

  /// What a whole read of the file finds (verify()).
  struct Contents {
    std::string hash;            ///< XXH64 of train then val tokens as int32: TokenFileInfo::content_hash's definition
    std::int64_t tokens = 0;     ///< tokens read (train + val)
    std::int32_t max_id = -1;    ///< the largest token id (-1: no tokens)
    std::int32_t min_id = 0;     ///< the smallest (0: no tokens)
  };
  /// Reads every token, in pieces of 16M, and hashes them as prep did when it wrote the file, so
  /// that a file changed since (a flipped bit on a file system, a copy cut short and padded, an
  /// in-place edit) shows as a hash other than info().content_hash. `progress`, when given, is
  /// called with the tokens read so far (of size("train") + size("val")). Local; reads the whole
  /// file. Throws IoError when a read fails.
  Contents verify(const std::function<void(std::int64_t)>& progress = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
  TokenFileInfo info_;
};

}  // namespace trident
