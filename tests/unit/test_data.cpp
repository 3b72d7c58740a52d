// Data layer and schedule: tokenizers (char, byte, a trained bpe model), prep (text, llm.c GPT-2
// and llama-3 shards, their split by name, binary inputs refused by name), token files, the sampler's permutation property and the LR schedule against nanoGPT's
// formula.
#include "core/error.hpp"
#include "data/prep.hpp"
#include "data/sampler.hpp"
#include "data/token_dataset.hpp"
#include "data/tokenizer.hpp"
#include "io/token_file.hpp"
#include "test_env.hpp"
#include "train/lr_schedule.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <optional>
#include <set>

namespace trident {
namespace {

std::string scratch(const std::string& name) {
  return test::scratch_dir() + "/r" + std::to_string(test::runtime().world_rank()) + "_" + name;
}

TEST(Tokenizer, CharRoundTripAndUtf8) {
  const std::string text = "héllo wörld\n";
  Tokenizer t = Tokenizer::build_char(text);
  EXPECT_EQ(t.vocab_size(), 10);  // \n ' ' d h l o r w é ö
  EXPECT_EQ(t.decode(t.encode(text)), text);
  EXPECT_THROW(t.encode("z"), Error);
  EXPECT_THROW(Tokenizer::build_char(std::string("\xff\xfe")), Error);
}

TEST(Tokenizer, VocabularyIsSortedDistinctCharacters) {
  Tokenizer t = Tokenizer::build_char("bca\nab");
  const std::vector<std::int32_t> want = {'\n', 'a', 'b', 'c'};
  EXPECT_EQ(t.vocab(), want);
  EXPECT_EQ(t.encode("cab"), (std::vector<std::int32_t>{3, 1, 2}));
  Tokenizer b = Tokenizer::byte_level();
  EXPECT_EQ(b.encode("A\xff"), (std::vector<std::int32_t>{65, 255}));
}

// A vocabulary read from a file (token file, checkpoint) is validated before it is used as an index.
TEST(Tokenizer, RejectsVocabulariesThatAreNoCodePointsOrUnsorted) {
  EXPECT_THROW(Tokenizer("char", {10, -5}, 2), Error);
  EXPECT_THROW(Tokenizer("char", {0xD800}, 1), Error);     // a UTF-16 surrogate
  EXPECT_THROW(Tokenizer("char", {0x110000}, 1), Error);   // beyond Unicode
  EXPECT_THROW(Tokenizer("char", {'b', 'a'}, 2), Error);   // not sorted
  EXPECT_THROW(Tokenizer("char", {'a', 'a'}, 2), Error);   // not distinct
  EXPECT_THROW(Tokenizer("byte", {0, 256}, 2), Error);
  EXPECT_NO_THROW(Tokenizer("char", {'\n', 'a', 0x10FFFF}, 3));
}

TEST(Tokenizer, UnknownCharacterIsNamedByItsHexCodePoint) {
  Tokenizer t = Tokenizer::build_char("ab");
  try {
    t.encode("\xc3\xa9");  // U+00E9
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(U+00E9)"), std::string::npos) << e.what();
  }
}

// A deterministic text of ~40 KB with what a bpe tokenizer must keep exactly: words from a small
// vocabulary (so there is something to merge), runs of spaces, tabs, empty lines, CR LF, and
// two- to four-byte UTF-8 characters.
std::string bpe_text() {
  const char* words[] = {"the", "model", "token", "train", "sample", "checkpoint", "rank", "grid", "tensor",
                         "café", "naïve", "日本語", "emoji 🙂", "x", "=", "{", "}", "(", ")", "  ", "\t"};
  std::string text;
  std::uint64_t state = 12345;
  for (int i = 0; i < 7000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;  // Knuth's MMIX LCG
    text += words[(state >> 33) % (sizeof words / sizeof *words)];
    const unsigned sep = (state >> 20) % 16;
    text += sep == 0 ? "\n" : sep == 1 ? "\n\n    " : sep == 2 ? "\r\n" : " ";
  }
  return text;
}

TEST(Tokenizer, BpeRoundTripsAnyTextAtTheAskedVocabSize) {
  const std::string text = bpe_text();
  const Tokenizer t = Tokenizer::train_bpe(text, 400);
  EXPECT_EQ(t.kind(), "bpe");
  EXPECT_EQ(t.vocab_size(), 400);
  EXPECT_TRUE(t.vocab().empty());
  ASSERT_FALSE(t.model().empty());
  const std::vector<std::int32_t> ids = t.encode(text);
  EXPECT_EQ(t.decode(ids), text);
  EXPECT_LT(ids.size(), text.size() / 2);  // merges learned: far fewer tokens than bytes
  for (std::int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 400);
  }
  // Characters the model never saw are spelt in byte pieces and still come back.
  for (const std::string& unseen : {std::string("Ωμέγα ∑ 𝄞\n"), std::string("\x01\x7f"), std::string()})
    EXPECT_EQ(t.decode(t.encode(unseen)), unseen);
  // The same text trains the same model, byte for byte.
  EXPECT_EQ(Tokenizer::train_bpe(text, 400).model(), t.model());
  // The stored form (token file, checkpoint) encodes as the trained tokenizer does; a model
  // vocab_size padded beyond the tokenizer's pieces decodes those ids as numbers.
  const Tokenizer stored("bpe", {}, 448, t.model());
  EXPECT_EQ(stored.encode(text), ids);
  EXPECT_EQ(stored.decode({420}), "[420]");
}

// Sampling prints token by token: a character spelt in several byte pieces appears once whole.
TEST(Tokenizer, BpeDecodeStreamHoldsPartialCharacters) {
  const Tokenizer t = Tokenizer::train_bpe(bpe_text(), 400);
  const std::string text = "the 𝄞 model Ω\n";  // U+1D11E and U+03A9 are not in the training text
  const std::vector<std::int32_t> ids = t.encode(text);
  DecodeStream stream(t);
  std::string out;
  int held = 0;
  for (std::int32_t id : ids) {
    const std::string piece = stream.push(id);
    held += piece.empty() ? 1 : 0;
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << "U+FFFD printed for id " << id;
    out += piece;
  }
  out += stream.finish();
  EXPECT_EQ(out, text);
  EXPECT_GE(held, 3 + 1);  // the 4 bytes of U+1D11E and 2 of U+03A9 were held until complete
}

TEST(Tokenizer, BpeRefusesBadSizesAndDamagedModels) {
  const std::string text = bpe_text();
  EXPECT_THROW(Tokenizer::train_bpe(text, 256), ConfigError);  // no room for <unk> and 256 bytes
  EXPECT_THROW(Tokenizer::train_bpe(text, Tokenizer::kBpeMaxVocab + 1), ConfigError);
  try {
    Tokenizer::train_bpe(text, 200000);  // more tokens than this text supports
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("Vocabulary size too high"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tokenizer::train_bpe(std::string("ok \xff\xfe"), 400), Error);  // not UTF-8
  const Tokenizer t = Tokenizer::train_bpe(text, 400);
  EXPECT_THROW(Tokenizer("bpe", {}, 400), Error);                   // no model
  EXPECT_THROW(Tokenizer("bpe", {}, 399, t.model()), Error);        // more tokens than vocab_size
  std::vector<std::uint8_t> damaged = t.model();
  damaged[0] = 0xde;  // the first tag gets wire type 6, which protobuf does not have
  EXPECT_THROW(Tokenizer("bpe", {}, 400, damaged), Error);
  EXPECT_THROW(Tokenizer("bpe", {}, 400, {'n', 'o', 't', ' ', 'a', ' ', 'm', 'o', 'd', 'e', 'l'}), Error);
}

TEST(Prep, BpeTokenFileKeepsIdsAndModel) {
  const std::string in = scratch("bpe.txt"), out = scratch("bpe.h5");
  const std::string text = bpe_text();
  std::ofstream(in) << text;
  PrepOptions o;
  o.inputs = {in};
  o.output = out;
  o.tokenizer = "bpe";
  EXPECT_THROW(prep_token_file(o), ConfigError);  // --vocab-size is required
  o.vocab_size = 400;
  const PrepResult r = prep_token_file(o);
  EXPECT_EQ(r.tokenizer, "bpe");
  EXPECT_EQ(r.vocab_size, 400);
  const Tokenizer trained = Tokenizer::train_bpe(text, 400);
  TokenDataset ds(out, 1.0);
  EXPECT_EQ(ds.info().model, trained.model());
  EXPECT_TRUE(ds.info().vocab.empty());
  std::vector<std::int32_t> ids(static_cast<size_t>(r.n_train + r.n_val));
  ds.read("train", 0, r.n_train, ids.data());
  ds.read("val", 0, r.n_val, ids.data() + r.n_train);
  EXPECT_EQ(ids, trained.encode(text));
  const TokenFileInfo& i = ds.info();
  EXPECT_EQ(Tokenizer(i.tokenizer, i.vocab, i.vocab_size, i.model).decode(ids), text);
  // --vocab-size belongs to bpe alone.
  o.tokenizer = "char";
  EXPECT_THROW(prep_token_file(o), ConfigError);
}

TEST(TokenFile, RefusesBpeFilesWithoutAWorkingModel) {
  TokenFileInfo info;
  info.tokenizer = "bpe";
  info.vocab_size = 400;
  const std::string none = scratch("bpe_none.h5");
  write_token_file(none, info, {1, 2, 3}, {1, 2});
  try {
    TokenFileReader r(none);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(none), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/tokenizer_model"), std::string::npos) << e.what();
  }
  info.model = Tokenizer::train_bpe(bpe_text(), 400).model();
  info.model[0] = 0xde;  // an invalid first tag
  const std::string damaged = scratch("bpe_damaged.h5");
  write_token_file(damaged, info, {1, 2, 3}, {1, 2});
  try {
    TokenDataset d(damaged, 1.0);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(damaged), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not load"), std::string::npos) << e.what();
  }
}

TEST(Prep, TextSplitsNinetyTen) {
  const std::string in = scratch("text.txt"), out = scratch("text.h5");
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 7);
  std::ofstream(in) << text;
  PrepOptions o;
  o.inputs = {in};
  o.output = out;
  PrepResult r = prep_token_file(o);
  EXPECT_EQ(r.n_train, 90);
  EXPECT_EQ(r.n_val, 10);
  EXPECT_EQ(r.vocab_size, 7);
  TokenDataset ds(out, 1.0);
  std::vector<std::int32_t> v(10);
  ds.read("val", 0, 10, v.data());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(v[i], (90 + i) % 7);
  EXPECT_THROW(ds.read("val", 5, 10, v.data()), IoError);
}

/// An llm.c shard as dev/data/data_common.py write_datafile writes it: 256 int32 (magic, version,
/// token count `claimed`, zeros), then the tokens as uint16 (GPT-2) or uint32 (llama-3).
void write_shard(const std::string& path, const std::vector<std::uint32_t>& toks, std::int32_t claimed,
                 std::int32_t magic = 20240520, std::int32_t version = 1) {
  std::int32_t header[256] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = claimed;
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header), sizeof header);
  for (std::uint32_t t : toks) {
    if (magic == 20240801) {
      f.write(reinterpret_cast<const char*>(&t), 4);
    } else {
      const auto u = static_cast<std::uint16_t>(t);
      f.write(reinterpret_cast<const char*>(&u), 2);
    }
  }
}
void write_llama3_shard(const std::string& path, const std::vector<std::uint32_t>& toks) {
  write_shard(path, toks, static_cast<std::int32_t>(toks.size()), 20240801, 7);
}

