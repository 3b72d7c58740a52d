// Deck parsing and validation: every rejection names the key; overrides beat the file; the
// resolved deck round-trips.
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/tp_partition.hpp"

#include <gtest/gtest.h>

#include <sstream>

namespace trident {
namespace {

const char* kDeck = R"(
[model]
n_layer = 2
n_head = 4
n_embd = 64
block_size = 32
[parallel]
dp = auto
[train]
global_batch_size = 16
max_steps = 10
[data]
path = data/x.h5
)";

std::string error_of(const std::string& text, int ranks, const std::vector<std::string>& ov = {}) {
  try {
    Config c = parse_deck_text(text, "t", ov);
    validate(c, ranks);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ParsesAndResolvesAutoDp) {
  Config c = parse_deck_text(kDeck, "t");
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.parallel.dp, 0);
  validate(c, 4);
  EXPECT_EQ(c.parallel.dp, 4);
  EXPECT_EQ(c.train.micro_batch_size, 4);  // 16 / dp
  EXPECT_EQ(c.train.out_dir, "runs/t");
}

TEST(Config, OverridesTakePrecedenceOverTheFile) {
  Config c = parse_deck_text(kDeck, "t", {"--train.max_steps=99", "model.n_layer=3"});
  EXPECT_EQ(c.train.max_steps, 99);
  EXPECT_EQ(c.model.n_layer, 3);
}

TEST(Config, TheLastOfRepeatedOverridesWins) {
  // Job scripts append their own overrides after the user's (jobscripts/chain.sh).
  Config c = parse_deck_text(kDeck, "t", {"--train.max_steps=5", "train.lr=0.5", "--train.max_steps=7"});
  EXPECT_EQ(c.train.max_steps, 7);
  EXPECT_DOUBLE_EQ(c.train.lr, 0.5);
  // The deck file itself may not give a key twice (a typo protection).
  EXPECT_NE(error_of(std::string(kDeck) + "[train]\nmax_steps = 3\n", 1).find("'max_steps' in section [train] is given twice"),
            std::string::npos);
  // ... naming both lines (kDeck's max_steps is on line 11; the appended one on line 15).
  EXPECT_NE(error_of(std::string(kDeck) + "[train]\nmax_steps = 3\n", 1).find(", lines 11 and 15: key"), std::string::npos)
      << error_of(std::string(kDeck) + "[train]\nmax_steps = 3\n", 1);
}

TEST(Config, AnEmptyOverrideValueIsAcceptedAsInADeck) {
  // "--train.out_dir=" asks for the default run directory, as "out_dir =" in a deck does.
  Config c = parse_deck_text(kDeck, "t", {"--train.out_dir=/elsewhere", "--train.out_dir="});
  EXPECT_TRUE(c.train.out_dir.empty() || c.train.out_dir == "runs/t") << c.train.out_dir;
  c = parse_deck_text(kDeck, "t", {"--train.out_dir=", "--train.out_dir=/x"});
  EXPECT_EQ(c.train.out_dir, "/x");
  // An empty number is still a bad value, named.
  EXPECT_NE(error_of(kDeck, 1, {"--model.n_layer="}).find("n_layer"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.nope="}).find("'nope' in section [train]"), std::string::npos);
}

TEST(Config, RejectsUnknownKeysNamingThem) {
  EXPECT_NE(error_of(std::string(kDeck) + "[model]\nn_layers = 3\n", 1).find("'n_layers' in section [model]"),
            std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.nope=1"}).find("'nope' in section [train]"), std::string::npos);
}

TEST(Config, ErrorsSayWhereTheKeyCameFromAndWhatWasMeant) {
  // A deck key: its line, and the nearest real key.
  std::string e = error_of(std::string(kDeck) + "[model]\nn_layers = 3\n", 1);
  EXPECT_NE(e.find("deck 't', line 15: unknown key 'n_layers' in section [model]"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'n_layer' in section [model]?"), std::string::npos) << e;
  // A command-line key is not blamed on the deck; a key in the wrong section is found in the right one.
  e = error_of(kDeck, 1, {"--model.lr=3"});
  EXPECT_EQ(e.find("deck 't'"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'lr' in section [model] given on the command line"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'lr' in section [train]?"), std::string::npos) << e;
  // Nothing close: no suggestion.
  e = error_of(kDeck, 1, {"--train.completely_unrelated=1"});
  EXPECT_EQ(e.find("did you mean"), std::string::npos) << e;
  // A section no key has: the sections, not a key of some other one.
  e = error_of(kDeck, 1, {"--zzz.a=1"});
  EXPECT_NE(e.find("there is no section [zzz]; the sections are [model], [parallel], [train], [data], [checkpoint]"),
            std::string::npos) << e;
  EXPECT_EQ(e.find("did you mean"), std::string::npos) << e;
  e = error_of(kDeck, 1, {"--.a=1"});
  EXPECT_NE(e.find("the section name before the dot is missing"), std::string::npos) << e;
  e = error_of(kDeck, 1, {"--model.=1"});
  EXPECT_NE(e.find("the key name after the dot is missing"), std::string::npos) << e;
  // A file that is not text (an executable): said so, without quoting its bytes; a UTF-8
  // byte-order mark before the first line is no error.
  e = error_of(std::string("\x7f" "ELF\x02\x01\x01") + std::string(1, '\0') + "rest", 1);
  EXPECT_NE(e.find("deck 't' is not a text file (byte 0 is 0x7f)"), std::string::npos) << e;
  EXPECT_EQ(error_of(std::string("\xEF\xBB\xBF") + kDeck, 1), "");
  // A bad value on the command line is a command-line error.
  e = error_of(kDeck, 1, {"--train.lr=fast"});
  EXPECT_NE(e.find("command line: bad value for 'lr' in section [train]"), std::string::npos) << e;
  // The same for a key whose value is one of a few names, checked after parsing: the command line
  // is blamed on the command line, a deck value gets its line.
  for (const char* ov : {"--train.dtype=half", "--parallel.pp_schedule=zigzag", "--checkpoint.on_error=retry",
                         "--parallel.comm_backend=gloo", "--parallel.dp=two"}) {
    e = error_of(kDeck, 1, {ov});
    EXPECT_EQ(e.rfind("command line: ", 0), 0u) << ov << ": " << e;
    EXPECT_EQ(e.find("deck 't'"), std::string::npos) << ov << ": " << e;
  }
  e = error_of(std::string(kDeck) + "[train]\ndtype = half\n", 1);
  EXPECT_NE(e.find("deck 't', line 15: [train] dtype = half: expected float or double"), std::string::npos) << e;
  // A syntax error names its line.
  e = error_of(std::string(kDeck) + "this is not a key\n", 1);
  EXPECT_NE(e.find("deck 't', line 14: syntax error"), std::string::npos) << e;
}

TEST(Config, RejectsWrongTypesNamingTheKey) {
  std::string e = error_of(std::string(kDeck) + "[train]\nlr = fast\n", 1);
  EXPECT_NE(e.find("'lr' in section [train]"), std::string::npos) << e;
  e = error_of(kDeck, 1, {"--model.n_layer=2.5"});
  EXPECT_NE(e.find("n_layer"), std::string::npos) << e;
}

TEST(Config, RejectsImpossibleValues) {
  EXPECT_NE(error_of(kDeck, 1, {"--model.n_embd=66"}).find("not divisible by [model] n_head"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 4, {"--parallel.dp=3"}).find("does not match the number of ranks"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 3, {"--parallel.tp=2"}).find("not divisible by tp * pp"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 2, {"--train.micro_batch_size=3"}).find("accumulated micro-batches"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.lr=-1"}).find("[train] lr"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--model.dropout=1"}).find("[model] dropout"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--parallel.dp=two"}).find("'dp' in section [parallel]"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 2, {"--parallel.tp=2", "--model.n_head=3", "--model.n_embd=63"}).find("n_head"),
            std::string::npos);
}

TEST(Config, CommBackendIsAChoiceParsedOnce) {
  Config c = parse_deck_text(kDeck, "t");
  EXPECT_EQ(c.parallel.comm_backend, CommBackend::automatic);  // the default: auto
  for (CommBackend b : {CommBackend::automatic, CommBackend::mpi, CommBackend::nccl}) {
    c = parse_deck_text(kDeck, "t", {std::string("--parallel.comm_backend=") + name_of(b)});
    EXPECT_EQ(c.parallel.comm_backend, b) << name_of(b);
    validate(c, 2);  // no rank count or build makes a name invalid; the process grid decides
    EXPECT_NE(c.to_ini().find(std::string("comm_backend = ") + name_of(b) + "\n"), std::string::npos) << c.to_ini();
    EXPECT_EQ(parse_deck_text(c.to_ini(), "t").parallel.comm_backend, b);
  }
  EXPECT_NE(error_of(kDeck, 1, {"--parallel.comm_backend=gloo"}).find("[parallel] comm_backend = gloo: expected auto, mpi or nccl"),
            std::string::npos)
      << error_of(kDeck, 1, {"--parallel.comm_backend=gloo"});
  EXPECT_NE(error_of(std::string(kDeck) + "[parallel]\ncomm_backend = NCCL\n", 1).find("comm_backend = NCCL"),
            std::string::npos);
}

// [train] compute_dtype = bf16 (bf16 GEMM inputs) exists only where the GEMMs have a bf16 path: a
// CUDA build or a host build with oneDNN accepts it, another host build refuses it at validation,
// naming the key and the way out. (Whether the CPU has the instructions is the trainer's check:
// tests/cli/test_cli_bf16.sh.)
TEST(Config, ComputeDtypeBf16NeedsCudaOrOneDnn) {
  Config c = parse_deck_text(kDeck, "t", {"--train.compute_dtype=bf16"});
  EXPECT_EQ(c.train.compute_dtype, Precision::bf16);
  const std::string err = error_of(kDeck, 1, {"--train.compute_dtype=bf16"});
  if (TRIDENT_HAVE_CUDA || TRIDENT_HAVE_ONEDNN) {
    EXPECT_EQ(err, "");
  } else {
    EXPECT_NE(err.find("[train] compute_dtype = bf16"), std::string::npos) << err;
    EXPECT_NE(err.find("no oneDNN"), std::string::npos) << err;
  }
  EXPECT_NE(error_of(kDeck, 1, {"--train.compute_dtype=bf16", "--train.dtype=double"}).find("needs [train] dtype = float"),
            std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.compute_dtype=double"}).find("expected float or bf16"), std::string::npos);
  EXPECT_EQ(parse_deck_text(kDeck, "t").train.compute_dtype, Precision::f32);
}

// The numerics policy's keys (train/numerics.hpp): defaults keep today's behaviour (stop on a
// non-finite step, the detector only warns), choices parse once, impossible values are refused.
TEST(Config, NumericsPolicyKeys) {
  Config c = parse_deck_text(kDeck, "t");
  EXPECT_EQ(c.train.nonfinite, NonfiniteAction::stop);
  EXPECT_FALSE(c.train.spike_rollback);
  c = parse_deck_text(kDeck, "t", {"--train.nonfinite=skip", "--train.max_consecutive_skips=2",
                                   "--train.spike_window=16", "--train.spike_rollback=true",
                                   "--checkpoint.interval=5"});
  validate(c, 1);
  EXPECT_EQ(c.train.nonfinite, NonfiniteAction::skip);
  EXPECT_EQ(parse_deck_text(c.to_ini(), "t").train.nonfinite, NonfiniteAction::skip);
  EXPECT_NE(c.to_ini().find("nonfinite = skip\n"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.nonfinite=ignore"}).find("[train] nonfinite = ignore: expected stop or skip"),
            std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.max_consecutive_skips=0"}).find("max_consecutive_skips"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.spike_window=1"}).find("spike_window"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.spike_zscore=0"}).find("spike_zscore"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.spike_rollback=true", "--checkpoint.interval=0"}).find("[checkpoint] interval > 0"),
            std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.spike_rollback=true", "--train.spike_window=0", "--checkpoint.interval=5"})
                .find("spike_window > 0"),
            std::string::npos);
}

// fp16 working parameters and reduction (with dynamic loss scaling): the choices parse once, the
// other spellings name the right one, the loss_scale_* keys are range-checked naming the key.
TEST(Config, Fp16AndTheLossScaleKeys) {
  Config c = parse_deck_text(kDeck, "t", {"--train.param_dtype=fp16", "--train.reduce_dtype=fp16"});
  validate(c, 1);
  EXPECT_EQ(c.train.param_dtype, Precision::fp16);
  EXPECT_EQ(c.train.reduce_dtype, Precision::fp16);
  EXPECT_TRUE(uses_loss_scaling(c.train));
  EXPECT_EQ(parse_deck_text(c.to_ini(), "t").train.param_dtype, Precision::fp16);
  EXPECT_NE(c.to_ini().find("param_dtype = fp16\n"), std::string::npos);
  EXPECT_NE(c.to_ini().find("loss_scale_init = 65536\n"), std::string::npos);
  EXPECT_FALSE(uses_loss_scaling(parse_deck_text(kDeck, "t", {"--train.param_dtype=bf16"}).train));
  for (const char* name : {"float16", "half"})
    EXPECT_NE(error_of(kDeck, 1, {std::string("--train.param_dtype=") + name}).find("write fp16"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.param_dtype=int8"}).find("expected float, bf16 or fp16"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.param_dtype=fp16", "--train.dtype=double"}).find(
                "[train] param_dtype/reduce_dtype = fp16 needs [train] dtype = float"),
            std::string::npos);
  const std::pair<const char*, const char*> bad[] = {
      {"--train.loss_scale_init=0", "[train] loss_scale_init = 0 must be > 0"},
      {"--train.loss_scale_init=1e39", "loss_scale_init = 1e+39 must be > 0 and within float"},
      {"--train.loss_scale_min=0", "[train] loss_scale_min = 0 must be > 0"},
      {"--train.loss_scale_min=1e6", "at most [train] loss_scale_init = 65536"},
      {"--train.loss_scale_growth=1", "[train] loss_scale_growth = 1 must be > 1"},
      {"--train.loss_scale_backoff=1", "[train] loss_scale_backoff = 1 must be between 0 and 1"},
      {"--train.loss_scale_backoff=0", "[train] loss_scale_backoff = 0 must be between 0 and 1"},
      {"--train.loss_scale_growth_interval=0", "[train] loss_scale_growth_interval = 0 must be >= 1"},
      {"--train.loss_scale_init=nan", "is not a finite number"}};
  for (const auto& [arg, want] : bad) EXPECT_NE(error_of(kDeck, 1, {arg}).find(want), std::string::npos) << arg;
}

TEST(Config, GradientAccumulationCount) {
  Config c = parse_deck_text(kDeck, "t", {"--train.micro_batch_size=2"});
  validate(c, 2);
  EXPECT_EQ(c.train.global_batch_size / (c.train.micro_batch_size * c.parallel.dp), 4);
}

TEST(Config, ResolvedDeckRoundTrips) {
  Config c = parse_deck_text(kDeck, "t", {"--train.lr=3e-4", "--model.bias=true"});
  validate(c, 2);
  Config d = parse_deck_text(c.to_ini(), "t");
  validate(d, 2);
  EXPECT_EQ(c.to_ini(), d.to_ini());
  EXPECT_EQ(d.train.lr, 3e-4);
  EXPECT_TRUE(d.model.bias);
  EXPECT_EQ(d.parallel.dp, 2);
}

/// Every boolean key of the deck, found in the resolved deck (its value prints as true/false), so
/// a boolean key added later is covered without editing this test.
std::vector<std::string> boolean_keys() {
  Config c = parse_deck_text(kDeck, "t");
  validate(c, 1);
  std::istringstream in(c.to_ini());
  std::string line, section;
  std::vector<std::string> keys;
  while (std::getline(in, line)) {
    if (line.rfind("[", 0) == 0) section = line.substr(1, line.find(']') - 1);
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    const std::string value = line.substr(eq + 3);
    if (value == "true" || value == "false") keys.push_back(section + "." + line.substr(0, eq));
  }
  return keys;
}

TEST(Config, AnEmptyBooleanIsRefusedNamingTheKey) {
  const std::vector<std::string> keys = boolean_keys();
  ASSERT_GE(keys.size(), 8u);  // bias, prefetch, overlap_reduce, sample_log, save_final, async, file_locking, verify_on_resume
  for (const std::string& k : keys) {
    const std::string section = k.substr(0, k.find('.')), key = k.substr(k.find('.') + 1);
    // On the command line ("--model.bias=") and in a deck ("bias =" under its section).
    std::string e = error_of(kDeck, 1, {"--" + k + "="});
    EXPECT_NE(e.find("command line: bad value for '" + key + "' in section [" + section + "]: the value is empty"),
              std::string::npos)
        << k << ": " << e;
    EXPECT_NE(e.find("expected a boolean"), std::string::npos) << e;
    e = error_of(std::string(kDeck) + "[" + section + "]\n" + key + " =\n", 1);
    EXPECT_NE(e.find("deck 't', line 15: bad value for '" + key + "' in section [" + section + "]: the value is empty"),
              std::string::npos)
        << k << ": " << e;
    EXPECT_NE(error_of(kDeck, 1, {"--" + k + "=maybe"}).find("'" + key + "'"), std::string::npos) << k;
  }
  // The words a boolean takes, in any case; an empty string value is still fine.
  for (const char* yes : {"true", "TRUE", "yes", "on", "1"})
    EXPECT_TRUE(parse_deck_text(kDeck, "t", {std::string("--model.bias=") + yes}).model.bias) << yes;
  for (const char* no : {"false", "False", "no", "off", "0"})
    EXPECT_FALSE(parse_deck_text(kDeck, "t", {"--model.bias=true", std::string("--model.bias=") + no}).model.bias) << no;
  EXPECT_EQ(error_of(kDeck, 1, {"--train.out_dir="}), "");
}

TEST(Config, RefusesValuesTheRunCannotRepresent) {
  // With dtype = float, the scalars AdamW casts to float must stay finite, non-zero and below 1.
  EXPECT_NE(error_of(kDeck, 1, {"--train.lr=1e39"}).find("[train] lr = 1e+39 is outside the range of float"),
            std::string::npos)
      << error_of(kDeck, 1, {"--train.lr=1e39"});
  EXPECT_NE(error_of(kDeck, 1, {"--train.eps=1e-45"}).find("[train] eps = 1e-45 is outside the range of float"),
            std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.min_lr=1e-40"}).find("[train] min_lr"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.beta2=0.999999999"}).find("[train] beta2 = 0.999999999 rounds to 1 in float"),
            std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.beta1=0.9999999999"}).find("[train] beta1"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.lr=1e36", "--train.beta1=0.999"}).find("lr / (1 - beta1)"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.lr=1e30", "--train.weight_decay=1e10"}).find("lr * weight_decay"),
            std::string::npos);
  // In double the same values are representable.
  for (const char* v : {"--train.lr=1e39", "--train.eps=1e-45", "--train.beta2=0.999999999"})
    EXPECT_EQ(error_of(kDeck, 1, {"--train.dtype=double", "--train.min_lr=0", v}), "") << v;
  // Limits that do not depend on the dtype: the 32-bit step key, int64 token counts.
  EXPECT_EQ(error_of(kDeck, 1, {"--train.max_steps=4294967295"}), "");
  EXPECT_NE(error_of(kDeck, 1, {"--train.max_steps=4294967296"}).find("[train] max_steps = 4294967296 is larger"),
            std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.max_steps=4000000000", "--train.global_batch_size=2000000000"})
                .find("tokens, more than an int64"),
            std::string::npos);
  // Sequences per step and per micro-batch are int in the executor: no wrap to a small batch.
  EXPECT_EQ(error_of(kDeck, 1, {"--train.global_batch_size=2147483647", "--train.max_steps=1"}), "");
  EXPECT_NE(error_of(kDeck, 1, {"--train.global_batch_size=4294967298"})
                .find("[train] global_batch_size = 4294967298 is larger than 2147483647"),
            std::string::npos);
  // Llama: norm_eps is added in float (beyond FLT_MAX every RMSNorm output would be 0), and the
  // rounding of ffn_hidden = 0 must not wrap (2^31 - 1 once rounded 8C/3 up to a width of 0).
  const std::vector<std::string> llama = {"--model.arch=llama", "--model.n_kv_head=2"};
  auto with = [&](std::vector<std::string> v, const char* x) { v.push_back(x); return v; };
  EXPECT_EQ(error_of(kDeck, 1, llama), "");
  EXPECT_NE(error_of(kDeck, 1, with(llama, "--model.norm_eps=1e39")).find("[model] norm_eps = 1e+39 is outside the range of float"),
            std::string::npos);
  EXPECT_EQ(error_of(kDeck, 1, with(with(llama, "--model.norm_eps=1e39"), "--train.dtype=double")).find("norm_eps"),
            std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, with(llama, "--model.ffn_multiple_of=2147483647"))
                .find("[model] ffn_multiple_of = 2147483647 is larger than 1048576"),
            std::string::npos);
  ModelConfig m;
  m.n_embd = 64;
  m.ffn_multiple_of = 2147483647;
  EXPECT_EQ(m.ffn_width(), 2147483647);  // saturates, never wraps to a small width
  m.ffn_multiple_of = 256;
  EXPECT_EQ(m.ffn_width(), 256);  // 2 * 4 * 64 / 3 = 170, rounded up to 256
  // Values past the integer type are refused by the parser, naming the key.
  EXPECT_NE(error_of(kDeck, 1, {"--model.n_layer=99999999999"}).find("'n_layer' in section [model]"), std::string::npos);
  EXPECT_NE(error_of(kDeck, 1, {"--train.max_steps=99999999999999999999"}).find("'max_steps' in section [train]"),
            std::string::npos);
}

