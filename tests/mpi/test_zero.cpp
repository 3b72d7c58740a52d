// ZeRO stages 0-3 and FSDP options against the serial oracle. Every variant trains the same
// global batch for 5 steps on the job's ranks and must give the losses of a single rank (stage 0,
// MPI_COMM_SELF) within 1e-5 relative and the step-1 gradient norm within 1e-6 relative (fp32:
// only the order of floating-point sums differs, see test_data_parallel.cpp). The model has
// n_embd = 15 and vocab_size = 997, so every unit's size is odd and no dp size splits it evenly:
// padding is exercised everywhere. bf16 working parameters are compared with the fp32 run of the
// same layout under a stated bound (below). Also: weight decay only on 2-D tensors when a piece
// boundary cuts a bias, the --dry-run prediction equals what is allocated (at start-up and by a
// save, synchronous or asynchronous), and the shard memory really falls with dp.
#include "core/host_copy.hpp"
#include "data/token_dataset.hpp"
#include "parallel/process_grid.hpp"
#include "train/trainer.hpp"
#include "trainer_fixture.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

namespace trident {
namespace {

const std::vector<std::string> kUneven = {"--model.n_embd=15", "--model.n_head=3", "--model.vocab_size=997"};

Config config(int ranks, std::vector<std::string> extra) {
  std::vector<std::string> ov = kUneven;
  ov.insert(ov.end(), extra.begin(), extra.end());
  Config c = test::tiny_config(ranks, ov);
  c.model.vocab_size = 997;
  return c;
}

using test::Trace;

Trace run(Communicator& comm, const Config& cfg, int steps) {
  return test::train_trace(comm, cfg, steps, [&](Trainer<float>&, ProcessGrid&, const StepResult& r, int) {
    // The norm is the same on every rank of the job.
    EXPECT_EQ(comm.all_reduce_value(r.grad_norm, ReduceOp::min), comm.all_reduce_value(r.grad_norm, ReduceOp::max));
  });
}

double rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

const Trace& serial() {
  static const Trace t = run(test::runtime().self(), config(1, {}), 5);
  return t;
}

void expect_matches_serial(const std::vector<std::string>& variant) {
  Runtime& rt = test::runtime();
  const Trace par = run(rt.world(), config(rt.world_size(), variant), 5);
  const Trace& ref = serial();
  std::string name;
  for (const auto& v : variant) name += v + " ";
  EXPECT_LE(rel(par.norm[0], ref.norm[0]), 1e-6) << name << "grad norm " << par.norm[0] << " vs " << ref.norm[0];
  for (int s = 0; s < 5; ++s) EXPECT_LE(rel(par.loss[s], ref.loss[s]), 1e-5) << name << "step " << s + 1;
}

// The Llama family (grouped-query attention, untied head) through the same engine: every stage,
// unit granularity and recompute equal its own serial run; bf16 working parameters stay close.
Config llama_config(int ranks, std::vector<std::string> extra) {
  std::vector<std::string> ov = {"--model.arch=llama", "--model.bias=false",       "--model.n_embd=16",
                                 "--model.n_head=4",   "--model.n_kv_head=2",      "--model.ffn_hidden=24",
                                 "--model.vocab_size=997", "--model.tie_embeddings=false"};
  ov.insert(ov.end(), extra.begin(), extra.end());
  Config c = test::tiny_config(ranks, ov);
  c.model.vocab_size = 997;
  return c;
}

TEST(Zero, LlamaEveryStageEqualsSerial) {
  Runtime& rt = test::runtime();
  const Trace ref = run(rt.self(), llama_config(1, {}), 5);
  for (const std::vector<std::string>& v :
       {std::vector<std::string>{"--parallel.zero_stage=0"}, {"--parallel.zero_stage=1"}, {"--parallel.zero_stage=2"},
        {"--parallel.zero_stage=3"}, {"--parallel.zero_stage=3", "--parallel.unit_blocks=0"},
        {"--parallel.zero_stage=3", "--train.activation_checkpointing=block", "--train.micro_batch_size=1"}}) {
    const Trace par = run(rt.world(), llama_config(rt.world_size(), v), 5);
    std::string name;
    for (const auto& x : v) name += x + " ";
    EXPECT_LE(rel(par.norm[0], ref.norm[0]), 1e-6) << name << "grad norm " << par.norm[0] << " vs " << ref.norm[0];
    for (int s = 0; s < 5; ++s) EXPECT_LE(rel(par.loss[s], ref.loss[s]), 1e-5) << name << "step " << s + 1;
  }
  const Trace h = run(rt.world(), llama_config(rt.world_size(), {"--parallel.zero_stage=3", "--train.param_dtype=bf16"}), 5);
  for (int s = 0; s < 5; ++s) EXPECT_LE(rel(h.loss[s], ref.loss[s]), 5e-3) << "bf16 step " << s + 1;
  EXPECT_NE(h.loss, ref.loss);  // the bf16 path is really taken
}

TEST(Zero, LlamaRecomputeIsBitwiseIdentical) {
  Runtime& rt = test::runtime();
  const Trace a = run(rt.world(), llama_config(rt.world_size(), {"--parallel.zero_stage=2"}), 3);
  const Trace b = run(rt.world(), llama_config(rt.world_size(), {"--parallel.zero_stage=2", "--train.activation_checkpointing=block"}), 3);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.norm, b.norm);
}

// [train] compute_dtype = bf16 (bf16 GEMM inputs, fp32 accumulation; kernels/gemm.hpp): every ZeRO
// stage, recompute and the Llama family equal their own serial bf16 run as closely as fp32 layouts
// equal theirs (the rounding of each GEMM input is elementwise, so a layout changes only summation
// order); recompute is bitwise; and bf16 stays near fp32 without equalling it (the path is taken).
TEST(Zero, Bf16ComputeEveryStageEqualsSerial) {
  if (!gemm_bf16_supported()) GTEST_SKIP() << gemm_bf16_unavailable_reason();
  Runtime& rt = test::runtime();
  const std::string bf16 = "--train.compute_dtype=bf16";
  const Trace ref = run(rt.self(), config(1, {bf16}), 5);
  for (const std::vector<std::string>& v :
       {std::vector<std::string>{"--parallel.zero_stage=0"}, {"--parallel.zero_stage=2"}, {"--parallel.zero_stage=3"},
        {"--parallel.zero_stage=3", "--train.param_dtype=bf16", "--train.reduce_dtype=bf16"}}) {
    std::vector<std::string> ov = v;
    ov.push_back(bf16);
    const Trace par = run(rt.world(), config(rt.world_size(), ov), 5);
    const double tol = ov.size() > 2 ? 5e-3 : 1e-5;  // bf16 parameters and reductions: their own rounding
    for (int s = 0; s < 5; ++s) EXPECT_LE(rel(par.loss[s], ref.loss[s]), tol) << v[0] << " step " << s + 1;
  }
  const Trace a = run(rt.world(), config(rt.world_size(), {"--parallel.zero_stage=1", bf16}), 3);
  const Trace b = run(rt.world(), config(rt.world_size(), {"--parallel.zero_stage=1", bf16, "--train.activation_checkpointing=block"}), 3);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.norm, b.norm);
  for (int s = 0; s < 5; ++s) EXPECT_LE(rel(ref.loss[s], serial().loss[s]), 5e-3) << "bf16 vs fp32 step " << s + 1;
  EXPECT_NE(ref.loss, serial().loss);
  const Trace lref = run(rt.self(), llama_config(1, {bf16}), 3);
  const Trace lpar = run(rt.world(), llama_config(rt.world_size(), {"--parallel.zero_stage=3", bf16}), 3);
  for (int s = 0; s < 3; ++s) EXPECT_LE(rel(lpar.loss[s], lref.loss[s]), 1e-5) << "llama step " << s + 1;
}