/// The message of the Error prep_token_file(o) throws (checking its kind), "" when it succeeds.
template <class E>
std::string prep_error(const PrepOptions& o) {
  try {
    prep_token_file(o);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong kind of error: ") + e.what();
  }
  return "";
}

std::vector<std::int32_t> read_split(const std::string& path, const std::string& split) {
  TokenDataset ds(path, 1.0);
  std::vector<std::int32_t> t(static_cast<size_t>(ds.size(split)));
  ds.read(split, 0, static_cast<std::int64_t>(t.size()), t.data());
  return t;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Prep, ReplacesATokenFileOnlyWithForce) {
  const std::string txt = scratch("force.txt"), out = scratch("force.h5");
  std::ofstream(txt) << "hello world, hello prep\n";
  PrepOptions o;
  o.inputs = {txt};
  o.output = out;
  ASSERT_EQ(prep_error<ConfigError>(o), "");
  const std::string before = TokenFileReader(out).info().content_hash;
  std::ofstream(txt) << "another text entirely\n";
  EXPECT_TRUE(has(prep_error<ConfigError>(o), "already exists (a token file)")) << prep_error<ConfigError>(o);
  EXPECT_EQ(TokenFileReader(out).info().content_hash, before);  // refused: the file is as it was
  o.force = true;
  ASSERT_EQ(prep_error<ConfigError>(o), "");
  EXPECT_NE(TokenFileReader(out).info().content_hash, before);
  // Never another kind of file, even with --force.
  std::ofstream(scratch("notes.txt")) << "mine";
  o.output = scratch("notes.txt");
  EXPECT_TRUE(has(prep_error<ConfigError>(o), "which is not a Trident token file")) << prep_error<ConfigError>(o);
}

