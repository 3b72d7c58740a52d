// Transfers larger than one I/O call may carry (io/io_limits.hpp): with the per-call limit lowered
// to a few KiB, checkpoints (raw container and a trainer's save and load), token files and array
// files are written and read in many small hyperslab calls, and everything reads back bitwise
// equal, with checksums that verify. The same code path carries a shard of more than 2^31 bytes
// under the default limit of 1 GiB; tools/bench_large_ckpt.sh runs that case for real.
#include "core/error.hpp"
#include "data/token_dataset.hpp"
#include "io/array_file.hpp"
#include "io/checkpoint_file.hpp"
#include "io/io_limits.hpp"
#include "io/token_file.hpp"
#include "parallel/process_grid.hpp"
#include "checkpoint/commit.hpp"
#include "train/trainer.hpp"
#include "trainer_fixture.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace trident {
namespace {

namespace fs = std::filesystem;

Communicator& world() { return test::runtime().world(); }

std::string path_for(const std::string& name) {
  return test::scratch_dir() + "/" + name + "_np" + std::to_string(world().size());
}

/// Lowers io_max_call_bytes() for one test and restores the default afterwards.
class CallLimit {
 public:
  explicit CallLimit(std::size_t bytes) { set_io_max_call_bytes(bytes); }
  ~CallLimit() { set_io_max_call_bytes(kDefaultIoMaxCallBytes); }
};

/// Element i of kind k of rank r's shard: distinct everywhere, exact in float.
float value(int k, int r, std::int64_t i) { return static_cast<float>(k * 1000000 + r * 100000 + i) * 0.5f; }

/// A checkpoint of one tensor "w" split over the ranks (rank r holds 5000 + 123 r elements: 20 KB
/// and more, many times a 4 KiB limit) with two kinds, plus a text, an int array and a byte array
/// larger than the limit. Collective over world.
struct RawCheckpoint {
  std::vector<std::vector<float>> arrays;  // this rank's, per kind
  std::vector<std::int64_t> lengths;       // every rank's shard length
  std::int64_t total = 0;
  CheckpointWrite w;
  std::vector<std::int32_t> ints;
  std::vector<std::uint8_t> bytes;

  RawCheckpoint() {
    const int R = world().size(), me = world().rank();
    std::int64_t offset = 0, my_offset = 0;
    for (int r = 0; r < R; ++r) {
      lengths.push_back(5000 + 123 * r);
      if (r == me) my_offset = offset;
      offset += lengths.back();
    }
    total = offset;
    const std::int64_t n = lengths[static_cast<size_t>(me)];
    for (int k = 0; k < 2; ++k) {
      arrays.emplace_back(static_cast<size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) arrays.back()[static_cast<size_t>(i)] = value(k, me, i);
    }
    for (int i = 0; i < 3000; ++i) ints.push_back(i * 7 - 5);
    for (int i = 0; i < 10000; ++i) bytes.push_back(static_cast<std::uint8_t>(i * 31));
    w.tensors = {CkptTensor{"w", {total}, -1, 1}};
    w.kinds = {"param", "exp_avg"};
    w.texts = {{"config", "[train]\nmax_steps = 1\n"}};
    w.int_arrays = {{"vocab", ints}};
    w.byte_arrays = {{"model", bytes}};
    w.rank_state_columns = {"a", "b"};
    w.rank_state = {me, 100 + me};
    w.shard = CkptShard{me, 0, me, 0, n};
    // Two segments per rank, so a read of the whole tensor crosses shard and segment boundaries.
    const std::int64_t half = n / 2;
    w.segments = {CkptSegment{0, 0, 0, my_offset, 0, half}, CkptSegment{0, 0, 0, my_offset + half, half, n - half}};
    w.arrays = {arrays[0].data(), arrays[1].data()};
  }

