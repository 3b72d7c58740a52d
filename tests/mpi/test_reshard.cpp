// Restart on another layout: a checkpoint written at one dp x tp x pp layout and ZeRO stage
// resumes at others. The losses after the resume equal the uninterrupted run's (first step within
// 1e-6 relative, the next within 1e-5: only the order of floating-point sums differs between
// layouts), and the state the new layout loaded, written out again, equals the saved state
// bitwise, tensor by tensor (parameters and both AdamW moments).
#include "data/token_dataset.hpp"
#include "io/checkpoint_file.hpp"
#include "parallel/process_grid.hpp"
#include "checkpoint/commit.hpp"
#include "checkpoint/tensor_read.hpp"
#include "train/model_schema.hpp"
#include "train/trainer.hpp"
#include "trainer_fixture.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace trident {
namespace {

const std::vector<std::string> kModel = {"--model.n_layer=4", "--model.n_head=8", "--model.n_embd=32",
                                         "--model.block_size=8", "--train.global_batch_size=8",
                                         "--train.micro_batch_size=1"};

struct Layout {
  int dp, tp, pp, zero;
};

/// The Llama family with grouped-query attention (tp up to 4) and an untied head.
const std::vector<std::string> kLlama = {"--model.arch=llama", "--model.bias=false", "--model.n_kv_head=4",
                                         "--model.ffn_hidden=64", "--model.tie_embeddings=false"};

Config config(const Layout& l, const std::vector<std::string>& family = {}) {
  std::vector<std::string> ov = kModel;
  ov.insert(ov.end(), family.begin(), family.end());
  ov.insert(ov.end(), {"--parallel.dp=" + std::to_string(l.dp), "--parallel.tp=" + std::to_string(l.tp),
                       "--parallel.pp=" + std::to_string(l.pp), "--parallel.zero_stage=" + std::to_string(l.zero)});
  return test::tiny_config(l.dp * l.tp * l.pp, ov);
}

std::string name(const Layout& l) {
  return std::to_string(l.dp) + "x" + std::to_string(l.tp) + "x" + std::to_string(l.pp) + "/z" + std::to_string(l.zero);
}

double rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

/// Every tensor of both files, whole (reassembled from their tp pieces), must be bitwise equal.
void expect_same_state(const std::string& a, const std::string& b, const Config& cfg) {
  Communicator& self = test::runtime().self();
  CheckpointReader ra(a, self), rb(b, self);
  const ParamLayout full = ParamLayout::make(cfg.model);
  for (const char* kind : {"param", "exp_avg", "exp_avg_sq"})
    for (const TensorSpec& t : full.tensors()) {
      std::vector<float> x(static_cast<size_t>(t.numel)), y(static_cast<size_t>(t.numel));
      read_tp_partition(ra, kind, checkpoint_tensor(t), 1, 0, 0, t.numel, DataType::f32, x.data());
      read_tp_partition(rb, kind, checkpoint_tensor(t), 1, 0, 0, t.numel, DataType::f32, y.data());
      ASSERT_EQ(x, y) << kind << " of " << t.name;
    }
}

void reshard_matrix(const Layout& save_at, const std::vector<Layout>& targets,
                    const std::vector<std::string>& family = {}) {
  Runtime& rt = test::runtime();
  const int n = rt.world_size();
  const std::string dir = test::scratch_dir() + "/reshard_" + name(save_at).replace(5, 1, "_") + "_np" +
                          std::to_string(n) + (family.empty() ? "" : "_llama");
  std::string saved;
  std::vector<double> want;  // losses of steps 4 and 5, uninterrupted
  {
    const Config cfg = config(save_at, family);
    ProcessGrid grid(rt.world(), {save_at.dp, save_at.tp, save_at.pp});
    TokenDataset data(cfg.data.path, 64.0);
    Trainer<float> t(cfg, grid, data);
    for (int s = 0; s < 3; ++s) t.train_step();
    saved = CheckpointDir(dir).commit(t.step(), grid.world_comm(),
                                      [&](const std::string& tmp) { t.write_checkpoint(tmp); }, 10);
    for (int s = 0; s < 2; ++s) want.push_back(t.train_step().loss);
  }
  for (const Layout& l : targets) {
    const int ranks = l.dp * l.tp * l.pp;
    Communicator& comm = ranks == 1 ? rt.self() : rt.world();
    if (ranks != 1 && ranks != n) continue;
    const Config cfg = config(l, family);
    ProcessGrid grid(comm, {l.dp, l.tp, l.pp});
    TokenDataset data(cfg.data.path, 64.0);
    Trainer<float> t(cfg, grid, data);
    t.load_checkpoint(saved);
    EXPECT_EQ(t.step(), 3) << name(l);
    // What this layout loaded, written out again: bitwise the saved state.
    const std::string again = test::scratch_dir() + "/again_" + std::to_string(rt.world_rank()) + "_" +
                              std::to_string(l.dp) + std::to_string(l.tp) + std::to_string(l.pp) +
                              (family.empty() ? "" : "_llama") + ".h5";
    const std::string path = ranks == 1 ? again : test::scratch_dir() + "/again_np" + std::to_string(n) + "_" +
                                                      std::to_string(l.dp) + std::to_string(l.tp) + std::to_string(l.pp) + "_" +
                                                      std::to_string(l.zero) + (family.empty() ? "" : "_llama") + ".h5";
    t.write_checkpoint(path);
    comm.barrier();
    if (comm.rank() == 0) expect_same_state(saved, path, cfg);
    const double l4 = t.train_step().loss, l5 = t.train_step().loss;
    EXPECT_LE(rel(l4, want[0]), 1e-6) << name(save_at) << " -> " << name(l) << " step 4: " << l4 << " vs " << want[0];
    EXPECT_LE(rel(l5, want[1]), 1e-5) << name(save_at) << " -> " << name(l) << " step 5: " << l5 << " vs " << want[1];
  }
}

TEST(Reshard, From2x2x2Zero1) {
  if (test::runtime().world_size() != 8) GTEST_SKIP() << "the layout matrix runs at 8 ranks";
  reshard_matrix({2, 2, 2, 1}, {{8, 1, 1, 0}, {1, 2, 4, 3}, {4, 1, 2, 2}, {1, 8, 1, 1}, {2, 2, 2, 1}, {1, 1, 1, 0}});
}

TEST(Reshard, FromDp4Zero3) {
  const int n = test::runtime().world_size();
  if (n != 4 && n != 8) GTEST_SKIP() << "runs at 4 or 8 ranks";
  if (n == 4) reshard_matrix({4, 1, 1, 3}, {{1, 2, 2, 0}, {2, 1, 2, 3}, {1, 4, 1, 1}, {4, 1, 1, 3}, {1, 1, 1, 0}});
  else reshard_matrix({8, 1, 1, 3}, {{2, 2, 2, 1}, {1, 2, 4, 3}, {4, 1, 2, 0}, {1, 1, 1, 3}});
}

TEST(Reshard, LlamaFrom2x2x1Zero1) {
  if (test::runtime().world_size() != 4) GTEST_SKIP() << "runs at 4 ranks";
  reshard_matrix({2, 2, 1, 1}, {{1, 2, 2, 3}, {4, 1, 1, 2}, {1, 4, 1, 0}, {1, 1, 1, 0}}, kLlama);
}

}  // namespace
}  // namespace trident
