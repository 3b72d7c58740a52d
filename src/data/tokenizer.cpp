#include "data/tokenizer.hpp"

#include "core/error.hpp"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string_view>
#include <unordered_map>

namespace trident {

namespace {
// Length of the UTF-8 sequence that `lead` starts: 1-4, or 0 for a byte that starts none.
int utf8_length(unsigned lead) {
  return lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
}

// Calls fn(code point) for each character of `s`; throws Error naming the byte of the first
// malformed sequence.
template <class Fn>
void for_each_code_point(const std::string& s, const std::string& what, Fn&& fn) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned c = p[i];
    const int len = utf8_length(c);
    if (len == 0 || i + len > n)
      throw ConfigError(what + ": invalid UTF-8 at byte " + std::to_string(i) +
                        "; use --tokenizer byte for binary or non-UTF-8 text");
    std::int32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80)
        throw ConfigError(what + ": invalid UTF-8 at byte " + std::to_string(i + k) +
                          "; use --tokenizer byte for binary or non-UTF-8 text");
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    // Well-formed UTF-8 (RFC 3629 section 3, Unicode 15 table 3-7): the shortest form only, no
    // UTF-16 surrogates, nothing beyond U+10FFFF. Decoders differ on the others (an overlong '/'
    // is the classic path-traversal trick), so a text holding them is not taken as text.
    static constexpr std::int32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    const char* bad = cp < kMin[len]                   ? "an overlong (non-shortest) encoding"
                      : cp >= 0xD800 && cp <= 0xDFFF ? "a UTF-16 surrogate, not a character"
                      : cp > 0x10FFFF                 ? "beyond U+10FFFF, the last code point"
                                                      : nullptr;
    if (bad != nullptr) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "U+%04X", static_cast<unsigned>(cp));
      throw ConfigError(what + ": invalid UTF-8 at byte " + std::to_string(i) + " (" + hex + " as " +
                        std::to_string(len) + " bytes: " + bad + "); use --tokenizer byte for binary or non-UTF-8 text");
    }
    fn(cp);
    i += static_cast<std::size_t>(len);
  }
}
}  // namespace

void utf8_check(const std::string& s, const std::string& what) {
  for_each_code_point(s, what, [](std::int32_t) {});
}

std::vector<std::int32_t> utf8_decode(const std::string& s, const std::string& what) {
  std::vector<std::int32_t> out;
  out.reserve(s.size());
  for_each_code_point(s, what, [&out](std::int32_t cp) { out.push_back(cp); });
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

// The loaded SentencePiece model of a bpe tokenizer, with what encode and decode look up per token.
struct Tokenizer::Bpe {
  sentencepiece::SentencePieceProcessor sp;
  int pieces = 0;
  std::vector<int> newline;           // the ids of "\n": lines are encoded one by one, joined by these
  std::vector<std::int16_t> byte_of;  // id -> value of a byte piece ("<0x0A>" -> 10), -1 for other pieces
};

namespace {
TokenizerKind kind_named(const std::string& name) {
  const auto kind = parse_tokenizer_kind(name);
  if (!kind) throw Error("unknown tokenizer '" + name + "' (expected " + tokenizer_kind_names() + ")");
  return *kind;
}

// SentencePiece's message without the source location it puts in front ("./src/x.cc(660) [cond] "),
// or the failed condition when that is all it says.
std::string sentencepiece_message(const sentencepiece::util::Status& st) {
  std::string m = st.message();
  const std::size_t cut = m.find("] ");
  if (m.rfind("./src/", 0) == 0 && cut != std::string::npos) {
    const std::size_t open = m.find(" [");
    const std::string rest = m.substr(cut + 2);
    m = rest.find_first_not_of(' ') != std::string::npos || open == std::string::npos
            ? rest
            : "SentencePiece's check " + m.substr(open + 2, cut - open - 2) + " failed";
  }
  return m;
}

// Training sentences: the lines of the text, never a newline inside (so no piece spans one);
// lines longer than kMaxLine bytes are cut there (at a UTF-8 character boundary), as SentencePiece
// would skip them whole.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  static constexpr std::size_t kMaxLine = 1 << 16;
  explicit LineIterator(const std::string& text) : text_(text) { Next(); }
  bool done() const override { return done_; }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }
  void Next() override {
    // Empty lines carry nothing to learn; skip them.
    while (pos_ < text_.size() && text_[pos_] == '\n') ++pos_;
    if (pos_ >= text_.size()) {
      done_ = true;
      return;
    }
    std::size_t end = std::min(text_.find('\n', pos_), text_.size());
    if (end - pos_ > kMaxLine) {
      end = pos_ + kMaxLine;
      while ((static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) --end;  // not inside a character
    }
    line_.assign(text_, pos_, end - pos_);
    pos_ = end;
  }

 private:
  const std::string& text_;
  std::size_t pos_ = 0;
  std::string line_;
  bool done_ = false;
};
}  // namespace

