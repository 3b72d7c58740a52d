#include "train/checkpoint_reshard.hpp"

#include "core/error.hpp"
#include "core/timer.hpp"
#include "parallel/agree.hpp"
#include "parallel/process_grid.hpp"
#include "train/checkpoint_dir.hpp"
#include "train/checkpoint_model.hpp"
#include "train/run_lock.hpp"
#include "train/model_state.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

namespace trident {

namespace fs = std::filesystem;

void read_tensor_piece(const CheckpointReader& rd, const std::string& kind, const TensorSpec& t, int tp_size,
                       int tp_rank, std::int64_t begin, std::int64_t count, DataType type, void* out) {
  const int k = rd.find_tensor(t.name);
  if (k < 0) throw CheckpointError("checkpoint '" + rd.path() + "' has no tensor '" + t.name + "'");
  const CkptTensor& src = rd.tensors()[static_cast<size_t>(k)];
  if (src.shape != t.global_shape)
    throw CheckpointError("tensor '" + t.name + "' has another shape in checkpoint '" + rd.path() + "'");
  if (src.split_dim != t.split_dim || src.split_groups != t.split_groups)
    throw CheckpointError("tensor '" + t.name + "' is split differently in checkpoint '" + rd.path() + "'");
  const std::size_t es = dtype_size(type);
  char* dst = static_cast<char*>(out);
  std::memset(dst, 0, static_cast<std::size_t>(count) * es);  // padding, and what no run covers
  const std::int64_t end = begin + count;
  // The reader's runs restricted to [begin, end), in global order.
  std::vector<Run> want;
  for (const Run& r : tp_runs(t.global_shape, t.split_dim, t.split_groups, tp_size, tp_rank)) {
    const std::int64_t a = std::max(begin, r.local), b = std::min(end, r.local + r.count);
    if (a < b) want.push_back(Run{a, r.global + (a - r.local), b - a});
  }
  if (want.empty()) return;
  const int writer_tp = src.split_dim < 0 ? 1 : static_cast<int>(rd.attr_int("tp"));
  std::int64_t covered = 0;
  for (int w = 0; w < writer_tp; ++w) {
    const std::vector<Run> have = tp_runs(src.shape, src.split_dim, src.split_groups, writer_tp, w);
    // Two-pointer merge of two lists of disjoint runs sorted by global offset.
    size_t i = 0, j = 0;
    while (i < want.size() && j < have.size()) {
      const Run& a = want[i];
      const Run& h = have[j];
      const std::int64_t lo = std::max(a.global, h.global), hi = std::min(a.global + a.count, h.global + h.count);
      if (lo < hi) {
        rd.read(kind, k, w, h.local + (lo - h.global), hi - lo, type,
                dst + static_cast<std::size_t>(a.local - begin + (lo - a.global)) * es);
        covered += hi - lo;
      }
      if (a.global + a.count <= h.global + h.count) ++i;
      else ++j;
    }
  }
  std::int64_t needed = 0;
  for (const Run& r : want) needed += r.count;
  if (covered != needed)
    throw CheckpointError("checkpoint '" + rd.path() + "' does not cover all of tensor '" + t.name + "'");
}


// ------------------------------------------------------------------------------------------------
// trident ckpt reshard

namespace {

std::string layout_text(std::int64_t dp, std::int64_t tp, std::int64_t pp, std::int64_t zero) {
  return std::to_string(dp) + " x " + std::to_string(tp) + " x " + std::to_string(pp) + ", ZeRO-" + std::to_string(zero);
}

template <class T>
void reshard_as(const Config& cfg, const std::string& input, const std::string& output, bool to_dir,
                Communicator& world, ReshardResult& res) {
  ProcessGrid grid(world, GridShape{cfg.parallel.dp, cfg.parallel.tp, cfg.parallel.pp});
  ModelState<T> state(cfg, grid);
  const RunState run = state.load(input);
  res.step = run.step;
  CheckpointSnapshot snap = state.snapshot(run);
  snap.write.file_locking = cfg.checkpoint.file_locking;
  auto write = [&](const std::string& tmp) { write_checkpoint_file(tmp, world, snap.write); };
  if (to_dir) {
    res.output = CheckpointDir(output).commit(run.step, world, write, std::numeric_limits<std::int64_t>::max());
  } else {
    commit_file(output, world, write);
    res.output = output;
  }
}

}  // namespace

ReshardResult reshard_checkpoint(const std::string& input, const ReshardOptions& opt, Communicator& world) {
  Timer timer;
  ReshardResult res;
  Config cfg;
  bool to_dir = false;
  std::string out = opt.output;  // the file, or the checkpoint directory written into
  // Rank 0 holds the lock of a run directory written into (train/run_lock.hpp) to the end.
  std::unique_ptr<RunLock> lock;
  run_agreed(world, "ckpt reshard", [&] {
    std::error_code ec;
    if (!fs::exists(input, ec)) throw CheckpointError("'" + input + "' does not exist");
    res.input = resolve_checkpoint_path(input);
    if (opt.output.empty()) throw ConfigError("no output given");
    // A path ending in .h5 is a file; anything else is a checkpoint directory.
    to_dir = fs::path(opt.output).extension() != ".h5";
    if (!to_dir && fs::exists(opt.output, ec)) {
      if (fs::equivalent(opt.output, res.input, ec))
        throw ConfigError("the output '" + opt.output + "' is the input checkpoint; write to another file");
      if (!opt.force)
        throw ConfigError("the output '" + opt.output + "' exists; remove it or pass --force to replace it");
    }
    CheckpointReader rd(res.input, world);
    require_intact(rd, world, "run `trident ckpt verify " + res.input + "`; nothing was written");
    if (!rd.has("config")) throw CheckpointError("'" + res.input + "' holds no /config deck");
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
          lock = std::make_unique<RunLock>(run.string(), "reshard into another directory or a *.h5 file");
        } catch (const IoError& e) {
          throw ConfigError(std::string("--output: ") + e.what());  // a usage error: exit 2
        }
      }
      const std::int64_t step = rd.attr_int("step");
      for (const auto& [s, p] : CheckpointDir(out).list()) {
        if (fs::equivalent(p, res.input, ec))
          throw ConfigError("the output directory '" + out + "' holds the input checkpoint; write to another directory");
        if (s >= step)
          throw ConfigError("the output directory '" + out + "' already holds " + fs::path(p).filename().string() +
                            " (step " + std::to_string(s) + " >= " + std::to_string(step) +
                            "): write to an empty directory or a *.h5 file");
      }
    }
    cfg = parse_deck_text(rd.text("config"), rd.has_attr("deck_name") ? rd.attr_string("deck_name") : "checkpoint");
    res.from_layout = layout_text(rd.attr_int("dp"), rd.attr_int("tp"), rd.attr_int("pp"), rd.attr_int("zero_stage"));
  });
  run_agreed(world, "ckpt reshard: the target layout is not possible", [&] {
    ParallelConfig& p = cfg.parallel;
    p.tp = opt.tp > 0 ? opt.tp : p.tp;
    p.pp = opt.pp > 0 ? opt.pp : p.pp;
    p.dp = opt.dp;  // 0: auto
    p.zero_stage = opt.zero_stage >= 0 ? opt.zero_stage : p.zero_stage;
    p.shard_group_size = opt.shard_group_size;
    // The micro-batch size does not change a checkpoint; keep it where the new dp allows it.
    Config trial = cfg;
    try {
      validate(trial, world.size());
    } catch (const ConfigError&) {
      cfg.train.micro_batch_size = 0;
      trial = cfg;
      validate(trial, world.size());
    }
    cfg = trial;
  });
  res.to_layout = layout_text(cfg.parallel.dp, cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.zero_stage);
  if (cfg.train.dtype == "double")
    reshard_as<double>(cfg, res.input, out, to_dir, world, res);
  else
    reshard_as<float>(cfg, res.input, out, to_dir, world, res);
  std::error_code ec;
  res.bytes = static_cast<std::int64_t>(fs::file_size(res.output, ec));
  res.seconds = timer.seconds();
  return res;
}

}  // namespace trident