TEST(Prep, LlmcShards) {
  const std::string tr = scratch("fw_train_000001.bin"), va = scratch("fw_val_000000.bin"), out = scratch("fw.h5");
  write_shard(tr, {1, 2, 50256, 7}, 4);
  write_shard(va, {9, 8}, 2);
  PrepOptions o;
  o.inputs = {tr, va};
  o.output = out;
  o.force = true;  // prepped again below over the same output
  PrepResult r = prep_token_file(o);
  EXPECT_EQ(r.tokenizer, "gpt2");
  EXPECT_EQ(r.vocab_size, 50257);
  EXPECT_EQ(r.n_train, 4);
  EXPECT_EQ(r.n_val, 2);
  EXPECT_EQ(read_split(out, "train"), (std::vector<std::int32_t>{1, 2, 50256, 7}));
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[0].format, "llm.c GPT-2 token shard (version 1)");
  EXPECT_EQ(r.inputs[0].split, "train");
  EXPECT_EQ(r.inputs[1].split, "val");
  EXPECT_EQ(r.inputs[1].count, 2);
  // A shard whose header claims more tokens than it holds is rejected by name.
  write_shard(tr, {1, 2}, 5);
  EXPECT_TRUE(has(prep_error<IoError>(o), "truncated")) << prep_error<IoError>(o);
  // Text and shards mixed.
  const std::string txt = scratch("mixed.txt");
  std::ofstream(txt) << "hello";
  o.inputs = {va, txt};
  EXPECT_TRUE(has(prep_error<ConfigError>(o), "inputs mix llm.c token shards")) << prep_error<ConfigError>(o);
}

