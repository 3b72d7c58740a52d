#include "data/token_dataset.hpp"

#include "core/error.hpp"
#include "data/tokenizer.hpp"

#include <cstring>

namespace trident {

TokenDataset::TokenDataset(const std::string& path, double cache_max_mb)
    : reader_(std::make_unique<TokenFileReader>(path)) {
  // The tokenizer travels from here into every checkpoint: a damaged vocabulary or model is
  // refused now, not when someone samples from the trained model.
  const TokenFileInfo& i = info();
  try {
    Tokenizer check(i.tokenizer, i.vocab, i.vocab_size, i.model);
  } catch (const Error& e) {
    throw IoError("token file '" + path + "': " + e.what() + "; write it again with `trident prep`");
  }
  const double limit = cache_max_mb * 1024.0 * 1024.0;
  for (const char* split : {"train", "val"}) {
    const std::int64_t n = reader_->size(split);
    if (static_cast<double>(n) * sizeof(std::int32_t) > limit) continue;
    auto& buf = std::string(split) == "train" ? train_ : val_;
    buf.resize(static_cast<size_t>(n));
    reader_->read(split, 0, n, buf.data());
    check_ids(split, 0, buf.data(), n);
    (std::string(split) == "train" ? train_cached_ : val_cached_) = true;
  }
}

bool TokenDataset::cached(const std::string& split) const { return split == "train" ? train_cached_ : val_cached_; }

void TokenDataset::check_ids(const std::string& split, std::int64_t offset, const std::int32_t* ids,
                             std::int64_t n) const {
  const std::int64_t V = info().vocab_size;
  for (std::int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= V)
      throw IoError("token file '" + path() + "': /" + split + "[" + std::to_string(offset + i) + "] = " +
                    std::to_string(ids[i]) + " is outside the vocabulary (vocab_size " + std::to_string(V) + ")");
}

void TokenDataset::read(const std::string& split, std::int64_t offset, std::int64_t count, std::int32_t* out) const {
  if (cached(split)) {
    const auto& buf = split == "train" ? train_ : val_;
    if (offset < 0 || count < 0 || offset + count > static_cast<std::int64_t>(buf.size()))
      throw IoError("token file '" + path() + "': range outside /" + split);
    std::memcpy(out, buf.data() + offset, static_cast<size_t>(count) * sizeof(std::int32_t));
    return;
  }
  reader_->read(split, offset, count, out);
  check_ids(split, offset, out, count);
}

void TokenDataset::load_batch(const std::string& split, const std::vector<std::int64_t>& offsets, int T,
                              std::int32_t* tokens, std::int32_t* targets) const {
  std::vector<std::int32_t> w(static_cast<size_t>(T) + 1);
  for (size_t b = 0; b < offsets.size(); ++b) {
    read(split, offsets[b], T + 1, w.data());
    std::memcpy(tokens + b * T, w.data(), static_cast<size_t>(T) * sizeof(std::int32_t));
    std::memcpy(targets + b * T, w.data() + 1, static_cast<size_t>(T) * sizeof(std::int32_t));
  }
}

}  // namespace trident
