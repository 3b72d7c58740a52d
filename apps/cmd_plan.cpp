// apps/cmd_plan.cpp: `trident plan`: rank a deck's layouts by predicted step time (perf/planner.hpp).
#include "apps/args.hpp"
#include "apps/commands.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "io/output_file.hpp"
#include "io/token_file.hpp"
#include "perf/machine.hpp"
#include "perf/planner.hpp"
#include "train/trainer.hpp"

#include <cerrno>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

namespace trident::app {

namespace {
const char* kPlanUsage = R"(usage: trident plan --config DECK --machine FILE (--ranks N | --nodes K) [options]

Enumerates the layouts of the deck's model for N ranks: dp x tp x pp, ZeRO stage, micro-batch size,
activation checkpointing and (with pp > 1) pipeline schedule; keeps those that `trident train`'s
deck validation accepts for N ranks and whose predicted memory per rank (what `trident train
--dry-run` prints, plus the machine file's runtime overhead) fits the machine's memory per device;
ranks them by predicted step time (perf/step_model.hpp; docs/scaling.md) and prints the table and
the breakdown of the fastest. The deck's other keys (model, batch, dtypes, unit_blocks, prefetch,
overlap_reduce) are kept. Runs on one rank; nothing is allocated or trained.

options:
  --config DECK          the input deck (required)
  --machine FILE         machine description file, e.g. input/machines/devbox-2core-quiet.ini (this machine
                         kind measured quiet; devbox-2core.ini: the same under a load of 9-13) (required)
  --ranks N              total ranks (devices) of the job
  --nodes K              or: K nodes of the machine file's devices_per_node ranks each
  --top K                print the breakdown of the K fastest layouts (default 3)
  --show K               rows of the ranking table, or of the smallest layouts when none fits
                         (default 20; 0 = all)
  --zero-stages LIST     ZeRO stages to try, comma separated (default 0,1,2,3)
  --tp LIST, --pp LIST   only these tp / pp sizes (default: every divisor of N)
  --fixed-micro-batch    keep the deck's micro_batch_size instead of trying every divisor
  --fixed-recompute      keep the deck's activation_checkpointing instead of trying none and block
  --fixed-schedule       keep the deck's pp_schedule instead of trying 1f1b and gpipe
  --csv FILE             write every valid layout (fitting or not) with its prediction, as a new
                         file (never the deck or machine file read)
  --force                with --csv: replace an existing file
  --assume-interleaved V predict as if the pipeline ran Megatron-LM's interleaved 1F1B with V model
                         chunks per stage (Trident runs 1f1b and gpipe only): for comparing the model
                         with published runs (docs/scaling.md); with pp > 1 only 1f1b layouts whose
                         stages' layers divide by V and whose micro-batches are a multiple of pp are
                         kept (the others are counted as refused)
  --assume-scatter-gather  likewise, Megatron-LM's scatter/gather of pipeline transfers over tp
  --assume-activation-bytes B  likewise, activations of B bytes per element in the tp and pp transfers
                         and the memory-bound kernels (Megatron-LM's mixed precision: 2; Trident keeps
                         them in the deck's dtype)
  --assume-flash-attention  likewise, a fused causal attention kernel (FlashAttention)
  --assume-tp-overlap    likewise, tp collectives overlapped with the GEMMs (Megatron-Core's
                         --tp-comm-overlap)
  --section.key=VALUE    override a deck key, e.g. --model.vocab_size=50304 (needed when the deck
                         says vocab_size = 0 and its [data] path cannot be read here)
  -h, --help             this text

Exit status: 0 a ranking was printed, 1 no valid layout fits in memory (the smallest are listed),
2 bad options, deck or machine file, or no valid layout at all (one reason is printed), or a
--csv file that may not be written (it exists without --force, is an input, a device, a directory);
1 also when the --csv file cannot be written (a full disk: any earlier file stays as it was).

machine file keys (INI; docs/scaling.md, tools/machine_file.sh writes one from the benchmarks):
)";

/// The largest count plan takes (ranks, nodes, sizes): 2^30 - 1.
std::vector<int> int_list(const std::string& opt, const std::string& v, int lo, long hi = kMaxCount) {
  std::vector<int> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    errno = 0;
    const long x = std::strtol(item.c_str(), &end, 10);
    require_config(!item.empty() && *end == '\0' && errno == 0 && x >= lo && x <= hi,
                   opt + " " + v + ": expected comma-separated integers from " + std::to_string(lo) + " to " +
                       std::to_string(hi));
    out.push_back(static_cast<int>(x));
  }
  require_config(!out.empty(), opt + ": empty list");
  return out;
}

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

void print_row(const PlanCandidate& c, int rank, int ranks, const MachineSpec& m) {
  const StepPrediction& p = c.pred;
  const Precision ct = c.cfg.train.compute_dtype == Precision::bf16 ? Precision::bf16 : c.cfg.train.dtype;
  std::printf("%4d  %-58s %10.2f %10.0f %6.1f%% %9.4g %10.1f\n", rank, layout_name(c.cfg).c_str(), p.total_s * 1e3,
              p.tokens / p.total_s, 100.0 * p.mfu(ranks, m.gemm_flops(ct) / m.gemm_efficiency),
              p.model_flops / (p.total_s * ranks) / 1e12, p.memory_total_bytes / (1024.0 * 1024.0));
}
}  // namespace

