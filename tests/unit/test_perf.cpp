// The performance model (perf/): its arithmetic against hand-computed cases, the alpha-beta fit
// against synthetic data with known alpha and beta, machine-file parsing, and the planner's promise
// (property test): every layout it proposes passes the trainer's validation and fits in memory.
#include "perf/collective_model.hpp"
#include "perf/machine.hpp"
#include "perf/planner.hpp"
#include "perf/step_model.hpp"

#include "core/error.hpp"
#include "model/gpt.hpp"
#include "model/param_layout.hpp"
#include "train/pipeline_schedule.hpp"
#include "train/trainer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

namespace trident {
namespace {

// ---- nccl-tests' bus factors and the alpha-beta model ------------------------------------

TEST(CollectiveModel, BusFactorsAreNcclTests) {
  // nccl-tests doc/PERFORMANCE.md: allreduce 2(n-1)/n, reducescatter/allgather (n-1)/n, bcast 1, sendrecv 1.
  EXPECT_DOUBLE_EQ(bus_factor(CommOp::all_reduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(CommOp::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(CommOp::all_reduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(bus_factor(CommOp::reduce_scatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(CommOp::all_gather, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(CommOp::broadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(CommOp::send, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(CommOp::all_reduce, 1), 0.0);
  EXPECT_THROW(bus_factor(CommOp::barrier, 2), Error);
  EXPECT_THROW(bus_factor(CommOp::all_reduce, 0), Error);
}

TEST(CollectiveModel, SecondsHandComputed) {
  // 4 ranks, 1 MiB all-reduce, alpha 10 us, 10 GB/s bus: 1e-5 + 1.5 * 1048576 / 1e10.
  EXPECT_NEAR(collective_seconds(CommOp::all_reduce, 4, 1048576.0, 1e-5, 1e-10), 1.672864e-4, 1e-15);
  EXPECT_DOUBLE_EQ(collective_seconds(CommOp::all_gather, 1, 1e6, 1e-5, 1e-10), 0.0);  // 1 rank: nothing
  EXPECT_NEAR(collective_seconds(CommOp::send, 2, 1000.0, 2e-6, 1e-9), 3e-6, 1e-18);
}

TEST(CollectiveModel, FitRecoversAlphaBetaFromNoiselessData) {
  const double alpha = 7.5e-6, beta = 2.5e-10;  // 7.5 us, 4 GB/s
  std::vector<double> x, t;
  for (double s = 4; s <= 256.0 * 1024 * 1024; s *= 2) {
    x.push_back(s);
    t.push_back(alpha + beta * s);
  }
  const AlphaBeta f = fit_alpha_beta(x, t);
  EXPECT_NEAR(f.alpha_s / alpha, 1.0, 1e-9);
  EXPECT_NEAR(f.beta_s_per_byte / beta, 1.0, 1e-9);
  EXPECT_LT(f.max_rel_error, 1e-9);
}

TEST(CollectiveModel, FitRecoversAlphaBetaThroughNoise) {
  // +-3% deterministic multiplicative noise (alternating sign, varying size): within 5%.
  const double alpha = 3e-5, beta = 1e-9;
  std::vector<double> x, t;
  int i = 0;
  for (double s = 4; s <= 64.0 * 1024 * 1024; s *= 2, ++i) {
    const double noise = 1.0 + 0.03 * ((i % 2) ? 1.0 : -1.0) * ((i % 3) + 1) / 3.0;
    x.push_back(s);
    t.push_back((alpha + beta * s) * noise);
  }
  const AlphaBeta f = fit_alpha_beta(x, t);
  EXPECT_NEAR(f.alpha_s / alpha, 1.0, 0.05);
  EXPECT_NEAR(f.beta_s_per_byte / beta, 1.0, 0.05);
  EXPECT_GT(f.max_rel_error, 0.005);  // the noise is seen
  EXPECT_LT(f.max_rel_error, 0.07);
}

TEST(CollectiveModel, FitClampsAndRejects) {
  // Pure bandwidth data (t = beta x): alpha is 0, not negative.
  const AlphaBeta f = fit_alpha_beta({1e3, 1e4, 1e5}, {1e-6, 1e-5, 1e-4});
  EXPECT_NEAR(f.alpha_s, 0.0, 1e-15);
  EXPECT_NEAR(f.beta_s_per_byte, 1e-9, 1e-18);
  EXPECT_THROW(fit_alpha_beta({1.0}, {1.0}), Error);
  EXPECT_THROW(fit_alpha_beta({1.0, 2.0}, {1.0, 0.0}), Error);
  EXPECT_THROW(fit_alpha_beta({1.0, 2.0}, {1.0}), Error);
}

// ---- FLOPs (Narayanan et al. 2021) ----------------------------------------------------------

TEST(StepModel, NarayananFlopsHandComputed) {
  ModelConfig m;
  m.n_layer = 2;
  m.n_embd = 64;
  m.block_size = 32;
  m.vocab_size = 100;
  // 6 N tokens (N = 12 l h^2 = 98304, 4 * 32 tokens) = 75497472; attention 12 B s^2 l h = 6291456;
  // logits 6 B s h V = 4915200.
  EXPECT_DOUBLE_EQ(narayanan_flops(m, 4, false), 86704128.0);
  // Recomputation: 8 N tokens = 100663296; attention 16 B s^2 l h = 8388608; logits 4915200.
  EXPECT_DOUBLE_EQ(narayanan_flops(m, 4, true), 113967104.0);
}

// ---- machine files --------------------------------------------------------------------------

const char* kMachine = R"(
[machine]
name = test box
note = synthetic, for unit tests
devices_per_node = 2
memory_per_device_gib = 1
[compute]
peak_tflops_float = 0.001     # 1e9 FLOP/s
attention_tflops = 0.0005
memory_gbs = 2
gelu_gelems = 0.1
optimizer_gparams = 0.01
overlap_efficiency = 0
[link.intra]
alpha_us = 10
busbw_gbs = 1
)";

TEST(Machine, ParsesEveryUnit) {
  const MachineSpec m = parse_machine_text(kMachine, "test");
  EXPECT_EQ(m.name, "test box");
  EXPECT_EQ(m.devices_per_node, 2);
  EXPECT_DOUBLE_EQ(m.memory_bytes, 1024.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(m.peak_flops_f32, 1e9);
  EXPECT_DOUBLE_EQ(m.gemm_flops(Precision::f64), 5e8);  // absent double peak: half of float
  EXPECT_DOUBLE_EQ(m.attention_flops, 5e8);
  EXPECT_DOUBLE_EQ(m.memory_bw, 2e9);
  EXPECT_DOUBLE_EQ(m.intra.generic.alpha_s, 1e-5);
  EXPECT_DOUBLE_EQ(m.intra.generic.beta_bus, 1e-9);
  EXPECT_DOUBLE_EQ(m.inter.generic.beta_bus, 1e-9);  // one-node file: inter = intra
  // A measured per-operation cost replaces the generic one for that operation only.
  const MachineSpec m2 =
      parse_machine_text(std::string(kMachine) + "all_reduce_alpha_us = 3\nall_reduce_busbw_gbs = 4\n", "test");
  EXPECT_DOUBLE_EQ(m2.intra.cost(CommOp::all_reduce).alpha_s, 3e-6);
  EXPECT_DOUBLE_EQ(m2.intra.cost(CommOp::all_reduce).beta_bus, 0.25e-9);
  EXPECT_DOUBLE_EQ(m2.intra.cost(CommOp::all_gather).alpha_s, 1e-5);
  // The fp32 GEMM library the rates were measured with: a word, not a number.
  EXPECT_EQ(m.host_gemm, "");
  std::string lib = kMachine;
  lib.insert(lib.find("peak_tflops_float"), "host_gemm = onednn\n");
  EXPECT_EQ(parse_machine_text(lib, "test").host_gemm, "onednn");
  lib.replace(lib.find("onednn"), 6, "mkl");
  EXPECT_THROW(parse_machine_text(lib, "test"), ConfigError);
}

TEST(Machine, RejectsBadFiles) {
  const std::string base = kMachine;
  EXPECT_THROW(parse_machine_text(base + "bogus = 1\n", "t"), ConfigError);
  EXPECT_THROW(parse_machine_text(base + "alpha_us = 3\n", "t"), ConfigError);  // given twice
  EXPECT_THROW(parse_machine_text("[machine]\ndevices_per_node = 2\n", "t"), ConfigError);  // required keys missing
  std::string bad = base;
  bad.replace(bad.find("memory_gbs = 2"), 14, "memory_gbs = x");
  EXPECT_THROW(parse_machine_text(bad, "t"), ConfigError);
  EXPECT_THROW(parse_machine_text(base + "[compute]\ngemm_backward_efficiency = 1.5\n", "t"), ConfigError);
  bad = base;
  bad.replace(bad.find("devices_per_node = 2"), 20, "devices_per_node = 0");
  EXPECT_THROW(parse_machine_text(bad, "t"), ConfigError);
  EXPECT_THROW(parse_machine_file("/nonexistent/machine.ini"), ConfigError);
  // Hexadecimal (strtod reads "0x10" as 16) and an exbibyte-plus of memory per device are typos.
  bad = base;
  bad.replace(bad.find("memory_gbs = 2"), 14, "memory_gbs = 0x10");
  EXPECT_THROW(parse_machine_text(bad, "t"), ConfigError);
  bad = base;
  bad.replace(bad.find("memory_per_device_gib = 1"), 25, "memory_per_device_gib = 1e300");
  EXPECT_THROW(parse_machine_text(bad, "t"), ConfigError);
  bad = base;  // ... and less than a KiB (1e-300 once planned "0 fit in 0 MiB per rank")
  bad.replace(bad.find("memory_per_device_gib = 1"), 25, "memory_per_device_gib = 1e-300");
  EXPECT_THROW(parse_machine_text(bad, "t"), ConfigError);
  // A value that is not a rate beyond 1e15 of its unit (a 300-digit mem_MiB column) is a typo.
  bad = base;
  bad.insert(bad.find("memory_per_device_gib = 1") + 25, "\nruntime_overhead_mib = 1e15");
  EXPECT_NO_THROW(parse_machine_text(bad, "t"));
  bad.replace(bad.find("runtime_overhead_mib = 1e15"), 27, "runtime_overhead_mib = 1e16");
  EXPECT_THROW(parse_machine_text(bad, "t"), ConfigError);
  // A rate outside [1e-9, 1e15] in the file's units is a typo (1e-300 printed 300-digit step times).
  for (const char* rate : {"peak_tflops_float = 1e-300", "peak_tflops_float = 1e16"}) {
    bad = base;
    bad.replace(bad.find("peak_tflops_float = 0.001"), 25, rate);
    EXPECT_THROW(parse_machine_text(bad, "t"), ConfigError) << rate;
  }
  bad = base;
  bad.replace(bad.find("peak_tflops_float = 0.001"), 25, "peak_tflops_float = 1e-9 ");
  EXPECT_NO_THROW(parse_machine_text(bad, "t"));
}

Config small_deck(int dp, int tp, int pp, std::int64_t global_batch, std::int64_t micro_batch);  // below

TEST(Machine, OptimizerRateBySize) {
  // One rate: every size.
  const MachineSpec one = parse_machine_text(kMachine, "test");
  EXPECT_DOUBLE_EQ(one.optimizer_rate(10), 1e7);
  EXPECT_DOUBLE_EQ(one.optimizer_rate(1e12), 1e7);
  // Two rates, 1e7/s at 1,000 and 2.5e6/s at 100,000 parameters: the time per parameter 1e-7 s and
  // 4e-7 s, half way in log size (10,000) 2.5e-7 s, so 4e6/s; clamped outside.
  const std::string large = "optimizer_params = 1000\noptimizer_large_gparams = 0.0025\noptimizer_large_params = 100000\n";
  std::string text = kMachine;
  text.insert(text.find("overlap_efficiency"), large);
  const MachineSpec m = parse_machine_text(text, "test");
  EXPECT_DOUBLE_EQ(m.optimizer_rate(500), 1e7);
  EXPECT_DOUBLE_EQ(m.optimizer_rate(1000), 1e7);
  EXPECT_NEAR(m.optimizer_rate(10000), 4e6, 1e-6);
  EXPECT_DOUBLE_EQ(m.optimizer_rate(100000), 2.5e6);
  EXPECT_DOUBLE_EQ(m.optimizer_rate(1e9), 2.5e6);
  // The step model charges the owned shard at its size's rate: the small deck's 108,864 parameters
  // at 2.5e6/s (beyond the large size), plus zeroing the gradient at 2e9 B/s.
  const Config c = small_deck(1, 1, 1, 4, 4);
  const double psi = static_cast<double>(ParamLayout::make(c.model).numel());
  EXPECT_NEAR(predict_step(c, m).optimizer_s, psi / 2.5e6 + psi * 4 / 2e9, 1e-12);

  // The pair comes whole and in order, or the file is refused naming what is missing.
  auto refused = [](const std::string& t, const std::string& what) {
    try {
      parse_machine_text(t, "m.ini");
      ADD_FAILURE() << "accepted: " << what;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  std::string no_size = kMachine;
  no_size.insert(no_size.find("overlap_efficiency"), "optimizer_large_gparams = 0.0025\noptimizer_large_params = 100000\n");
  refused(no_size, "[compute] optimizer_params is missing: the optimizer rate at two shard sizes");
  std::string size_only = kMachine;  // a size without the large rate means nothing: refused too
  size_only.insert(size_only.find("overlap_efficiency"), "optimizer_params = 1000\n");
  refused(size_only, "[compute] optimizer_large_gparams is missing");
  std::string backwards = kMachine;
  backwards.insert(backwards.find("overlap_efficiency"),
                   "optimizer_params = 1000\noptimizer_large_gparams = 0.0025\noptimizer_large_params = 1000\n");
  refused(backwards, "optimizer_large_params must exceed optimizer_params");
  std::string zero = kMachine;
  zero.insert(zero.find("overlap_efficiency"), "optimizer_params = 0\n");
  refused(zero, "[compute] optimizer_params must be > 0");
}

// ---- the step model against hand-computed cases ---------------------------------------------

Config small_deck(int dp, int tp, int pp, std::int64_t global_batch, std::int64_t micro_batch) {
  Config c;
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_embd = 64;
  c.model.block_size = 32;
  c.model.vocab_size = 128;
  c.parallel.dp = dp;
  c.parallel.tp = tp;
  c.parallel.pp = pp;
  c.train.global_batch_size = global_batch;
  c.train.micro_batch_size = micro_batch;
  c.data.path = "unused.h5";
  validate(c, dp * tp * pp);
  return c;
}

// Hand derivation for the small deck (C = 64, T = 32, L = 2, V = 128), micro-batch 4 (N = 128
// tokens), the test machine (GEMM 1e9, attention 5e8, memory 2e9 B/s, GELU 1e8/s, AdamW 1e7/s):
//   block fwd = GEMM 24 N C^2 / 1e9 + attention 6 b T^2 C / 5e8 / 3 + memory 10 N C 4 / 2e9 + GELU 4 N C / 1e8 / 3
constexpr double kGemmF = 24.0 * 128 * 64 * 64 / 1e9;      // 0.012582912
constexpr double kAttn = 6.0 * 4 * 32 * 32 * 64 / 5e8;     // 0.003145728 (fwd + bwd)
constexpr double kGelu = 4.0 * 128 * 64 / 1e8;             // 0.00032768 (fwd + bwd)
constexpr double kBlkF = kGemmF + kAttn / 3 + 10.0 * 128 * 64 * 4 / 2e9 + kGelu / 3;
constexpr double kBlkB = 2 * kGemmF + 2 * kAttn / 3 + 12.0 * 128 * 64 * 4 / 2e9 + 2 * kGelu / 3;
constexpr double kEmbed = 2.0 * 128 * 64 * 4 / 2e9;  // each way
constexpr double kHeadF = 2.0 * 128 * 64 * 128 / 1e9 + (3.0 * 128 * 128 + 4.0 * 128 * 64) * 4 / 2e9;
constexpr double kHeadB = 4.0 * 128 * 64 * 128 / 1e9 + (2.0 * 128 * 128 + 6.0 * 128 * 64) * 4 / 2e9;
// Parameters (bias = false): blocks 12 L C^2 + 2 L C (two LayerNorm weights), wte + wpe (V + T) C, ln_f C.
constexpr double kPsi = 12.0 * 2 * 64 * 64 + 2.0 * 2 * 64 + (128.0 + 32) * 64 + 64;  // 108864

TEST(StepModel, OneRankHandComputed) {
  const MachineSpec mach = parse_machine_text(kMachine, "test");
  const Config c = small_deck(1, 1, 1, 4, 4);
  EXPECT_EQ(ParamLayout::make(c.model).numel(), static_cast<std::int64_t>(kPsi));
  const StepPrediction p = predict_step(c, mach);
  EXPECT_EQ(p.num_micro_batches, 1);
  EXPECT_NEAR(p.forward_s, 2 * kBlkF + kEmbed + kHeadF, 1e-12);
  EXPECT_NEAR(p.backward_s, 2 * kBlkB + kEmbed + kHeadB, 1e-12);
  EXPECT_DOUBLE_EQ(p.recompute_s, 0.0);
  EXPECT_DOUBLE_EQ(p.bubble_s, 0.0);
  EXPECT_DOUBLE_EQ(p.dp_comm_s, 0.0);
  EXPECT_DOUBLE_EQ(p.tp_comm_s, 0.0);
  // AdamW + norm on all parameters at 1e7/s, zeroing the gradient at 2e9 B/s.
  EXPECT_NEAR(p.optimizer_s, kPsi / 1e7 + kPsi * 4 / 2e9, 1e-12);
  EXPECT_NEAR(p.total_s, p.forward_s + p.backward_s + p.optimizer_s, 1e-12);
  EXPECT_DOUBLE_EQ(p.model_flops, narayanan_flops(c.model, 4, false));
  // Memory is the trainer's own prediction.
  const MemoryBytes mem = predict_memory(c);
  EXPECT_DOUBLE_EQ(p.memory_total_bytes, static_cast<double>(std::accumulate(mem.begin(), mem.end(), std::int64_t{0})));

  // Backward GEMMs at half the forward's share of the peak: the blocks' 2 kGemmF and the head's
  // 4 N C V FLOPs take twice as long, nothing else changes.
  std::string slow = kMachine;
  slow.insert(slow.find("attention_tflops"), "gemm_backward_efficiency = 0.5\n");
  const StepPrediction pb = predict_step(c, parse_machine_text(slow, "test"));
  EXPECT_NEAR(pb.backward_s, p.backward_s + 2 * 2 * kGemmF + 4.0 * 128 * 64 * 128 / 1e9, 1e-12);
  EXPECT_DOUBLE_EQ(pb.forward_s, p.forward_s);

  // Activation checkpointing: one more block forward per block.
  Config r = c;
  r.train.activation_checkpointing = Recompute::block;
  EXPECT_NEAR(predict_step(r, mach).recompute_s, 2 * kBlkF, 1e-12);
}

TEST(StepModel, EnginePassesFollowZeroCpp) {
  // n = 100 parameters, s = 30 owned (padded) over S = 4 (sS = 120): the passes of train/zero.cpp's
  // begin_step, finish_gradients and refresh_params, counted there by hand.
  EXPECT_DOUBLE_EQ(engine_passes(0, 1, 100, 100, false, false), 100);          // zero the gradient
  EXPECT_DOUBLE_EQ(engine_passes(0, 4, 100, 100, true, true), 100 + 200 + 100);  // + to/from 16 bits, + params
  EXPECT_DOUBLE_EQ(engine_passes(1, 4, 100, 30, false, false), 100 + 30 + 120 + 100 + 30 + 100);
  EXPECT_DOUBLE_EQ(engine_passes(1, 4, 100, 30, true, false), 480 + 120 + 30);
  // One rank: the reduce-scatter (separate buffers) is a copy, the in-place all-gather is not.
  EXPECT_DOUBLE_EQ(engine_passes(1, 1, 100, 100, false, false), 100 + 100 + 100 + 100 + 100 + 100 + 100);
  EXPECT_DOUBLE_EQ(engine_passes(2, 4, 100, 30, false, false), 30 + 30 + 100);
  EXPECT_DOUBLE_EQ(engine_passes(2, 1, 100, 100, false, false), 100 + 100 + 100);
  EXPECT_DOUBLE_EQ(engine_passes(3, 4, 100, 30, false, false), 30);
  EXPECT_DOUBLE_EQ(engine_passes(3, 4, 100, 30, false, true), 60);
}

TEST(StepModel, DataParallelHandComputed) {
  const MachineSpec mach = parse_machine_text(kMachine, "test");
  // Stage 0, dp = 2: one all-reduce of the 4-byte gradient: alpha + 2(n-1)/n * 4 Psi / 1 GB/s.
  const StepPrediction p0 = predict_step(small_deck(2, 1, 1, 8, 4), mach);
  EXPECT_NEAR(p0.dp_comm_s, 1e-5 + 1.0 * 4 * kPsi * 1e-9, 1e-12);
  EXPECT_NEAR(p0.dp_exposed_s, p0.dp_comm_s, 1e-15);  // overlap_efficiency = 0
  EXPECT_NEAR(p0.other_s, 1e-5 + 8e-9, 1e-15);  // the loss all-reduce (8 bytes) over dp
  // Stage 1: a reduce-scatter and an all-gather per unit (embedding, 2 blocks, head): 8 alphas, and
  // (n-1)/n = 1/2 of the padded units, twice; the optimizer works on half the (padded) parameters.
  Config c1 = small_deck(2, 1, 1, 8, 4);
  c1.parallel.zero_stage = 1;
  const ParamLayout L = ParamLayout::make(c1.model, 1);
  double padded = 0, owned = 0;
  for (const auto& u : L.units()) {
    padded += std::ceil(u.numel / 2.0) * 2;
    owned += std::ceil(u.numel / 2.0);
  }
  ASSERT_EQ(L.units().size(), 4u);
  const StepPrediction p1 = predict_step(c1, mach);
  EXPECT_NEAR(p1.dp_comm_s, 8 * 1e-5 + 2 * 0.5 * 4 * padded * 1e-9, 1e-12);
  // The engine's passes at stage 1 (engine_passes): zero the gradient (Psi) and the shard (owned),
  // fill (padded) and copy (Psi) into the reduce-scatter buffer, the master piece (owned) into the
  // all-gather buffer and that (Psi) into the working params: 4-byte elements at memory_gbs here.
  EXPECT_NEAR(p1.optimizer_s, owned / 1e7 + (kPsi + owned + padded + kPsi + owned + kPsi) * 4 / 2e9, 1e-12);
  // With copy_gbs, at that rate instead.
  std::string copy_file = kMachine;
  copy_file.insert(copy_file.find("overlap_efficiency"), "copy_gbs = 8\n");
  EXPECT_NEAR(predict_step(c1, parse_machine_text(copy_file, "test")).optimizer_s,
              owned / 1e7 + (3 * kPsi + 2 * owned + padded) * 4 / 8e9, 1e-12);
  // Stage 2 with 2 micro-batches: the reduce-scatter per unit per micro-batch.
  Config c2 = small_deck(2, 1, 1, 16, 4);
  c2.parallel.zero_stage = 2;
  const StepPrediction p2 = predict_step(c2, mach);
  EXPECT_EQ(p2.num_micro_batches, 2);
  EXPECT_NEAR(p2.dp_comm_s, (2 * 4 + 4) * 1e-5 + (2 + 1) * 0.5 * 4 * padded * 1e-9, 1e-12);
  // Stage 3, 2 micro-batches, 2 block units (both stay in the two block slots): each unit gathered
  // once per step, reduce-scattered once per micro-batch.
  Config c3 = c2;
  c3.parallel.zero_stage = 3;
  const StepPrediction p3 = predict_step(c3, mach);
  EXPECT_NEAR(p3.dp_comm_s, (4 + 2 * 4) * 1e-5 + (1 + 2) * 0.5 * 4 * padded * 1e-9, 1e-12);
  // 4 blocks of one unit each: 2 M (4 - 2) + 2 = 10 block gathers with M = 2.
  Config c4 = c3;
  c4.model.n_layer = 4;
  const ParamLayout L4 = ParamLayout::make(c4.model, 1);
  ASSERT_EQ(L4.units().size(), 6u);
  double special = 0, block = 0;
  for (size_t u = 0; u < L4.units().size(); ++u)
    (u == 0 || u == 5 ? special : block) += std::ceil(L4.units()[u].numel / 2.0) * 2;
  const StepPrediction p4 = predict_step(c4, mach);
  EXPECT_NEAR(p4.dp_comm_s,
              (2 + 10 + 2 * 6) * 1e-5 + 0.5 * 4 * 1e-9 * (special + block * 10.0 / 4 + 2 * (special + block)), 1e-12);
}

TEST(StepModel, OffloadHandComputed) {
  // The offload records at the [storage] rates: read 0.1 GB/s, write 0.05 GB/s.
  const MachineSpec bare = parse_machine_text(kMachine, "test");
  const MachineSpec mach = parse_machine_text(std::string(kMachine) + "[storage]\nread_gbs = 0.1\nwrite_gbs = 0.05\n", "test");
  EXPECT_DOUBLE_EQ(mach.storage_read_bw, 1e8);
  EXPECT_DOUBLE_EQ(mach.storage_write_bw, 5e7);
  const auto aligned = [](double b) { return std::ceil(b / 4096.0) * 4096.0; };
  // One rank, stage 0, fp32: the working params are the master, so each unit's chunk holds the two
  // moments (8 bytes per parameter; every unit is below the 16 MiB chunk), read and written once.
  Config c = small_deck(1, 1, 1, 4, 4);
  const StepPrediction none = predict_step(c, bare);
  EXPECT_DOUBLE_EQ(none.offload_io_s, 0.0);
  c.parallel.offload_optimizer = OffloadKind::nvme;
  c.parallel.offload_path = "/scratch";
  validate(c, 1);
  EXPECT_THROW(predict_step(c, bare), ConfigError);  // a deck that offloads needs [storage]
  {
    // Host offload (GPU builds): the gradient shard down and the master up at [host] link_gbs
    // (2 GB/s here), nothing hidden, and AdamW at the host's rate (1e6/s) instead of the device's.
    Config h = small_deck(1, 1, 1, 4, 4);
    h.parallel.offload_optimizer = OffloadKind::host;
    validate(h, 1, BuildTarget::cuda);  // a GPU build accepts the deck
    try {
      predict_step(h, mach);
      ADD_FAILURE() << "a deck with offload_optimizer = host was predicted without [host] rates";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("no [host] link_gbs and [host] optimizer_gparams"), std::string::npos)
          << e.what();
    }
    const MachineSpec hm =
        parse_machine_text(std::string(kMachine) + "[host]\nlink_gbs = 2\noptimizer_gparams = 0.001\n", "test");
    const StepPrediction q = predict_step(h, hm);
    EXPECT_DOUBLE_EQ(q.offload_read_bytes, 4.0 * kPsi);
    EXPECT_DOUBLE_EQ(q.offload_write_bytes, 4.0 * kPsi);
    EXPECT_NEAR(q.offload_io_s, 8.0 * kPsi / 2e9, 1e-12);
    EXPECT_DOUBLE_EQ(q.offload_hidden_s, 0.0);
    // The gradient norm (one of the eight passes of the device's norm + AdamW rate) stays on the device.
    EXPECT_NEAR(q.optimizer_s, none.optimizer_s - kPsi / 1e7 * 7.0 / 8.0 + kPsi / 1e6, 1e-12);
    EXPECT_NEAR(q.total_s, none.total_s + 8.0 * kPsi / 2e9 - kPsi / 1e7 * 7.0 / 8.0 + kPsi / 1e6, 1e-12);
    // Memory per device: the 12-byte block and its gradient staging are host memory; one chunk of
    // three kinds (here the largest unit, below 16 MiB) stays on the device.
    std::int64_t max_unit = 0;
    const ParamLayout hl = ParamLayout::make(h.model, 1);
    for (const auto& u : hl.units()) max_unit = std::max(max_unit, u.numel);
    const auto O = static_cast<size_t>(MemCategory::optimizer);
    EXPECT_EQ(q.memory[O], 12 * max_unit);
    EXPECT_DOUBLE_EQ(q.host_offload_bytes, aligned(12.0 * kPsi) + aligned(4.0 * max_unit));
    double sum = hm.runtime_overhead_bytes;
    for (auto v : q.memory) sum += static_cast<double>(v);
    EXPECT_DOUBLE_EQ(q.memory_total_bytes, sum);
    // A machine file with one of the two keys is refused naming the other.
    const MachineSpec half = parse_machine_text(std::string(kMachine) + "[host]\nlink_gbs = 2\n", "half.ini");
    try {
      require_machine_rates(h, half, "machine file half.ini");
      ADD_FAILURE() << "a machine file without [host] optimizer_gparams was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("half.ini has no [host] optimizer_gparams, which"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(parse_machine_text(std::string(kMachine) + "[host]\nlink_gbs = 0\n", "test"), ConfigError);
  }
  double chunks = 0;
  const ParamLayout layout = ParamLayout::make(c.model, 1);
  for (const auto& u : layout.units()) chunks += aligned(8.0 * u.numel);
  const StepPrediction p = predict_step(c, mach);
  EXPECT_DOUBLE_EQ(p.offload_read_bytes, chunks);
  EXPECT_DOUBLE_EQ(p.offload_write_bytes, chunks);
  EXPECT_NEAR(p.offload_io_s, chunks / 1e8 + chunks / 5e7, 1e-12);
  // AdamW (kPsi at 1e7/s) runs under the stream; the rest of the transfers is exposed and in the step.
  EXPECT_NEAR(p.offload_hidden_s, kPsi / 1e7, 1e-12);
  EXPECT_NEAR(p.offload_exposed_s, chunks / 1e8 + chunks / 5e7 - kPsi / 1e7, 1e-12);
  EXPECT_NEAR(p.total_s, none.total_s + p.offload_exposed_s, 1e-12);

  // dp 2, ZeRO-3 with offload_params, 4 blocks of one unit, 2 micro-batches: the master and both
  // moments of each piece (12 bytes), and a parameter record per unit (4 bytes per element of its
  // piece) written once, read at each gather: embedding and head once, the blocks 2 M (4 - 2) + 2 = 10
  // times among 4. With prefetch, all but the first read of each of the 2 M passes run under compute.
  Config z = small_deck(2, 1, 1, 16, 4);
  z.model.n_layer = 4;
  z.parallel.zero_stage = 3;
  z.parallel.offload_optimizer = OffloadKind::nvme;
  z.parallel.offload_params = OffloadKind::nvme;
  z.parallel.offload_path = "/scratch";
  validate(z, 2);
  const ParamLayout zlayout = ParamLayout::make(z.model, 1);
  const auto& units = zlayout.units();
  ASSERT_EQ(units.size(), 6u);
  double zchunks = 0, writes = 0, reads = 0, largest = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const double s_u = std::ceil(units[u].numel / 2.0), rec = aligned(4.0 * s_u);
    zchunks += aligned(12.0 * s_u);
    writes += rec;
    reads += rec * (u == 0 || u == 5 ? 1.0 : 10.0 / 4.0);
    largest = std::max(largest, rec);
  }
  const StepPrediction q = predict_step(z, mach);
  EXPECT_NEAR(q.offload_read_bytes, zchunks + reads, 1e-6);
  EXPECT_DOUBLE_EQ(q.offload_write_bytes, zchunks + writes);
  const double stream = zchunks / 1e8 + (zchunks + writes) / 5e7, read = reads / 1e8;
  EXPECT_NEAR(q.offload_io_s, stream + read, 1e-12);
  const double owned = [&] {
    double o = 0;
    for (const auto& u : units) o += std::ceil(u.numel / 2.0);
    return o;
  }();
  const double unhidden = std::min(read, 2.0 * 2 * largest / 1e8);
  EXPECT_NEAR(q.offload_hidden_s, std::min(stream, owned / 1e7) + (read - unhidden), 1e-12);
  // Without prefetch no read is hidden.
  z.parallel.prefetch = false;
  EXPECT_NEAR(predict_step(z, mach).offload_hidden_s, std::min(stream, owned / 1e7), 1e-12);
  // A negative or zero storage rate is refused.
  EXPECT_THROW(parse_machine_text(std::string(kMachine) + "[storage]\nread_gbs = 0\nwrite_gbs = 1\n", "t"), ConfigError);
}

// block_slot_fills against a replay of the stage's real PipelineSchedule over the engine's slot
// rule (block unit k in slot k % 2; a unit enters when its slot holds another; forward acquires
// 0..nb-1, backward nb-1..0; slots empty at the step's start): every schedule, pp 1-4, every
// stage, 1-7 micro-batches, 0-6 block units, split by pass direction.
TEST(StepModel, BlockSlotFillsReplayThePipelineSchedule) {
  for (PipelineScheduleKind kind : {PipelineScheduleKind::one_f_one_b, PipelineScheduleKind::gpipe})
    for (int pp = 1; pp <= 4; ++pp)
      for (int stage = 0; stage < pp; ++stage)
        for (int M = 1; M <= 7; ++M)
          for (int nb = 0; nb <= 6; ++nb) {
            int slot[2] = {-1, -1};
            double fwd = 0, bwd = 0;
            const PipelineSchedule schedule(kind, M, pp, stage);
            for (const PipelineAction& a : schedule.actions()) {
              const bool forward = a.pass == PipelineAction::Pass::forward;
              for (int i = 0; i < nb; ++i) {
                const int k = forward ? i : nb - 1 - i;
                if (slot[k % 2] != k) {
                  (forward ? fwd : bwd) += 1;
                  slot[k % 2] = k;
                }
              }
            }
            const SlotFills f = block_slot_fills(nb, kind, M, pp, stage);
            const std::string where = std::string(name_of(kind)) + " pp " + std::to_string(pp) + " stage " +
                                      std::to_string(stage) + " M " + std::to_string(M) + " nb " + std::to_string(nb);
            EXPECT_EQ(f.fwd, fwd) << where;
            EXPECT_EQ(f.bwd, bwd) << where;
            if (kind == PipelineScheduleKind::one_f_one_b && pp == 1 && nb > 2) {
              EXPECT_EQ(f.total(), 2.0 * M * (nb - 2) + 2) << where;
            }
          }
}

TEST(StepModel, EnginePassesInsideMicroBatches) {
  // The small deck at dp = 2 with 2 micro-batches, fp32: against stage 1 (no engine passes inside a
  // micro-batch), stage 2 adds per micro-batch in backward the gradient slots' zeroing (padded P)
  // and the accumulation of the reduced piece (owned s); stage 3 also copies the owned piece into
  // each gather: the 2 block units once per step, in the first forward (two slots hold both, so the
  // backward and the next forward find them), the embedding and head once per step in forward. 4-byte
  // elements at the test machine's 2e9 B/s (no copy_gbs).
  const MachineSpec mach = parse_machine_text(kMachine, "test");
  Config c = small_deck(2, 1, 1, 16, 4);
  c.parallel.zero_stage = 1;
  const StepPrediction p1 = predict_step(c, mach);
  ASSERT_EQ(p1.num_micro_batches, 2);
  const ParamLayout L = ParamLayout::make(c.model, 1);
  const GptSchedule sched = GptSchedule::make(L, c.model);
  double P = 0, s = 0, s_blocks = 0, s_special = 0;
  for (size_t u = 0; u < L.units().size(); ++u) {
    const double su = std::ceil(L.units()[u].numel / 2.0);
    P += su * 2;
    s += su;
    const bool special = std::find(sched.special_units.begin(), sched.special_units.end(), static_cast<int>(u)) !=
                         sched.special_units.end();
    (special ? s_special : s_blocks) += su;
  }
  const double pass = 4 / 2e9;
  c.parallel.zero_stage = 2;
  const StepPrediction p2 = predict_step(c, mach);
  EXPECT_NEAR(p2.forward_s, p1.forward_s, 1e-15);
  EXPECT_NEAR(p2.backward_s - p1.backward_s, 2 * (P + s) * pass, 1e-12);
  c.parallel.zero_stage = 3;
  const StepPrediction p3 = predict_step(c, mach);
  EXPECT_NEAR(p3.forward_s - p1.forward_s, (s_blocks + s_special) * pass, 1e-12);
  EXPECT_NEAR(p3.backward_s - p1.backward_s, 2 * (P + s) * pass, 1e-12);
  // 16-bit working params below stage 3: a unit is converted when it enters its slot, so here
  // (2 block units, two slots) every unit once per step, in the first forward: kPsi in all.
  c.parallel.zero_stage = 1;
  c.train.param_dtype = Precision::bf16;
  validate(c, 2);
  const StepPrediction ph = predict_step(c, mach);
  double n_special = 0;
  for (int u : sched.special_units) n_special += static_cast<double>(L.units()[static_cast<size_t>(u)].numel);
  EXPECT_NEAR(ph.forward_s - p1.forward_s, kPsi * pass, 1e-12);
  EXPECT_NEAR(ph.backward_s - p1.backward_s, 0.0, 1e-15);
  (void)n_special;
  // Four block units, 2 micro-batches: the blocks enter their slots 2 M (nb - 2) + 2 = 10 times a
  // step (the two blocks at each forward/backward turn stay), i.e. 10 block units' elements.
  Config d = small_deck(2, 1, 1, 16, 4);
  d.model.n_layer = 4;
  d.parallel.zero_stage = 1;
  validate(d, 2);
  const StepPrediction d32 = predict_step(d, mach);
  d.train.param_dtype = Precision::bf16;
  validate(d, 2);
  const StepPrediction d16 = predict_step(d, mach);
  const ParamLayout L4 = ParamLayout::make(d.model, 1);
  const GptSchedule sched4 = GptSchedule::make(L4, d.model);
  double block_unit = 0, special4 = 0;
  for (size_t u = 0; u < L4.units().size(); ++u) {
    const bool special = std::find(sched4.special_units.begin(), sched4.special_units.end(), static_cast<int>(u)) !=
                         sched4.special_units.end();
    if (special) special4 += static_cast<double>(L4.units()[u].numel);
    else block_unit = static_cast<double>(L4.units()[u].numel);
  }
  EXPECT_NEAR((d16.forward_s + d16.backward_s) - (d32.forward_s + d32.backward_s),
              (10 * block_unit + special4) * pass, 1e-12);
}

TEST(StepModel, TensorParallelHandComputed) {
  const MachineSpec mach = parse_machine_text(kMachine, "test");
  const StepPrediction p = predict_step(small_deck(1, 2, 1, 4, 4), mach);
  // Per micro-batch: 4 all-reduces of N C floats per block (2 blocks), 1 for the embedding, 2 for
  // the head, and the cross entropy's max (N floats) and sums (2 N floats); n = 2: factor 1.
  const double ar = 1e-5 + 128.0 * 64 * 4 * 1e-9;
  EXPECT_NEAR(p.tp_comm_s, 8 * ar + ar + 2 * ar + (1e-5 + 128.0 * 4 * 1e-9) + (1e-5 + 256.0 * 4 * 1e-9), 1e-12);
  // GEMMs and attention are split over tp: the block forward's GEMM time halves.
  const StepPrediction p1 = predict_step(small_deck(1, 1, 1, 4, 4), mach);
  EXPECT_LT(p.forward_s, p1.forward_s);
  EXPECT_NEAR(p1.forward_s - p.forward_s,
              2 * (kGemmF / 2 + kAttn / 6 + kGelu / 6) + (2.0 * 128 * 64 * 64 / 1e9 + 3.0 * 128 * 64 * 4 / 2e9), 1e-12);
}

TEST(StepModel, PipelineBubbleIsFillAndDrain) {
  const MachineSpec mach = parse_machine_text(kMachine, "test");
  // pp = 2, micro-batch 4: with M = 2 and M = 4 the fill/drain costs the same, and every extra
  // micro-batch costs one critical-stage time: (M - 1) max_s t_s + sum_s t_s.
  const StepPrediction a = predict_step(small_deck(1, 1, 2, 8, 4), mach);
  const StepPrediction b = predict_step(small_deck(1, 1, 2, 16, 4), mach);
  ASSERT_EQ(a.num_micro_batches, 2);
  ASSERT_EQ(b.num_micro_batches, 4);
  EXPECT_NEAR(a.bubble_s, b.bubble_s, 1e-12);
  EXPECT_GT(a.bubble_s, 0.0);
  const double t_crit = (b.pipeline_s - a.pipeline_s) / 2;
  EXPECT_NEAR(a.pipeline_s, 2 * t_crit + a.bubble_s, 1e-12);
  // Each of the 2 stages waits for one transfer per micro-batch (the first for the gradient, the
  // last for the activation) of N C floats.
  EXPECT_NEAR(b.pp_comm_s, 4 * (1e-5 + 128.0 * 64 * 4 * 1e-9), 1e-12);
  // GPipe and 1F1B have the same bubble.
  Config g = small_deck(1, 1, 2, 16, 4);
  g.parallel.pp_schedule = PipelineScheduleKind::gpipe;
  EXPECT_NEAR(predict_step(g, mach).total_s, b.total_s, 1e-12);
}

// ---- attention and dropout where no attention rate is measured ------------------------------

TEST(StepModel, UnmeasuredAttentionIsGemmsOverAllScoresPlusSoftmax) {
  // Without attention_tflops the model runs attention as kernels/attention.cpp does: GEMMs over the
  // whole (T, T) scores (4 b T^2 C forward, 8 b T^2 C backward at the GEMM rate 1e9) and the softmax
  // at 2e9 B/s (2 passes of n_head T^2 floats per sequence forward, 3 backward).
  std::string text = kMachine;
  text.replace(text.find("attention_tflops = 0.0005\n"), 26, "");
  const MachineSpec bare = parse_machine_text(text, "test"), measured = parse_machine_text(kMachine, "test");
  const Config c = small_deck(1, 1, 1, 4, 4);  // b = 4, T = 32, C = 64, 2 heads, 2 layers
  const double scores = 4.0 * 2 * 32 * 32 * 4;  // bytes of one pass over the scores
  const double f = 4.0 * 4 * 32 * 32 * 64 / 1e9 + 2 * scores / 2e9, b = 8.0 * 4 * 32 * 32 * 64 / 1e9 + 3 * scores / 2e9;
  const StepPrediction p = predict_step(c, bare), q = predict_step(c, measured);
  EXPECT_NEAR(p.forward_s - q.forward_s, 2 * (f - kAttn / 3), 1e-12);
  EXPECT_NEAR(p.backward_s - q.backward_s, 2 * (b - 2 * kAttn / 3), 1e-12);
}

TEST(StepModel, DropoutAddsItsMemoryPasses) {
  // Per block and pass: the attention dropout reads and writes the scores (2 n_head T^2 floats per
  // sequence), the two residual dropouts read and write N C floats each.
  const MachineSpec mach = parse_machine_text(kMachine, "test");
  Config c = small_deck(1, 1, 1, 4, 4);
  const StepPrediction off = predict_step(c, mach);
  c.model.dropout = 0.1;
  const StepPrediction on = predict_step(c, mach);
  const double per_pass = (2.0 * 4 * 2 * 32 * 32 * 4 + 4.0 * 128 * 64 * 4) / 2e9;
  EXPECT_NEAR(on.forward_s - off.forward_s, 2 * per_pass, 1e-12);
  EXPECT_NEAR(on.backward_s - off.backward_s, 2 * per_pass, 1e-12);
}

TEST(StepModel, HiddenCommunicationNeverExceedsTheCompute) {
  // ZeRO-3 with prefetch and overlapped reduce-scatters on a slow link with full overlap: the dp
  // collectives share the link, so at most the compute time is hidden and the rest is exposed.
  std::string text = kMachine;
  text.replace(text.find("overlap_efficiency = 0"), 22, "overlap_efficiency = 1");
  text.replace(text.find("busbw_gbs = 1"), 13, "busbw_gbs = 0.001");
  const MachineSpec slow = parse_machine_text(text, "test");
  Config c = small_deck(2, 1, 1, 16, 4);
  c.model.n_layer = 4;
  c.parallel.zero_stage = 3;
  c.parallel.prefetch = true;
  c.parallel.overlap_reduce = true;
  validate(c, 2);
  const StepPrediction p = predict_step(c, slow);
  const double compute = p.forward_s + p.backward_s + p.recompute_s;
  ASSERT_GT(p.dp_comm_s, 2 * compute);  // the link is the bottleneck
  EXPECT_NEAR(p.dp_hidden_s, compute, 1e-12);
  EXPECT_NEAR(p.dp_exposed_s, p.dp_comm_s - compute, 1e-12);
}

TEST(StepModel, AGroupCrossingANodeUsesTheInterNodeLink) {
  // tp = 3 on nodes of 8: the third group (ranks 6-8) crosses a node boundary, so tp runs at the
  // inter-node cost, as it does on nodes of 2; on nodes of 6 every group is inside one node.
  MachineSpec m = parse_machine_text(std::string(kMachine) + "[link.inter]\nalpha_us = 50\nbusbw_gbs = 0.1\n", "t");
  Config c = small_deck(1, 1, 1, 4, 4);
  c.model.n_embd = 48;
  c.model.n_head = 6;
  c.parallel.tp = 3;
  validate(c, 3);
  auto tp_time = [&](int per_node) {
    m.devices_per_node = per_node;
    return predict_step(c, m).tp_comm_s;
  };
  EXPECT_DOUBLE_EQ(tp_time(8), tp_time(2));
  EXPECT_LT(tp_time(6), tp_time(8));
}

// ---- what other codes run: interleaved 1F1B, scatter/gather p2p, 16-bit activations ---------

TEST(StepModel, InterleavedScheduleDividesTheBubbleByTheChunks) {
  // pp = 2 with 2 layers per stage and M = 4: v = 2 chunks per stage halve the fill and drain
  // (Narayanan et al. 2021, sec. 2.2.2) and every chunk boundary is a transfer: the first stage
  // receives v - 1 activations and v gradients per micro-batch, the last v and v - 1.
  const MachineSpec mach = parse_machine_text(kMachine, "test");
  Config c = small_deck(1, 1, 2, 16, 4);
  c.model.n_layer = 4;
  validate(c, 2);
  const StepPrediction one = predict_step(c, mach);
  PeerSchedule v2;
  v2.virtual_stages = 2;
  const StepPrediction two = predict_step(c, mach, v2);
  ASSERT_EQ(two.num_micro_batches, 4);
  const double xfer = 1e-5 + 128.0 * 64 * 4 * 1e-9;  // one activation of N C floats
  EXPECT_NEAR(one.pp_comm_s, 4 * xfer, 1e-12);
  EXPECT_NEAR(two.pp_comm_s, 4 * 3 * xfer, 1e-12);
  // The stage time grows by the two extra transfers per micro-batch; the bubble is
  // (sum_s t_s - max_s t_s) / v with the new stage times.
  const double t_crit1 = one.pipeline_s - one.bubble_s, t_crit2 = two.pipeline_s - two.bubble_s;
  EXPECT_NEAR(t_crit2 - t_crit1, 4 * 2 * xfer, 1e-12);
  EXPECT_NEAR(two.bubble_s, (one.bubble_s + 2 * xfer) / 2, 1e-12);
  // Megatron-LM's requirements: whole chunks per stage, micro-batches a multiple of pp.
  PeerSchedule v3;
  v3.virtual_stages = 3;
  EXPECT_THROW(predict_step(c, mach, v3), ConfigError);
  Config odd = small_deck(1, 1, 2, 12, 4);  // M = 3
  odd.model.n_layer = 4;
  validate(odd, 2);
  EXPECT_THROW(predict_step(odd, mach, v2), ConfigError);
  EXPECT_NO_THROW(predict_step(odd, mach));
}

TEST(StepModel, ScatterGatherAndActivationBytes) {
  // tp = 2, pp = 2 on one node: scatter/gather sends N C / 2 floats to the next stage and
  // all-gathers N C floats over tp ((n - 1)/n = 1/2); 2-byte activations halve every tp all-reduce.
  const MachineSpec mach = parse_machine_text(kMachine, "test");
  MachineSpec wide = mach;
  wide.devices_per_node = 4;
  const Config c = small_deck(1, 2, 2, 8, 4);  // M = 2
  PeerSchedule sg;
  sg.p2p_scatter_gather = true;
  const StepPrediction plain = predict_step(c, wide), scattered = predict_step(c, wide, sg);
  const double act = 128.0 * 64 * 4;
  EXPECT_NEAR(plain.pp_comm_s, 2 * (1e-5 + act * 1e-9), 1e-12);
  EXPECT_NEAR(scattered.pp_comm_s, 2 * ((1e-5 + act / 2 * 1e-9) + (1e-5 + 0.5 * act * 1e-9)), 1e-12);
  PeerSchedule half;
  half.activation_bytes = 2;
  const StepPrediction h = predict_step(c, wide, half);
  EXPECT_NEAR(h.pp_comm_s, 2 * (1e-5 + act / 2 * 1e-9), 1e-12);
  // The critical (last) stage's tp all-reduces per micro-batch: 4 for its block, 2 for the head,
  // the cross entropy's max (N) and sums (2 N): 8 alphas and 6 N C + 3 N elements; 2-byte
  // activations halve the bytes, not the alphas.
  const double elems = 6.0 * 128 * 64 + 3.0 * 128;
  EXPECT_NEAR(plain.tp_comm_s, 2 * (8e-5 + elems * 4 * 1e-9), 1e-12);
  EXPECT_NEAR(h.tp_comm_s, 2 * (8e-5 + elems * 2 * 1e-9), 1e-12);
  EXPECT_NEAR(h.memory_total_bytes, plain.memory_total_bytes, 0.0);  // memory is Trident's own
}

TEST(StepModel, FlashAttentionAndTpOverlap) {
  // Fused causal attention: 2 b T^2 C forward and 5 b T^2 C backward at the GEMM rate (1e9), no
  // pass over the scores, no attention-dropout pass: per block the difference to the measured
  // attention (kAttn: a third forward) is exact.
  const MachineSpec mach = parse_machine_text(kMachine, "test");
  const Config c = small_deck(1, 1, 1, 4, 4);
  PeerSchedule flash;
  flash.flash_attention = true;
  const StepPrediction a = predict_step(c, mach), f = predict_step(c, mach, flash);
  const double ff = 2.0 * 4 * 32 * 32 * 64 / 1e9;
  EXPECT_NEAR(f.forward_s - a.forward_s, 2 * (ff - kAttn / 3), 1e-12);
  EXPECT_NEAR(f.backward_s - a.backward_s, 2 * (2.5 * ff - 2 * kAttn / 3), 1e-12);
  // tp overlap hides the tp collectives under the blocks' GEMMs (3 passes, halved by tp = 2),
  // times overlap_efficiency: 0 on the test machine (nothing hidden), 1 on a copy.
  const Config t = small_deck(1, 2, 1, 4, 4);
  PeerSchedule ov;
  ov.tp_overlap = true;
  EXPECT_DOUBLE_EQ(predict_step(t, mach, ov).tp_comm_s, predict_step(t, mach).tp_comm_s);
  MachineSpec full = mach;
  full.overlap_efficiency = 1;
  const double gemms = 2 * 3 * kGemmF / 2;  // 2 blocks, fwd + 2 x fwd backward
  EXPECT_NEAR(predict_step(t, full, ov).tp_comm_s, std::max(0.0, predict_step(t, full).tp_comm_s - gemms), 1e-12);
}

TEST(StepModel, ACudaMachineValidatesBf16Gemms) {
  // A host build without oneDNN refuses compute_dtype = bf16 for itself, and every build accepts it
  // for a CUDA build, which is what a machine file with build = cuda plans for.
  Config c = small_deck(1, 1, 1, 4, 4);
  c.train.compute_dtype = Precision::bf16;
  const bool host_bf16 = TRIDENT_HAVE_CUDA || TRIDENT_HAVE_ONEDNN;
  if (!host_bf16) {
    EXPECT_THROW(validate(c, 1), ConfigError);
  } else {
    EXPECT_NO_THROW(validate(c, 1));
  }
  EXPECT_NO_THROW(validate(c, 1, BuildTarget::cuda));
  const MachineSpec host = parse_machine_text(kMachine, "test");
  EXPECT_FALSE(host.cuda_build);
  const MachineSpec gpu =
      parse_machine_text(std::string(kMachine).replace(0, 10, "[machine]\nbuild = cuda\n"), "test");
  EXPECT_TRUE(gpu.cuda_build);
  EXPECT_THROW(parse_machine_text(std::string(kMachine).replace(0, 10, "[machine]\nbuild = rocm\n"), "t"), ConfigError);
  PlanOptions opt;
  opt.ranks = 1;
  const PlanResult on_gpu = plan_layouts(c, gpu, opt), on_host = plan_layouts(c, host, opt);
  EXPECT_FALSE(on_gpu.fitting.empty() && on_gpu.too_big.empty());
  EXPECT_EQ(on_host.fitting.empty() && on_host.too_big.empty(), !host_bf16);
}

// ---- the planner's promise: valid and within memory (property test) ------------------------

Config deck(int L, int NH, int C, int T, int V, std::int64_t G) {
  Config c;
  c.model.n_layer = L;
  c.model.n_head = NH;
  c.model.n_embd = C;
  c.model.block_size = T;
  c.model.vocab_size = V;
  c.parallel.dp = 0;
  c.train.global_batch_size = G;
  c.data.path = "unused.h5";
  return c;
}

TEST(Planner, NeverProposesAnInvalidOrOverMemoryLayout) {
  MachineSpec mach = parse_machine_text(kMachine, "test");
  const std::vector<Config> decks = {deck(4, 4, 128, 64, 65, 12),      // the example deck
                                     deck(12, 10, 600, 64, 65, 8),     // bench_zero_50m
                                     deck(6, 6, 384, 128, 50304, 24),  // a GPT-2-vocabulary model
                                     deck(3, 3, 96, 16, 7, 9)};        // odd sizes
  for (double mem_mib : {48.0, 256.0, 4096.0}) {
    mach.memory_bytes = mem_mib * 1024 * 1024;
    for (const Config& d : decks)
      for (int ranks : {1, 2, 3, 4, 6, 8}) {
        PlanOptions opt;
        opt.ranks = ranks;
        const PlanResult res = plan_layouts(d, mach, opt);
        EXPECT_GT(res.enumerated, 0);
        EXPECT_EQ(static_cast<size_t>(res.enumerated), res.fitting.size() + res.too_big.size() + res.invalid);
        for (const PlanCandidate& c : res.fitting) {
          SCOPED_TRACE(layout_name(c.cfg) + " ranks " + std::to_string(ranks));
          Config again = c.cfg;
          EXPECT_NO_THROW(validate(again, ranks));  // the trainer's validation accepts it
          EXPECT_EQ(c.cfg.parallel.dp * c.cfg.parallel.tp * c.cfg.parallel.pp, ranks);
          EXPECT_EQ(d.model.n_head % c.cfg.parallel.tp, 0);
          EXPECT_EQ(c.cfg.train.global_batch_size % (c.cfg.train.micro_batch_size * c.cfg.parallel.dp), 0);
          const MemoryBytes mem = predict_memory(c.cfg);  // what --dry-run prints
          const double total = static_cast<double>(std::accumulate(mem.begin(), mem.end(), std::int64_t{0}));
          EXPECT_LE(total + mach.runtime_overhead_bytes, mach.memory_bytes);
          EXPECT_GT(c.pred.total_s, 0.0);
        }
        for (size_t i = 1; i < res.fitting.size(); ++i)
          EXPECT_LE(res.fitting[i - 1].pred.total_s, res.fitting[i].pred.total_s);
        for (const PlanCandidate& c : res.too_big) EXPECT_GT(c.pred.memory_total_bytes, mach.memory_bytes);
      }
  }
}

TEST(Planner, FindsTheKnownLayoutsAndRefusesTheInvalidOnes) {
  const MachineSpec mach = parse_machine_text(kMachine, "test");
  // 4 heads, 4 layers, 8 ranks: tp = 8 would not divide the heads; pp = 8 exceeds the layers.
  PlanOptions opt;
  opt.ranks = 8;
  const PlanResult res = plan_layouts(deck(4, 4, 128, 64, 65, 16), mach, opt);
  bool saw_tp4 = false;
  for (const auto* list : {&res.fitting, &res.too_big})
    for (const PlanCandidate& c : *list) {
      EXPECT_LE(c.cfg.parallel.tp, 4);
      EXPECT_LE(c.cfg.parallel.pp, 4);
      saw_tp4 |= c.cfg.parallel.tp == 4 && c.cfg.parallel.pp == 2;
    }
  EXPECT_TRUE(saw_tp4);
  EXPECT_GT(res.invalid, 0);
  EXPECT_FALSE(res.first_invalid_reason.empty());
  // A memory of 1 byte: nothing fits, everything valid is listed as too big.
  MachineSpec tiny = mach;
  tiny.memory_bytes = 1;
  const PlanResult none = plan_layouts(deck(4, 4, 128, 64, 65, 16), tiny, opt);
  EXPECT_TRUE(none.fitting.empty());
  EXPECT_FALSE(none.too_big.empty());
}

}  // namespace
}  // namespace trident
