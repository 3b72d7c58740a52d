#include "core/tokenizer_kind.hpp"

namespace trident {

const std::vector<TokenizerKindInfo>& tokenizer_kinds() {
  static const std::vector<TokenizerKindInfo> kinds = {
      // kind                    name    stores_vocab stores_model from_text codes_text fixed_vocab
      {TokenizerKind::character, "char", true, false, true, true, 0},
      {TokenizerKind::byte, "byte", true, false, true, true, 256},
      // GPT-2's tiktoken vocabulary and Meta-Llama-3.1-8B's, which llm.c's shards use.
      {TokenizerKind::gpt2, "gpt2", false, false, false, false, 50257},
      {TokenizerKind::bpe, "bpe", false, true, true, true, 0},
      {TokenizerKind::llama3, "llama3", false, false, false, false, 128256},
  };
  return kinds;
}

const TokenizerKindInfo& tokenizer_info(TokenizerKind kind) { return tokenizer_kinds()[static_cast<size_t>(kind)]; }

const char* name_of(TokenizerKind kind) { return tokenizer_info(kind).name; }

std::optional<TokenizerKind> parse_tokenizer_kind(const std::string& name) {
  for (const TokenizerKindInfo& k : tokenizer_kinds())
    if (name == k.name) return k.kind;
  return std::nullopt;
}

std::string tokenizer_kind_names(bool TokenizerKindInfo::*column) {
  std::vector<const char*> names;
  for (const TokenizerKindInfo& k : tokenizer_kinds())
    if (column == nullptr || k.*column) names.push_back(k.name);
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + std::string(names[i]);
  return s;
}

}  // namespace trident
