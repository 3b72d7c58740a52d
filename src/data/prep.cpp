#include "data/prep.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "data/tokenizer.hpp"
#include "io/token_file.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace trident {

namespace {
constexpr std::int32_t kLlmcMagic = 20240520;
constexpr std::int32_t kLlmcVersion = 1;
constexpr std::int64_t kGpt2Vocab = 50257;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot read input file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::int32_t> read_llmc_shard(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot read input file '" + path + "'");
  std::int32_t header[256] = {};
  in.read(reinterpret_cast<char*>(header), sizeof header);
  if (in.gcount() != static_cast<std::streamsize>(sizeof header))
    throw IoError("llm.c shard '" + path + "' is truncated: shorter than its 1024-byte header");
  if (header[0] != kLlmcMagic) throw IoError("'" + path + "' is not an llm.c token shard (bad magic number)");
  if (header[1] != kLlmcVersion)
    throw IoError("llm.c shard '" + path + "' has version " + std::to_string(header[1]) + "; only version 1 is supported");
  const std::int64_t n = header[2];
  const auto size = static_cast<std::int64_t>(std::filesystem::file_size(path));
  if (n < 0 || size != 1024 + 2 * n)
    throw IoError("llm.c shard '" + path + "' is truncated or corrupt: header says " + std::to_string(n) +
                  " tokens, file has " + std::to_string((size - 1024) / 2));
  std::vector<std::uint16_t> raw(static_cast<size_t>(n));
  in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(2 * n));
  std::vector<std::int32_t> ids(raw.begin(), raw.end());
  for (std::int64_t i = 0; i < n; ++i)
    if (ids[static_cast<size_t>(i)] >= kGpt2Vocab)
      throw IoError("llm.c shard '" + path + "': token " + std::to_string(i) + " = " +
                    std::to_string(ids[static_cast<size_t>(i)]) + " is outside the GPT-2 vocabulary");
  return ids;
}

void split_tail(std::vector<std::int32_t>& all, double val_fraction, std::vector<std::int32_t>& val) {
  const auto n = static_cast<std::int64_t>(all.size());
  const auto n_train = static_cast<std::int64_t>(static_cast<double>(n) * (1.0 - val_fraction));
  val.assign(all.begin() + n_train, all.end());
  all.resize(static_cast<size_t>(n_train));
}
}  // namespace

bool is_llmc_shard(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot read input file '" + path + "'");
  std::int32_t magic = 0;
  in.read(reinterpret_cast<char*>(&magic), sizeof magic);
  return in.gcount() == sizeof magic && magic == kLlmcMagic;
}