  /// The whole tensor of kind k as every rank wrote it.
  std::vector<float> expected(int k) const {
    std::vector<float> all;
    for (int r = 0; r < static_cast<int>(lengths.size()); ++r)
      for (std::int64_t i = 0; i < lengths[static_cast<size_t>(r)]; ++i) all.push_back(value(k, r, i));
    return all;
  }
};

/// Reads everything back from `path` and checks it against `ck`: verify() (every checksum), both
/// kinds as float and as double, the rank state, the text and both arrays. Collective over world.
void expect_reads_back(const std::string& path, const RawCheckpoint& ck) {
  CheckpointReader rd(path, world());
  EXPECT_EQ(rd.verify(world()), std::vector<std::string>{});
  for (int k = 0; k < 2; ++k) {
    std::vector<float> got(static_cast<size_t>(ck.total));
    rd.read(ck.w.kinds[static_cast<size_t>(k)], 0, 0, 0, ck.total, DataType::f32, got.data());
    EXPECT_EQ(got, ck.expected(k)) << "kind " << k;
    std::vector<double> as_double(static_cast<size_t>(ck.total));  // converted by HDF5, piece by piece
    rd.read(ck.w.kinds[static_cast<size_t>(k)], 0, 0, 0, ck.total, DataType::f64, as_double.data());
    const std::vector<float> want = ck.expected(k);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(as_double[i], static_cast<double>(want[i])) << i;
  }
  for (int r = 0; r < world().size(); ++r) EXPECT_EQ(rd.rank_state(r), (std::vector<std::int64_t>{r, 100 + r}));
  EXPECT_EQ(rd.text("config"), ck.w.texts.at("config"));
  EXPECT_EQ(rd.int_array("vocab"), ck.ints);
  EXPECT_EQ(rd.byte_array("model"), ck.bytes);  // checked against its own xxh64 attribute too
}

TEST(IoLimits, CheckpointInCallsOfAFewKiBReadsBackBitwiseAndVerifies) {
  const RawCheckpoint ck;
  const std::string big = path_for("limit_default.h5");
  write_checkpoint_file(big, world(), ck.w);
  for (std::size_t limit : {std::size_t{4096}, std::size_t{4099}}) {  // also one that is no multiple of 4
    SCOPED_TRACE("limit " + std::to_string(limit));
    const CallLimit lowered(limit);
    const std::string small = path_for("limit_" + std::to_string(limit) + ".h5");
    const std::uint64_t before = io_transfer_calls();
    write_checkpoint_file(small, world(), ck.w);
    // Each shard dataset alone takes at least its bytes / limit calls.
    const std::uint64_t shard_bytes = static_cast<std::uint64_t>(ck.w.shard.length) * sizeof(float);
    EXPECT_GE(io_transfer_calls() - before, 2 * (shard_bytes / limit));
    expect_reads_back(small, ck);       // small calls both ways
    expect_reads_back(big, ck);         // written in one call per dataset, read in small ones
    set_io_max_call_bytes(kDefaultIoMaxCallBytes);
    expect_reads_back(small, ck);       // written in small calls, read in large ones
  }
}

TEST(IoLimits, AnElementLargerThanTheLimitStillMovesOneElementPerCall) {
  const CallLimit lowered(1);
  TokenFileInfo info;
  info.tokenizer = "byte";
  info.vocab_size = 256;
  const std::vector<std::int32_t> train = {1, 2, 3, 255, 0, 7}, val = {9};
  const std::string path = path_for("one_byte_calls") + "_rank" + std::to_string(world().rank()) + ".h5";
  write_token_file(path, info, train, val);
  TokenFileReader rd(path);
  std::vector<std::int32_t> got(train.size());
  rd.read("train", 0, static_cast<std::int64_t>(got.size()), got.data());
  EXPECT_EQ(got, train);
}

TEST(IoLimits, TokenFilesInCallsOfAFewKiBReadBackBitwise) {
  const CallLimit lowered(4096);
  for (std::int64_t vocab : {std::int64_t{1000}, std::int64_t{100000}}) {  // uint16 and int32 on disk
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    TokenFileInfo info;
    info.tokenizer = "gpt2";
    info.vocab_size = vocab;
    std::vector<std::int32_t> train(20011), val(3001);
    for (size_t i = 0; i < train.size(); ++i) train[i] = static_cast<std::int32_t>((i * 7919) % vocab);
    for (size_t i = 0; i < val.size(); ++i) val[i] = static_cast<std::int32_t>((i * 104729) % vocab);
    const std::string path =
        path_for("tokens_" + std::to_string(vocab)) + "_rank" + std::to_string(world().rank()) + ".h5";
    const std::uint64_t before = io_transfer_calls();
    write_token_file(path, info, train, val);
    EXPECT_GE(io_transfer_calls() - before, train.size() * 4 / 4096);
    TokenFileReader rd(path);
    std::vector<std::int32_t> got(train.size());
    rd.read("train", 0, static_cast<std::int64_t>(got.size()), got.data());
    EXPECT_EQ(got, train);
    got.assign(val.size(), -1);
    rd.read("val", 0, static_cast<std::int64_t>(got.size()), got.data());
    EXPECT_EQ(got, val);
    // Windows that start and end inside a call's piece.
    for (std::int64_t off : {std::int64_t{1}, std::int64_t{1023}, std::int64_t{5000}}) {
      std::vector<std::int32_t> window(2500);
      rd.read("train", off, 2500, window.data());
      EXPECT_TRUE(std::equal(window.begin(), window.end(), train.begin() + off)) << "offset " << off;
    }
  }
  // The training data path: a TokenDataset that caches a split reads it through the same calls.
  const std::string path = test::tiny_token_file();
  TokenFileReader rd(path);
  std::vector<std::int32_t> want(static_cast<size_t>(rd.size("train")));
  {
    const CallLimit unlimited(kDefaultIoMaxCallBytes);
    rd.read("train", 0, rd.size("train"), want.data());
  }
  std::vector<std::int32_t> got(want.size());
  rd.read("train", 0, rd.size("train"), got.data());
  EXPECT_EQ(got, want);
}

TEST(IoLimits, ArrayFilesInCallsOfAFewKiBReadBackBitwise) {
  const CallLimit lowered(4096);
  std::vector<NamedArray> arrays;
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape) {
    NamedArray a;
    a.name = name;
    a.shape = shape;
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    for (std::int64_t i = 0; i < n; ++i) a.data.push_back(static_cast<double>(i) * 1.25 - 3.0);
    arrays.push_back(a);
  };
  add("flat", {5000});            // 40 KB in 4 KiB calls
  add("grad/wide_rows", {3, 700});  // one row is 5600 bytes: split inside rows
  add("cube", {4, 3, 300});       // rows of 7200 bytes, split along two dimensions
  add("loss", {});                // a scalar
  const std::string path = path_for("arrays") + "_rank" + std::to_string(world().rank()) + ".h5";
  write_arrays(path, arrays);
  std::vector<NamedArray> back = read_arrays(path);
  ASSERT_EQ(back.size(), arrays.size());
  for (const NamedArray& want : arrays) {
    const auto it = std::find_if(back.begin(), back.end(), [&](const NamedArray& a) { return a.name == want.name; });
    ASSERT_NE(it, back.end()) << want.name;
    EXPECT_EQ(it->shape, want.shape) << want.name;
    EXPECT_EQ(it->data, want.data) << want.name;
  }
}

