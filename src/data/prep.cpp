#include "data/prep.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/progress.hpp"
#include "data/tokenizer.hpp"
#include "io/output_file.hpp"
#include "io/token_file.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include <sys/stat.h>
#include <unistd.h>

namespace trident {

namespace {
constexpr std::int64_t kLlmcHeaderBytes = 256 * 4;

/// llm.c files that are no token shards, by the int32 magic their writers put first (llm.c
/// train_gpt2.py, train_gpt2.cu, train_llama3.py, dev/data/data_common.py write_evalfile).
struct LlmcOtherFile {
  std::int32_t magic;
  const char* what;
};
constexpr LlmcOtherFile kLlmcOtherFiles[] = {
    {20240326, "an llm.c GPT-2 model checkpoint"},
    {20240327, "an llm.c GPT-2 debug state file"},
    {20240328, "an llm.c GPT-2 tokenizer file"},
    {20240522, "an llm.c evaluation file (HellaSwag/MMLU examples)"},
    {20240527, "an llm.c training state file"},
    {20240803, "an llm.c llama-3 model or debug state file"},
};

/// Binary formats recognised by their first bytes, so they are named rather than tokenised.
struct ByteMagic {
  std::string_view magic;
  const char* what;
};
constexpr ByteMagic kByteMagics[] = {
    {std::string_view("\x89HDF\r\n\x1a\n", 8), "an HDF5 file (a Trident token file or checkpoint is one)"},
    {std::string_view("\x93NUMPY", 6), "a NumPy .npy array"},
    {std::string_view("\x1f\x8b", 2), "a gzip archive"},
    {std::string_view("PK\x03\x04", 4), "a zip archive (also .npz and PyTorch .pt files)"},
    {std::string_view("\x28\xb5\x2f\xfd", 4), "a zstd archive"},
    {std::string_view("\xfd" "7zXZ\x00", 6), "an xz archive"},
    {std::string_view("\x7f" "ELF", 4), "an ELF executable or library"},
    {std::string_view("\x89PNG\r\n\x1a\n", 8), "a PNG image"},
};

/// The format of a file from `read(offset, length)` (fewer bytes at its end) and its size.
InputFormat detect_format(const std::function<std::string(std::int64_t, std::int64_t)>& read, std::int64_t size) {
  InputFormat f;
  const std::string head = read(0, 12);
  if (head.size() >= 4) {
    std::int32_t word[3] = {0, 0, 0};
    std::memcpy(word, head.data(), std::min<size_t>(head.size(), sizeof word));
    for (const LlmcShardFormat& s : llmc_shard_formats()) {
      if (word[0] != s.magic) continue;
      f.kind = InputFormat::Kind::binary;
      if (head.size() >= 8 && word[1] == s.version) {
        f.kind = InputFormat::Kind::llmc_shard;
        f.shard = s;
        f.what = std::string("an llm.c ") + s.name + " token shard (version " + std::to_string(s.version) + ")";
      } else {
        f.what = std::string("an llm.c ") + s.name + " token shard of version " +
                 (head.size() >= 8 ? std::to_string(word[1]) : std::string("?")) + ", which prep does not know (it reads version " +
                 std::to_string(s.version) + ")";
      }
      return f;
    }
    for (const LlmcOtherFile& o : kLlmcOtherFiles)
      if (word[0] == o.magic) {
        f.kind = InputFormat::Kind::binary;
        f.what = std::string(o.what) + ", not a token shard";
        return f;
      }
  }
  for (const ByteMagic& m : kByteMagics)
    if (head.compare(0, m.magic.size(), m.magic) == 0) {
      f.kind = InputFormat::Kind::binary;
      f.what = m.what;
      return f;
    }
  // bzip2: "BZh", a block size digit, then the block magic (the BCD digits of pi).
  if (head.size() >= 10 && head.compare(0, 3, "BZh") == 0 && head[3] >= '1' && head[3] <= '9' &&
      head.compare(4, 6, "1AY&SY") == 0) {
    f.kind = InputFormat::Kind::binary;
    f.what = "a bzip2 archive";
    return f;
  }
  // HDF5 files may start with a user block: the superblock is then at 512, 1024, 2048, ...
  for (std::int64_t off = 512; off + 8 <= size; off *= 2)
    if (read(off, 8) == kByteMagics[0].magic) {
      f.kind = InputFormat::Kind::binary;
      f.what = kByteMagics[0].what;
      return f;
    }
  return f;
}

/// Bytes prep reads per call: the step of its progress.
constexpr std::int64_t kReadChunk = std::int64_t{1} << 20;

/// Reads n bytes of `in` into `dst` in kReadChunk pieces, adding each to `progress`. Returns the
/// bytes read (fewer at the end of the file).
std::int64_t read_chunked(std::ifstream& in, char* dst, std::int64_t n, Progress& progress) {
  std::int64_t got = 0;
  while (got < n) {
    in.read(dst + got, static_cast<std::streamsize>(std::min(kReadChunk, n - got)));
    const auto k = static_cast<std::int64_t>(in.gcount());
    if (k <= 0) break;
    got += k;
    progress.add(k);
  }
  return got;
}

/// "cannot read input file 'PATH': REASON", the reason from errno after a failed open (a missing
/// file also names the directory a relative path is taken from).
IoError unreadable_input(const std::string& path) {
  const int e = errno;
  std::string why = e != 0 ? std::strerror(e) : "cannot be opened";
  std::error_code ec;
  if (e == ENOENT && std::filesystem::path(path).is_relative())
    why += " (relative to the current directory, " + std::filesystem::current_path(ec).string() + ")";
  return IoError("cannot read input file '" + path + "': " + why);
}

std::string read_file(const std::string& path, Progress& progress) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw unreadable_input(path);
  std::string s;
  std::vector<char> buf(static_cast<size_t>(kReadChunk));
  for (;;) {
    const std::int64_t k = read_chunked(in, buf.data(), kReadChunk, progress);
    s.append(buf.data(), static_cast<size_t>(k));
    if (k < kReadChunk) break;
  }
  if (in.bad()) throw IoError("cannot read input file '" + path + "'");
  return s;
}

std::string name_of_path(const std::string& path) { return std::filesystem::path(path).filename().string(); }

/// The token ids of llm.c shard `path` of format `f`. Throws IoError for a truncated or corrupt
/// shard or a token outside f's vocabulary, ConfigError for a shard without tokens.
std::vector<std::int32_t> read_llmc_shard(const std::string& path, const LlmcShardFormat& f, Progress& progress) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw unreadable_input(path);
  std::int32_t header[256] = {};
  in.read(reinterpret_cast<char*>(header), sizeof header);
  const std::string what = std::string("llm.c ") + f.name + " shard '" + path + "'";
  if (in.gcount() != static_cast<std::streamsize>(sizeof header))
    throw IoError(what + " is truncated: shorter than its 1024-byte header");
  const std::int64_t n = header[2];
  const auto size = static_cast<std::int64_t>(std::filesystem::file_size(path));
  const std::int64_t held = (size - kLlmcHeaderBytes) / f.token_bytes;
  if (n < 0 || size != kLlmcHeaderBytes + f.token_bytes * n)
    throw IoError(what + " is truncated or corrupt: its header says " + std::to_string(n) + " tokens of " +
                  std::to_string(f.token_bytes) + " bytes, the file holds " + std::to_string(held) +
                  (size - kLlmcHeaderBytes == held * f.token_bytes ? std::string() : " and a part"));
  if (n == 0)
    throw ConfigError(what + " holds no tokens (its header says 0): leave it out of the inputs");
  std::vector<char> raw(static_cast<size_t>(n * f.token_bytes));
  progress.add(kLlmcHeaderBytes);
  if (read_chunked(in, raw.data(), static_cast<std::int64_t>(raw.size()), progress) != static_cast<std::int64_t>(raw.size()))
    throw IoError("cannot read the tokens of " + what);
  std::vector<std::int32_t> ids(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t v = 0;
    if (f.token_bytes == 2) {
      std::uint16_t u = 0;
      std::memcpy(&u, raw.data() + 2 * i, 2);
      v = u;
    } else {
      std::memcpy(&v, raw.data() + 4 * i, 4);
    }
    if (v >= static_cast<std::uint64_t>(f.vocab_size))
      throw IoError(what + ": token " + std::to_string(i) + " = " + std::to_string(v) + " is outside the " + f.name +
                    " vocabulary of " + std::to_string(f.vocab_size));
    ids[static_cast<size_t>(i)] = static_cast<std::int32_t>(v);
  }
  return ids;
}

