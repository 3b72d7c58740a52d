// data/tokenizer.hpp: the character, byte and (decode-less) GPT-2 tokenizers.
//
// Layer: data. Local.
// "char" is nanoGPT's shakespeare_char tokenizer: the sorted distinct characters (Unicode code
// points of the UTF-8 input) of the training text, id = position in that list. "byte" maps each
// byte to its value (vocab 256, any input). "gpt2" marks llm.c token shards: ids come tokenised,
// vocab 50257, and Trident cannot turn them back into text (sampling prints ids).
#pragma once

#include "core/tokenizer_kind.hpp"
#include "io/token_file.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

class Tokenizer {
 public:
  /// The tokenizer stored in a token file or checkpoint (kind name + vocab). Throws Error for an
  /// unknown kind or an invalid vocabulary (entries out of range; char: not sorted and distinct).
  Tokenizer(const std::string& kind, std::vector<std::int32_t> vocab, std::int64_t vocab_size);
  Tokenizer(TokenizerKind kind, std::vector<std::int32_t> vocab, std::int64_t vocab_size);
  /// Character tokenizer over the distinct code points of `text`. Throws Error on invalid UTF-8.
  static Tokenizer build_char(const std::string& text);
  static Tokenizer byte_level();

  /// The kind's name ("char", "byte", "gpt2").
  std::string kind() const { return name_of(kind_); }
  TokenizerKind kind_id() const { return kind_; }
  std::int64_t vocab_size() const { return vocab_size_; }
  const std::vector<std::int32_t>& vocab() const { return vocab_; }
  bool can_decode() const { return tokenizer_info(kind_).codes_text; }

  /// Token ids of `text`. Throws Error naming the first character that is not in the vocabulary.
  std::vector<std::int32_t> encode(const std::string& text) const;
  /// Text of `ids` (UTF-8). For gpt2, the ids as numbers in brackets.
  std::string decode(const std::vector<std::int32_t>& ids) const;

 private:
  TokenizerKind kind_;
  std::vector<std::int32_t> vocab_;
  std::int64_t vocab_size_ = 0;
  std::vector<std::int32_t> lookup_;  // code point -> id (char), -1 if absent
};

/// Decodes UTF-8 into code points. Throws Error("...invalid UTF-8 at byte N...") on malformed input.
std::vector<std::int32_t> utf8_decode(const std::string& s, const std::string& what);
/// Appends the UTF-8 encoding of code point `cp` to `out`.
void utf8_append(std::string& out, std::int32_t cp);

}  // namespace trident
