// Data layer and schedule: tokenizers (char, byte, a trained bpe model), prep (text and llm.c
// shards), token files, the sampler's permutation property and the LR schedule against nanoGPT's
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

void write_shard(const std::string& path, const std::vector<std::uint16_t>& toks, std::int32_t claimed) {
  std::int32_t header[256] = {};
  header[0] = 20240520;
  header[1] = 1;
  header[2] = claimed;
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header), sizeof header);
  f.write(reinterpret_cast<const char*>(toks.data()), static_cast<std::streamsize>(toks.size() * 2));
}

TEST(Prep, LlmcShards) {
  const std::string tr = scratch("fw_train_000001.bin"), va = scratch("fw_val_000000.bin"), out = scratch("fw.h5");
  write_shard(tr, {1, 2, 50256, 7}, 4);
  write_shard(va, {9, 8}, 2);
  PrepOptions o;
  o.inputs = {tr, va};
  o.output = out;
  PrepResult r = prep_token_file(o);
  EXPECT_EQ(r.tokenizer, "gpt2");
  EXPECT_EQ(r.n_train, 4);
  EXPECT_EQ(r.n_val, 2);
  TokenDataset ds(out, 1.0);
  std::vector<std::int32_t> t(4);
  ds.read("train", 0, 4, t.data());
  EXPECT_EQ(t, (std::vector<std::int32_t>{1, 2, 50256, 7}));
  // A shard whose header claims more tokens than it holds is rejected by name.
  write_shard(tr, {1, 2}, 5);
  try {
    prep_token_file(o);
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos);
  }
  // Text and shards mixed.
  const std::string txt = scratch("mixed.txt");
  std::ofstream(txt) << "hello";
  o.inputs = {va, txt};
  EXPECT_THROW(prep_token_file(o), ConfigError);
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