// With bf16 GEMM inputs the GEMM seam keeps a bf16 copy of the largest GEMM's operands: after a
// step, the activations category holds exactly what --dry-run predicts (model + that copy), for
// both families and with the head on this rank.
TEST(Zero, Bf16GemmScratchPredictionEqualsAllocation) {
  if (!gemm_bf16_supported()) GTEST_SKIP() << gemm_bf16_unavailable_reason();
  Runtime& rt = test::runtime();
  for (const bool llama : {false, true})
  for (const char* attention : {"--model.attention=gemm", "--model.attention=fused"}) {
    const std::vector<std::string> ov = {"--train.compute_dtype=bf16", "--parallel.zero_stage=1", attention};
    const Config cfg = llama ? llama_config(rt.world_size(), ov) : config(rt.world_size(), ov);
    ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
    TokenDataset data(cfg.data.path, 64.0);
    gemm_release_scratch();
    const std::int64_t before = MemoryLedger::current(MemCategory::activations);
    MemoryLedger::reset_peak(MemCategory::activations);
    Trainer<float> t(cfg, grid, data);
    t.train_step();
    const std::int64_t got = MemoryLedger::current(MemCategory::activations) - before;
    const std::int64_t want = predict_memory(cfg)[static_cast<size_t>(MemCategory::activations)];
    EXPECT_EQ(got, want) << (llama ? "llama " : "gpt2 ") << attention;  // activations: the same on every dp rank
    // ... and the peak too: the bf16 scratch grows by freeing first (kernels/bf16_staging.hpp), also
    // while GemmInputReuse keeps a copy in it.
    EXPECT_EQ(MemoryLedger::peak(MemCategory::activations) - before, want) << (llama ? "llama " : "gpt2 ") << attention;
    EXPECT_GT(want, Gpt<float>::activation_elements(cfg.model, ParamLayout::make(cfg.model),
                                                    static_cast<int>(cfg.train.micro_batch_size), cfg.model.block_size,
                                                    false) * 4)
        << "the prediction counts the bf16 copy";
  }
}

