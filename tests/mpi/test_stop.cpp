// Stop requests during an evaluation: Trainer::evaluate asks an agreed stop check (StopPolicy::
// agree_signal, a max all-reduce over world) before every forward pass and leaves at the pass
// where it first says yes, on every rank of every layout (dp; tp x pp and dp x pp at 4 ranks,
// where the forward passes are collective over tp and pp), so a stop never waits for a whole
// evaluation. An abandoned evaluation changes nothing of the training: the steps after it are
// bitwise those of a run that never evaluated, and a later evaluation gives the same loss.
#include "data/token_dataset.hpp"
#include "parallel/process_grid.hpp"
#include "train/stop_policy.hpp"
#include "train/trainer.hpp"
#include "trainer_fixture.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <csignal>

namespace trident {
namespace {

std::vector<std::vector<std::string>> layouts(int ranks) {
  std::vector<std::vector<std::string>> out = {{}, {"--parallel.zero_stage=3"}};
  if (ranks == 4) {
    out.push_back({"--parallel.tp=2", "--parallel.pp=2"});
    out.push_back({"--parallel.dp=2", "--parallel.pp=2", "--parallel.zero_stage=2"});
  }
  return out;
}

TEST(Stop, EvaluationLeavesAtTheAgreedBatch) {
  Runtime& rt = test::runtime();
  Communicator& world = rt.world();
  const bool last_rank = world.rank() == world.size() - 1;
  for (std::vector<std::string> ov : layouts(rt.world_size())) {
    ov.push_back("--train.eval_iters=0");  // the whole validation split
    const Config cfg = test::tiny_config(rt.world_size(), ov);
    ProcessGrid grid(world, {cfg.parallel.dp, cfg.parallel.tp, cfg.parallel.pp});
    TokenDataset data(cfg.data.path, 64.0);
    Trainer<float> evaluated(cfg, grid, data), plain(cfg, grid, data);
    evaluated.train_step();
    plain.train_step();
    // The request reaches the last rank only, just before the third pass.
    int asked = 0;
    const EvalResult e = evaluated.evaluate([&] {
      ++asked;
      return StopPolicy::agree_signal(world, asked >= 3 && last_rank ? SIGTERM : 0) != 0;
    });
    const std::string tag = ov.size() > 1 ? ov[0] : "dp";
    EXPECT_TRUE(e.stopped) << tag;
    EXPECT_EQ(e.batches, 2) << tag;
    EXPECT_EQ(asked, 3) << tag;
    EXPECT_GT(e.batches_planned, 3) << tag << ": too few batches to show anything";
    EXPECT_TRUE(std::isnan(e.loss)) << tag;
    EXPECT_EQ(e.tokens, 0) << tag;
    for (int s = 0; s < 2; ++s) EXPECT_EQ(evaluated.train_step().loss, plain.train_step().loss) << tag;
    EXPECT_EQ(evaluated.master_copy(), plain.master_copy()) << tag;
    // Without a request it runs every batch, asking before each one.
    asked = 0;
    const EvalResult full = evaluated.evaluate([&] {
      ++asked;
      return StopPolicy::agree_signal(world, 0) != 0;
    });
    EXPECT_FALSE(full.stopped) << tag;
    EXPECT_EQ(full.batches, full.batches_planned) << tag;
    EXPECT_EQ(asked, full.batches_planned) << tag;
    EXPECT_EQ(full.loss, plain.evaluate().loss) << tag;
  }
}

}  // namespace
}  // namespace trident
