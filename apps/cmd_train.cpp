// apps/cmd_train.cpp: `trident train`.
#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/token_file.hpp"
#include "parallel/agree.hpp"
#include "train/trainer.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace trident::app {

namespace {
const char* kTrainUsage = R"(usage: trident train --config DECK [--section.key=value ...] [--resume [PATH]]
                     [--print-config] [--dry-run [N]]

Trains the model of an input deck (INI file with sections [model] [parallel] [train] [data]
[checkpoint]) on all ranks of the job. Writes [train] out_dir (default runs/<deck name>):
deck.ini (the resolved deck), metrics.csv (one row per step) and checkpoints/ (step_*.h5 and a
`latest` pointer). One log line per step on rank 0.

options:
  --config DECK          the input deck (required)
  --section.key=VALUE    override a deck key, e.g. --train.max_steps=100 (also --section.key VALUE)
  --resume [PATH]        continue from checkpoint PATH, or without PATH from the run's latest
                         checkpoint (starting at step 0 when there is none yet, so a job script
                         can always pass --resume; stopping, exit 1, when checkpoints exist and
                         none verifies). Keys that differ from the checkpoint's deck
                         are listed; changes of lr, min_lr, warmup_steps, max_steps, seed and
                         [data] path are refused (exit 2) unless [train] allow_changed names them
  --print-config         print the resolved deck for this number of ranks and exit
  --dry-run [N]          print the predicted per-rank memory by category for N ranks (default: this
                         job's), next to the ZeRO paper's formula, and exit without allocating
  -h, --help             this text

deck keys and defaults:)";

namespace fs = std::filesystem;

// How to call `trident-plot` (tools/plot_run.py): it sits next to the executable in an install's
// bin/ and in a build's bin/. Its bare name when PATH finds that very file, else its path; empty
// when there is none.
std::string plot_command() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path plot = exe.parent_path() / "trident-plot";
  if (!fs::exists(plot, ec)) return "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / "trident-plot";
    if (fs::exists(candidate, ec)) return fs::equivalent(candidate, plot, ec) ? "trident-plot" : plot.string();
  }
  return plot.string();
}
}  // namespace

int cmd_train(Runtime& rt, const std::vector<std::string>& args) {
  std::string deck;
  std::vector<std::string> overrides;
  TrainRunOptions opt;
  bool print_config = false;
  int dry_run_ranks = -1;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      if (rt.world_rank() == 0) std::printf("%s\n%s\n", kTrainUsage, deck_help().c_str());
      return 0;
    } else if (is_option(a, "--config")) {
      const std::string d = option_value(args, i, "--config");
      if (!deck.empty() && d != deck)
        throw ConfigError("--config given twice (" + deck + ", " + d + "): a run reads one deck; change keys with "
                          "--section.key=value");
      deck = d;
    } else if (a == "--resume" || a.rfind("--resume=", 0) == 0) {
      opt.resume = true;
      std::string path;
      if (a != "--resume") path = a.substr(9);
      else if (i + 1 < args.size() && args[i + 1].rfind("-", 0) != 0) path = args[++i];
      if (!path.empty() && !opt.resume_path.empty() && path != opt.resume_path)
        throw ConfigError("--resume given two checkpoints (" + opt.resume_path + ", " + path + "): name one");
      if (!path.empty()) opt.resume_path = path;
    } else if (a == "--print-config") {
      print_config = true;
    } else if (a == "--dry-run") {
      dry_run_ranks = rt.world_size();
      if (i + 1 < args.size() && args[i + 1].rfind("-", 0) != 0) dry_run_ranks = count_option("--dry-run", args[++i], 1);
    } else if (take_deck_override(args, i, overrides)) {
      // --section.key=value or --section.key value
    } else {
      throw unknown_argument(a, "train");
    }
  }
  if (deck.empty()) throw ConfigError("no input deck: give --config DECK (try `trident train --help`)");
  require_deck_exists(deck);
  Config cfg = parse_deck(deck, overrides);
  validate(cfg, dry_run_ranks > 0 ? dry_run_ranks : rt.world_size());
  if (dry_run_ranks > 0) {
    // Every rank reads the same file: a missing one is one clear error, not an MPI abort banner.
    if (cfg.model.vocab_size == 0)
      run_agreed(rt.world(), "", [&] { resolve_vocab(cfg, TokenFileReader(cfg.data.path).info()); });
    if (rt.world_rank() == 0) print_memory_prediction(cfg);
    return 0;
  }
  if (print_config) {
    if (rt.world_rank() == 0) std::printf("%s", cfg.to_ini().c_str());
    return 0;
  }
  const int status = run_train(cfg, rt.world(), opt);
  // The last line of a run that ended with its checkpoint (done, or stopped on request or on a
  // signal): where its metrics are and the command that draws them.
  const std::string metrics = (fs::path(cfg.train.out_dir) / "metrics.csv").string();
  std::error_code ec;
  if (rt.world_rank() == 0 && (status == 0 || status == 3) && fs::exists(metrics, ec)) {
    const std::string plot = plot_command();
    log::info("metrics: %s | plot: %s %s", metrics.c_str(),
              plot.empty() ? "/usr/bin/python3 tools/plot_run.py" : plot.c_str(), cfg.train.out_dir.c_str());
  }
  return status;
}

}  // namespace trident::app