void split_tail(std::vector<std::int32_t>& all, double val_fraction, std::vector<std::int32_t>& val) {
  const auto n = static_cast<std::int64_t>(all.size());
  const auto n_train = static_cast<std::int64_t>(static_cast<double>(n) * (1.0 - val_fraction));
  val.assign(all.begin() + n_train, all.end());
  all.resize(static_cast<size_t>(n_train));
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// The offset of the first NUL byte within the first MiB of `path`; -1 when there is none (or the
/// file cannot be read: reading it later says why).
std::int64_t first_nul_byte(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string buf(std::size_t{1} << 20, '\0');
  in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
  buf.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  const auto at = buf.find('\0');
  return at == std::string::npos ? -1 : static_cast<std::int64_t>(at);
}

/// What prep reads, and how to take a file's bytes anyway.
std::string binary_advice() {
  std::string shards;
  const auto& f = llmc_shard_formats();
  for (size_t i = 0; i < f.size(); ++i)
    shards += (i == 0 ? "" : i + 1 == f.size() ? " and " : ", ") + std::string(f[i].name) + " (version " +
              std::to_string(f[i].version) + ")";
  return "prep reads text files and llm.c " + shards +
         " token shards; to train on a file's raw bytes, use --tokenizer byte --binary";
}

/// What --output may be, checked before any input is read (tokenizing gigabytes, then failing on
/// the output, would waste the time): a file name (not a directory, not ending in '/'); nothing
/// there, or a Trident token file with --force (never anything else: a checkpoint, a text, a
/// deck, a link to nothing); its parent an existing directory, or creatable (its nearest existing
/// ancestor a directory we may write in); a name short enough for its temporary file. Returns the
/// path to write: --output, or the file a symbolic link there points to (the link stays and names
/// the new file, as an in-place write would have). Warns of temporary files an interrupted prep
/// left beside it.
std::string check_prep_output(const PrepOptions& opt) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string& out = opt.output;
  const std::string name = "--output '" + out + "'";
  if (out.back() == '/' || fs::is_directory(out, ec))
    throw ConfigError(name + (out.back() == '/' ? " ends in '/'" : " is a directory") + ": give a file name (e.g. " +
                      (fs::path(out) / "tokens.h5").string() + ")");
  std::string target = out;
  const fs::file_status st = fs::symlink_status(out, ec);
  if (fs::is_symlink(st)) {
    const fs::path to = fs::read_symlink(out, ec);
    if (!fs::exists(out, ec))
      throw ConfigError(name + " is a symbolic link to nothing ('" + to.string() +
                        "'): remove it, or give the file it should name");
    target = fs::canonical(out, ec).string();
    if (ec) throw IoError("cannot resolve the symbolic link " + name + ": " + ec.message());
  }
  warn_leftover_temporaries(leftover_temporaries(target), "prep");  // also when refused below
  if (fs::exists(st) || fs::is_symlink(st)) {
    bool token_file = false;
    try {
      TokenFileReader probe(target);
      token_file = true;
    } catch (const Error&) {
    }
    if (!token_file)
      throw ConfigError("refusing to overwrite '" + out + "'" + (target != out ? " (a link to '" + target + "')" : "") +
                        ", which is not a Trident token file; remove it or choose another --output");
    if (!opt.force)
      throw ConfigError(name + " already exists (a token file): choose a new file, or add --force to replace it (a "
                        "run reading it keeps its tokens; a resume on the new ones is refused by their content hash)");
    if (target != out) log::info("prep: --output '%s' is a symbolic link: replacing the token file it names, '%s'",
                                 out.c_str(), target.c_str());
  }
  // The nearest existing ancestor of the output: a directory this process may create entries in.
  fs::path dir = fs::path(target).parent_path();
  if (dir.empty()) dir = ".";
  while (!fs::exists(fs::symlink_status(dir, ec)) && dir.has_parent_path() && dir.parent_path() != dir)
    dir = dir.parent_path();
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw ConfigError(name + ": '" + dir.string() + "' is not a directory");
  if (fs::is_directory(dir, ec) && ::access(dir.c_str(), W_OK | X_OK) != 0)
    throw ConfigError(name + ": cannot write in directory '" + dir.string() + "' (" + std::strerror(errno) + ")");
  // The temporary file beside it is ".NAME.XXXXXX": 8 bytes longer than the name.
  const long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  const std::size_t len = fs::path(target).filename().string().size();
  if (name_max > 8 && len + 8 > static_cast<std::size_t>(name_max))
    throw ConfigError(name + ": the file name is " + std::to_string(len) + " bytes; its temporary file ('.' + name + " +
                      "'.XXXXXX') must fit this file system's " + std::to_string(name_max) + ", so give at most " +
                      std::to_string(name_max - 8));
  return target;
}
}  // namespace