// oneDNN's fp32 matmul as the GEMM library ([train] host_gemm = onednn, what auto picks where it is
// faster): every ZeRO stage and the Llama family equal the OpenBLAS serial run within the tolerance
// of a layout change (the two libraries sum in other orders); recompute stays bitwise.
TEST(Zero, OneDnnFp32GemmsEqualOpenBlas) {
  if (!host_gemm_available(HostGemm::onednn)) GTEST_SKIP() << "this build has no oneDNN";
  Runtime& rt = test::runtime();
  const Trace& ref = serial();  // OpenBLAS
  const Trace lref = run(rt.self(), llama_config(1, {}), 3);
  set_host_gemm(HostGemm::onednn);
  for (const char* stage : {"--parallel.zero_stage=0", "--parallel.zero_stage=3"}) {
    const Trace par = run(rt.world(), config(rt.world_size(), {stage}), 5);
    for (int s = 0; s < 5; ++s) EXPECT_LE(rel(par.loss[s], ref.loss[s]), 1e-5) << stage << " step " << s + 1;
  }
  const Trace a = run(rt.world(), config(rt.world_size(), {"--parallel.zero_stage=1"}), 3);
  const Trace b = run(rt.world(), config(rt.world_size(), {"--parallel.zero_stage=1", "--train.activation_checkpointing=block"}), 3);
  EXPECT_EQ(a.loss, b.loss);
  const Trace l = run(rt.world(), llama_config(rt.world_size(), {"--parallel.zero_stage=2"}), 3);
  for (int s = 0; s < 3; ++s) EXPECT_LE(rel(l.loss[s], lref.loss[s]), 1e-5) << "llama step " << s + 1;
  set_host_gemm(HostGemm::openblas);
  EXPECT_NE(a.loss, run(rt.world(), config(rt.world_size(), {"--parallel.zero_stage=1"}), 3).loss)
      << "the oneDNN path was not taken";
}