TEST(Prep, Llama3ShardsKeepTheirIdsInAnInt32File) {
  // Ids past uint16, up to the last of the 128256 of llama-3.
  const std::string tr = scratch("tiny_shakespeare_train.bin"), va = scratch("tiny_shakespeare_val.bin"),
                    out = scratch("l3.h5");
  write_llama3_shard(tr, {128000, 9906, 65536, 70000, 128255, 0});
  write_llama3_shard(va, {128000, 1, 2});
  PrepOptions o;
  o.inputs = {tr, va};
  o.output = out;
  o.force = true;  // prepped again below over the same output
  const PrepResult r = prep_token_file(o);
  EXPECT_EQ(r.tokenizer, "llama3");
  EXPECT_EQ(r.vocab_size, 128256);
  EXPECT_EQ(read_split(out, "train"), (std::vector<std::int32_t>{128000, 9906, 65536, 70000, 128255, 0}));
  EXPECT_EQ(read_split(out, "val"), (std::vector<std::int32_t>{128000, 1, 2}));
  EXPECT_EQ(TokenFileReader(out).info().tokenizer, "llama3");
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[0].format, "llm.c llama-3 token shard (version 7)");
  EXPECT_EQ(r.inputs[1].split, "val");
  EXPECT_EQ(r.inputs[1].reason, "'val' (or 'valid', 'validation') in its name");
  // Naming the kind is allowed; another kind is refused by name, never tokenised as text or bytes.
  o.tokenizer = "llama3";
  EXPECT_EQ(prep_error<ConfigError>(o), "");
  for (const char* k : {"byte", "gpt2", "bpe"}) {
    o.tokenizer = k;
    const std::string e = prep_error<ConfigError>(o);
    EXPECT_TRUE(has(e, "is an llm.c llama-3 token shard, already llama3-tokenised: --tokenizer " + std::string(k) +
                           " does not apply"))
        << e;
  }
  // The explicit way to take the bytes anyway.
  o.tokenizer = "byte";
  o.binary = true;
  const PrepResult b = prep_token_file(o);
  EXPECT_EQ(b.tokenizer, "byte");
  EXPECT_EQ(b.n_train + b.n_val, 2 * 1024 + 9 * 4);
  EXPECT_EQ(b.inputs[0].format, "raw bytes (--binary)");
  o.tokenizer = "char";
  EXPECT_TRUE(has(prep_error<ConfigError>(o), "--binary reads every input's raw bytes: it needs --tokenizer byte"));
  // A token outside the vocabulary, a shard shorter than its header says.
  o.binary = false;
  o.tokenizer = "";  // not given: the shards' own kind
  write_llama3_shard(tr, {1, 128256});
  EXPECT_TRUE(has(prep_error<IoError>(o), "token 1 = 128256 is outside the llama-3 vocabulary of 128256"))
      << prep_error<IoError>(o);
  write_shard(tr, {1, 2}, 3, 20240801, 7);
  EXPECT_TRUE(has(prep_error<IoError>(o), "header says 3 tokens of 4 bytes, the file holds 2")) << prep_error<IoError>(o);
  // An explicit --tokenizer char is not the shards' kind: refused, never silently ignored.
  write_llama3_shard(tr, {1, 2});
  o.tokenizer = "char";
  EXPECT_TRUE(has(prep_error<ConfigError>(o), "--tokenizer char does not apply")) << prep_error<ConfigError>(o);
  // --tokenizer bpe --vocab-size N with shards: the tokenizer is what is wrong, not the vocab size.
  o.tokenizer = "bpe";
  o.vocab_size = 300;
  EXPECT_TRUE(has(prep_error<ConfigError>(o), "--tokenizer bpe does not apply")) << prep_error<ConfigError>(o);
  o.vocab_size.reset();
  // The same file twice (by another name too) would count its tokens twice.
  o.tokenizer = "";
  const std::vector<std::string> inputs = o.inputs;
  o.inputs.push_back(inputs.front());
  EXPECT_TRUE(has(prep_error<ConfigError>(o), "is given twice")) << prep_error<ConfigError>(o);
  o.inputs = inputs;
}

