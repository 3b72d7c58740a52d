// data/prep.hpp: turning text files or llm.c token shards into a Trident token file.
//
// Layer: data. Local (serial).
// Text: tokenised with "char" (vocabulary = sorted distinct characters of all inputs), "byte", or
// "bpe" (a SentencePiece BPE model of --vocab-size tokens trained on all inputs, stored in the file);
// the concatenated token stream is split into the first floor(0.9 n) tokens for training and the
// rest for validation, as nanoGPT's data/shakespeare_char/prepare.py.
// llm.c shards (llm.c dev/data/data_common.py write_datafile: a header of 256 int32 -- magic,
// version, token count, zeros -- then the tokens): GPT-2 (magic 20240520, version 1, uint16
// tokens, vocab 50257) and llama-3 (magic 20240801, version 7, uint32 tokens, vocab 128256; the
// token file stores int32). A shard is validation when a word of its file name is "val" (llm.c's
// tiny_shakespeare_val.bin, fineweb_val_000000.bin, TinyStories_val.bin), training otherwise; with
// no validation shard, the concatenation is split 90/10 as for text, with a warning. Every input's
// format, token count and split are logged.
// Invariants: no file is tokenised as text when its first bytes are a known binary format (every
// llm.c file, HDF5, NumPy, archives, executables) or it holds a NUL byte, unless --binary asks for
// its raw bytes (byte tokenizer only); an input is read in a known format or refused by name.
#pragma once

#include "core/tokenizer_kind.hpp"

#include "io/token_file.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trident {

struct PrepOptions {
  /// char | byte | bpe (text inputs); for llm.c shards their own kind (gpt2 | llama3). Empty: not
  /// given (char for text; the shards' own kind), so a --tokenizer char given with shards is refused.
  std::string tokenizer;
  std::optional<std::int64_t> vocab_size;  ///< tokens of the model to train: required for bpe, refused otherwise
  bool binary = false;  ///< byte only: take every input's raw bytes, whatever format it is in
  std::vector<std::string> inputs;
  std::string output;
  bool force = false;  ///< replace a token file at `output` (never another file); else an existing one is refused
  double val_fraction = 0.1;
  /// --val-fraction was given (not the default): refused with validation shards, and a split it
  /// leaves under 2 tokens is an error rather than a warning
  bool val_fraction_given = false;
};

/// One input of a prep run: what it was read as and where its tokens went.
struct PrepInput {
  std::string path;
  std::string format;   ///< "text", "llm.c GPT-2 token shard (version 1)", "raw bytes (--binary)", ...
  std::int64_t count = 0;  ///< tokens of a shard, bytes of a text (or --binary) file
  std::string split;    ///< "train", "val", or "train+val" (text and unnamed shards: the tail goes to val)
  std::string reason;   ///< why that split, in the user's words
};

struct PrepResult {
  std::string tokenizer;
  std::int64_t vocab_size = 0, n_train = 0, n_val = 0;
  std::vector<PrepInput> inputs;  ///< in the order given
};

/// Reads the inputs and writes the token file; logs one line per input (format, tokens, split).
/// Shows the progress of reading (bytes of all inputs) and of tokenising text (bytes) on world
/// rank 0 (core/progress.hpp: local, silenced by TRIDENT_PROGRESS=0).
/// Throws IoError naming the file for a missing, unreadable, truncated or corrupt input (a shard
/// whose size disagrees with its header, a token outside its vocabulary); ConfigError naming the
/// file for an input of a kind prep does not take: a known binary format or NUL bytes with a text
/// tokenizer (unless --binary), an llm.c file that is no token shard or of an unknown version, a
/// shard with no tokens, a shard whose name says both train and val, shards of two formats or
/// shards and text mixed, no training shard; ConfigError for a --vocab-size that is missing (bpe),
/// given for another kind, out of range, or more than the text supports (SentencePiece's message),
/// and for --binary without --tokenizer byte.
PrepResult prep_token_file(const PrepOptions& opt);

/// An llm.c token shard format (llm.c dev/data/data_common.py HEADERS_INFO).
struct LlmcShardFormat {
  const char* name;         ///< "GPT-2", "llama-3"
  std::int32_t magic, version;
  int token_bytes;          ///< 2 (uint16) or 4 (uint32)
  TokenizerKind tokenizer;  ///< gpt2, llama3
  std::int64_t vocab_size;  ///< 50257, 128256
};

/// Every shard format prep reads. Local.
const std::vector<LlmcShardFormat>& llmc_shard_formats();

/// What an input file is by its first bytes (and, for HDF5, a superblock at 512, 1024, ...).
struct InputFormat {
  enum class Kind { text, llmc_shard, binary } kind = Kind::text;
  std::string what;                     ///< for shards and binaries: e.g. "an llm.c llama-3 token shard (version 7)", "an HDF5 file"
  std::optional<LlmcShardFormat> shard; ///< the format of a shard prep reads
};

/// The format of `path` from its header: a shard of a known format and version, another known
/// binary format (an llm.c file that is no token shard or a shard of an unknown version, HDF5,
/// NumPy, gzip, zip, zstd, xz, bzip2, ELF, PNG), else text (NUL bytes are the text reader's
/// check). Local. Throws IoError if the file cannot be read.
InputFormat detect_input_format(const std::string& path);

/// The split an llm.c shard belongs to by its file name, following llm.c's own scripts: "val" when
/// a word of the name without its extension (words separated by '_', '-' or '.', any case) is
/// "val", "valid" or "validation" (tiny_shakespeare_val.bin, fineweb_val_000000.bin, TinyStories_val.bin,
/// Hugging Face's "validation" and "valid" splits),
/// "train" when a word is "train", "" when neither. Local, pure. Throws ConfigError naming the file
/// when its name has both.
std::string shard_split_by_name(const std::string& path);

/// Why the tokenizer a token file records (TokenFileInfo: kind, vocab_size, vocab, model) is not
/// what prep writes, "" when it is: the Tokenizer does not load from it (an entry that is no code
/// point or byte, a char vocabulary not sorted and distinct, a bpe model that does not load), or
/// its parts disagree (char: vocab_size = the vocabulary's length; byte: the 256 byte values in
/// order; gpt2, llama3: the kind's fixed vocab_size and no vocabulary; bpe: a model of exactly
/// vocab_size pieces; a model only for bpe). `trident prep --verify`. Local, pure.
std::string token_file_tokenizer_problem(const TokenFileInfo& info);

}  // namespace trident