TEST(Zero, Stage0) { expect_matches_serial({"--parallel.zero_stage=0"}); }
TEST(Zero, Stage1) { expect_matches_serial({"--parallel.zero_stage=1"}); }
TEST(Zero, Stage2) { expect_matches_serial({"--parallel.zero_stage=2"}); }
TEST(Zero, Stage2NoOverlap) { expect_matches_serial({"--parallel.zero_stage=2", "--parallel.overlap_reduce=false"}); }
TEST(Zero, Stage3) { expect_matches_serial({"--parallel.zero_stage=3"}); }
TEST(Zero, Stage3NoPrefetchNoOverlap) {
  expect_matches_serial({"--parallel.zero_stage=3", "--parallel.prefetch=false", "--parallel.overlap_reduce=false"});
}
TEST(Zero, Stage3TwoBlocksPerUnit) { expect_matches_serial({"--parallel.zero_stage=3", "--parallel.unit_blocks=2"}); }
TEST(Zero, Stage3WholeModelUnit) { expect_matches_serial({"--parallel.zero_stage=3", "--parallel.unit_blocks=0"}); }
TEST(Zero, Stage3WithGradientAccumulation) {
  expect_matches_serial({"--parallel.zero_stage=3", "--train.micro_batch_size=1"});
}
TEST(Zero, Stage3WithActivationCheckpointing) {
  expect_matches_serial({"--parallel.zero_stage=3", "--train.activation_checkpointing=block"});
}
TEST(Zero, HybridSharding) {
  const int n = test::runtime().world_size();
  if (n < 4) GTEST_SKIP() << "HSDP needs at least two groups of two ranks";
  expect_matches_serial({"--parallel.zero_stage=3", "--parallel.shard_group_size=2"});
  expect_matches_serial({"--parallel.zero_stage=1", "--parallel.shard_group_size=2"});
}

TEST(Zero, ActivationCheckpointingIsBitwiseIdentical) {
  Runtime& rt = test::runtime();
  const Trace a = run(rt.world(), config(rt.world_size(), {"--parallel.zero_stage=2"}), 3);
  const Trace b = run(rt.world(), config(rt.world_size(), {"--parallel.zero_stage=2", "--train.activation_checkpointing=block"}), 3);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.norm, b.norm);
}

TEST(Zero, Bf16ParametersStayCloseToFp32) {
  // bf16 keeps 8 significant bits: each working parameter is off by up to 2^-9 relative
  // (0.2%). Over 5 steps the loss of this model moves by ~0.3 and is computed from such
  // weights, so we require agreement within 0.5% relative, and gradient norms within 2%:
  // an order of magnitude above the rounding and two below a real error (a wrong cast or
  // a lost update shows as > 10%).
  Runtime& rt = test::runtime();
  for (const char* stage : {"--parallel.zero_stage=0", "--parallel.zero_stage=3"}) {
    const Trace f = run(rt.world(), config(rt.world_size(), {stage}), 5);
    const Trace h = run(rt.world(), config(rt.world_size(), {stage, "--train.param_dtype=bf16"}), 5);
    const Trace hr = run(rt.world(), config(rt.world_size(), {stage, "--train.param_dtype=bf16", "--train.reduce_dtype=bf16"}), 5);
    for (int s = 0; s < 5; ++s) {
      EXPECT_LE(rel(h.loss[s], f.loss[s]), 5e-3) << stage << " step " << s + 1;
      EXPECT_LE(rel(hr.loss[s], f.loss[s]), 5e-3) << stage << " bf16 reduce, step " << s + 1;
      EXPECT_LE(rel(h.norm[s], f.norm[s]), 2e-2) << stage << " step " << s + 1;
    }
    EXPECT_NE(h.loss, f.loss);  // the bf16 path is really taken
  }
}

