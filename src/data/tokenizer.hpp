// data/tokenizer.hpp: the character, byte, (decode-less) GPT-2 and llama-3, and trained BPE tokenizers.
//
// Layer: data. Local.
// "char" is nanoGPT's shakespeare_char tokenizer: the sorted distinct characters (Unicode code
// points of the UTF-8 input) of the training text, id = position in that list. "byte" maps each
// byte to its value (vocab 256, any input). "gpt2" and "llama3" mark llm.c token shards: ids come
// tokenised (vocab 50257 and 128256), and Trident cannot turn them back into text (sampling prints
// ids). "bpe" is a
// byte-pair-encoding model (Sennrich et al. 2016) that SentencePiece (Kudo & Richardson 2018)
// trains on the text: identity normalisation, no dummy prefix and no whitespace folding, so that
// decode(encode(text)) == text for any UTF-8 text without U+2581 (which SentencePiece uses for the
// space); byte fallback, so characters the model has no piece for are spelt as their UTF-8 bytes
// (256 byte pieces, ids 1..256, after <unk> = 0). Training sees the text line by line, so no piece
// spans a newline, and encoding goes line by line as well.
// Invariants: a Tokenizer is immutable once built; copies share the (read-only) SentencePiece model.
#pragma once

#include "core/tokenizer_kind.hpp"
#include "io/token_file.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace trident {

class Tokenizer {
 public:
  /// The smallest and largest --vocab-size of a bpe model: <unk> and the 256 byte pieces come
  /// first, and ids must fit an int32 comfortably (GPT-2 has 50257, Llama 2 32000).
  static constexpr std::int64_t kBpeMinVocab = 257;
  static constexpr std::int64_t kBpeMaxVocab = std::int64_t{1} << 20;

  /// The tokenizer stored in a token file or checkpoint: kind name, vocabulary (char, byte),
  /// vocab_size, and the serialized model (bpe). Throws Error for an unknown kind, an invalid
  /// vocabulary (entries out of range; char: not sorted and distinct), or a model that is missing,
  /// does not load, cannot spell a newline or has more pieces than vocab_size.
  Tokenizer(const std::string& kind, std::vector<std::int32_t> vocab, std::int64_t vocab_size,
            std::vector<std::uint8_t> model = {});
  Tokenizer(TokenizerKind kind, std::vector<std::int32_t> vocab, std::int64_t vocab_size,
            std::vector<std::uint8_t> model = {});
  /// Character tokenizer over the distinct code points of `text`. Throws Error on invalid UTF-8.
  static Tokenizer build_char(const std::string& text);
  static Tokenizer byte_level();
  /// Trains a bpe model of exactly `vocab_size` pieces on `text` with SentencePiece (single
  /// thread, fixed seed: the same text gives the same model, byte for byte; quiet unless it
  /// fails). Throws ConfigError when vocab_size is outside [kBpeMinVocab, kBpeMaxVocab] or
  /// SentencePiece cannot train it on this text (its message passed on, e.g. "Vocabulary size too
  /// high (5000). Please set it to a value <= 3210."), Error on invalid UTF-8.
  static Tokenizer train_bpe(const std::string& text, std::int64_t vocab_size);
  /// Throws ConfigError "--vocab-size N is outside kBpeMinVocab .. kBpeMaxVocab" unless
  /// `vocab_size` is a bpe model's possible size (train_bpe's check; prep makes it before it
  /// reads the text). Local, pure.
  static void check_bpe_vocab_size(std::int64_t vocab_size);

  /// The kind's name ("char", "byte", "gpt2", "bpe", "llama3").
  std::string kind() const { return name_of(kind_); }
  TokenizerKind kind_id() const { return kind_; }
  std::int64_t vocab_size() const { return vocab_size_; }
  const std::vector<std::int32_t>& vocab() const { return vocab_; }
  /// The serialized model (bpe: SentencePiece's ModelProto, what `spm_encode --model` reads); empty
  /// for the other kinds.
  const std::vector<std::uint8_t>& model() const { return model_; }
  bool can_decode() const { return tokenizer_info(kind_).codes_text; }
  /// The pieces of the loaded model (bpe: SentencePiece's GetPieceSize(), at most vocab_size; prep
  /// trains exactly vocab_size); 0 for kinds without a model.
  std::int64_t model_pieces() const;

  /// Called with the work done so far in bytes of the text (0 .. size; char counts its UTF-8
  /// check and its lookup as one half each), about every MiB and once at the end.
  using EncodeProgress = std::function<void(std::int64_t bytes_done)>;
  /// Token ids of `text`. Throws Error naming the first character that is not in the vocabulary
  /// (char) or on invalid UTF-8 (char, bpe). `progress` (optional) only observes: the ids are the
  /// same with or without it. Local.
  std::vector<std::int32_t> encode(const std::string& text, const EncodeProgress& progress = {}) const;
  /// Text of `ids` (UTF-8 for char and bpe; raw bytes for byte). Ids without a token (gpt2, or
  /// beyond the tokenizer's vocabulary inside a larger model vocab_size) as numbers in brackets.
  std::string decode(const std::vector<std::int32_t>& ids) const;
  /// True when `ids` end inside a character: bpe byte pieces that begin a multi-byte UTF-8
  /// sequence but do not complete it yet (decode would show U+FFFD for them).
  bool ends_mid_character(const std::vector<std::int32_t>& ids) const;

 private:
  struct Bpe;
  TokenizerKind kind_;
  std::vector<std::int32_t> vocab_;
  std::int64_t vocab_size_ = 0;
  std::vector<std::int32_t> lookup_;  // code point -> id (char), -1 if absent
  std::vector<std::uint8_t> model_;
  std::shared_ptr<const Bpe> bpe_;    // the loaded SentencePiece model (bpe)
};

/// Ids drawn one at a time (sampling) turned into text as soon as it is final: a character that a
/// bpe model spells as several byte pieces is held until its last byte arrives. Local.
class DecodeStream {
 public:
  explicit DecodeStream(const Tokenizer& tok) : tok_(tok) {}
  /// The text that `id` completes ("" while a character is incomplete).
  std::string push(std::int32_t id);
  /// The text of the ids still held (an incomplete character decodes as U+FFFD).
  std::string finish();

 private:
  const Tokenizer& tok_;
  std::vector<std::int32_t> pending_;
};

/// Decodes UTF-8 into code points. Throws Error("...invalid UTF-8 at byte N...") on malformed input.
std::vector<std::int32_t> utf8_decode(const std::string& s, const std::string& what);
/// Throws ConfigError("<what>: invalid UTF-8 at byte N ...") unless `s` is well-formed UTF-8 (the
/// check utf8_decode makes, without building the code points). Local.
void utf8_check(const std::string& s, const std::string& what);
/// Appends the UTF-8 encoding of code point `cp` to `out`.
void utf8_append(std::string& out, std::int32_t cp);

}  // namespace trident
