// perf/planner.hpp: enumerate the layouts of a deck for a number of ranks, keep those the trainer
// would accept and that fit in memory, and rank them by predicted step time.
//
// Layer: perf. Local and pure. A layout is (dp, tp, pp, ZeRO stage, micro-batch size, activation
// checkpointing, pipeline schedule); every other key of the deck is kept. Validity is decided by
// the trainer's own deck validation (validate(), core/config.hpp) for `ranks` ranks, and memory by
// the trainer's own dry-run prediction (predict_memory) plus the machine's runtime overhead, so the
// planner can never propose a layout `trident train` refuses or one `--dry-run` says is larger than
// the device.
#pragma once

#include "core/config.hpp"
#include "perf/machine.hpp"
#include "perf/step_model.hpp"

#include <string>
#include <vector>

namespace trident {

struct PlanOptions {
  int ranks = 1;                         ///< total ranks (devices) of the job
  std::vector<int> zero_stages{0, 1, 2, 3};  ///< ZeRO stages to try
  bool vary_micro_batch = true;          ///< try every micro-batch size that divides the per-dp batch; else the deck's
  bool vary_recompute = true;            ///< try activation checkpointing none and block; else the deck's
  bool vary_schedule = true;             ///< with pp > 1, try 1f1b and gpipe; else the deck's
  std::vector<int> tp_sizes;             ///< restrict tp to these (empty: every divisor)
  std::vector<int> pp_sizes;             ///< restrict pp to these (empty: every divisor)
  PeerSchedule peer;                     ///< schedules of other codes to model (default: Trident's own)
};

/// One layout that passed validation, with its prediction.
struct PlanCandidate {
  Config cfg;            ///< the deck with this layout, validated for PlanOptions::ranks
  StepPrediction pred;
  bool fits = false;     ///< pred.memory_total_bytes <= the machine's memory per device
};

struct PlanResult {
  std::vector<PlanCandidate> fitting;   ///< valid and within memory, fastest first
  std::vector<PlanCandidate> too_big;   ///< valid but over memory, smallest first
  int enumerated = 0;                   ///< layouts tried
  int invalid = 0;                      ///< refused by validate() (or by the model's layout code)
  std::string first_invalid_reason;     ///< one validation message, for the user
};

/// Short name of a candidate's layout: "dp=2 tp=1 pp=1 zero=1 mb=6 ckpt=none sched=1f1b". Local.
std::string layout_name(const Config& c);

/// Every layout of `deck` (vocab resolved; its layout keys are replaced) for `opt.ranks` ranks, as
/// the header comment says. Local, pure. Throws ConfigError when opt.ranks < 1.
PlanResult plan_layouts(const Config& deck, const MachineSpec& mach, const PlanOptions& opt);

}  // namespace trident
