#include "train/eval_run.hpp"
#include "train/peak.hpp"

#include "train/hf_import.hpp"

#include "checkpoint/metadata.hpp"
#include "checkpoint/verify.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "data/token_dataset.hpp"
#include "io/checkpoint_file.hpp"
#include "parallel/agree.hpp"
#include "parallel/process_grid.hpp"
#include "train/model_schema.hpp"
#include "train/resume_check.hpp"
#include "train/trainer.hpp"

#include <algorithm>
#include <memory>

namespace trident {

namespace {

/// The token file must speak the checkpoint's tokenizer: the same kind and, where one is stored,
/// the same vocabulary or model, and no id past the model's vocabulary.
void require_same_tokenizer(const CheckpointMeta& meta, const Config& cfg, const TokenFileInfo& info,
                            const std::string& data_path) {
  const std::string where = "token file '" + data_path + "'";
  if (const std::string why = tokenizer_mismatch(meta.run, info); !why.empty()) throw ConfigError(where + ": " + why);
  if (info.vocab_size > cfg.model.vocab_size)
    throw ConfigError(where + " has " + std::to_string(info.vocab_size) + " token ids, more than the model's vocabulary (" +
                      std::to_string(cfg.model.vocab_size) + ")");
}

template <class T>
EvalResult run_evaluation(const Config& cfg, const ProcessGrid& grid, const TokenDataset& data, const std::string& path,
                          const std::string& split) {
  Trainer<T> trainer(cfg, grid, data);
  trainer.state().set_resume_deck_check(false);  // a model to read, not a run to continue
  trainer.load_checkpoint(path);
  return trainer.evaluate({}, split);
}

}  // namespace

EvalRunResult evaluate_checkpoint(const EvalRunOptions& opt, Communicator& world) {
  if (opt.split != "val" && opt.split != "train")
    throw ConfigError("--split '" + opt.split + "': give val or train");
  if (opt.tp < 1 || opt.pp < 1 || opt.micro_batch < 1)
    throw ConfigError("--tp, --pp and --micro-batch must be >= 1");
  // In 64 bits: tp x pp of two ints can wrap an int (and a division by the wrapped 0 kill the job).
  if (opt.tp > world.size() || opt.pp > world.size() ||
      static_cast<std::int64_t>(opt.tp) * opt.pp > static_cast<std::int64_t>(world.size()))
    throw ConfigError("--tp " + std::to_string(opt.tp) + " x --pp " + std::to_string(opt.pp) + " needs more than the " +
                      std::to_string(world.size()) + " rank(s) of this job");
  constexpr std::int64_t kMaxMicroBatch = std::int64_t{1} << 20;
  if (opt.micro_batch > kMaxMicroBatch)
    throw ConfigError("--micro-batch " + std::to_string(opt.micro_batch) + " is more than " +
                      std::to_string(kMaxMicroBatch) + " sequences per forward pass");
  if (world.size() % (opt.tp * opt.pp) != 0)
    throw ConfigError("--tp " + std::to_string(opt.tp) + " x --pp " + std::to_string(opt.pp) + " does not divide the " +
                      std::to_string(world.size()) + " ranks");
  EvalRunResult res;
  std::string path;
  run_agreed(world, "", [&] { path = resolve_checkpoint_path(opt.checkpoint); });
  CheckpointMeta meta;
  Config cfg;
  {
    CheckpointReader rd(path, world);
    require_intact(rd, world, "run `trident ckpt verify " + path + "`", model_schema());
    run_agreed(world, "cannot evaluate '" + path + "'", [&] {
      meta = CheckpointMeta::read(rd);
      meta.require_complete(path);
      if (!meta.model_error.empty()) throw CheckpointError(meta.model_error);
      std::vector<std::string> overrides;
      if (!opt.compute_dtype.empty()) overrides.push_back("train.compute_dtype=" + opt.compute_dtype);
      if (!opt.attention.empty()) overrides.push_back("model.attention=" + opt.attention);
      if (!opt.host_gemm.empty()) overrides.push_back("train.host_gemm=" + opt.host_gemm);
      try {
        cfg = meta.deck(overrides);
      } catch (const ConfigError& e) {
        if (overrides.empty()) throw;
        throw ConfigError(std::string(e.what()) + " (from --compute-dtype / --attention / --host-gemm)");
      }
    });
  }
  // The checkpoint's deck on this evaluation's layout: whole split, no offload scratch files.
  const int dp = world.size() / (opt.tp * opt.pp);
  cfg.parallel.dp = dp;
  cfg.parallel.tp = opt.tp;
  cfg.parallel.pp = opt.pp;
  cfg.parallel.shard_group_size = 0;
  cfg.parallel.offload_optimizer = OffloadKind::none;
  cfg.parallel.offload_params = OffloadKind::none;
  cfg.train.eval_iters = 0;
  cfg.train.micro_batch_size = opt.micro_batch;
  cfg.train.global_batch_size = opt.micro_batch * dp * opt.pp;  // one micro-batch per stage and dp rank
  if (!opt.data.empty()) cfg.data.path = opt.data;
  // A bf16-trained checkpoint on a CPU without bf16 dot products: say how to evaluate it anyway.
  require_bf16_gemms(cfg.train, world, "cannot evaluate with compute_dtype = bf16 here",
                     "`trident eval --compute-dtype float` evaluates the checkpoint with fp32 GEMMs (the loss then "
                     "differs from the run's in its last digits)");
  run_agreed(world, "", [&] {
    if (opt.data.empty() && cfg.data.path.rfind(kImportedDataPath, 0) == 0)
      throw ConfigError("the checkpoint was imported (`trident ckpt import`) and records no token file: give --data FILE");
    try {
      validate(cfg, world.size());
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("this layout cannot evaluate the checkpoint's model: ") + e.what() +
                        " (choose other --tp / --pp / --micro-batch, or another rank count)");
    }
  });
  std::unique_ptr<TokenDataset> data;
  run_agreed(world, "cannot load the token file",
             [&] { data = std::make_unique<TokenDataset>(cfg.data.path, cfg.data.cache_max_mb); });
  run_agreed(world, "", [&] {  // the file loaded: what is wrong is its fit to the checkpoint
    require_same_tokenizer(meta, cfg, data->info(), cfg.data.path);
    if (data->size(opt.split) < cfg.model.block_size + 1)
      throw ConfigError("token file '" + cfg.data.path + "': its " + opt.split + " split has " +
                        std::to_string(data->size(opt.split)) + " tokens, fewer than one window of block_size + 1 = " +
                        std::to_string(cfg.model.block_size + 1));
  });
  // A micro-batch larger than the windows one dp rank reads would allocate activations for
  // sequences that do not exist (--micro-batch 1000000: terabytes): capped, said once.
  {
    const std::int64_t windows = (data->size(opt.split) - 1) / cfg.model.block_size;
    const std::int64_t per_rank = std::max<std::int64_t>(1, (windows + dp - 1) / dp);
    if (cfg.train.micro_batch_size > per_rank) {
      if (world.rank() == 0)
        log::info("--micro-batch %lld is more than the %lld window(s) of %d tokens a dp rank reads: using %lld",
                  static_cast<long long>(cfg.train.micro_batch_size), static_cast<long long>(per_rank),
                  cfg.model.block_size, static_cast<long long>(per_rank));
      cfg.train.micro_batch_size = per_rank;
      cfg.train.global_batch_size = per_rank * dp * opt.pp;
    }
  }
  ProcessGrid grid(world, GridShape{cfg.parallel.dp, cfg.parallel.tp, cfg.parallel.pp}, cfg.parallel.comm_backend);
  resolve_host_gemm(cfg.train, world);  // the training run's GEMM library, so its losses are reproduced
  install_host_gemm_chooser(cfg.train);
  const EvalResult e = cfg.train.dtype == Precision::f64
                           ? run_evaluation<double>(cfg, grid, *data, path, opt.split)
                           : run_evaluation<float>(cfg, grid, *data, path, opt.split);
  res.path = path;
  res.data = cfg.data.path;
  res.step = meta.run.step;
  res.loss = e.loss;
  res.tokens = e.tokens;
  res.seconds = e.seconds;
  res.layout = grid.describe();
  return res;
}

}  // namespace trident
