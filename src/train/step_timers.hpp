// train/step_timers.hpp: the step-time breakdown: where the wall time of each training step goes,
// on this rank, as metrics.csv's t_* columns and the end-of-run summary line.
//
// Layer: train. Local: nothing here communicates (the collectives it reads are timed by the
// communicators themselves, Communicator::set_timing).
//
// Model (docs/scaling.md, "Step-time breakdown"). The run is cut into consecutive *intervals*, one
// per metrics row: an interval starts where the previous row was taken (lap()) and ends where this
// one is. Inside it, *parts* are timed with scopes that never nest:
//  - time(part): the part's wall time minus the exposed communication inside it (fwd, bwd, opt,
//    data): the tp all-reduces inside a forward pass land in the tp column, not in fwd.
//  - claim(part): the part's whole wall time, communication included, which is then taken out of
//    the communication columns (bubble: the pipeline receives a stage waits in; ckpt and eval: a
//    save or an evaluation counts whole).
// Per axis (dp, tp, pp, world) exposed = seconds blocked in the watched communicators' calls and
// waits that no claim took; hidden = the in-flight estimate of their non-blocking operations
// (CommTimes: an upper bound, not part of the sum). other = interval - parts - exposed; it is >= 0
// up to clock resolution because parts and exposed time are disjoint stretches of one thread's time.
//
// Invariant: step == sum(part) + sum(exposed) + other, exactly (other is defined so), other >= -1 us.
#pragma once

#include "core/config.hpp"
#include "parallel/communicator.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace trident {

/// Parts of a step (columns t_fwd ... t_eval). fwd/bwd: the model's forward/backward passes (with
/// ZeRO's per-unit bookkeeping), opt: gradient reduction bookkeeping, norm, clipping, AdamW, the
/// loss reduction; bubble: pipeline receives of activations and gradients (waiting for neighbour
/// stages); data: loading a micro-batch's tokens; ckpt: checkpoint saves (and a rollback's load);
/// eval: validation.
enum class StepPart : int { fwd = 0, bwd, opt, bubble, data, ckpt, eval, count_ };
/// Communication axes of the breakdown: dp (dp, dp_shard, dp_replicate), tp, pp (pp, pp_tied),
/// world (world and mp: the run's agreements, the global gradient norm over tp x pp).
enum class CommAxis : int { dp = 0, tp, pp, world, count_ };

constexpr int kStepParts = static_cast<int>(StepPart::count_);
constexpr int kCommAxes = static_cast<int>(CommAxis::count_);

/// "fwd", "bwd", ...; "dp", "tp", ... (column names t_<part>, t_comm_<axis>_exposed). Local.
const char* step_part_name(StepPart p);
const char* comm_axis_name(CommAxis a);
/// The breakdown axis of a communicator label (Communicator::axis()): "dp", "dp_shard",
/// "dp_replicate" -> dp; "tp" -> tp; "pp", "pp_tied" -> pp; anything else -> world. Local.
CommAxis comm_axis_of(const std::string& label);

/// One interval's time by cause on this rank, in seconds.
struct StepBreakdown {
  bool on = false;                        ///< false: timers off (every value 0)
  double step = 0;                        ///< wall time of the interval
  std::array<double, kStepParts> part{};  ///< by StepPart
  std::array<double, kCommAxes> exposed{};
  std::array<double, kCommAxes> hidden{};
  double other = 0;                       ///< step - sum(part) - sum(exposed)

  /// Comma-separated metrics.csv fields in milliseconds, in the order of step_breakdown_columns();
  /// empty fields when !on. Local.
  std::string csv_fields() const;
};

/// The metrics.csv column names of StepBreakdown::csv_fields, comma-separated: t_step, t_fwd, t_bwd,
/// t_opt, t_comm_dp_exposed, t_comm_dp_hidden, ... (tp, pp, world), t_bubble, t_data, t_ckpt,
/// t_eval, t_other. Local.
std::string step_breakdown_columns();

class StepTimers {
 public:
  using Clock = std::chrono::steady_clock;

  explicit StepTimers(TimerMode mode = TimerMode::coarse) : mode_(mode) {}
  StepTimers(const StepTimers&) = delete;
  StepTimers& operator=(const StepTimers&) = delete;

  TimerMode mode() const { return mode_; }
  bool on() const { return mode_ != TimerMode::off; }

  /// Accounts `c`'s communication under comm_axis_of(c.axis()): turns its timing on when timers are
  /// on and it has more than one rank (a one-rank "collective" is a local copy, left to the part
  /// that calls it, so axes of size 1 read zero). `c` must outlive this object. Local.
  void watch(Communicator& c);

  /// Starts the first interval (and discards anything timed before). Local.
  void start();
  /// Ends the current interval, returns its breakdown, and starts the next one at the same instant.
  /// With timers off: a breakdown with on = false. Local.
  StepBreakdown lap();

  /// A timed part (RAII, see the header): ends at destruction or stop(). Scopes must not nest.
  class Scope {
   public:
    Scope(Scope&& o) noexcept : t_(o.t_), part_(o.part_), claim_(o.claim_), t0_(o.t0_), ex0_(o.ex0_) { o.t_ = nullptr; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { stop(); }
    void stop();

   private:
    friend class StepTimers;
    Scope(StepTimers* t, StepPart part, bool claim);
    StepTimers* t_;
    StepPart part_;
    bool claim_;
    Clock::time_point t0_{};
    std::array<double, kCommAxes> ex0_{};
  };
  /// Charges the scope's wall time minus the exposed communication inside it to `p`. With
  /// [train] timers = fine, fences Kokkos at both ends. Local.
  Scope time(StepPart p) { return Scope(on() ? this : nullptr, p, false); }
  /// Charges the scope's whole wall time to `p` and takes the exposed communication inside it out
  /// of the communication columns. With timers = fine, fences Kokkos at both ends. Local.
  Scope claim(StepPart p) { return Scope(on() ? this : nullptr, p, true); }

 private:
  std::array<double, kCommAxes> exposed_now() const;
  std::array<double, kCommAxes> hidden_now() const;
  void fence() const;

  TimerMode mode_;
  std::vector<std::pair<CommAxis, Communicator*>> comms_;
  Clock::time_point start_{};
  std::array<double, kStepParts> part_{};
  std::array<double, kCommAxes> claimed_{};
  std::array<double, kCommAxes> exposed0_{}, hidden0_{};
};

/// Means of StepBreakdowns over a run, for the end-of-run line. Local.
class BreakdownSummary {
 public:
  /// Adds the interval of `step`; the first one added is the warm-up and is left out of the means
  /// unless it stays the only one.
  void add(std::int64_t step, const StepBreakdown& b);
  std::int64_t steps() const { return n_; }
  /// One line: "step-time breakdown (ms/step, mean of steps A-B on this rank, first step left out as
  /// warm-up): step S = fwd ... + other O | hidden: dp H ...". Empty when nothing was added or the
  /// timers were off.
  std::string line(const std::string& note = "") const;

 private:
  StepBreakdown first_, sum_;
  std::int64_t first_step_ = 0, last_step_ = 0, n_ = 0;  // n_ counts all added, the warm-up included
};

}  // namespace trident