TEST(Config, DeckDifferencesListEveryChangedKeyInDeckOrder) {
  Config a = parse_deck_text(kDeck, "t");
  validate(a, 2);
  EXPECT_TRUE(deck_differences(a, a).empty());
  Config b = parse_deck_text(kDeck, "t", {"--train.lr=3e-4", "--model.bias=true", "--data.path=other.h5",
                                          "--train.micro_batch_size=4"});
  validate(b, 2);
  const std::vector<DeckDifference> d = deck_differences(a, b);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].name(), "model.bias");
  EXPECT_EQ(d[0].before, "false");
  EXPECT_EQ(d[0].after, "true");
  EXPECT_EQ(d[1].name(), "train.micro_batch_size");  // resolved: 16 / dp = 8 before
  EXPECT_EQ(d[1].before, "8");
  EXPECT_EQ(d[1].after, "4");
  EXPECT_EQ(d[2].name(), "train.lr");
  EXPECT_EQ(std::stod(d[2].before), 1e-3);  // the shortest text that round-trips
  EXPECT_EQ(std::stod(d[2].after), 3e-4);
  EXPECT_EQ(d[3].name(), "data.path");
  EXPECT_EQ(d[3].after, "other.h5");
  // A deck written and read back has no differences (what a checkpoint stores).
  EXPECT_TRUE(deck_differences(b, parse_deck_text(b.to_ini(), "t")).empty());
  // The resolved dp is compared as a number.
  Config c = parse_deck_text(kDeck, "t");
  validate(c, 4);
  const auto dc = deck_differences(a, c);
  ASSERT_GE(dc.size(), 1u);
  EXPECT_EQ(dc[0].name(), "parallel.dp");
  EXPECT_EQ(dc[0].before + ">" + dc[0].after, "2>4");
}

