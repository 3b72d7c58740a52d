// perf/planner.cpp: see planner.hpp.
#include "perf/planner.hpp"

#include "core/progress.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

#include <algorithm>

namespace trident {

namespace {
/// The divisors of n in increasing order, in O(sqrt n) (a rank count near 2^30 took seconds per
/// call in a linear scan, and the planner calls it once per tp).
std::vector<int> divisors(long long n) {
  std::vector<int> low, high;
  for (long long i = 1; i * i <= n; ++i)
    if (n % i == 0) {
      low.push_back(static_cast<int>(i));
      if (i != n / i) high.push_back(static_cast<int>(n / i));
    }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}
bool allowed(const std::vector<int>& only, int v) {
  return only.empty() || std::find(only.begin(), only.end(), v) != only.end();
}
}  // namespace

std::string layout_name(const Config& c) {
  return log::format("dp=%d tp=%d pp=%d zero=%d mb=%lld ckpt=%s sched=%s", c.parallel.dp, c.parallel.tp, c.parallel.pp,
                     c.parallel.zero_stage, static_cast<long long>(c.train.micro_batch_size),
                     name_of(c.train.activation_checkpointing), name_of(c.parallel.pp_schedule));
}

PlanResult plan_layouts(const Config& deck, const MachineSpec& mach, const PlanOptions& opt) {
  require_config(opt.ranks >= 1, "plan: the number of ranks must be >= 1");
  PlanResult res;
  const Recompute deck_rc = deck.train.activation_checkpointing;
  const PipelineScheduleKind deck_sched = deck.parallel.pp_schedule;
  // The tp x pp splits first, so that a long enumeration (a rank count with many divisors: minutes)
  // reports its progress (core/progress.hpp) instead of going silent.
  std::vector<std::pair<int, int>> splits;
  for (int tp : divisors(opt.ranks)) {
    if (!allowed(opt.tp_sizes, tp)) continue;
    for (int pp : divisors(opt.ranks / tp))
      if (allowed(opt.pp_sizes, pp)) splits.emplace_back(tp, pp);
  }
  Progress progress("plan", static_cast<std::int64_t>(splits.size()), ProgressUnit::splits);
  for (const auto& [tp, pp] : splits) {
    const int dp = opt.ranks / (tp * pp);
    // Micro-batch sizes: divisors of the per-dp batch (global_batch_size / dp must be whole:
    // otherwise validate() refuses every micro-batch, and one candidate says why).
    std::vector<std::int64_t> mbs;
    if (deck.train.global_batch_size % dp != 0 || !opt.vary_micro_batch) mbs.push_back(deck.train.micro_batch_size);
    else
      for (int d : divisors(deck.train.global_batch_size / dp)) mbs.push_back(d);
    std::vector<Recompute> rcs{deck_rc};
    if (opt.vary_recompute) rcs = {Recompute::none, Recompute::block};
    std::vector<PipelineScheduleKind> scheds{deck_sched};
    if (opt.vary_schedule && pp > 1) scheds = {PipelineScheduleKind::one_f_one_b, PipelineScheduleKind::gpipe};
    // dp not dividing the global batch: validate() refuses every candidate of this split for that
    // reason alone; the first one is validated (for the example reason), the rest only counted (a
    // rank count near 2^30 has thousands of splits: minutes of identical refusals otherwise).
    const bool batch_split = deck.train.global_batch_size > 0 && deck.train.global_batch_size % dp != 0;
    const std::int64_t combos = static_cast<std::int64_t>(opt.zero_stages.size() * mbs.size() * rcs.size() * scheds.size());
    bool tried = false;
    for (int z : opt.zero_stages)
      for (std::int64_t mb : mbs)
        for (Recompute rc : rcs)
          for (PipelineScheduleKind sk : scheds) {
            if (batch_split && tried) continue;
            tried = true;
            ++res.enumerated;
            Config c = deck;
            c.parallel.dp = dp;
            c.parallel.tp = tp;
            c.parallel.pp = pp;
            c.parallel.zero_stage = z;
            if (deck.parallel.pp != pp) c.parallel.pp_layers.clear();  // the deck's split is for its own pp
            // The deck's HSDP group only where it still divides dp (and sharding is on).
            if (z == 0 || deck.parallel.shard_group_size <= 0 || dp % deck.parallel.shard_group_size != 0)
              c.parallel.shard_group_size = 0;
            c.train.micro_batch_size = mb;
            c.train.activation_checkpointing = rc;
            c.parallel.pp_schedule = sk;
            PlanCandidate cand;
            try {
              // The trainer's own validation, for this many ranks and the machine's build.
              validate(c, opt.ranks, mach.cuda_build ? BuildTarget::cuda : BuildTarget::this_build);
              cand.pred = predict_step(c, mach, opt.peer);
            } catch (const Error& e) {
              if (res.invalid++ == 0) res.first_invalid_reason = layout_name(c) + ": " + e.what();
              continue;
            }
            cand.cfg = c;
            cand.fits = cand.pred.memory_total_bytes <= mach.memory_bytes;
            (cand.fits ? res.fitting : res.too_big).push_back(std::move(cand));
          }
    if (batch_split && combos > 1) {  // the candidates not validated, refused for the same reason
      res.enumerated += static_cast<int>(combos - 1);
      res.invalid += static_cast<int>(combos - 1);
    }
    progress.add(1);
  }
  progress.finish();
  std::stable_sort(res.fitting.begin(), res.fitting.end(),
                   [](const PlanCandidate& a, const PlanCandidate& b) { return a.pred.total_s < b.pred.total_s; });
  std::stable_sort(res.too_big.begin(), res.too_big.end(), [](const PlanCandidate& a, const PlanCandidate& b) {
    return a.pred.memory_total_bytes < b.pred.memory_total_bytes;
  });
  return res;
}

}  // namespace trident
