// data/token_dataset.hpp: the train and validation token streams of a token file, held in memory
// when small and read window by window when large.
//
// Layer: data. Local (each rank opens its own reader).
// Invariants: every token id handed out is in [0, vocab_size): a cached split is checked once at
// load, an uncached window at each read; a bad id raises IoError naming file, split and position.
#pragma once

#include "io/token_file.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trident {

class TokenDataset {
 public:
  /// Opens `path`; splits of at most cache_max_mb MiB are read into memory. Throws IoError, also
  /// for a tokenizer that does not load (data/tokenizer.hpp: a bad vocabulary, a damaged model).
  TokenDataset(const std::string& path, double cache_max_mb);

  const TokenFileInfo& info() const { return reader_->info(); }
  const std::string& path() const { return reader_->path(); }
  std::int64_t size(const std::string& split) const { return reader_->size(split); }
  bool cached(const std::string& split) const;

  /// Copies tokens [offset, offset + count) of `split` ("train" or "val") to `out`.
  void read(const std::string& split, std::int64_t offset, std::int64_t count, std::int32_t* out) const;

  /// Fills tokens and targets (offsets.size() * T each) with the windows that start at `offsets`:
  /// tokens = w[0, T), targets = w[1, T + 1) (next-token prediction).
  void load_batch(const std::string& split, const std::vector<std::int64_t>& offsets, int T, std::int32_t* tokens,
                  std::int32_t* targets) const;

 private:
  void check_ids(const std::string& split, std::int64_t offset, const std::int32_t* ids, std::int64_t n) const;
  std::unique_ptr<TokenFileReader> reader_;
  std::vector<std::int32_t> train_, val_;
  bool train_cached_ = false, val_cached_ = false;
};

}  // namespace trident