Tokenizer::Tokenizer(const std::string& kind, std::vector<std::int32_t> vocab, std::int64_t vocab_size,
                     std::vector<std::uint8_t> model)
    : Tokenizer(kind_named(kind), std::move(vocab), vocab_size, std::move(model)) {}

Tokenizer::Tokenizer(TokenizerKind kind, std::vector<std::int32_t> vocab, std::int64_t vocab_size,
                     std::vector<std::uint8_t> model)
    : kind_(kind), vocab_(std::move(vocab)), vocab_size_(vocab_size), model_(std::move(model)) {
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
  if (tokenizer_info(kind_).stores_model) {
    const std::string what = "the " + std::string(name_of(kind_)) + " tokenizer's model";
    if (model_.empty()) throw Error(what + " is missing");
    auto bpe = std::make_shared<Bpe>();
    const sentencepiece::util::Status st = bpe->sp.LoadFromSerializedProto(
        std::string_view(reinterpret_cast<const char*>(model_.data()), model_.size()));
    if (!st.ok())
      throw Error(what + " (" + std::to_string(model_.size()) + " bytes) does not load: " + sentencepiece_message(st));
    bpe->pieces = bpe->sp.GetPieceSize();
    if (bpe->pieces > vocab_size_)
      throw Error(what + " has " + std::to_string(bpe->pieces) + " tokens, more than vocab_size = " +
                  std::to_string(vocab_size_));
    bpe->byte_of.assign(static_cast<size_t>(bpe->pieces), -1);
    for (int id = 0; id < bpe->pieces; ++id) {
      if (!bpe->sp.IsByte(id)) continue;
      const std::string piece = bpe->sp.IdToPiece(id);  // "<0x0A>"
      bpe->byte_of[static_cast<size_t>(id)] = static_cast<std::int16_t>(std::stoi(piece.substr(3, 2), nullptr, 16));
    }
    if (!bpe->sp.Encode("\n", &bpe->newline).ok() || bpe->newline.empty() ||
        std::any_of(bpe->newline.begin(), bpe->newline.end(), [&](int id) { return bpe->sp.IsUnknown(id); }))
      throw Error(what + " cannot spell a newline (it was not trained with byte fallback)");
    bpe_ = std::move(bpe);
  }
}

void Tokenizer::check_bpe_vocab_size(std::int64_t vocab_size) {
  if (vocab_size < kBpeMinVocab || vocab_size > kBpeMaxVocab)
    throw ConfigError("--vocab-size " + std::to_string(vocab_size) + " is outside " + std::to_string(kBpeMinVocab) +
                      " .. " + std::to_string(kBpeMaxVocab) +
                      " (a bpe model holds <unk> and 256 byte pieces before the pieces it learns)");
}

