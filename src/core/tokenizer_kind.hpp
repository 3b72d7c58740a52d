// core/tokenizer_kind.hpp: the one registry of tokenizer kinds -- their names as token files and
// checkpoints store them, and what each kind can do.
//
// Layer: core (the io layer validates token files and the checkpoint layer validates checkpoints
// against it, below the data layer's Tokenizer that implements the kinds). Local, pure.
// Invariants: every place that accepts, validates or branches on a tokenizer kind goes through
// this table; adding a kind is one row here plus its encoder in data/tokenizer.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trident {

enum class TokenizerKind {
  character,  ///< "char": nanoGPT's shakespeare_char, the sorted distinct code points of the text
  byte,       ///< "byte": each byte its own id (vocab 256, any input)
  gpt2,       ///< "gpt2": llm.c GPT-2 token shards, already tokenised (Trident cannot encode or decode text)
  bpe,        ///< "bpe": a byte-pair-encoding model SentencePiece trains on the text (prep --vocab-size N)
  llama3,     ///< "llama3": llm.c llama-3 token shards (vocab 128256), already tokenised like gpt2
};

struct TokenizerKindInfo {
  TokenizerKind kind;
  const char* name;       ///< as stored in token files and checkpoints, and given to `prep --tokenizer`
  bool stores_vocab;      ///< the vocabulary (code points or bytes) is stored with the data and checkpoints
  bool stores_model;      ///< `prep` trains a model of --vocab-size tokens on the text; its serialized form
                          ///< is stored with the data and checkpoints (and --vocab-size applies to no other kind)
  bool from_text;         ///< `trident prep` builds it from text (else it comes with pre-tokenised shards)
  bool codes_text;        ///< it can turn text into ids and back (sampling prints text, not ids)
  std::int64_t fixed_vocab;  ///< ids of a kind whose vocabulary is fixed (byte 256, gpt2 50257, llama3 128256); 0: the text decides
};

/// Every kind, in the order of the enum. Local.
const std::vector<TokenizerKindInfo>& tokenizer_kinds();
/// The row of `kind`. Local.
const TokenizerKindInfo& tokenizer_info(TokenizerKind kind);
/// The name of `kind` ("char", "byte", "gpt2", "bpe", "llama3"). Local.
const char* name_of(TokenizerKind kind);
/// The kind called `name`, or nothing. Local.
std::optional<TokenizerKind> parse_tokenizer_kind(const std::string& name);
/// "char, byte, gpt2, bpe or llama3": every kind, or only those whose `column` is true (e.g. "char, byte
/// or bpe" for &TokenizerKindInfo::from_text). Local.
std::string tokenizer_kind_names(bool TokenizerKindInfo::*column = nullptr);

}  // namespace trident