const std::vector<LlmcShardFormat>& llmc_shard_formats() {
  // llm.c dev/data/data_common.py HEADERS_INFO; vocabularies of GPT-2 (tiktoken "gpt2") and of
  // Meta-Llama-3.1-8B's tokenizer, which llm.c's llama-3 scripts use.
  static const std::vector<LlmcShardFormat> formats = {
      {"GPT-2", 20240520, 1, 2, TokenizerKind::gpt2, tokenizer_info(TokenizerKind::gpt2).fixed_vocab},
      {"llama-3", 20240801, 7, 4, TokenizerKind::llama3, tokenizer_info(TokenizerKind::llama3).fixed_vocab},
  };
  return formats;
}

InputFormat detect_input_format(const std::string& path) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw unreadable_input(path);
  std::error_code ec;
  const auto size = static_cast<std::int64_t>(std::filesystem::file_size(path, ec));
  return detect_format(
      [&](std::int64_t off, std::int64_t len) {
        std::string buf(static_cast<size_t>(len), '\0');
        in.clear();
        in.seekg(off);
        in.read(buf.data(), len);
        buf.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
        return buf;
      },
      ec ? 0 : size);
}

std::string shard_split_by_name(const std::string& path) {
  const std::string stem = lower(std::filesystem::path(path).stem().string());
  bool val = false, train = false;
  std::string word;
  for (size_t i = 0; i <= stem.size(); ++i) {
    if (i == stem.size() || stem[i] == '_' || stem[i] == '-' || stem[i] == '.') {
      val = val || word == "val" || word == "valid" || word == "validation";
      train = train || word == "train";
      word.clear();
    } else {
      word += stem[i];
    }
  }
  if (val && train)
    throw ConfigError("llm.c shard '" + path + "': its name says both train and val; rename it (llm.c names them " +
                      "NAME_train.bin / NAME_val.bin or NAME_train_000001.bin / NAME_val_000000.bin)");
  return val ? "val" : train ? "train" : "";
}