Tokenizer Tokenizer::train_bpe(const std::string& text, std::int64_t vocab_size) {
  check_bpe_vocab_size(vocab_size);
  // SentencePiece would turn malformed bytes into U+FFFD, and decode would not give the text back.
  for_each_code_point(text, "input text", [](std::int32_t) {});
  // The trainer's settings (SentencePiece's TrainerSpec and NormalizerSpec fields); see the header
  // for why each one keeps decode(encode(text)) == text.
  const std::unordered_map<std::string, std::string> spec = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "0.9995"},  // SentencePiece's advice; the rarest characters fall back to bytes
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},  // runs of spaces (indentation) can become one token
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"max_sentence_length", std::to_string(LineIterator::kMaxLine)},
      {"input_sentence_size", "10000000"},  // a seeded sample of 10M lines for larger texts
      {"num_threads", "1"},
      {"minloglevel", "2"},  // errors only: they come back in the status
  };
  sentencepiece::SetRandomGeneratorSeed(1337);
  LineIterator lines(text);
  std::string serialized;
  const sentencepiece::util::Status st = sentencepiece::SentencePieceTrainer::Train(spec, &lines, &serialized);
  if (!st.ok()) {
    const std::string why = sentencepiece_message(st);
    const std::string head = "SentencePiece cannot train a bpe model of --vocab-size " + std::to_string(vocab_size) +
                             " on this text: ";
    // The two failures a user can act on, in prep's words (SentencePiece names its own options).
    long long a = 0, b = 0;
    if (std::sscanf(why.c_str(), "Vocabulary size is smaller than required_chars. %lld vs %lld", &a, &b) == 2)
      throw ConfigError(head + "the model needs <unk>, the 256 byte pieces and the text's " + std::to_string(b - 257) +
                        " characters (all but the rarest 0.05%) before any piece it learns, " + std::to_string(b) +
                        " in all; give --vocab-size " + std::to_string(b) + " or more");
    if (why.find("sentences_.empty()") != std::string::npos)
      throw ConfigError(head + "it holds no line with a character to learn from (empty lines, or only newlines); "
                        "give more text, or use --tokenizer char or byte");
    throw ConfigError(head + why);
  }
  return Tokenizer(TokenizerKind::bpe, {}, vocab_size, std::vector<std::uint8_t>(serialized.begin(), serialized.end()));
}

Tokenizer Tokenizer::build_char(const std::string& text) {
  const auto cps = utf8_decode(text, "input text");
  std::set<std::int32_t> distinct(cps.begin(), cps.end());
  std::vector<std::int32_t> vocab(distinct.begin(), distinct.end());
  const auto n = static_cast<std::int64_t>(vocab.size());
  return Tokenizer(TokenizerKind::character, std::move(vocab), n);
}

std::int64_t Tokenizer::model_pieces() const { return bpe_ ? bpe_->pieces : 0; }

Tokenizer Tokenizer::byte_level() {
  std::vector<std::int32_t> vocab(256);
  for (int i = 0; i < 256; ++i) vocab[i] = i;
  return Tokenizer(TokenizerKind::byte, std::move(vocab), 256);
}

