#include "checkpoint/reshard.hpp"

#include "checkpoint/commit.hpp"
#include "checkpoint/metadata.hpp"
#include "checkpoint/run_lock.hpp"
#include "checkpoint/verify.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "io/output_file.hpp"
#include "parallel/agree.hpp"
#include "parallel/process_grid.hpp"

#include <filesystem>
#include <limits>
#include <memory>

namespace trident {

namespace fs = std::filesystem;

// ------------------------------------------------------------------------------------------------
// trident ckpt reshard

namespace {

std::string layout_text(std::int64_t dp, std::int64_t tp, std::int64_t pp, std::int64_t zero) {
  return std::to_string(dp) + " x " + std::to_string(tp) + " x " + std::to_string(pp) + ", ZeRO-" + std::to_string(zero);
}

}  // namespace

ReshardResult reshard_checkpoint(const std::string& input, const ReshardOptions& opt, Communicator& world,
                                 const ModelSchema& schema, const CheckpointStateFactory& make_state) {
  Timer timer;
  ReshardResult res;
  Config cfg;
  bool to_dir = false;
  std::string out = opt.output;  // the file, or the checkpoint directory written into
  // Rank 0 holds the lock of a run directory written into (checkpoint/run_lock.hpp) to the end.
  std::unique_ptr<RunLock> lock;
  run_agreed(world, "ckpt reshard", [&] {
    std::error_code ec;
    if (!fs::exists(input, ec)) throw CheckpointError("'" + input + "' does not exist");
    res.input = resolve_checkpoint_path(input);
    if (opt.output.empty()) throw ConfigError("no output given");
    // A path ending in .h5 is a file; anything else is a checkpoint directory.
    to_dir = fs::path(opt.output).extension() != ".h5";
    if (to_dir) check_output_directory(opt.output, "the output", "a name ending in .h5 is written as one checkpoint file");
    if (!to_dir && fs::exists(opt.output, ec)) {
      if (fs::equivalent(opt.output, res.input, ec))
        throw ConfigError("the output '" + opt.output + "' is the input checkpoint; write to another file");
      if (!opt.force)
        throw ConfigError("the output '" + opt.output + "' exists; remove it or pass --force to replace it");
    }
    if (!to_dir) {
      // Even with --force, and for a new name too: never a run's checkpoint file or `latest` (a
      // step added behind a run's back), a device or a directory.
      OutputRules rules;
      rules.force = true;
      rules.replace_checkpoint = true;
      rules.creates_parent = true;
      rules.inputs = {res.input};
      check_output_file(opt.output, "the output", rules);
    }
    CheckpointReader rd(res.input, world);
    require_intact(rd, world, "run `trident ckpt verify " + res.input + "`; nothing was written", schema);
    const CheckpointMeta meta = CheckpointMeta::read(rd);
    if (!meta.has("/config")) throw CheckpointError("'" + res.input + "' holds no /config deck");
    if (to_dir) {
      // A checkpoint directory: the file lands as step_NNNNNNNN.h5 and `latest` moves to it, so
      // the directory must not hold this step or a later one (that would replace the input, or
      // move `latest` of a live run backwards) and no job may be training in it. A run directory
      // (it has checkpoints/ or a run lock) means its checkpoints/, as for an input path; links
      // are followed, so a run is recognised under any name.
      fs::path dir = fs::weakly_canonical(fs::path(opt.output), ec);
      if (ec) dir = fs::absolute(fs::path(opt.output)).lexically_normal();
      if (fs::is_directory(dir / "checkpoints", ec) || fs::exists(dir / ".trident.lock", ec)) dir /= "checkpoints";
      out = dir.string();
      const fs::path run = dir.parent_path();
      if (world.rank() == 0 && dir.filename() == "checkpoints" && fs::exists(run / ".trident.lock", ec)) {
        try {
          lock = std::make_unique<RunLock>(run.string(), "reshard into another directory or a *.h5 file",
                                           "reshard into a *.h5 file and move it there once no job runs");
        } catch (const ConfigError& e) {
          throw ConfigError(std::string("--output: ") + e.what());  // a usage error: exit 2
        }
      }
      const std::int64_t step = meta.run.step;
      for (const auto& [s, p] : CheckpointDir(out).list()) {
        if (fs::equivalent(p, res.input, ec))
          throw ConfigError("the output directory '" + out + "' holds the input checkpoint; write to another directory");
        if (s >= step)
          throw ConfigError("the output directory '" + out + "' already holds " + fs::path(p).filename().string() +
                            " (step " + std::to_string(s) + " >= " + std::to_string(step) +
                            "): write to an empty directory or a *.h5 file");
      }
    }
    cfg = parse_deck_text(meta.config_text, meta.deck_name.empty() ? "checkpoint" : meta.deck_name);
    res.from_layout = layout_text(meta.dp, meta.tp, meta.pp, meta.zero_stage);
  });
  run_agreed(world, "the target layout is not possible", [&] {
    ParallelConfig& p = cfg.parallel;
    // What the message says of the target: which sizes were given and which the checkpoint kept.
    const auto given = [](const char* axis, int v, int kept) {
      return std::string(axis) + " " + (v > 0 ? std::to_string(v) + " (--" + axis + ")"
                                            : std::to_string(kept) + " (the checkpoint's; --" + axis + " changes it)");
    };
    const std::string target = given("tp", opt.tp, p.tp) + ", " + given("pp", opt.pp, p.pp) + ", dp " +
                               (opt.dp > 0 ? std::to_string(opt.dp) + " (--dp)" : std::string("the rest of the ranks"));
    p.tp = opt.tp > 0 ? opt.tp : p.tp;
    p.pp = opt.pp > 0 ? opt.pp : p.pp;
    p.dp = opt.dp;  // 0: auto
    p.zero_stage = opt.zero_stage >= 0 ? opt.zero_stage : p.zero_stage;
    p.shard_group_size = opt.shard_group_size;
    // Offload files are scratch of the machine that trained (docs/offload.md): the resharded
    // checkpoint's deck keeps none, and a resume chooses its own (any [parallel] key may change).
    p.offload_optimizer = OffloadKind::none;
    p.offload_params = OffloadKind::none;
    // Neither does the GEMM input type: the deck of a bf16 run on a GPU ([train] compute_dtype)
    // reshards on a host build, and keeps its compute_dtype.
    const Precision compute = cfg.train.compute_dtype;
    cfg.train.compute_dtype = Precision::f32;
    // The micro-batch size does not change a checkpoint; keep it where the new dp allows it.
    Config trial = cfg;
    try {
      try {
        validate(trial, world.size());
      } catch (const ConfigError&) {
        cfg.train.micro_batch_size = 0;
        trial = cfg;
        validate(trial, world.size());
      }
    } catch (const ConfigError& e) {
      // The rank-count hint only where the rank count is the problem (not n_head, pp > n_layer, ...).
      const std::string why = e.what();
      const bool ranks = why.find("number of ranks") != std::string::npos;
      throw ConfigError("on " + std::to_string(world.size()) + " rank(s) (mpiexec -n) with " + target + ": " + why +
                        (ranks ? "; dp * tp * pp must equal the number of ranks" : ""));
    }
    cfg = trial;
    cfg.train.compute_dtype = compute;
  });
  res.to_layout = layout_text(cfg.parallel.dp, cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.zero_stage);
  // The output's file system takes a checkpoint the way the save below writes one (a file system
  // without the locks MPI-IO needs is refused with advice, exit 2), before the input is loaded.
  const std::string out_dir = to_dir ? out : fs::absolute(fs::path(out)).parent_path().string();
  run_agreed(world, "ckpt reshard", [&] {
    if (world.rank() == 0) fs::create_directories(out_dir);
  });
  run_agreed(world, "ckpt reshard", [&] { probe_checkpoint_dir(out_dir, world, cfg.checkpoint.file_locking); });
  {
    // Exactly a resume at the target layout, then a save (the same code as a training run).
    ProcessGrid grid(world, GridShape{cfg.parallel.dp, cfg.parallel.tp, cfg.parallel.pp});
    std::unique_ptr<CheckpointState> state = make_state(cfg, grid);
    const RunState run = state->load(res.input);
    res.step = run.step;
    CheckpointSnapshot snap = state->live_view(run);  // synchronous: no copy of the state
    snap.write.file_locking = cfg.checkpoint.file_locking;
    snap.write.progress_label = "ckpt reshard: writing";
    auto write = [&](const std::string& tmp) { write_checkpoint_file(tmp, world, snap.write); };
    if (to_dir) {
      res.output = CheckpointDir(out).commit(run.step, world, write, std::numeric_limits<std::int64_t>::max());
    } else {
      commit_file(out, world, write);
      res.output = out;
    }
  }
  std::error_code ec;
  res.bytes = static_cast<std::int64_t>(fs::file_size(res.output, ec));
  res.seconds = timer.seconds();
  return res;
}

}  // namespace trident