TEST(Prep, ShardSplitFollowsLlmcNaming) {
  for (const char* v : {"tiny_shakespeare_val.bin", "fineweb_val_000000.bin", "edu_fineweb_val_000000.bin",
                        "TinyStories_val.bin", "/data/x/shard-VAL-3.bin", "owt_validation.bin", "val.bin",
                        "wikitext_valid.bin", "data-valid-000.bin"})
    EXPECT_EQ(shard_split_by_name(v), "val") << v;
  for (const char* t : {"tiny_shakespeare_train.bin", "fineweb_train_000001.bin", "TinyStories_train.bin"})
    EXPECT_EQ(shard_split_by_name(t), "train") << t;
  // "val" must be a word of the name: not a part of another word, not a directory.
  for (const char* n : {"interval_data.bin", "x_values.bin", "eval_000.bin", "/val/shard_000.bin", "shard.bin"})
    EXPECT_EQ(shard_split_by_name(n), "") << n;
  EXPECT_THROW(shard_split_by_name("x_val_train.bin"), ConfigError);

  // llm.c's own names (NAME_val.bin): the validation tokens are /val, exactly.
  const std::string va = scratch("tinyshakespeare_val.bin"), tr = scratch("tinyshakespeare_train.bin"),
                    out = scratch("ts.h5");
  write_shard(va, {5, 6, 7}, 3);
  write_shard(tr, {1, 2, 3, 4, 5, 6, 7, 8}, 8);
  PrepOptions o;
  o.inputs = {va, tr};  // the order llm.c writes them in
  o.output = out;
  o.force = true;  // prepped again below over the same output
  const PrepResult r = prep_token_file(o);
  EXPECT_EQ(read_split(out, "val"), (std::vector<std::int32_t>{5, 6, 7}));
  EXPECT_EQ(read_split(out, "train"), (std::vector<std::int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(r.inputs[0].split, "val");
  EXPECT_EQ(r.inputs[1].split, "train");
  EXPECT_EQ(r.inputs[1].reason, "'train' in its name");

  // No validation shard: /val is the tail of the training tokens, and each input says so.
  const std::string a = scratch("corpus_000.bin"), b = scratch("corpus_001.bin");
  write_shard(a, {1, 2, 3, 4, 5}, 5);
  write_shard(b, {6, 7, 8, 9, 10}, 5);
  o.inputs = {a, b};
  const PrepResult s = prep_token_file(o);
  EXPECT_EQ(s.n_train, 9);
  EXPECT_EQ(s.n_val, 1);
  EXPECT_EQ(s.inputs[0].split, "train+val");
  EXPECT_TRUE(has(s.inputs[0].reason, "no validation shard")) << s.inputs[0].reason;

  // Only validation shards: no training data, said so.
  o.inputs = {va};
  EXPECT_TRUE(has(prep_error<ConfigError>(o), "no training shard: every input is named as validation"));
  o.inputs = {va, scratch("x_val_train.bin")};
  write_shard(o.inputs[1], {1, 2}, 2);
  EXPECT_TRUE(has(prep_error<ConfigError>(o), "its name says both train and val"));
}

TEST(Prep, AnEmptyShardIsRefusedByName) {
  const std::string empty = scratch("fw_train_000002.bin"), va = scratch("fw_val_000000.bin");
  write_shard(empty, {}, 0);
  write_shard(va, {9, 8}, 2);
  PrepOptions o;
  o.inputs = {empty, va};
  o.output = scratch("empty.h5");
  const std::string e = prep_error<ConfigError>(o);
  EXPECT_TRUE(has(e, "llm.c GPT-2 shard '" + empty + "' holds no tokens")) << e;
  EXPECT_FALSE(has(e, "no training shard")) << e;
  write_llama3_shard(empty, {});
  o.inputs = {empty};
  EXPECT_TRUE(has(prep_error<ConfigError>(o), "llm.c llama-3 shard '" + empty + "' holds no tokens"));
}

TEST(Prep, BinaryInputsAreNamedNotTokenised) {
  PrepOptions o;
  o.output = scratch("bin.h5");
  // llm.c files that are no token shards, and shards of versions prep does not know.
  const std::string f = scratch("hellaswag_val.bin");
  write_shard(f, {1, 2}, 2, 20240522, 1);
  for (const char* k : {"char", "byte"}) {
    o.inputs = {f};
    o.tokenizer = k;
    const std::string e = prep_error<ConfigError>(o);
    EXPECT_TRUE(has(e, "is an llm.c evaluation file (HellaSwag/MMLU examples), not a token shard")) << e;
    EXPECT_TRUE(has(e, "--tokenizer byte --binary")) << e;
  }
  o.tokenizer = "char";
  write_shard(f, {1, 2}, 2, 20240520, 2);
  EXPECT_TRUE(has(prep_error<ConfigError>(o), "llm.c GPT-2 token shard of version 2, which prep does not know"));
  write_shard(f, {1, 2}, 2, 20240801, 1);
  EXPECT_TRUE(has(prep_error<ConfigError>(o), "llm.c llama-3 token shard of version 1"));
  // Shards of both formats.
  const std::string g = scratch("g_train.bin"), l = scratch("l_train.bin");
  write_shard(g, {1, 2}, 2);
  write_llama3_shard(l, {1, 2});
  o.inputs = {g, l};
  EXPECT_TRUE(has(prep_error<ConfigError>(o), "inputs mix llm.c GPT-2 shards")) << prep_error<ConfigError>(o);
  // An HDF5 file (a token file) and NUL bytes in what looks like text.
  TokenFileInfo info;
  info.tokenizer = "byte";
  info.vocab_size = 256;
  const std::string h5 = scratch("tokens_as_input.h5");
  write_token_file(h5, info, {1, 2, 3}, {4, 5});
  o.inputs = {h5};
  EXPECT_TRUE(has(prep_error<ConfigError>(o), "is an HDF5 file")) << prep_error<ConfigError>(o);
  const std::string nul = scratch("nul.txt");
  {
    std::ofstream out(nul, std::ios::binary);
    out << "some text";
    out.put('\0');
    out << "more";
  }
  for (const char* k : {"char", "byte", "bpe"}) {
    o.inputs = {nul};
    o.tokenizer = k;
    o.vocab_size = std::string(k) == "bpe" ? std::optional<std::int64_t>(300) : std::nullopt;
    EXPECT_TRUE(has(prep_error<ConfigError>(o), "is a binary file (a NUL byte at offset 9), not text")) << k;
  }
  o.vocab_size.reset();
  o.tokenizer = "byte";
  o.binary = true;
  const PrepResult r = prep_token_file(o);  // 14 bytes: 12 train, 2 val
  EXPECT_EQ(r.n_train, 12);
  EXPECT_EQ(r.n_val, 2);
  EXPECT_EQ(detect_input_format(nul).kind, InputFormat::Kind::text);  // by its header; the NUL is the reader's check
  EXPECT_EQ(detect_input_format(h5).kind, InputFormat::Kind::binary);
}

TEST(TokenFile, RejectsMissingForeignAndBadIds) {
  EXPECT_THROW(TokenDataset("/nonexistent.h5", 1.0), IoError);
  const std::string junk = scratch("junk.h5");
  std::ofstream(junk) << "not hdf5";
  try {
    TokenDataset d(junk, 1.0);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("not an HDF5 file"), std::string::npos);
  }
  TokenFileInfo info;
  info.tokenizer = "byte";
  info.vocab_size = 4;
  const std::string bad = scratch("bad.h5");
  write_token_file(bad, info, {0, 1, 2, 9, 1}, {0, 1});
  EXPECT_THROW(TokenDataset(bad, 1.0), IoError);   // checked at load when cached
  TokenDataset lazy(bad, 0.0);                      // not cached: checked per read
  std::vector<std::int32_t> v(5);
  EXPECT_NO_THROW(lazy.read("train", 0, 3, v.data()));
  EXPECT_THROW(lazy.read("train", 2, 3, v.data()), IoError);
}

TEST(Sampler, EachEpochIsAPermutation) {
  for (std::int64_t n_tokens : {5, 17, 100, 1000}) {
    Sampler s(42, n_tokens, 4);
    const std::int64_t n = s.num_windows();
    for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
      std::set<std::int64_t> seen;
      for (std::int64_t i = 0; i < n; ++i) seen.insert(s.offset(epoch * n + i));
      EXPECT_EQ(static_cast<std::int64_t>(seen.size()), n);
      EXPECT_EQ(*seen.begin(), 0);
      EXPECT_EQ(*seen.rbegin(), n - 1);
    }
  }
}

