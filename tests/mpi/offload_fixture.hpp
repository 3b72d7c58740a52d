// tests/mpi/offload_fixture.hpp: what the optimizer-offload tests share (test_offload.cpp for
// offload_optimizer = nvme, test_offload_host.cpp for host): the tiny deck with uneven unit sizes,
// a run's losses, norms and final state, and bitwise comparison against the resident run.
#pragma once

#include "data/token_dataset.hpp"
#include "parallel/process_grid.hpp"
#include "train/trainer.hpp"
#include "trainer_fixture.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace trident {
namespace offload_test {

// Odd unit sizes (n_embd = 15, vocab 997): padding in every piece at every dp.
inline const std::vector<std::string> kUneven = {"--model.n_embd=15", "--model.n_head=3", "--model.vocab_size=997"};

inline std::string offload_dir() {
  const std::string d = test::scratch_dir() + "/offload";
  if (test::runtime().world().rank() == 0) std::filesystem::create_directories(d);
  test::runtime().world().barrier();
  return d;
}

/// Where the optimizer state goes in a test run.
enum class Mode { resident, nvme, host };

/// The tiny deck with kUneven and `extra`; nvme: offload_optimizer = nvme under offload_dir();
/// host: offload_optimizer = host, set after the deck's validation (which refuses it in a host
/// build, where it would mean nothing to a user; the engine runs it, without copies, for tests).
inline Config config(std::vector<std::string> extra, Mode mode) {
  std::vector<std::string> ov = kUneven;
  ov.insert(ov.end(), extra.begin(), extra.end());
  if (mode == Mode::nvme) {
    ov.push_back("--parallel.offload_optimizer=nvme");
    ov.push_back("--parallel.offload_path=" + offload_dir());
  }
  Config c = test::tiny_config(test::runtime().world_size(), ov);
  c.model.vocab_size = 997;
  if (mode == Mode::host) c.parallel.offload_optimizer = OffloadKind::host;
  return c;
}
/// config() with offload_optimizer = nvme (true) or the state resident (false).
inline Config config(std::vector<std::string> extra, bool offload) {
  return config(std::move(extra), offload ? Mode::nvme : Mode::resident);
}

struct RunResult {
  std::vector<double> loss, norm;
  std::vector<float> master, m, v;
};

inline RunResult train(const Config& cfg, int steps) {
  RunResult r;
  const test::Trace tr = test::train_trace(test::runtime().world(), cfg, steps,
                                           [&](Trainer<float>& t, const ProcessGrid&, const StepResult&, int s) {
                                             if (s + 1 < steps) return;
                                             r.master = t.master_copy();
                                             r.m = t.exp_avg_copy();
                                             r.v = t.exp_avg_sq_copy();
                                           });
  r.loss = tr.loss;
  r.norm = tr.norm;
  return r;
}

/// Constructs a Trainer of `cfg` (offloaded) and checks what every offload mode promises of its
/// memory: the optimizer bytes the construction allocated are the dry run's prediction (dp rank 0;
/// at most that on the others), and every other category but checkpoint is predicted as for
/// `resident`. Then f(trainer, grid, want, want_res) with both predictions, for the mode's own
/// checks. `what` labels failures.
template <class F>
void check_offload_memory(const Config& cfg, const Config& resident, const std::string& what, F&& f) {
  ProcessGrid grid(test::runtime().world(), {cfg.parallel.dp, 1, 1});
  TokenDataset data(cfg.data.path, 64.0);
  const std::int64_t before = MemoryLedger::current(MemCategory::optimizer);
  Trainer<float> t(cfg, grid, data);
  const std::int64_t got = MemoryLedger::current(MemCategory::optimizer) - before;
  const MemoryBytes want = predict_memory(cfg), want_res = predict_memory(resident);
  const auto opt = static_cast<size_t>(MemCategory::optimizer);
  if (grid.dp_rank() == 0) {
    EXPECT_EQ(got, want[opt]) << what;
  } else {
    EXPECT_LE(got, want[opt]) << what;
  }
  for (int c = 0; c < static_cast<int>(MemCategory::data); ++c) {
    if (static_cast<size_t>(c) == opt || static_cast<MemCategory>(c) == MemCategory::checkpoint) continue;
    EXPECT_EQ(want[static_cast<size_t>(c)], want_res[static_cast<size_t>(c)]) << what << ", category " << c;
  }
  f(t, grid, want, want_res);
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Small chunks (TRIDENT_OFFLOAD_CHUNK_BYTES): several records per unit, cut at odd places.
struct ChunkBytes {
  explicit ChunkBytes(const char* bytes) {
    if (bytes != nullptr) ::setenv("TRIDENT_OFFLOAD_CHUNK_BYTES", bytes, 1);
  }
  ~ChunkBytes() { ::unsetenv("TRIDENT_OFFLOAD_CHUNK_BYTES"); }
};

// The run with `offloaded` (offload_optimizer = nvme or host added), with the default and with
// 1000-byte chunks, against the resident run `ref`: every step's loss and norm, the final master
// weights and both moments bitwise equal.
inline void expect_equal_with_offload(const RunResult& ref, const std::vector<std::string>& offloaded,
                                      Mode mode = Mode::nvme) {
  for (const char* chunk : {static_cast<const char*>(nullptr), "1000"}) {
    ChunkBytes scoped(chunk);
    const RunResult off = train(config(offloaded, mode), 4);
    const std::string what = chunk == nullptr ? "default chunks" : "1000-byte chunks";
    for (size_t s = 0; s < ref.loss.size(); ++s) {
      EXPECT_EQ(off.loss[s], ref.loss[s]) << what << ", step " << s + 1;
      EXPECT_EQ(off.norm[s], ref.norm[s]) << what << ", step " << s + 1;
    }
    EXPECT_TRUE(same_bits(off.master, ref.master)) << what << ": master weights";
    EXPECT_TRUE(same_bits(off.m, ref.m)) << what << ": exp_avg";
    EXPECT_TRUE(same_bits(off.v, ref.v)) << what << ": exp_avg_sq";
  }
}

}  // namespace offload_test
}  // namespace trident