int cmd_plan(Runtime& rt, const std::vector<std::string>& args) {
  std::string deck, machine, csv;
  bool csv_given = false;
  std::vector<std::string> overrides;
  int ranks = 0, nodes = 0, top = 3, show = 20;
  bool force = false;
  std::set<std::string> given;  // options with a value: each at most once
  PlanOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value_of = [&](const char* name) {
      if (!given.insert(name).second) throw ConfigError(std::string(name) + " is given twice");
      return option_value(args, i, name);
    };
    auto is = [&](const char* name) { return is_option(a, name); };
    if (a == "-h" || a == "--help") {
      if (rt.world_rank() == 0) std::printf("%s%s", kPlanUsage, machine_file_help().c_str());
      return 0;
    } else if (is("--config")) deck = value_of("--config");
    else if (is("--machine")) machine = value_of("--machine");
    else if (is("--ranks")) ranks = count_option("--ranks", value_of("--ranks"), 1);
    else if (is("--nodes")) nodes = count_option("--nodes", value_of("--nodes"), 1);
    else if (is("--top")) top = count_option("--top", value_of("--top"), 0);
    else if (is("--show")) show = count_option("--show", value_of("--show"), 0);
    else if (is("--zero-stages")) {
      opt.zero_stages = int_list("--zero-stages", value_of("--zero-stages"), 0, 3);
    } else if (is("--tp")) opt.tp_sizes = int_list("--tp", value_of("--tp"), 1);
    else if (is("--pp")) opt.pp_sizes = int_list("--pp", value_of("--pp"), 1);
    else if (a == "--fixed-micro-batch") opt.vary_micro_batch = false;
    else if (a == "--fixed-recompute") opt.vary_recompute = false;
    else if (a == "--fixed-schedule") opt.vary_schedule = false;
    else if (is("--csv")) {
      csv = value_of("--csv");
      csv_given = true;
    }
    else if (a == "--force") force = true;
    else if (is("--assume-interleaved")) opt.peer.virtual_stages = count_option("--assume-interleaved", value_of("--assume-interleaved"), 1);
    else if (a == "--assume-scatter-gather") opt.peer.p2p_scatter_gather = true;
    else if (a == "--assume-flash-attention") opt.peer.flash_attention = true;
    else if (a == "--assume-tp-overlap") opt.peer.tp_overlap = true;
    else if (is("--assume-activation-bytes")) {
      opt.peer.activation_bytes = count_option("--assume-activation-bytes", value_of("--assume-activation-bytes"), 1);
      require_config(opt.peer.activation_bytes == 2 || opt.peer.activation_bytes == 4 || opt.peer.activation_bytes == 8,
                     "--assume-activation-bytes: 2, 4 or 8");
    }
    else if (take_deck_override(args, i, overrides)) {
      // --section.key=value or --section.key value
    } else {
      throw unknown_argument(a, "plan");
    }
  }
  require_config(!deck.empty(), "no input deck: give --config DECK (try `trident plan --help`)");
  require_config(!machine.empty(), "no machine file: give --machine FILE (input/machines/*.ini; try `trident plan --help`)");
  require_config((ranks > 0) != (nodes > 0), "give exactly one of --ranks N and --nodes K");
  require_config(!force || csv_given, "--force only applies to --csv");
  if (csv_given) {
    OutputRules rules;
    rules.force = force;
    rules.inputs = {deck, machine};
    check_output_file(csv, "--csv", rules);  // an empty name or a missing directory too, before the ranking
  }
  const MachineSpec mach = parse_machine_file(machine);
  const long long total = ranks > 0 ? ranks : static_cast<long long>(nodes) * mach.devices_per_node;
  require_config(total <= kMaxCount, "--nodes " + std::to_string(nodes) + " x " + std::to_string(mach.devices_per_node) +
                                         " devices per node = " + std::to_string(total) + " ranks: more than " +
                                         std::to_string(kMaxCount));
  opt.ranks = static_cast<int>(total);
  require_deck_exists(deck);
  Config cfg = parse_deck(deck, overrides);
  if (cfg.model.vocab_size == 0) {
    try {
      resolve_vocab(cfg, TokenFileReader(cfg.data.path).info());
    } catch (const Error& e) {
      throw ConfigError("[model] vocab_size = 0 takes the vocabulary of [data] path = " + cfg.data.path +
                        ", which cannot be read here (" + e.what() + "): give --model.vocab_size=N");
    }
  }
  if (rt.world_rank() != 0) return 0;
  require_machine_rates(cfg, mach, "machine file " + machine);

  const PlanResult res = plan_layouts(cfg, mach, opt);
  std::printf("plan for %s on %s (%s): %d ranks, global batch %lld x %d tokens\n", cfg.deck_name.c_str(),
              mach.name.c_str(), mach.note.empty() ? "no note" : mach.note.c_str(), opt.ranks,
              static_cast<long long>(cfg.train.global_batch_size), cfg.model.block_size);
  std::printf("%d layouts enumerated: %zu fit in %.0f MiB per rank, %zu valid but too large, %d refused by the deck "
              "validation\n",
              res.enumerated, res.fitting.size(), mach.memory_bytes / (1024.0 * 1024.0), res.too_big.size(), res.invalid);
  if (res.invalid > 0) std::printf("  e.g. %s\n", res.first_invalid_reason.c_str());
  if (opt.peer.any())
  {
    std::string what;
    auto add = [&what](const std::string& w) { what += (what.empty() ? "" : ", ") + w; };
    if (opt.peer.virtual_stages > 1)
      add("interleaved 1F1B with " + std::to_string(opt.peer.virtual_stages) + " chunks per stage");
    if (opt.peer.p2p_scatter_gather) add("p2p scatter/gather over tp");
    if (opt.peer.activation_bytes > 0) add(std::to_string(opt.peer.activation_bytes) + "-byte activations");
    if (opt.peer.flash_attention) add("fused causal attention");
    if (opt.peer.tp_overlap) add("tp collectives overlapped with GEMMs");
    std::printf("assuming what Trident does not run (for comparing with published runs): %s\n", what.c_str());
  }
  if (mach.cuda_build) std::printf("the machine runs a CUDA build: decks are validated for it\n");
  if (res.fitting.empty() && res.too_big.empty()) {
    if (res.enumerated == 0)  // --tp / --pp left no divisor of the ranks
      throw ConfigError("no layout of " + std::to_string(opt.ranks) + " ranks has the tp and pp sizes asked for (" +
                        (opt.tp_sizes.empty() ? std::string() : "--tp " + join_ints(opt.tp_sizes)) +
                        (opt.tp_sizes.empty() || opt.pp_sizes.empty() ? "" : ", ") +
                        (opt.pp_sizes.empty() ? std::string() : "--pp " + join_ints(opt.pp_sizes)) +
                        "): tp x pp must divide the number of ranks");
    throw ConfigError("no layout of " + cfg.deck_name + " is valid for " + std::to_string(opt.ranks) + " ranks (" +
                      std::to_string(res.invalid) + " refused), e.g. " + res.first_invalid_reason);
  }
  // The table once there is one to write (an error above leaves an existing file alone).
  if (!csv.empty()) {
    std::string f;
    f += "dp,tp,pp,zero_stage,micro_batch_size,activation_checkpointing,pp_schedule,fits,step_ms,forward_ms,backward_ms,"
         "recompute_ms,tp_ms,pp_ms,bubble_ms,dp_ms,dp_hidden_ms,optimizer_ms,other_ms,memory_mib,tflops_per_device,"
         "offload_ms,offload_hidden_ms,offload_read_mib,offload_write_mib\n";
    for (const auto* list : {&res.fitting, &res.too_big})
      for (const PlanCandidate& c : *list) {
        const StepPrediction& p = c.pred;
        char line[512];
        std::snprintf(line, sizeof line,
                      "%d,%d,%d,%d,%lld,%s,%s,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.2f,%.6g,%.4f,%.4f,"
                      "%.6g,%.6g\n",
                      c.cfg.parallel.dp, c.cfg.parallel.tp, c.cfg.parallel.pp, c.cfg.parallel.zero_stage,
                      static_cast<long long>(c.cfg.train.micro_batch_size), name_of(c.cfg.train.activation_checkpointing),
                      name_of(c.cfg.parallel.pp_schedule), c.fits ? 1 : 0, p.total_s * 1e3, p.forward_s * 1e3,
                      p.backward_s * 1e3, p.recompute_s * 1e3, p.tp_comm_s * 1e3, p.pp_comm_s * 1e3, p.bubble_s * 1e3,
                      p.dp_comm_s * 1e3, p.dp_hidden_s * 1e3, p.optimizer_s * 1e3, p.other_s * 1e3,
                      p.memory_total_bytes / (1024.0 * 1024.0), p.model_flops / (p.total_s * opt.ranks) / 1e12,
                      p.offload_io_s * 1e3, p.offload_hidden_s * 1e3, p.offload_read_bytes / (1024.0 * 1024.0),
                      p.offload_write_bytes / (1024.0 * 1024.0));
        f += line;
      }
    write_file_atomically(csv, f, force);  // a failed write (a full disk) keeps what was there
  }
  if (res.fitting.empty()) {
    std::printf("no valid layout fits in memory; the smallest:\n");
    const size_t rows = show == 0 ? res.too_big.size() : static_cast<size_t>(show);  // --show, as the ranking
    for (size_t i = 0; i < res.too_big.size() && i < rows; ++i) print_row(res.too_big[i], static_cast<int>(i + 1), opt.ranks, mach);
    return 1;
  }
  std::printf("\n%4s  %-58s %10s %10s %7s %9s %10s\n", "rank", "layout", "step_ms", "tokens/s", "MFU", "TFLOP/s", "mem_MiB");
  for (size_t i = 0; i < res.fitting.size() && (show == 0 || static_cast<int>(i) < show); ++i)
    print_row(res.fitting[i], static_cast<int>(i + 1), opt.ranks, mach);
  if (top > 0)
    std::printf("\nbreakdown of the fastest (ms per step; dp exposed = dp communication not hidden by compute):\n");
  for (size_t i = 0; i < res.fitting.size() && static_cast<int>(i) < top; ++i)
    std::printf("%zu. %s\n   %s\n", i + 1, layout_name(res.fitting[i].cfg).c_str(), describe(res.fitting[i].pred).c_str());
  return 0;
}

}  // namespace trident::app