TEST(Sampler, PureFunctionOfSeedAndIndex) {
  Sampler a(7, 100000, 64), b(7, 100000, 64), c(8, 100000, 64);
  int same = 0;
  for (std::int64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(a.offset(i), b.offset(i));
    same += a.offset(i) == c.offset(i) ? 1 : 0;
  }
  EXPECT_LT(same, 5);
  // Consecutive samples are not consecutive windows (a shuffled order).
  int adjacent = 0;
  for (std::int64_t i = 0; i < 1000; ++i) adjacent += std::llabs(a.offset(i + 1) - a.offset(i)) == 1 ? 1 : 0;
  EXPECT_LT(adjacent, 5);
}

TEST(LrSchedule, MatchesNanoGptGetLr) {
  LrSchedule s{1e-3, 1e-4, 100, 2000};
  auto nano = [](std::int64_t it) {  // nanoGPT train.py get_lr(), lr_decay_iters = max_iters = 2000
    const double lr = 1e-3, min_lr = 1e-4;
    if (it < 100) return lr * (it + 1) / (100 + 1);
    if (it > 2000) return min_lr;
    const double r = (it - 100) / double(2000 - 100);
    return min_lr + 0.5 * (1.0 + std::cos(M_PI * r)) * (lr - min_lr);
  };
  for (std::int64_t it : {0, 1, 50, 99, 100, 101, 1000, 1999, 2000, 2001}) EXPECT_DOUBLE_EQ(s.at(it), nano(it)) << it;
  EXPECT_DOUBLE_EQ(s.at(100), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(2000), 1e-4);
}

}  // namespace
}  // namespace trident