// A real save and resume of a tiny model with every call a few KiB: the resumed state equals the
// saved one bitwise, and the file's contents equal those of a save in one call per dataset.
TEST(IoLimits, TrainerSaveAndResumeInCallsOfAFewKiBAreBitwise) {
  Runtime& rt = test::runtime();
  const Config cfg = test::tiny_config(rt.world_size());
  ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
  TokenDataset data(cfg.data.path, 64.0);
  Trainer<float> trained(cfg, grid, data);
  trained.train_step();
  trained.train_step();
  const std::string dir = path_for("trainer_small_calls");
  const std::string one_call = path_for("trainer_one_call.h5");
  trained.write_checkpoint(one_call);
  std::string path;
  {
    const CallLimit lowered(4096);
    path = CheckpointDir(dir).commit(trained.step(), rt.world(),
                                     [&](const std::string& tmp) { trained.write_checkpoint(tmp); }, 3);
    Trainer<float> resumed(cfg, grid, data);
    resumed.load_checkpoint(path);
    EXPECT_EQ(resumed.step(), 2);
    EXPECT_EQ(resumed.master_copy(), trained.master_copy());
    EXPECT_EQ(resumed.exp_avg_copy(), trained.exp_avg_copy());
    EXPECT_EQ(resumed.exp_avg_sq_copy(), trained.exp_avg_sq_copy());
    CheckpointReader rd(path, rt.world());
    EXPECT_EQ(rd.verify(rt.world()), std::vector<std::string>{});
  }
  CheckpointReader a(path, rt.world()), b(one_call, rt.world());
  ASSERT_EQ(a.kinds(), b.kinds());
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const std::string& kind : a.kinds())
    for (size_t t = 0; t < a.tensors().size(); ++t) {
      std::int64_t n = 1;
      for (std::int64_t d : a.tensors()[t].shape) n *= d;
      std::vector<float> va(static_cast<size_t>(n)), vb(static_cast<size_t>(n));
      a.read(kind, static_cast<int>(t), 0, 0, n, DataType::f32, va.data());
      b.read(kind, static_cast<int>(t), 0, 0, n, DataType::f32, vb.data());
      EXPECT_EQ(va, vb) << kind << " " << a.tensors()[t].name;
    }
}

}  // namespace
}  // namespace trident