TEST(Zero, WeightDecayOnlyOnMatricesAcrossPieceBoundaries) {
  Runtime& rt = test::runtime();
  const Config cfg = config(rt.world_size(), {"--parallel.zero_stage=3"});
  const ParamLayout layout = ParamLayout::make(cfg.model);
  const GptSchedule sched = GptSchedule::make(layout, cfg.model);
  ZeroEngine<double> z(layout, sched, cfg.train, ZeroOptions::from(cfg), rt.world());
  z.initialize(5);
  const View1<const double> master(z.master(), static_cast<size_t>(z.local_size()));
  const std::vector<double> before = to_host_vector(master);
  z.begin_step();  // gradient zero: AdamW's only effect is the decoupled decay
  z.end_micro_batch();
  z.finish_gradients();
  z.step(0.5, 1.0);
  const double decay = 1.0 - 0.5 * cfg.train.weight_decay;
  const std::vector<double> after = to_host_vector(master);
  bool cut_inside_bias = false;
  for (const Piece& p : z.owned())
    for (const TensorSpec& t : layout.tensors()) {
      const std::int64_t a = std::max(p.flat_offset, t.offset), b = std::min(p.flat_offset + p.count, t.offset + t.numel);
      if (a >= b) continue;
      if (!t.decay && (p.flat_offset > t.offset || p.flat_offset + p.count < t.offset + t.numel)) cut_inside_bias = true;
      for (std::int64_t e = a; e < b; ++e) {
        const std::int64_t i = p.local_offset + (e - p.flat_offset);
        EXPECT_EQ(after[static_cast<size_t>(i)], t.decay ? before[static_cast<size_t>(i)] * decay : before[static_cast<size_t>(i)]) << t.name;
      }
    }
  // With 4 shards a boundary of each block unit (12 C^2 + 13 C = 2895 elements, pieces of 724)
  // falls inside attn.c_attn.bias; with 2 it falls inside mlp.c_fc.weight for any C.
  if (rt.world_size() >= 4) {
    EXPECT_TRUE(rt.world().all_reduce_value<int>(cut_inside_bias ? 1 : 0, ReduceOp::max) == 1)
        << "no piece boundary fell inside a non-decayed tensor; the test would prove nothing";
  }
}

TEST(Zero, DryRunPredictionEqualsAllocation) {
  Runtime& rt = test::runtime();
  for (const std::vector<std::string>& v :
       {std::vector<std::string>{"--parallel.zero_stage=0"}, {"--parallel.zero_stage=1"}, {"--parallel.zero_stage=2"},
        {"--parallel.zero_stage=3"}, {"--parallel.zero_stage=3", "--train.param_dtype=bf16", "--train.reduce_dtype=bf16"},
        {"--parallel.zero_stage=1", "--train.param_dtype=bf16"}, {"--train.activation_checkpointing=block"},
        {"--model.arch=llama"}, {"--model.arch=llama", "--parallel.zero_stage=3", "--train.activation_checkpointing=block"},
        {"--model.attention=fused"}, {"--model.attention=fused", "--model.dropout=0.1"},
        {"--model.arch=llama", "--model.attention=fused"}}) {
    const bool llama = v[0] == "--model.arch=llama";
    const Config cfg = llama ? llama_config(rt.world_size(), std::vector<std::string>(v.begin() + 1, v.end()))
                             : config(rt.world_size(), v);
    ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
    TokenDataset data(cfg.data.path, 64.0);
    MemoryBytes before{};
    for (int c = 0; c < static_cast<int>(MemCategory::count_); ++c)
      before[static_cast<size_t>(c)] = MemoryLedger::current(static_cast<MemCategory>(c));
    Trainer<float> t(cfg, grid, data);
    const MemoryBytes want = predict_memory(cfg);
    // Prediction is for dp shard rank 0, which holds the largest pieces; others hold at most as much.
    for (int c = 0; c < static_cast<int>(MemCategory::data); ++c) {
      const std::int64_t got = MemoryLedger::current(static_cast<MemCategory>(c)) - before[static_cast<size_t>(c)];
      if (static_cast<MemCategory>(c) == MemCategory::checkpoint) {  // allocated by saves (next test)
        EXPECT_EQ(got, 0) << v[0];
        continue;
      }
      if (grid.dp_rank() == 0) {
        EXPECT_EQ(got, want[static_cast<size_t>(c)]) << v[0] << " " << mem_category_name(static_cast<MemCategory>(c));
      } else {
        EXPECT_LE(got, want[static_cast<size_t>(c)]) << v[0] << " " << mem_category_name(static_cast<MemCategory>(c));
      }
    }
  }
}