PrepResult prep_token_file(const PrepOptions& opt) {
  if (opt.inputs.empty()) throw ConfigError("no input files given");
  if (opt.output.empty()) throw ConfigError("no --output file given");
  if (!(opt.val_fraction > 0.0 && opt.val_fraction < 1.0))
    throw ConfigError("--val-fraction must be in (0, 1)");
  std::error_code ec;
  // Each file once, by identity (device and inode: also through links and other names), in one
  // pass: an llm.c dataset can have thousands of shards, too many to compare pairwise.
  std::map<std::pair<dev_t, ino_t>, std::string> seen_files;
  std::set<std::string> seen_names;  // inputs that do not exist (yet): reading them reports it
  for (const std::string& p : opt.inputs) {
    if (std::filesystem::is_directory(p, ec)) throw ConfigError("input '" + p + "' is a directory");
    struct stat st {};
    std::string first;  // the earlier name of the same file, if any
    if (::stat(p.c_str(), &st) == 0) {
      const auto [it, fresh] = seen_files.try_emplace({st.st_dev, st.st_ino}, p);
      if (!fresh) first = it->second;
    } else if (!seen_names.insert(p).second) {
      first = p;
    }
    if (!first.empty())
      throw ConfigError("input '" + p + "' is given twice (also as '" + first +
                        "'): its tokens would be counted twice; give each file once");
    if (std::filesystem::exists(opt.output, ec) && std::filesystem::equivalent(p, opt.output, ec))
      throw ConfigError("--output '" + opt.output + "' is also an input; write the token file elsewhere");
  }
  const std::string write_path = check_prep_output(opt);
  // The one place --tokenizer is interpreted (core/tokenizer_kind.hpp).
  const bool tokenizer_given = !opt.tokenizer.empty();
  const std::string tokenizer_name = tokenizer_given ? opt.tokenizer : std::string("char");
  const std::optional<TokenizerKind> kind = parse_tokenizer_kind(tokenizer_name);
  if (opt.binary && kind != TokenizerKind::byte)
    throw ConfigError("--binary reads every input's raw bytes: it needs --tokenizer byte");

  // What each input is. With --binary, everything is bytes (said once for a file of a known format).
  std::vector<InputFormat> formats;
  const LlmcShardFormat* shard_format = nullptr;
  std::string shard_example, text_example;
  for (const auto& p : opt.inputs) {
    // A .bin of 0 bytes is no llm.c shard (those have a header) and no text anyone meant: a
    // download cut short, say. Named before the formats are compared.
    if (!opt.binary && std::filesystem::path(p).extension() == ".bin" && std::filesystem::is_regular_file(p, ec) &&
        std::filesystem::file_size(p, ec) == 0 && !ec)
      throw ConfigError("'" + p + "' is empty (0 bytes): not an llm.c token shard (those start with a 1024-byte "
                        "header), nor text; leave it out or fetch it again");
    InputFormat f = detect_input_format(p);
    if (opt.binary) {
      if (f.kind != InputFormat::Kind::text)
        log::warn("'%s' is %s; --binary reads its raw bytes", p.c_str(), f.what.c_str());
      f = InputFormat{};
    } else if (f.kind == InputFormat::Kind::binary) {
      throw ConfigError("'" + p + "' is " + f.what + ": " + binary_advice());
    } else if (f.kind == InputFormat::Kind::llmc_shard) {
      if (shard_format != nullptr && shard_format->magic != f.shard->magic)
        throw ConfigError("inputs mix llm.c " + std::string(shard_format->name) + " shards ('" + shard_example +
                          "') and " + f.shard->name + " shards ('" + p + "'); give one format");
      if (shard_format == nullptr) {
        shard_example = p;
        for (const LlmcShardFormat& s : llmc_shard_formats())
          if (s.magic == f.shard->magic) shard_format = &s;
      }
    } else if (text_example.empty()) {
      text_example = p;
    }
    formats.push_back(std::move(f));
  }
  if (shard_format != nullptr && !text_example.empty()) {
    // A file without a known header is text only if it holds no NUL byte: a damaged shard or
    // other binary data beside the shards is named as what it is.
    if (const std::int64_t nul = first_nul_byte(text_example); nul >= 0)
      throw ConfigError("'" + text_example + "' is a binary file without an llm.c shard header (a NUL byte at offset " +
                        std::to_string(nul) + "), given with the llm.c token shards ('" + shard_example +
                        "'): a damaged or cut shard? " + binary_advice());
    throw ConfigError("inputs mix llm.c token shards ('" + shard_example + "') and text files ('" + text_example +
                      "'); give one kind only");
  }
  const bool shards = shard_format != nullptr;

  // Progress over the bytes of every input (rank 0 only: prep runs there).
  std::int64_t input_bytes = 0;
  for (const auto& p : opt.inputs) {
    const auto size = std::filesystem::file_size(p, ec);
    if (!ec) input_bytes += static_cast<std::int64_t>(size);
  }
  Progress reading("prep: reading", input_bytes, ProgressUnit::bytes);

  TokenFileInfo info;
  std::vector<std::int32_t> train, val;
  std::string source;
  for (const auto& p : opt.inputs) source += (source.empty() ? "" : " ") + name_of_path(p);
  info.source = source;
  if (!shards && kind && !tokenizer_info(*kind).from_text)
    throw ConfigError("--tokenizer " + tokenizer_name + " does not tokenise text: " + tokenizer_name +
                      " tokens come already tokenised in llm.c shards (Trident has no " + tokenizer_name +
                      " encoder), and '" + text_example + "' is text; for text use " +
                      tokenizer_kind_names(&TokenizerKindInfo::from_text));
  if (!shards && !(kind && tokenizer_info(*kind).from_text))
    throw ConfigError("unknown --tokenizer '" + tokenizer_name + "' (expected " +
                      tokenizer_kind_names(&TokenizerKindInfo::from_text) + ")");
  if (shards && tokenizer_given && kind != shard_format->tokenizer)
    throw ConfigError("'" + shard_example + "' is an llm.c " + shard_format->name + " token shard, already " +
                      name_of(shard_format->tokenizer) + "-tokenised: --tokenizer " + opt.tokenizer +
                      " does not apply (leave it out" +
                      (kind == TokenizerKind::byte ? std::string(", or add --binary to read the file's raw bytes)")
                                                   : std::string(")")));
  const bool trained = !shards && tokenizer_info(*kind).stores_model;
  if (trained && !opt.vocab_size)
    throw ConfigError("--tokenizer " + tokenizer_name + " needs --vocab-size N, the number of tokens to learn (" +
                      std::to_string(Tokenizer::kBpeMinVocab) + " .. " + std::to_string(Tokenizer::kBpeMaxVocab) +
                      "; e.g. 4096 for a few MB of text)");
  if (trained) Tokenizer::check_bpe_vocab_size(*opt.vocab_size);  // before the text is read
  if (!trained && opt.vocab_size)
    throw ConfigError("--vocab-size applies to --tokenizer " + tokenizer_kind_names(&TokenizerKindInfo::stores_model) +
                      " only: the " + (shards ? std::string(name_of(shard_format->tokenizer)) : tokenizer_name) +
                      " vocabulary is set by the input");
  PrepResult r;
  if (shards && opt.val_fraction_given)
    for (const std::string& p : opt.inputs)
      if (shard_split_by_name(p) == "val")
        throw ConfigError("--val-fraction does not apply: '" + p + "' is named as a validation shard, so /val is the "
                          "shards named so; leave --val-fraction out (or give no validation shard to split the "
                          "training tokens' tail)");
  if (shards) {
    bool any_val = false;
    log::info("inputs (llm.c shards: a word 'val', 'valid' or 'validation' in the name means validation, as llm.c "
              "and Hugging Face datasets name them):");
    for (size_t i = 0; i < opt.inputs.size(); ++i) {
      const std::string& p = opt.inputs[i];
      const std::string by_name = shard_split_by_name(p);
      const bool is_val = by_name == "val";
      any_val = any_val || is_val;
      auto ids = read_llmc_shard(p, *shard_format, reading);
      PrepInput in;
      in.path = p;
      in.format = std::string("llm.c ") + shard_format->name + " token shard (version " +
                  std::to_string(shard_format->version) + ")";
      in.count = static_cast<std::int64_t>(ids.size());
      in.split = is_val ? "val" : "train";
      in.reason = is_val ? "'val' (or 'valid', 'validation') in its name" : by_name == "train" ? "'train' in its name" : "no 'val' in its name";
      r.inputs.push_back(in);
      auto& dst = is_val ? val : train;
      dst.insert(dst.end(), ids.begin(), ids.end());
    }
    if (train.empty())
      throw ConfigError("no training shard: every input is named as validation (a word 'val' in its name, as " +
                        name_of_path(opt.inputs.front()) + "); add the NAME_train*.bin shards");
    if (!any_val) {
      log::warn("no input is named as a validation shard (llm.c names them NAME_val.bin or NAME_val_000000.bin): "
                "/val takes the last %g%% of the training tokens",
                100.0 * opt.val_fraction);
      for (PrepInput& in : r.inputs) {
        in.split = "train+val";
        in.reason += "; no validation shard, so /val is the last " + log::format("%g", 100.0 * opt.val_fraction) +
                     "% of the concatenation";
      }
      split_tail(train, opt.val_fraction, val);
    }
    reading.finish();
    info.tokenizer = name_of(shard_format->tokenizer);
    info.vocab_size = shard_format->vocab_size;
  } else {
    std::string text;
    log::info("inputs (text: /train is the first %g%% of the tokens, /val the rest):", 100.0 * (1.0 - opt.val_fraction));
    for (size_t i = 0; i < opt.inputs.size(); ++i) {
      const std::string& p = opt.inputs[i];
      std::string content = read_file(p, reading);
      if (content.empty()) log::warn("'%s' is empty (0 bytes): it adds no tokens", p.c_str());
      // Binary data without a known header: a NUL byte does not occur in text.
      const auto nul = content.find('\0');
      if (!opt.binary && nul != std::string::npos)
        throw ConfigError("'" + p + "' is a binary file (a NUL byte at offset " + std::to_string(nul) + "), not text: " +
                          binary_advice());
      // The tokenizers of text read UTF-8: checked per file here, so the error names the file and
      // the byte within it (the concatenation's offset would name neither).
      if (kind != TokenizerKind::byte) utf8_check(content, "'" + p + "'");
      PrepInput in;
      in.path = p;
      in.format = opt.binary ? "raw bytes (--binary)" : "text";
      in.count = static_cast<std::int64_t>(content.size());
      in.split = "train+val";
      in.reason = "the tail of the concatenated text is /val";
      r.inputs.push_back(in);
      text += content;
    }
    reading.finish();
    if (text.empty())
      throw ConfigError(opt.inputs.size() == 1 ? "'" + opt.inputs.front() + "' is empty (0 bytes): nothing to tokenise"
                                               : std::string("every input is empty (0 bytes): nothing to tokenise"));
    // SentencePiece's trainer reports no progress: say what runs, and how long it took.
    const bool learns = kind != TokenizerKind::character && kind != TokenizerKind::byte;
    if (learns)
      log::info("prep: training a %s tokenizer of %lld tokens on %.1f MiB of text with SentencePiece (no progress "
                "from the library; minutes for hundreds of MiB)",
                tokenizer_name.c_str(), static_cast<long long>(*opt.vocab_size),
                static_cast<double>(text.size()) / (1024.0 * 1024.0));
    const auto t_train = std::chrono::steady_clock::now();
    Tokenizer tok = kind == TokenizerKind::character ? Tokenizer::build_char(text)
                    : kind == TokenizerKind::byte    ? Tokenizer::byte_level()
                                                     : Tokenizer::train_bpe(text, *opt.vocab_size);
    if (learns)
      log::info("prep: tokenizer trained in %.1f s",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t_train).count());
    Progress tokenizing("prep: tokenizing", static_cast<std::int64_t>(text.size()), ProgressUnit::bytes);
    train = tok.encode(text, [&](std::int64_t done) { tokenizing.update(done); });
    tokenizing.finish();
    split_tail(train, opt.val_fraction, val);
    info.tokenizer = tok.kind();
    info.vocab_size = tok.vocab_size();
    info.vocab = tok.vocab();
    info.model = tok.model();
  }
  for (const PrepInput& in : r.inputs)
    log::info("  %s: %s, %lld %s -> %s (%s)", in.path.c_str(), in.format.c_str(), static_cast<long long>(in.count),
              shards ? "tokens" : "bytes", in.split.c_str(), in.reason.c_str());
  // A training window of T tokens needs T + 1 of them (inputs and shifted targets): a split of
  // fewer than two tokens holds none, and training would only fail later, at its start.
  if (train.size() < 2)
    throw ConfigError("the input gives a training split of " + std::to_string(train.size()) +
                      " token(s): a run needs at least [model] block_size + 1 (65 for input/shakespeare_char.ini); "
                      "give more text or a smaller --val-fraction");
  if (val.size() < 2 && opt.val_fraction_given)
    throw ConfigError("--val-fraction " + log::format("%g", opt.val_fraction) + " leaves " +
                      std::to_string(val.size()) + " of the " + std::to_string(train.size() + val.size()) +
                      " tokens for validation: a validation loss needs at least 2; give a larger fraction");
  if (val.size() < 2)
    log::warn("the validation split holds %zu token(s): runs on this file report no validation loss", val.size());
  // Like `trident train` with its out_dir, create the output's directory (data/ in a fresh clone).
  const std::filesystem::path parent = std::filesystem::path(write_path).parent_path();
  if (!parent.empty()) {
    std::filesystem::create_directories(parent, ec);
    if (ec) throw IoError("cannot create directory '" + parent.string() + "' for --output: " + ec.message());
  }
  {
    Progress writing("prep: writing " + opt.output, static_cast<std::int64_t>(train.size() + val.size()),
                     ProgressUnit::tokens);
    write_token_file(write_path, info, train, val, [&](std::int64_t done) { writing.update(done); }, opt.force);
    writing.finish();
  }
  r.tokenizer = info.tokenizer;
  r.vocab_size = info.vocab_size;
  r.n_train = static_cast<std::int64_t>(train.size());
  r.n_val = static_cast<std::int64_t>(val.size());
  return r;
}