TEST(Config, AllowChangedNamesDeckKeys) {
  EXPECT_EQ(resolve_deck_key("seed"), "train.seed");
  EXPECT_EQ(resolve_deck_key("data.path"), "data.path");
  EXPECT_EQ(resolve_deck_key("path"), "data.path");
  TrainConfig t;
  t.allow_changed = " max_steps, data.path ,,lr";
  EXPECT_EQ(allowed_changes(t), (std::vector<std::string>{"train.max_steps", "data.path", "train.lr"}));
  std::string e = error_of(kDeck, 1, {"--train.allow_changed=max_step"});
  EXPECT_NE(e.find("[train] allow_changed = max_step: 'max_step' is not a deck key"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'max_steps' in section [train]?"), std::string::npos) << e;
  EXPECT_NE(error_of(kDeck, 1, {"--train.allow_changed=train.nope"}).find("'train.nope' is not a deck key"),
            std::string::npos);
  EXPECT_EQ(error_of(kDeck, 1, {"--train.allow_changed=max_steps,seed"}), "");
}

TEST(Config, MissingDeckFile) {
  try {
    parse_deck("/nonexistent/deck.ini");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/deck.ini"), std::string::npos);
  }
}

TEST(Config, HelpListsEveryKey) {
  const std::string h = deck_help();
  for (const char* k : {"n_layer", "n_head", "n_embd", "block_size", "bias", "dropout", "dp", "tp", "pp",
                        "global_batch_size", "micro_batch_size", "max_steps", "stop_at_step", "time_limit_min", "lr",
                        "min_lr", "warmup_steps", "weight_decay", "beta1", "beta2", "grad_clip", "eval_interval",
                        "eval_iters", "seed", "out_dir", "compute_dtype", "path", "interval", "keep", "comm_backend",
                        "allow_changed"})
    EXPECT_NE(h.find(std::string(k) + " = "), std::string::npos) << k;
}

}  // namespace
}  // namespace trident

