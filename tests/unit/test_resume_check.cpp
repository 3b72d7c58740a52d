// What `trident train --resume` does with a deck that differs from the checkpoint's
// (train/resume_check.hpp): every deck key has a class, each class gives its verdict, refused
// changes name themselves and the override, [train] allow_changed lets them through (never the
// model's shape), and the LR schedule keys report the jump of the next step's LR.
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "train/lr_schedule.hpp"
#include "train/resume_check.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <sstream>

namespace trident {
namespace {

const char* kDeck = R"(
[model]
n_layer = 2
n_head = 4
n_embd = 64
block_size = 32
[train]
global_batch_size = 16
max_steps = 10
warmup_steps = 2
[data]
path = data/x.h5
)";

Config deck(const std::vector<std::string>& overrides = {}, int ranks = 2) {
  Config c = parse_deck_text(kDeck, "t", overrides);
  validate(c, ranks);
  return c;
}

std::string refusal(const ResumeChanges& r) {
  try {
    r.require_allowed();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_TRUE(e.collective());
    return e.what();
  }
  return "";
}

TEST(ResumeCheck, EveryDeckKeyHasAClass) {
  std::istringstream in(deck().to_ini());
  std::string line, section;
  int keys = 0;
  while (std::getline(in, line)) {
    if (line.rfind("[", 0) == 0) section = line.substr(1, line.find(']') - 1);
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    ++keys;
    EXPECT_TRUE(change_class(section + "." + line.substr(0, eq)).has_value()) << section << "." << line.substr(0, eq);
  }
  EXPECT_GT(keys, 40);
  EXPECT_FALSE(change_class("train.no_such_key").has_value());
  for (const char* k : {"model.n_layer", "model.n_head", "model.n_embd", "model.block_size", "model.vocab_size", "model.bias"})
    EXPECT_EQ(change_class(k), ChangeClass::impossible) << k;
  for (const char* k : {"train.lr", "train.min_lr", "train.warmup_steps", "train.max_steps", "train.seed", "data.path"})
    EXPECT_EQ(change_class(k), ChangeClass::refused) << k;
  for (const char* k : {"train.global_batch_size", "train.beta1", "train.beta2", "train.eps", "train.weight_decay",
                        "train.grad_clip", "model.dropout", "train.dtype", "train.param_dtype", "train.reduce_dtype",
                        "train.compute_dtype"})
    EXPECT_EQ(change_class(k), ChangeClass::takes_effect) << k;
  for (const char* k : {"parallel.dp", "parallel.zero_stage", "train.micro_batch_size", "train.stop_at_step",
                        "train.time_limit_min", "train.out_dir", "checkpoint.interval", "data.cache_max_mb",
                        "train.nonfinite", "train.spike_window", "train.spike_rollback", "train.loss_scale_init",
                        "train.loss_scale_growth_interval", "train.loss_scale_growth", "train.loss_scale_backoff",
                        "train.loss_scale_min"})
    EXPECT_EQ(change_class(k), ChangeClass::same_math) << k;
}

TEST(ResumeCheck, TheSameDeckResumesSilently) {
  const ResumeChanges r = compare_resume_decks(deck(), deck(), 5, 80);
  EXPECT_TRUE(r.changes.empty());
  EXPECT_EQ(refusal(r), "");
  // allow_changed itself is about this resume, never a difference.
  EXPECT_TRUE(compare_resume_decks(deck(), deck({"--train.allow_changed=seed"}), 5, 80).changes.empty());
}

TEST(ResumeCheck, AScheduleChangeIsRefusedWithTheLrJumpUnlessAllowed) {
  const Config before = deck(), after = deck({"--train.max_steps=20"});
  const ResumeChanges r = compare_resume_decks(before, after, 5, 80);
  ASSERT_EQ(r.changes.size(), 1u);
  EXPECT_EQ(r.changes[0].cls, ChangeClass::refused);
  EXPECT_FALSE(r.changes[0].allowed);
  // The LR of the next update (iteration 5) under both schedules.
  const double lr0 = LrSchedule{1e-3, 1e-4, 2, 10}.at(5), lr1 = LrSchedule{1e-3, 1e-4, 2, 20}.at(5);
  const std::string jump = log::format("the LR of step 6 goes from %.4g to %.4g (%+.0f%%)", lr0, lr1,
                                       100.0 * (lr1 / lr0 - 1.0));
  EXPECT_NE(r.changes[0].effect.find(jump), std::string::npos) << r.changes[0].effect;
  const std::string e = refusal(r);
  EXPECT_NE(e.find("[train] max_steps 10 -> 20: refused; the LR schedule changes"), std::string::npos) << e;
  EXPECT_NE(e.find("--train.allow_changed=train.max_steps"), std::string::npos) << e;
  ASSERT_EQ(r.blocking().size(), 1u);

  const ResumeChanges ok = compare_resume_decks(before, deck({"--train.max_steps=20", "--train.allow_changed=max_steps"}), 5, 80);
  ASSERT_EQ(ok.changes.size(), 1u);
  EXPECT_TRUE(ok.changes[0].allowed);
  EXPECT_EQ(refusal(ok), "");
  EXPECT_NE(ok.lines()[0].find("takes effect (allowed by [train] allow_changed)"), std::string::npos) << ok.lines()[0];
  EXPECT_NE(ok.lines()[0].find(jump), std::string::npos);

  // In warmup the next LR is the same under both schedules: no "+0%" jump, the later steps differ.
  const ResumeChanges warm = compare_resume_decks(before, after, 0, 0);
  ASSERT_EQ(warm.changes.size(), 1u);
  EXPECT_EQ(warm.changes[0].cls, ChangeClass::refused);
  EXPECT_NE(warm.changes[0].effect.find("under both schedules, but the later steps' LRs differ"), std::string::npos)
      << warm.changes[0].effect;
  EXPECT_EQ(warm.changes[0].effect.find("+0%"), std::string::npos) << warm.changes[0].effect;
}

TEST(ResumeCheck, DataPathAndSeedAreRefusedTogetherAndNamed) {
  const ResumeChanges r = compare_resume_decks(deck(), deck({"--train.seed=7", "--data.path=other.h5"}), 5, 80);
  ASSERT_EQ(r.changes.size(), 2u);
  const std::string e = refusal(r);
  EXPECT_NE(e.find("[train] seed 1337 -> 7: refused"), std::string::npos) << e;
  EXPECT_NE(e.find("[data] path data/x.h5 -> other.h5: refused; consumed_samples (80) would index another token file"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("--train.allow_changed=train.seed,data.path"), std::string::npos) << e;
  // Allowing one leaves the other refused.
  const std::string e2 = refusal(compare_resume_decks(
      deck(), deck({"--train.seed=7", "--data.path=other.h5", "--train.allow_changed=path"}), 5, 80));
  EXPECT_NE(e2.find("--train.allow_changed=train.seed"), std::string::npos) << e2;
  EXPECT_EQ(e2.find("data.path"), std::string::npos) << e2;
  EXPECT_EQ(e2.find("[data] path"), std::string::npos) << e2;
  // Any other name whose file holds the tokens the checkpoint recorded (its content hash: the file
  // named from another working directory, a copy) is the same data: listed, not refused.
  const ResumeChanges copy = compare_resume_decks(deck(), deck({"--data.path=/elsewhere/copy.h5"}), 5, 80, true);
  ASSERT_EQ(copy.changes.size(), 1u);
  EXPECT_EQ(copy.changes[0].cls, ChangeClass::same_math);
  EXPECT_NE(copy.changes[0].effect.find("the same tokens"), std::string::npos) << copy.changes[0].effect;
  EXPECT_EQ(refusal(copy), "");
  // The same file named another way is no change of data.
  const ResumeChanges same = compare_resume_decks(deck(), deck({"--data.path=./data/../data/x.h5"}), 5, 80);
  ASSERT_EQ(same.changes.size(), 1u);
  EXPECT_EQ(same.changes[0].cls, ChangeClass::same_math);
  EXPECT_EQ(refusal(same), "");
  // A relative and an absolute name (or a link) of one existing file: the same file too; another
  // existing file is still refused.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("trident-rc-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "a.h5") << "a";
  std::ofstream(dir / "b.h5") << "b";
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  const ResumeChanges abs = compare_resume_decks(deck({"--data.path=a.h5"}), deck({"--data.path=" + (dir / "a.h5").string()}), 5, 80);
  const ResumeChanges other = compare_resume_decks(deck({"--data.path=a.h5"}), deck({"--data.path=" + (dir / "b.h5").string()}), 5, 80);
  std::filesystem::current_path(cwd);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(abs.changes.size(), 1u);
  EXPECT_EQ(abs.changes[0].cls, ChangeClass::same_math);
  EXPECT_NE(refusal(other), "");
}

TEST(ResumeCheck, OptimizerHyperparametersTakeEffectWithAWarning) {
  const ResumeChanges r = compare_resume_decks(
      deck(), deck({"--train.eps=1e-6", "--train.weight_decay=0.05", "--train.beta2=0.95", "--train.global_batch_size=32"}),
      5, 80);
  ASSERT_EQ(r.changes.size(), 5u);  // + micro_batch_size, resolved from the batch
  EXPECT_EQ(refusal(r), "");
  const std::vector<std::string> l = r.lines();
  EXPECT_NE(l[0].find("[train] global_batch_size 16 -> 32: takes effect; from step 6 each step takes 32 sequences; "
                      "the data continues at sample 80"),
            std::string::npos)
      << l[0];
  EXPECT_NE(l[1].find("[train] micro_batch_size 8 -> 16: takes effect; the layout"), std::string::npos) << l[1];
  EXPECT_NE(l[2].find("[train] weight_decay 0.1 -> 0.05: takes effect; the optimisation changes from step 6"),
            std::string::npos)
      << l[2];
  EXPECT_NE(l[3].find("[train] beta2 0.99 -> 0.95: takes effect; AdamW's moments"), std::string::npos) << l[3];
  EXPECT_NE(l[4].find("[train] eps"), std::string::npos) << l[4];
}

TEST(ResumeCheck, LayoutAndRunControlChangesAreSameMath) {
  const ResumeChanges r = compare_resume_decks(
      deck(), deck({"--parallel.zero_stage=3", "--train.stop_at_step=7", "--checkpoint.interval=2"}, 4), 5, 80);
  EXPECT_EQ(refusal(r), "");
  for (const ResumeChange& c : r.changes) EXPECT_EQ(c.cls, ChangeClass::same_math) << c.diff.name();
  EXPECT_GE(r.changes.size(), 5u);  // dp, shard_group_size, zero_stage, micro_batch_size, stop_at_step, interval
}

TEST(ResumeCheck, TheModelShapeCannotBeAllowed) {
  const ResumeChanges r =
      compare_resume_decks(deck(), deck({"--model.n_embd=128", "--train.allow_changed=n_embd"}), 5, 80);
  ASSERT_EQ(r.changes.size(), 1u);
  EXPECT_EQ(r.changes[0].cls, ChangeClass::impossible);
  const std::string e = refusal(r);
  EXPECT_NE(e.find("[model] n_embd 64 -> 128: refused (cannot be allowed)"), std::string::npos) << e;
  EXPECT_EQ(e.find("allow_changed="), std::string::npos) << e;
}

}  // namespace
}  // namespace trident