std::vector<std::int32_t> Tokenizer::encode(const std::string& text, const EncodeProgress& progress) const {
  // Progress every kProgressBytes of text, and at the end.
  constexpr std::int64_t kProgressBytes = std::int64_t{1} << 20;
  std::int64_t next_report = kProgressBytes;
  const auto report = [&](std::int64_t done) {
    if (progress && done >= next_report) {
      progress(done);
      next_report = done + kProgressBytes;
    }
  };
  const auto n_bytes = static_cast<std::int64_t>(text.size());
  std::vector<std::int32_t> ids;
  if (kind_ == TokenizerKind::byte) {
    ids.reserve(text.size());
    for (std::int64_t first = 0; first < n_bytes; first += kProgressBytes) {
      const std::int64_t last = std::min(n_bytes, first + kProgressBytes);
      for (std::int64_t i = first; i < last; ++i) ids.push_back(static_cast<unsigned char>(text[static_cast<size_t>(i)]));
      report(last);
    }
    if (progress) progress(n_bytes);
    return ids;
  }
  if (!tokenizer_info(kind_).codes_text)
    throw Error("the " + std::string(name_of(kind_)) + " tokenizer cannot encode text in Trident; give prompt token ids instead");
  if (bpe_) {
    for_each_code_point(text, "text to encode", [](std::int32_t) {});
    std::vector<int> line_ids;
    for (std::size_t pos = 0;;) {
      const std::size_t end = std::min(text.find('\n', pos), text.size());
      const std::string_view line = std::string_view(text).substr(pos, end - pos);
      const sentencepiece::util::Status st = bpe_->sp.Encode(line, &line_ids);
      if (!st.ok()) throw Error("the bpe tokenizer cannot encode the text: " + sentencepiece_message(st));
      ids.insert(ids.end(), line_ids.begin(), line_ids.end());
      report(static_cast<std::int64_t>(end));
      if (end == text.size()) break;
      ids.insert(ids.end(), bpe_->newline.begin(), bpe_->newline.end());
      pos = end + 1;
    }
    if (progress) progress(n_bytes);
    return ids;
  }
  // Two passes over the text, each half of the reported work: the whole text is decoded (and its
  // UTF-8 checked) before any character is looked up, as before, so the errors are the same; a
  // report from the first pass keeps the rate (and ETA) of a long text honest from the start.
  const auto utf8_len = [](std::int32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; };
  std::vector<std::int32_t> cps;
  cps.reserve(text.size());
  std::int64_t bytes_done = 0;
  for_each_code_point(text, "text to encode", [&](std::int32_t cp) {
    cps.push_back(cp);
    bytes_done += utf8_len(cp);
    report(bytes_done / 2);
  });
  bytes_done = 0;
  for (std::int32_t cp : cps) {
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
    bytes_done += utf8_len(cp);
    report(n_bytes / 2 + bytes_done / 2);
  }
  if (progress) progress(n_bytes);
  return ids;
}

std::string Tokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  if (bpe_) {
    // SentencePiece decodes each run of the model's ids; ids past its pieces (a model vocab_size
    // padded beyond them) have no text.
    std::vector<int> run;
    std::string text;
    auto flush = [&] {
      if (run.empty()) return;
      const sentencepiece::util::Status st = bpe_->sp.Decode(run, &text);
      if (!st.ok()) throw Error("the bpe tokenizer cannot decode: " + sentencepiece_message(st));
      out += text;
      run.clear();
    };
    for (auto id : ids) {
      if (id >= 0 && id < bpe_->pieces) {
        run.push_back(id);
      } else {
        flush();
        out += "[" + std::to_string(id) + "]";
      }
    }
    flush();
    return out;
  }
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

bool Tokenizer::ends_mid_character(const std::vector<std::int32_t>& ids) const {
  if (!bpe_) return false;
  // Walk back over trailing continuation bytes (10xxxxxx) to the byte that starts their character.
  int continuation = 0;
  for (auto it = ids.rbegin(); it != ids.rend() && *it >= 0 && *it < bpe_->pieces; ++it) {
    const int b = bpe_->byte_of[static_cast<size_t>(*it)];
    if (b < 0) return false;  // a whole piece: whatever came before it is decoded already
    if ((b & 0xC0) == 0x80) {
      if (++continuation > 3) return false;
      continue;
    }
    return continuation + 1 < utf8_length(static_cast<unsigned>(b));
  }
  return false;
}

std::string DecodeStream::push(std::int32_t id) {
  pending_.push_back(id);
  if (tok_.ends_mid_character(pending_)) return "";
  return finish();
}

std::string DecodeStream::finish() {
  std::string text = tok_.decode(pending_);
  pending_.clear();
  return text;
}

}  // namespace trident
