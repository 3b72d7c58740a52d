#include "data/tokenizer.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

namespace trident {

std::vector<std::int32_t> utf8_decode(const std::string& s, const std::string& what) {
  std::vector<std::int32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned c = p[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > n)
      throw Error(what + ": invalid UTF-8 at byte " + std::to_string(i) + "; use --tokenizer byte for binary or non-UTF-8 text");
    std::int32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80)
        throw Error(what + ": invalid UTF-8 at byte " + std::to_string(i + k) +
                    "; use --tokenizer byte for binary or non-UTF-8 text");
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    out.push_back(cp);
    i += static_cast<std::size_t>(len);
  }
  return out;
}

void utf8_append(std::string& out, std::int32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {
TokenizerKind kind_named(const std::string& name) {
  const auto kind = parse_tokenizer_kind(name);
  if (!kind) throw Error("unknown tokenizer '" + name + "' (expected " + tokenizer_kind_names() + ")");
  return *kind;
}
}  // namespace

Tokenizer::Tokenizer(const std::string& kind, std::vector<std::int32_t> vocab, std::int64_t vocab_size)
    : Tokenizer(kind_named(kind), std::move(vocab), vocab_size) {}

Tokenizer::Tokenizer(TokenizerKind kind, std::vector<std::int32_t> vocab, std::int64_t vocab_size)
    : kind_(kind), vocab_(std::move(vocab)), vocab_size_(vocab_size) {
  const bool bytes = kind_ == TokenizerKind::byte;
  // A vocabulary read from a file is checked before it is used as an index.
  for (size_t i = 0; i < vocab_.size(); ++i) {
    const std::int32_t cp = vocab_[i];
    const bool valid = bytes ? (cp >= 0 && cp < 256) : (cp >= 0 && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF));
    if (!valid)
      throw Error("the " + std::string(name_of(kind_)) + " tokenizer's vocabulary entry " + std::to_string(i) + " = " + std::to_string(cp) +
                  (bytes ? " is not a byte value" : " is not a Unicode code point"));
    if (kind_ == TokenizerKind::character && i > 0 && cp <= vocab_[i - 1])
      throw Error("the char tokenizer's vocabulary is not sorted and distinct at entry " + std::to_string(i));
  }
  if (kind_ == TokenizerKind::character) {
    std::int32_t maxcp = 0;
    for (auto cp : vocab_) maxcp = std::max(maxcp, cp);
    lookup_.assign(static_cast<size_t>(maxcp) + 1, -1);
    for (size_t i = 0; i < vocab_.size(); ++i) lookup_[static_cast<size_t>(vocab_[i])] = static_cast<std::int32_t>(i);
  }
}

Tokenizer Tokenizer::build_char(const std::string& text) {
  const auto cps = utf8_decode(text, "input text");
  std::set<std::int32_t> distinct(cps.begin(), cps.end());
  std::vector<std::int32_t> vocab(distinct.begin(), distinct.end());
  const auto n = static_cast<std::int64_t>(vocab.size());
  return Tokenizer(TokenizerKind::character, std::move(vocab), n);
}

Tokenizer Tokenizer::byte_level() {
  std::vector<std::int32_t> vocab(256);
  for (int i = 0; i < 256; ++i) vocab[i] = i;
  return Tokenizer(TokenizerKind::byte, std::move(vocab), 256);
}

std::vector<std::int32_t> Tokenizer::encode(const std::string& text) const {
  std::vector<std::int32_t> ids;
  if (kind_ == TokenizerKind::byte) {
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  if (!tokenizer_info(kind_).codes_text)
    throw Error("the " + std::string(name_of(kind_)) + " tokenizer cannot encode text in Trident; give prompt token ids instead");
  for (std::int32_t cp : utf8_decode(text, "text to encode")) {
    const std::int32_t id = cp >= 0 && static_cast<size_t>(cp) < lookup_.size() ? lookup_[static_cast<size_t>(cp)] : -1;
    if (id < 0) {
      std::string ch;
      utf8_append(ch, cp);
      char code[16];
      std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(cp));
      throw Error("character '" + (cp < 0x20 || cp == 0x7F ? std::string("?") : ch) + "' (" + code +
                  ") is not in the vocabulary of this model");
    }
    ids.push_back(id);
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  for (auto id : ids) {
    if (!can_decode() || id < 0 || id >= static_cast<std::int32_t>(vocab_.size())) {
      out += "[" + std::to_string(id) + "]";
    } else if (kind_ == TokenizerKind::byte) {
      out += static_cast<char>(vocab_[static_cast<size_t>(id)]);
    } else {
      utf8_append(out, vocab_[static_cast<size_t>(id)]);
    }
  }
  return out;
}

}  // namespace trident