std::string token_file_tokenizer_problem(const TokenFileInfo& info) {
  const std::optional<TokenizerKind> kind = parse_tokenizer_kind(info.tokenizer);
  if (!kind) return "unknown tokenizer '" + info.tokenizer + "'";
  const TokenizerKindInfo& k = tokenizer_info(*kind);
  const std::string name = "the " + info.tokenizer + " tokenizer";
  std::int64_t pieces = 0;
  try {
    pieces = Tokenizer(*kind, info.vocab, info.vocab_size, info.model).model_pieces();
  } catch (const Error& e) {
    return e.what();
  }
  const auto n_vocab = static_cast<std::int64_t>(info.vocab.size());
  if (k.fixed_vocab > 0 && info.vocab_size != k.fixed_vocab)
    return name + " has vocab_size " + std::to_string(info.vocab_size) + ", not its fixed " +
           std::to_string(k.fixed_vocab);
  if (k.stores_vocab && n_vocab != info.vocab_size)
    return name + "'s vocabulary has " + std::to_string(n_vocab) + " entries, but vocab_size is " +
           std::to_string(info.vocab_size);
  if (*kind == TokenizerKind::byte)
    for (std::int64_t i = 0; i < n_vocab; ++i)
      if (info.vocab[static_cast<size_t>(i)] != i)
        return name + "'s vocabulary entry " + std::to_string(i) + " is " +
               std::to_string(info.vocab[static_cast<size_t>(i)]) + ", not the byte value " + std::to_string(i);
  if (!k.stores_vocab && n_vocab > 0)
    return name + " stores no vocabulary, but the file has one of " + std::to_string(n_vocab) + " entries";
  if (!k.stores_model && !info.model.empty())
    return name + " has no model, but the file holds one of " + std::to_string(info.model.size()) + " bytes";
  if (k.stores_model && pieces != info.vocab_size)
    return name + "'s model has " + std::to_string(pieces) + " pieces, but vocab_size is " +
           std::to_string(info.vocab_size) + " (prep trains exactly vocab_size)";
  return "";
}

}  // namespace trident