PrepResult prep_token_file(const PrepOptions& opt) {
  if (opt.inputs.empty()) throw ConfigError("no input files given");
  if (opt.output.empty()) throw ConfigError("no --output file given");
  if (!(opt.val_fraction > 0.0 && opt.val_fraction < 1.0))
    throw ConfigError("--val-fraction must be in (0, 1)");
  std::error_code ec;
  for (const auto& p : opt.inputs) {
    if (std::filesystem::is_directory(p, ec)) throw ConfigError("input '" + p + "' is a directory");
    if (std::filesystem::exists(opt.output, ec) && std::filesystem::equivalent(p, opt.output, ec))
      throw ConfigError("--output '" + opt.output + "' is also an input; write the token file elsewhere");
  }
  if (std::filesystem::exists(opt.output, ec)) {
    // Overwrite an earlier token file, never anything else (a checkpoint, a text, a deck).
    bool token_file = false;
    try {
      TokenFileReader probe(opt.output);
      token_file = true;
    } catch (const Error&) {
    }
    if (!token_file)
      throw ConfigError("refusing to overwrite '" + opt.output +
                        "', which is not a Trident token file; remove it or choose another --output");
  }
  int shards = 0;
  for (const auto& p : opt.inputs) shards += is_llmc_shard(p) ? 1 : 0;
  if (shards != 0 && shards != static_cast<int>(opt.inputs.size()))
    throw ConfigError("inputs mix llm.c token shards and text files; give one kind only");

  TokenFileInfo info;
  std::vector<std::int32_t> train, val;
  std::string source;
  for (const auto& p : opt.inputs) source += (source.empty() ? "" : " ") + std::filesystem::path(p).filename().string();
  info.source = source;
  // The one place --tokenizer is interpreted (core/tokenizer_kind.hpp).
  const std::optional<TokenizerKind> kind = parse_tokenizer_kind(opt.tokenizer);
  if (shards == 0 && !(kind && tokenizer_info(*kind).from_text))
    throw ConfigError("unknown --tokenizer '" + opt.tokenizer + "' (expected " +
                      tokenizer_kind_names(&TokenizerKindInfo::from_text) + ")");
  const bool trained = shards == 0 && tokenizer_info(*kind).stores_model;
  if (trained && !opt.vocab_size)
    throw ConfigError("--tokenizer " + opt.tokenizer + " needs --vocab-size N, the number of tokens to learn (" +
                      std::to_string(Tokenizer::kBpeMinVocab) + " .. " + std::to_string(Tokenizer::kBpeMaxVocab) +
                      "; e.g. 4096 for a few MB of text)");
  if (!trained && opt.vocab_size)
    throw ConfigError("--vocab-size applies to --tokenizer " + tokenizer_kind_names(&TokenizerKindInfo::stores_model) +
                      " only: the " + (shards > 0 ? std::string("gpt2") : opt.tokenizer) +
                      " vocabulary is set by the input");
  if (shards > 0) {
    // "char" is the option's default, so it stands for "not given" with shards.
    if (kind != TokenizerKind::character && kind != TokenizerKind::gpt2)
      throw ConfigError("llm.c shards are GPT-2 tokenised; --tokenizer " + opt.tokenizer + " does not apply");
    bool any_val = false;
    for (const auto& p : opt.inputs) {
      const bool is_val = std::filesystem::path(p).filename().string().find("_val_") != std::string::npos;
      any_val = any_val || is_val;
      auto ids = read_llmc_shard(p);
      auto& dst = is_val ? val : train;
      dst.insert(dst.end(), ids.begin(), ids.end());
    }
    if (!any_val) split_tail(train, opt.val_fraction, val);
    if (train.empty()) throw ConfigError("no training shard (every input name contains _val_)");
    info.tokenizer = name_of(TokenizerKind::gpt2);
    info.vocab_size = kGpt2Vocab;
  } else {
    std::string text;
    for (const auto& p : opt.inputs) text += read_file(p);
    if (text.empty()) throw ConfigError("the input text is empty");
    Tokenizer tok = kind == TokenizerKind::character ? Tokenizer::build_char(text)
                    : kind == TokenizerKind::byte    ? Tokenizer::byte_level()
                                                     : Tokenizer::train_bpe(text, *opt.vocab_size);
    train = tok.encode(text);
    split_tail(train, opt.val_fraction, val);
    info.tokenizer = tok.kind();
    info.vocab_size = tok.vocab_size();
    info.vocab = tok.vocab();
    info.model = tok.model();
  }
  // A training window of T tokens needs T + 1 of them (inputs and shifted targets): a split of
  // fewer than two tokens holds none, and training would only fail later, at its start.
  if (train.size() < 2)
    throw ConfigError("the input gives a training split of " + std::to_string(train.size()) +
                      " token(s): a run needs at least [model] block_size + 1 (65 for input/shakespeare_char.ini); "
                      "give more text or a smaller --val-fraction");
  if (val.size() < 2)
    log::warn("the validation split holds %zu token(s): runs on this file report no validation loss", val.size());
  // Like `trident train` with its out_dir, create the output's directory (data/ in a fresh clone).
  const std::filesystem::path parent = std::filesystem::path(opt.output).parent_path();
  if (!parent.empty()) {
    std::filesystem::create_directories(parent, ec);
    if (ec) throw IoError("cannot create directory '" + parent.string() + "' for --output: " + ec.message());
  }
  write_token_file(opt.output, info, train, val);
  PrepResult r;
  r.tokenizer = info.tokenizer;
  r.vocab_size = info.vocab_size;
  r.n_train = static_cast<std::int64_t>(train.size());
  r.n_val = static_cast<std::int64_t>(val.size());
  return r;
}

}  // namespace trident
