// Checkpoints: resuming with the same layout is bitwise exact (losses, parameters and AdamW
// moments after 10 + 10 steps equal a straight 20-step run); a dp = N checkpoint loads at dp = 1;
// another model, a truncated file and a corrupted dataset are refused; commit keeps `keep` files.
// Saves without a copy: a live view writes the same file as a snapshot (the file of a background
// save) at every layout and staging size, with at most the staging bound of extra host memory;
// an abandoned background save leaves the previous checkpoint and `latest` as they were.
#include "core/error.hpp"
#include "data/token_dataset.hpp"
#include "io/checkpoint_file.hpp"
#include "parallel/process_grid.hpp"
#include "checkpoint/async_writer.hpp"
#include "checkpoint/commit.hpp"
#include "checkpoint/tools.hpp"
#include "train/trainer.hpp"
#include "trainer_fixture.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>

namespace trident {
namespace {

namespace fs = std::filesystem;

std::string dir_for(const std::string& name) {
  return test::scratch_dir() + "/" + name + "_np" + std::to_string(test::runtime().world_size());
}

std::string save(Trainer<float>& t, const ProcessGrid& g, const std::string& dir, std::int64_t keep = 3) {
  CheckpointDir cd(dir);
  return cd.commit(t.step(), g.world_comm(), [&](const std::string& tmp) { t.write_checkpoint(tmp); }, keep);
}

/// 20 steps straight vs 10 steps + checkpoint + a fresh trainer resumed from it + 10 steps:
/// losses, master weights and both AdamW moments must be bitwise equal.
void expect_bitwise_resume(const std::vector<std::string>& overrides, const std::string& tag) {
  Runtime& rt = test::runtime();
  const Config cfg = test::tiny_config(rt.world_size(), overrides);
  ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
  TokenDataset data(cfg.data.path, 64.0);

  Trainer<float> straight(cfg, grid, data);
  std::vector<double> want;
  for (int s = 0; s < 20; ++s) want.push_back(straight.train_step().loss);

  const std::string dir = dir_for("resume_" + tag);
  {
    Trainer<float> first(cfg, grid, data);
    for (int s = 0; s < 10; ++s) EXPECT_EQ(first.train_step().loss, want[s]);
    save(first, grid, dir);
  }
  Trainer<float> second(cfg, grid, data);
  second.load_checkpoint(*CheckpointDir(dir).latest());
  EXPECT_EQ(second.step(), 10);
  EXPECT_EQ(second.consumed_samples(), 10 * cfg.train.global_batch_size);
  for (int s = 10; s < 20; ++s) EXPECT_EQ(second.train_step().loss, want[s]) << tag << " step " << s + 1;
  EXPECT_EQ(second.engine().optimizer().step_count(), 20);
  EXPECT_EQ(second.master_copy(), straight.master_copy()) << tag;
  EXPECT_EQ(second.exp_avg_copy(), straight.exp_avg_copy()) << tag;
  EXPECT_EQ(second.exp_avg_sq_copy(), straight.exp_avg_sq_copy()) << tag;
}

const std::vector<std::string> kUneven = {"--model.n_embd=15", "--model.n_head=3", "--model.vocab_size=997"};

TEST(Checkpoint, ResumeWithSameLayoutIsBitwiseExact) { expect_bitwise_resume({}, "stage0"); }

TEST(Checkpoint, ResumeStage3UnevenVocabIsBitwiseExact) {
  std::vector<std::string> ov = kUneven;
  ov.push_back("--parallel.zero_stage=3");
  expect_bitwise_resume(ov, "stage3");
  ov.push_back("--train.param_dtype=bf16");
  expect_bitwise_resume(ov, "stage3_bf16");
}

TEST(Checkpoint, ResumeHybridShardingIsBitwiseExact) {
  if (test::runtime().world_size() < 4) GTEST_SKIP() << "needs two shard groups of two";
  std::vector<std::string> ov = kUneven;
  ov.insert(ov.end(), {"--parallel.zero_stage=2", "--parallel.shard_group_size=2"});
  expect_bitwise_resume(ov, "hsdp");
}

TEST(Checkpoint, Stage3CheckpointLoadsAtStage0OnOneRank) {
  // Each element was written once, by the rank owning it; a replicated single-rank run reassembles
  // every element bitwise, and each piece the sharded run owns equals the same flat range there.
  Runtime& rt = test::runtime();
  std::vector<std::string> ov = kUneven;
  ov.push_back("--parallel.zero_stage=3");
  Config cfg = test::tiny_config(rt.world_size(), ov);
  cfg.model.vocab_size = 997;
  ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
  TokenDataset data(cfg.data.path, 64.0);
  Trainer<float> t(cfg, grid, data);
  for (int s = 0; s < 3; ++s) t.train_step();
  const std::string path = save(t, grid, dir_for("stage3_to_0"));
  ProcessGrid solo(rt.self(), {1, 1, 1});
  std::vector<std::string> ov1 = kUneven;
  Config c1 = test::tiny_config(1, ov1);
  c1.model.vocab_size = 997;
  Trainer<float> one(c1, solo, data);
  one.load_checkpoint(path);
  const auto full = one.master_copy(), mine = t.master_copy();
  const auto full_v = one.exp_avg_sq_copy(), mine_v = t.exp_avg_sq_copy();
  for (const Piece& p : t.engine().owned())
    for (std::int64_t i = 0; i < p.count; ++i) {
      ASSERT_EQ(full[static_cast<size_t>(p.flat_offset + i)], mine[static_cast<size_t>(p.local_offset + i)]);
      ASSERT_EQ(full_v[static_cast<size_t>(p.flat_offset + i)], mine_v[static_cast<size_t>(p.local_offset + i)]);
    }
  EXPECT_EQ(one.step(), 3);
}

TEST(Checkpoint, RefusesAnotherModel) {
  Runtime& rt = test::runtime();
  const Config cfg = test::tiny_config(rt.world_size());
  ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
  TokenDataset data(cfg.data.path, 64.0);
  Trainer<float> t(cfg, grid, data);
  const std::string path = save(t, grid, dir_for("other"));
  Trainer<float> other(test::tiny_config(rt.world_size(), {"--model.n_embd=32"}), grid, data);
  try {
    other.load_checkpoint(path);
    ADD_FAILURE() << "loaded a checkpoint of another model";
  } catch (const ConfigError& e) {  // a usage error (exit 2): the deck does not match the file
    EXPECT_NE(std::string(e.what()).find("n_embd = 16 in the checkpoint, 32 in this run"), std::string::npos)
        << e.what();
    EXPECT_TRUE(e.collective());
    EXPECT_EQ(e.exit_code(), 2);
  }
}

TEST(Checkpoint, DetectsTruncationAndCorruption) {
  Runtime& rt = test::runtime();
  const Config cfg = test::tiny_config(rt.world_size());
  ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
  TokenDataset data(cfg.data.path, 64.0);
  Trainer<float> t(cfg, grid, data);
  t.train_step();
  const std::string path = save(t, grid, dir_for("corrupt"));
  {
    CheckpointReader ok(path, rt.world());
    EXPECT_TRUE(ok.verify(rt.world()).empty());
  }
  const std::string truncated = path + ".truncated", corrupted = path + ".corrupted";
  if (rt.world_rank() == 0) {
    fs::copy_file(path, truncated, fs::copy_options::overwrite_existing);
    fs::resize_file(truncated, fs::file_size(path) / 2);
    fs::copy_file(path, corrupted, fs::copy_options::overwrite_existing);
    // Flip bytes in the last quarter of the file: shard data is allocated after the metadata.
    std::fstream f(corrupted, std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<std::streamoff>(fs::file_size(corrupted));
    for (std::streamoff off = size * 3 / 4; off < size * 3 / 4 + 64; ++off) {
      f.seekp(off);
      f.put(static_cast<char>(0x5A));
    }
  }
  rt.world().barrier();
  EXPECT_THROW(CheckpointReader(truncated, rt.world()), Error);
  bool detected = false;
  try {
    CheckpointReader bad(corrupted, rt.world());
    detected = !bad.verify(rt.world()).empty();
  } catch (const Error&) {
    detected = true;  // the flipped bytes hit metadata instead: refused at open
  }
  EXPECT_TRUE(detected);
  EXPECT_THROW(CheckpointReader(dir_for("corrupt") + "/missing.h5", rt.world()), Error);
}

TEST(Checkpoint, CommitRotatesAndMovesLatest) {
  Runtime& rt = test::runtime();
  const Config cfg = test::tiny_config(rt.world_size());
  ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
  TokenDataset data(cfg.data.path, 64.0);
  Trainer<float> t(cfg, grid, data);
  const std::string dir = dir_for("rotate");
  for (int s = 0; s < 4; ++s) {
    t.train_step();
    save(t, grid, dir, /*keep=*/2);
  }
  rt.world().barrier();
  CheckpointDir cd(dir);
  const auto all = cd.list();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, 3);
  EXPECT_EQ(all[1].first, 4);
  EXPECT_EQ(*cd.latest(), cd.path_for(4));
  // A failed write leaves the previous checkpoint and latest untouched.
  EXPECT_THROW(cd.commit(5, rt.world(), [](const std::string&) { throw CheckpointError("injected", true); }, 2),
               CheckpointError);
  EXPECT_EQ(*cd.latest(), cd.path_for(4));
  EXPECT_EQ(cd.list().size(), 2u);
}

/// Layouts whose shards have gaps of every kind in the live buffers: dp pieces of every unit
/// (stage 0), unit padding and an uneven vocabulary (stage 3, bf16), tp replicas of replicated
/// tensors and the tied embedding's second copy (tp x pp at 4 ranks).
std::vector<std::vector<std::string>> save_layouts(int ranks) {
  std::vector<std::vector<std::string>> out = {{}, {"--parallel.zero_stage=3"},
                                               {"--parallel.zero_stage=3", "--train.param_dtype=bf16"}};
  for (auto& v : out) v.insert(v.begin(), kUneven.begin(), kUneven.end());
  if (ranks == 4) {
    out.push_back({"--parallel.tp=2", "--parallel.pp=2", "--model.n_layer=2"});
    out.push_back({"--parallel.dp=2", "--parallel.pp=2", "--parallel.zero_stage=1"});
  }
  return out;
}

TEST(Checkpoint, LiveViewWritesTheSnapshotsFile) {
  // Today's file (a snapshot's arrays written at once) and the live view's, with the default and
  // with a tiny staging buffer (many blocks, runs cut anywhere): the same size, every array and
  // attribute equal at tolerance 0 and every stored checksum that of its data. (Not compared byte
  // for byte: HDF5 object headers hold their creation second.)
  Runtime& rt = test::runtime();
  int n = 0;
  for (const auto& ov : save_layouts(rt.world_size())) {
    Config cfg = test::tiny_config(rt.world_size(), ov);
    ProcessGrid grid(rt.world(), {cfg.parallel.dp, cfg.parallel.tp, cfg.parallel.pp});
    TokenDataset data(cfg.data.path, 64.0);
    Trainer<float> t(cfg, grid, data);
    for (int s = 0; s < 2; ++s) t.train_step();
    const std::string dir = dir_for("live_" + std::to_string(n++));
    if (rt.world().rank() == 0) fs::create_directories(dir);
    rt.world().barrier();
    auto write = [&](CheckpointSnapshot snap, const std::string& name) {
      snap.write.int_attrs["created_unix_time"] = 1700000000;  // a field that differs run to run
      write_checkpoint_file(dir + "/" + name, rt.world(), snap.write);
      return dir + "/" + name;
    };
    const std::string want = write(t.snapshot(), "copy.h5");
    std::vector<std::string> got = {write(t.live_view(), "live.h5")};
    t.state().set_staging_bytes(40);  // 10 floats
    got.push_back(write(t.live_view(), "live_small.h5"));
    for (const std::string& g : got) {
      const CheckpointDiff d = diff_checkpoints(g, want, rt.world(), DiffOptions{});
      EXPECT_TRUE(d.identical()) << ov.back() << "\n" << format_diff(d, false);
      EXPECT_EQ(d.arrays.size(), diff_checkpoints(want, want, rt.world(), DiffOptions{}).arrays.size());
      const std::vector<std::string> bad = CheckpointReader(g, rt.world()).verify(rt.world());  // checksums
      EXPECT_TRUE(bad.empty()) << ov.back() << ": " << (bad.empty() ? "" : bad[0]);
      if (rt.world().rank() == 0) {
        EXPECT_EQ(fs::file_size(g), fs::file_size(want)) << ov.back();
      }
    }
  }
}

TEST(Checkpoint, SynchronousSaveNeedsOnlyTheStagingBound) {
  // A synchronous save's extra host memory is the staging buffer, whatever the shard's size; a
  // snapshot would be 12 bytes per element of the shard.
  Runtime& rt = test::runtime();
  const Config cfg = test::tiny_config(rt.world_size(), {"--model.n_embd=64", "--model.n_head=4"});
  ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
  TokenDataset data(cfg.data.path, 64.0);
  Trainer<float> t(cfg, grid, data);
  t.train_step();
  const std::int64_t bound = 4096;
  t.state().set_staging_bytes(bound);
  MemoryLedger::reset_peaks();
  const std::int64_t before = MemoryLedger::current(MemCategory::checkpoint);
  const std::string path = save(t, grid, dir_for("bounded"));
  const std::int64_t extra = MemoryLedger::peak(MemCategory::checkpoint) - before;
  const std::int64_t copy = 3 * t.live_view().write.shard.length * static_cast<std::int64_t>(sizeof(float));
  EXPECT_EQ(extra, bound);
  EXPECT_GT(copy, 20 * bound) << "the model is too small to show the bound";
  EXPECT_EQ(MemoryLedger::current(MemCategory::checkpoint), before);
  // And the file resumes bitwise.
  Trainer<float> back(cfg, grid, data);
  back.load_checkpoint(path);
  EXPECT_EQ(back.master_copy(), t.master_copy());
  EXPECT_EQ(back.exp_avg_sq_copy(), t.exp_avg_sq_copy());
}

TEST(Checkpoint, AbandonedBackgroundSaveLeavesThePreviousCheckpoint) {
  if (!mpi_thread_multiple()) GTEST_SKIP() << "background saves need MPI_THREAD_MULTIPLE";
  Runtime& rt = test::runtime();
  const Config cfg = test::tiny_config(rt.world_size());
  ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
  TokenDataset data(cfg.data.path, 64.0);
  Trainer<float> t(cfg, grid, data);
  const std::string dir = dir_for("abandon");
  t.train_step();
  save(t, grid, dir);
  t.train_step();
  // The writer thread waits in the shard's first block until abandon() has been called on this
  // rank, so the save is abandoned in the middle of its writes, deterministically.
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  CheckpointSnapshot snap = t.snapshot();
  const std::vector<const void*> arrays = snap.write.arrays;
  snap.write.arrays.clear();
  snap.write.read_block = [arrays, open](std::size_t k, std::int64_t first, std::int64_t max_count, const void** p) {
    open.wait();
    *p = static_cast<const float*>(arrays[k]) + first;
    return std::min<std::int64_t>(max_count, 8);
  };
  AsyncCheckpointWriter writer(rt.world());
  const CheckpointDir cd(dir);
  writer.start(cd, 2, std::move(snap), 3);
  writer.abandon();
  gate.set_value();
  const AsyncCheckpointWriter::Result r = writer.wait();
  EXPECT_TRUE(r.abandoned);
  EXPECT_FALSE(r.done);
  rt.world().barrier();
  EXPECT_EQ(*cd.latest(), cd.path_for(1));
  EXPECT_FALSE(fs::exists(cd.path_for(2)));
  EXPECT_FALSE(fs::exists(cd.path_for(2) + ".tmp"));
  // The writer works on: the next save commits.
  writer.start(cd, 2, t.snapshot(), 3);
  EXPECT_FALSE(writer.wait().abandoned);
  EXPECT_EQ(*cd.latest(), cd.path_for(2));
}

}  // namespace
}  // namespace trident
