// tests/mpi/trainer_fixture.hpp: a small token file and a tiny deck shared by the trainer tests.
#pragma once

#include "core/config.hpp"
#include "data/token_dataset.hpp"
#include "io/token_file.hpp"
#include "parallel/process_grid.hpp"
#include "train/trainer.hpp"
#include "test_env.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace trident::test {

/// A token file with a learnable structure (a noisy periodic sequence over 37 ids), written once
/// by rank 0 into the scratch directory. Collective.
inline std::string tiny_token_file() {
  const std::string path = scratch_dir() + "/tiny_tokens.h5";
  Communicator& w = runtime().world();
  if (w.rank() == 0 && !std::filesystem::exists(path)) {
    TokenFileInfo info;
    info.tokenizer = "byte";
    info.vocab_size = 37;
    std::vector<std::int32_t> train(6000), val(700);
    std::uint32_t x = 12345;
    auto next = [&](std::size_t i) {
      x = x * 1664525u + 1013904223u;
      return static_cast<std::int32_t>((i * 7 + ((x >> 28) == 0 ? (x >> 20) : 0)) % 37);
    };
    for (std::size_t i = 0; i < train.size(); ++i) train[i] = next(i);
    for (std::size_t i = 0; i < val.size(); ++i) val[i] = next(i);
    write_token_file(path, info, train, val);
  }
  w.barrier();
  return path;
}

/// A tiny model deck (dropout on, so the counter-based masks are exercised) for `ranks` ranks.
inline Config tiny_config(int ranks, const std::vector<std::string>& overrides = {}) {
  const std::string deck = R"(
[model]
n_layer = 2
n_head = 2
n_embd = 16
block_size = 16
bias = true
dropout = 0.1
[train]
global_batch_size = 8
max_steps = 40
lr = 1e-2
min_lr = 1e-3
warmup_steps = 3
weight_decay = 0.1
grad_clip = 1.0
eval_iters = 2
seed = 7
)";
  std::vector<std::string> ov = overrides;
  ov.push_back("--data.path=" + tiny_token_file());
  ov.push_back("--train.out_dir=" + scratch_dir() + "/run");
  Config c = parse_deck_text(deck, "tiny", ov);
  c.model.vocab_size = 37;
  validate(c, ranks);
  return c;
}

/// Loss and gradient norm of each step of a run.
struct Trace {
  std::vector<double> loss, norm;
};

/// Trains `steps` steps of `cfg` on the grid of `comm` (dp x tp x pp from cfg) and records each
/// step's loss and norm; `after_step(trainer, grid, result, step_index)` runs after every step
/// (per-step assertions). Collective over comm.
template <class AfterStep>
Trace train_trace(Communicator& comm, const Config& cfg, int steps, AfterStep&& after_step) {
  ProcessGrid grid(comm, {cfg.parallel.dp, cfg.parallel.tp, cfg.parallel.pp});
  TokenDataset data(cfg.data.path, 64.0);
  Trainer<float> t(cfg, grid, data);
  Trace tr;
  for (int s = 0; s < steps; ++s) {
    const StepResult r = t.train_step();
    tr.loss.push_back(r.loss);
    tr.norm.push_back(r.grad_norm);
    after_step(t, grid, r, s);
  }
  return tr;
}

inline Trace train_trace(Communicator& comm, const Config& cfg, int steps) {
  return train_trace(comm, cfg, steps, [](Trainer<float>&, ProcessGrid&, const StepResult&, int) {});
}

}  // namespace trident::test
