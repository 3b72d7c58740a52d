// Optimizer-state offload ([parallel] offload_optimizer = nvme) against its oracle, the same run
// with the state resident: at ZeRO stages 0-3, fp32 and bf16 working params, one unit per block
// and the whole model as one unit, default and 1000-byte chunks, every step's loss and gradient
// norm and the final master weights and both moments are bitwise equal (the streamed update is
// the resident one, chunk by chunk). Also: what is allocated equals the --dry-run prediction to
// the byte and the offload file has the predicted size (the resident optimizer memory is two
// records), also with chunks smaller than units; and an I/O failure on one rank only (its file
// truncated by the test hook) stops every rank with the same collective IoError naming that file.
#include "core/error.hpp"
#include "offload_fixture.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace trident {
namespace {

using namespace offload_test;

class OffloadEquality : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(OffloadEquality, BitwiseEqualToResident) {
  const RunResult ref = train(config(GetParam(), false), 4);
  expect_equal_with_offload(ref, GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    Stages, OffloadEquality,
    ::testing::Values(std::vector<std::string>{"--parallel.zero_stage=0"}, std::vector<std::string>{"--parallel.zero_stage=1"},
                      std::vector<std::string>{"--parallel.zero_stage=2"}, std::vector<std::string>{"--parallel.zero_stage=3"},
                      std::vector<std::string>{"--parallel.zero_stage=1", "--train.param_dtype=bf16"},
                      std::vector<std::string>{"--parallel.zero_stage=3", "--train.param_dtype=bf16"},
                      std::vector<std::string>{"--parallel.zero_stage=0", "--train.param_dtype=bf16"},
                      std::vector<std::string>{"--parallel.zero_stage=2", "--parallel.unit_blocks=0"}));

// What construction allocates is the prediction, the offload file has the predicted size, and the
// optimizer memory that left is the hand-computed 4 * kinds * shard elements (kinds: 3 with a
// separate master copy, 2 where the fp32 working params are the master) minus two records of
// the largest chunk (min(largest piece, chunk_bytes / (4 kinds)) elements).
class OffloadPlanBytes : public ::testing::TestWithParam<std::int64_t> {};

TEST_P(OffloadPlanBytes, DryRunPredictionEqualsAllocation) {
  Runtime& rt = test::runtime();
  const std::int64_t chunk_bytes = GetParam();
  ChunkBytes scoped(chunk_bytes > 0 ? std::to_string(chunk_bytes).c_str() : nullptr);
  for (const std::vector<std::string>& v :
       {std::vector<std::string>{"--parallel.zero_stage=0"}, {"--parallel.zero_stage=1"}, {"--parallel.zero_stage=3"},
        {"--parallel.zero_stage=1", "--train.param_dtype=bf16"}}) {
    const Config cfg = config(v, true);
    check_offload_memory(cfg, config(v, false), v[0], [&](Trainer<float>& t, const ProcessGrid& grid,
                                                         const MemoryBytes& want, const MemoryBytes& want_res) {
      const auto opt = static_cast<size_t>(MemCategory::optimizer);
      // Hand computation from the engine's geometry.
      const ZeroEngine<float>& z = t.engine();
      const bool separate = v.size() > 1 || (v[0] != "--parallel.zero_stage=0" && v[0] != "--parallel.zero_stage=3");
      const std::int64_t kinds = separate ? 3 : 2;
      const std::int64_t c = chunk_bytes > 0 ? chunk_bytes / (4 * kinds) : (std::int64_t{16} << 20) / (4 * kinds);
      std::int64_t max_rec = 0;
      const int S = cfg.parallel.zero_stage == 0 ? 1 : cfg.parallel.dp;
      std::int64_t file = 0;
      for (const UnitSpec& u : t.layout().units()) {
        const std::int64_t s = (u.numel + S - 1) / S;  // the unit's piece
        for (std::int64_t b = 0; b < s; b += c) {
          const std::int64_t n = std::min(c, s - b);
          max_rec = std::max(max_rec, n);
          file += OffloadFile::aligned(kinds * n * 4);
        }
      }
      const std::int64_t staging = 2 * OffloadFile::aligned(kinds * max_rec * 4);
      if (grid.dp_rank() == 0) {
        EXPECT_EQ(want_res[opt] - want[opt], kinds * z.local_size() * 4 - staging) << v[0];
        EXPECT_EQ(predict_offload(cfg).file_bytes, file) << v[0];
        EXPECT_EQ(predict_offload(cfg).staging_bytes, staging) << v[0];
        EXPECT_EQ(static_cast<std::int64_t>(
                      std::filesystem::file_size(offload_file_name(cfg.parallel.offload_path, rt.world().rank()))),
                  file)
            << v[0];
      }
      EXPECT_EQ(z.optimizer().exp_avg().size(), 0) << "no resident moments";
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Chunks, OffloadPlanBytes, ::testing::Values(std::int64_t{0}, std::int64_t{1000}));

// Parameter offload (offload_params = nvme, ZeRO-3): the working parameter shard also lives in the
// file (one record per unit) and is read before every all-gather; losses, norms, master weights
// and moments stay bitwise those of the fully resident run, with prefetch on and off, one unit per
// block and the whole model as one unit, default and 1000-byte optimizer chunks.
class OffloadParamsEquality : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(OffloadParamsEquality, BitwiseEqualToResident) {
  std::vector<std::string> v = GetParam();
  v.push_back("--parallel.zero_stage=3");
  const RunResult ref = train(config(v, false), 4);
  std::vector<std::string> p = v;
  p.push_back("--parallel.offload_params=nvme");
  expect_equal_with_offload(ref, p);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, OffloadParamsEquality,
    ::testing::Values(std::vector<std::string>{}, std::vector<std::string>{"--train.param_dtype=bf16"},
                      std::vector<std::string>{"--parallel.prefetch=false"},
                      std::vector<std::string>{"--parallel.unit_blocks=0", "--train.param_dtype=bf16"}));

// With the parameter shard offloaded, what is allocated is the prediction, the file has the
// predicted size, and the hand formula holds: the params category drops from the shard (4 or 2
// bytes per element) to three records of the largest unit piece (one read, two written behind);
// the optimizer keeps two chunk
// records of three kinds (the master is now a copy of its own, on disk); the file holds the
// chunk records plus one aligned parameter record per unit.
TEST(Offload, ParamsDryRunPredictionEqualsAllocation) {
  Runtime& rt = test::runtime();
  for (const bool bf16 : {false, true}) {
    std::vector<std::string> v{"--parallel.zero_stage=3"};
    if (bf16) v.push_back("--train.param_dtype=bf16");
    const Config resident = config(v, false);
    v.push_back("--parallel.offload_params=nvme");
    const Config cfg = config(v, true);
    ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
    TokenDataset data(cfg.data.path, 64.0);
    const std::int64_t p0 = MemoryLedger::current(MemCategory::params), o0 = MemoryLedger::current(MemCategory::optimizer);
    Trainer<float> t(cfg, grid, data);
    const MemoryBytes want = predict_memory(cfg), want_res = predict_memory(resident);
    const auto P = static_cast<size_t>(MemCategory::params), O = static_cast<size_t>(MemCategory::optimizer);
    const std::int64_t got_p = MemoryLedger::current(MemCategory::params) - p0,
                       got_o = MemoryLedger::current(MemCategory::optimizer) - o0;
    const std::string what = bf16 ? "bf16" : "fp32";
    const int S = cfg.parallel.dp;
    const std::int64_t pe = bf16 ? 2 : 4, c = (std::int64_t{16} << 20) / 12;
    std::int64_t max_piece = 0, max_rec = 0, file = 0;
    for (const UnitSpec& u : t.layout().units()) {
      const std::int64_t s = (u.numel + S - 1) / S;
      max_piece = std::max(max_piece, s);
      for (std::int64_t b = 0; b < s; b += c) {
        max_rec = std::max(max_rec, std::min(c, s - b));
        file += OffloadFile::aligned(12 * std::min(c, s - b));
      }
      file += OffloadFile::aligned(s * pe);
    }
    const ZeroEngine<float>& z = t.engine();
    if (grid.dp_rank() == 0) {
      EXPECT_EQ(got_p, want[P]) << what;
      EXPECT_EQ(got_o, want[O]) << what;
      EXPECT_EQ(want_res[P] - want[P], z.local_size() * pe - 3 * OffloadFile::aligned(max_piece * pe)) << what;
      EXPECT_EQ(want[O], 2 * OffloadFile::aligned(12 * max_rec)) << what;
      EXPECT_EQ(predict_offload(cfg).file_bytes, file) << what;
      EXPECT_EQ(static_cast<std::int64_t>(
                    std::filesystem::file_size(offload_file_name(cfg.parallel.offload_path, rt.world().rank()))),
                file)
          << what;
    }
    EXPECT_EQ(z.master(), nullptr) << what << ": the master weights are on disk";
  }
}

// Saves read the offloaded state back: an asynchronous save's snapshot holds bitwise the resident
// run's arrays (read across chunk boundaries: 1000-byte chunks), and what a save allocates is the
// dry run's checkpoint bytes (a synchronous save goes through its staging buffer, at most 16 MiB,
// as on a GPU build).
TEST(Offload, SavesReadTheStateBackAndMatchThePrediction) {
  Runtime& rt = test::runtime();
  ChunkBytes scoped("1000");
  int variant = 0;
  for (const std::vector<std::string>& v :
       {std::vector<std::string>{"--parallel.zero_stage=0"}, {"--parallel.zero_stage=1"},
        {"--parallel.zero_stage=3", "--train.param_dtype=bf16"}}) {
    for (const bool async : {false, true}) {
      std::vector<std::string> ov = v;
      ov.push_back(async ? "--checkpoint.async=true" : "--checkpoint.async=false");
      const Config cfg = config(ov, true), res_cfg = config(ov, false);
      ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
      TokenDataset data(cfg.data.path, 64.0);
      Trainer<float> off(cfg, grid, data), res(res_cfg, grid, data);
      for (int s = 0; s < 2; ++s) {
        off.train_step();
        res.train_step();
      }
      const std::int64_t want = predict_memory(cfg)[static_cast<size_t>(MemCategory::checkpoint)];
      MemoryLedger::reset_peaks();
      const std::int64_t before = MemoryLedger::current(MemCategory::checkpoint);
      std::int64_t got = 0;
      const std::string what = v.back() + (async ? " async" : " sync");
      if (async) {
        CheckpointSnapshot snap = off.snapshot();
        got = MemoryLedger::current(MemCategory::checkpoint) - before;
        CheckpointSnapshot ref = res.snapshot();
        ASSERT_EQ(snap.write.shard.length, ref.write.shard.length) << what;
        ASSERT_EQ(snap.write.arrays.size(), 3u) << what;
        for (size_t k = 0; k < 3; ++k)
          EXPECT_EQ(std::memcmp(snap.write.arrays[k], ref.write.arrays[k],
                                static_cast<size_t>(snap.write.shard.length) * sizeof(float)),
                    0)
              << what << " kind " << k;
      } else {
        off.write_checkpoint(test::scratch_dir() + "/offload_save_" + std::to_string(variant) + ".h5");
        got = MemoryLedger::peak(MemCategory::checkpoint) - before;
      }
      if (grid.dp_rank() == 0) {
        EXPECT_EQ(got, want) << what;
      } else {
        EXPECT_LE(got, want) << what;
      }
      ++variant;
    }
  }
}

// One rank's file is truncated before step 2: every rank fails that step with the same collective
// IoError, which names the file of the failing rank.
class OffloadTruncated : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(OffloadTruncated, OnOneRankStopsEveryRank) {
  Runtime& rt = test::runtime();
  const Config cfg = config(GetParam(), true);
  ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
  TokenDataset data(cfg.data.path, 64.0);
  Trainer<float> t(cfg, grid, data);
  t.train_step();
  const int victim = rt.world_size() - 1;
  if (rt.world().rank() == victim) t.engine().truncate_offload_for_test();
  std::string msg;
  bool collective = false;
  try {
    t.train_step();
  } catch (const IoError& e) {
    msg = e.what();
    collective = e.collective();
  }
  EXPECT_TRUE(collective) << msg;
  EXPECT_NE(msg.find("step 2: offload failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("trident-offload." + std::to_string(victim) + ".bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

// ZeRO-1: the optimizer chunks; ZeRO-3 with offload_params: the parameter records at the end of
// the file are cut first, and the forward's reads fail before the update's.
INSTANTIATE_TEST_SUITE_P(Files, OffloadTruncated,
                         ::testing::Values(std::vector<std::string>{"--parallel.zero_stage=1"},
                                           std::vector<std::string>{"--parallel.zero_stage=3",
                                                                    "--parallel.offload_params=nvme"}));

// With offload_params an evaluation reads the parameter records: a failed read on one rank stops
// every rank with the file named, instead of a wrong validation loss.
TEST(Offload, FailedParameterReadInAnEvaluationStopsEveryRank) {
  Runtime& rt = test::runtime();
  const Config cfg = config({"--parallel.zero_stage=3", "--parallel.offload_params=nvme"}, true);
  ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
  TokenDataset data(cfg.data.path, 64.0);
  Trainer<float> t(cfg, grid, data);
  t.train_step();
  const int victim = rt.world_size() - 1;
  if (rt.world().rank() == victim) t.engine().truncate_offload_for_test();
  std::string msg;
  bool collective = false;
  try {
    t.evaluate({}, "val");
  } catch (const IoError& e) {
    msg = e.what();
    collective = e.collective();
  }
  EXPECT_TRUE(collective) << msg;
  EXPECT_NE(msg.find("evaluation: offload failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("trident-offload." + std::to_string(victim) + ".bin"), std::string::npos) << msg;
}

// A missing offload directory is refused at start-up, on every rank alike, naming the file.
TEST(Offload, MissingDirectoryIsAgreed) {
  Runtime& rt = test::runtime();
  Config cfg = config({"--parallel.zero_stage=2"}, true);
  cfg.parallel.offload_path = test::scratch_dir() + "/does-not-exist";
  ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
  TokenDataset data(cfg.data.path, 64.0);
  std::string msg;
  try {
    Trainer<float> t(cfg, grid, data);
  } catch (const IoError& e) {
    msg = e.what();
    EXPECT_TRUE(e.collective());
  }
  EXPECT_NE(msg.find("cannot start the optimizer-state offload"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does-not-exist/trident-offload.0.bin"), std::string::npos) << msg;
}

}  // namespace
}  // namespace trident