namespace trident {

// tp_partition_numel counts without building the runs: it must equal the sum of tp_runs' counts
// (the oracle) for every partition, padded ones (a vocabulary not divisible by tp) included, and
// refuse exactly what tp_runs refuses.
TEST(TpPartition, NumelIsTheSumOfTheRuns) {
  struct Case {
    std::vector<std::int64_t> shape;
    int split_dim, groups;
  };
  const std::vector<Case> cases = {{{65, 12}, 0, 1},    {{12, 65}, 1, 1},  {{48, 8}, 0, 3},  {{4, 24, 6}, 1, 2},
                                   {{4, 24, 6}, 2, 1},  {{7}, -1, 1},     {{100, 16}, 0, 1}, {{3, 5}, 0, 1}};
  int checked = 0;
  for (const Case& c : cases)
    for (int P : {1, 2, 3, 4, 8})
      for (int r = 0; r < P; ++r) {
        std::int64_t sum = 0;
        bool refused = false;
        try {
          for (const trident::Run& run : tp_runs(c.shape, c.split_dim, c.groups, P, r)) sum += run.count;
        } catch (const Error&) {
          refused = true;
        }
        if (refused) {
          EXPECT_THROW(tp_partition_numel(c.shape, c.split_dim, c.groups, P, r), Error);
          continue;
        }
        EXPECT_EQ(tp_partition_numel(c.shape, c.split_dim, c.groups, P, r), sum)
            << "split_dim " << c.split_dim << " groups " << c.groups << " tp " << P << " rank " << r;
        ++checked;
      }
  EXPECT_GT(checked, 100);
}

}  // namespace trident
