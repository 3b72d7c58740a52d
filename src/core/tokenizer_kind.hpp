// core/tokenizer_kind.hpp: the one registry of tokenizer kinds -- their names as token files and
// checkpoints store them, and what each kind can do.
//
// Layer: core (the io layer validates token files and the checkpoint layer validates checkpoints
// against it, below the data layer's Tokenizer that implements the kinds). Local, pure.
// Invariants: every place that accepts, validates or branches on a tokenizer kind goes through
// this table; adding a kind is one row here plus its encoder in data/tokenizer.cpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace trident {

enum class TokenizerKind {
  character,  ///< "char": nanoGPT's shakespeare_char, the sorted distinct code points of the text
  byte,       ///< "byte": each byte its own id (vocab 256, any input)
  gpt2,       ///< "gpt2": llm.c token shards, already tokenised (Trident cannot encode or decode text)
};

struct TokenizerKindInfo {
  TokenizerKind kind;
  const char* name;       ///< as stored in token files and checkpoints, and given to `prep --tokenizer`
  bool stores_vocab;      ///< the vocabulary (code points or bytes) is stored with the data and checkpoints
  bool from_text;         ///< `trident prep` builds it from text (else it comes with pre-tokenised shards)
  bool codes_text;        ///< it can turn text into ids and back (sampling prints text, not ids)
};

/// Every kind, in the order of the enum. Local.
const std::vector<TokenizerKindInfo>& tokenizer_kinds();
/// The row of `kind`. Local.
const TokenizerKindInfo& tokenizer_info(TokenizerKind kind);
/// The name of `kind` ("char", "byte", "gpt2"). Local.
const char* name_of(TokenizerKind kind);
/// The kind called `name`, or nothing. Local.
std::optional<TokenizerKind> parse_tokenizer_kind(const std::string& name);
/// "char, byte or gpt2" (only the kinds with from_text = true when `from_text_only`). Local.
std::string tokenizer_kind_names(bool from_text_only = false);

}  // namespace trident
