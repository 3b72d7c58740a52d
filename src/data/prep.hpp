// data/prep.hpp: turning text files or llm.c token shards into a Trident token file.
//
// Layer: data. Local (serial).
// Text: tokenised with "char" (vocabulary = sorted distinct characters of all inputs), "byte", or
// "bpe" (a SentencePiece BPE model of --vocab-size tokens trained on all inputs, stored in the file);
// the concatenated token stream is split into the first floor(0.9 n) tokens for training and the
// rest for validation, as nanoGPT's data/shakespeare_char/prepare.py.
// llm.c shards (int32[256] header with magic 20240520 and version 1, then uint16 GPT-2 tokens):
// files whose name contains "_val_" form the validation split, the others training; with no such
// file, the concatenation is split 90/10 as for text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trident {

struct PrepOptions {
  std::string tokenizer = "char";  ///< char | byte | bpe (text inputs); llm.c shards are always gpt2
  std::optional<std::int64_t> vocab_size;  ///< tokens of the model to train: required for bpe, refused otherwise
  std::vector<std::string> inputs;
  std::string output;
  double val_fraction = 0.1;
};

struct PrepResult {
  std::string tokenizer;
  std::int64_t vocab_size = 0, n_train = 0, n_val = 0;
};

/// Reads the inputs and writes the token file. Throws Error/IoError naming the offending file:
/// missing input, truncated or corrupt llm.c shard, text and shards mixed, invalid UTF-8 (char,
/// bpe); ConfigError for a --vocab-size that is missing (bpe), given for another kind, out of range,
/// or more than the text supports (SentencePiece's message).
PrepResult prep_token_file(const PrepOptions& opt);

/// True when `path` starts with the llm.c shard magic number. Throws IoError if it cannot be read.
bool is_llmc_shard(const std::string& path);

}  // namespace trident