// What a save allocates (MemCategory::checkpoint) is what --dry-run predicts: an asynchronous
// save's snapshot (kept for the next save), or the peak of a synchronous save's staging buffer.
TEST(Zero, SavePredictionEqualsAllocation) {
  Runtime& rt = test::runtime();
  int variant = 0;
  for (const std::vector<std::string>& v :
       {std::vector<std::string>{"--parallel.zero_stage=0"}, {"--parallel.zero_stage=1"}, {"--parallel.zero_stage=3"},
        {"--parallel.zero_stage=3", "--train.param_dtype=bf16"}, {"--parallel.zero_stage=2", "--model.n_embd=64",
        "--model.n_head=4"}}) {
    for (const bool async : {false, true}) {
      std::vector<std::string> ov = v;
      ov.push_back(async ? "--checkpoint.async=true" : "--checkpoint.async=false");
      const Config cfg = config(rt.world_size(), ov);
      ProcessGrid grid(rt.world(), {cfg.parallel.dp, 1, 1});
      TokenDataset data(cfg.data.path, 64.0);
      Trainer<float> t(cfg, grid, data);
      t.train_step();
      const std::int64_t want = predict_memory(cfg)[static_cast<size_t>(MemCategory::checkpoint)];
      MemoryLedger::reset_peaks();
      const std::int64_t before = MemoryLedger::current(MemCategory::checkpoint);
      std::int64_t got = 0;
      if (async) {
        CheckpointSnapshot snap = t.snapshot();
        got = MemoryLedger::current(MemCategory::checkpoint) - before;
        t.recycle(std::move(snap));  // kept for the next save
        EXPECT_EQ(MemoryLedger::current(MemCategory::checkpoint) - before, got);
        CheckpointSnapshot again = t.snapshot();  // reuses the kept buffers
        EXPECT_EQ(MemoryLedger::peak(MemCategory::checkpoint) - before, got) << "two copies at once";
      } else {
        t.write_checkpoint(test::scratch_dir() + "/save_memory_" + std::to_string(variant) + ".h5");
        got = MemoryLedger::peak(MemCategory::checkpoint) - before;
        EXPECT_EQ(MemoryLedger::current(MemCategory::checkpoint), before) << "a synchronous save keeps nothing";
      }
      EXPECT_GT(want, 0);
      if (grid.dp_rank() == 0) EXPECT_EQ(got, want) << v[0] << (async ? " async" : " sync");
      else EXPECT_LE(got, want) << v[0] << (async ? " async" : " sync");
      ++variant;
    }
  }
}

TEST(Zero, ShardedStateShrinksWithDp) {
  // At stage 3 every model state (working params, grads, optimizer) is 1/dp of the replicated
  // one, up to the padding of each unit to a multiple of dp.
  Runtime& rt = test::runtime();
  const int n = rt.world_size();
  const MemoryBytes full = predict_memory(config(1, {"--parallel.zero_stage=0"}));
  const MemoryBytes sharded = predict_memory(config(n, {"--parallel.zero_stage=3"}));
  const std::int64_t units = 4;  // embed, 2 blocks, head: at most dp - 1 padding elements each
  for (MemCategory c : {MemCategory::params, MemCategory::optimizer}) {
    const auto f = full[static_cast<size_t>(c)], s = sharded[static_cast<size_t>(c)];
    EXPECT_GE(s * n, f) << mem_category_name(c);
    EXPECT_LE(s * n, f + units * n * 4 * 3) << mem_category_name(c);
  }
}

}  // namespace
}  // namespace trident
