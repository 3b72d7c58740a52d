#include "train/stop_policy.hpp"

#include "core/log.hpp"
#include "train/signals.hpp"

#include <csignal>
#include <utility>

namespace trident {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::none: return "none";
    case StopReason::signal: return "signal";
    case StopReason::end_of_run: return "end of run";
    case StopReason::stop_at_step: return "stop_at_step";
    case StopReason::time_limit: return "time limit";
  }
  return "none";
}

StopPolicy::StopPolicy(const StopLimits& limits, std::function<double()> elapsed_seconds)
    : limits_(limits), elapsed_seconds_(std::move(elapsed_seconds)) {}

StartDecision StopPolicy::at_start(std::int64_t step) const {
  if (limits_.stop_at_step > 0 && step >= limits_.stop_at_step) {
    log::info("nothing to do: the run is at step %lld and [train] stop_at_step = %lld (raise it to continue)",
              static_cast<long long>(step), static_cast<long long>(limits_.stop_at_step));
    return StartDecision::at_stop_step;
  }
  if (step >= limits_.max_steps) {
    log::info("the run is already complete: step %lld of max_steps %lld (to train on: --train.max_steps=N "
              "--train.allow_changed=max_steps)",
              static_cast<long long>(step), static_cast<long long>(limits_.max_steps));
    return StartDecision::complete;
  }
  return StartDecision::train;
}

void StopPolicy::record_step_seconds(double seconds) {
  step_seconds_avg_ = has_step_seconds_ ? 0.9 * step_seconds_avg_ + 0.1 * seconds : seconds;
  has_step_seconds_ = true;
}

bool StopPolicy::time_limit_near(double elapsed_s, double last_save_seconds) const {
  if (limits_.time_limit_min <= 0.0) return false;
  // Stop while a step and a save still fit, with a 10% margin.
  const double need = 1.1 * (step_seconds_avg_ + last_save_seconds) + 1.0;
  return elapsed_s + need > limits_.time_limit_min * 60.0;
}

StopDecision StopPolicy::after_step(Communicator& world, std::int64_t step, int local_signal,
                                    double last_save_seconds) const {
  StopDecision d;
  d.step = step;
  // Preemption or Ctrl-C: a SIGUSR1/SIGTERM/SIGINT on any rank stops every rank after this step,
  // with a checkpoint.
  const int sig = agree_signal(world, local_signal);
  if (sig != 0) {
    d.reason = StopReason::signal;
    d.signal = sig;
    return d;
  }
  if (step == limits_.max_steps) {
    d.reason = StopReason::end_of_run;
    return d;
  }
  if (limits_.stop_at_step > 0 && step >= limits_.stop_at_step) {
    d.reason = StopReason::stop_at_step;
    return d;
  }
  if (limits_.time_limit_min > 0.0) {
    // Rank 0 decides for everyone, so clocks that disagree cannot split the job.
    std::int32_t stop = time_limit_near(elapsed_seconds_(), last_save_seconds) ? 1 : 0;
    world.broadcast(&stop, 1, 0);
    if (stop) d.reason = StopReason::time_limit;
  }
  return d;
}

int StopPolicy::agree_signal(Communicator& world, int local_signal) {
  return world.all_reduce_value<std::int32_t>(local_signal, ReduceOp::max);
}

int StopPolicy::exit_status(StopReason reason, bool final_saved) {
  if (!final_saved) return 1;  // the final checkpoint failed: a job chain must not take it for a clean stop
  return reason == StopReason::signal ? kExitRequeue : 0;
}

int StopPolicy::finish(const StopDecision& d, bool final_saved, int world_rank) const {
  if (final_saved) {
    const auto step = static_cast<long long>(d.step);
    switch (d.reason) {
      case StopReason::signal:
        log::info("stopping after step %lld on %s; exit status %d asks the job script to requeue (by hand: run "
                  "the same command with --resume)",
                  step, stop_signal_name(d.signal), kExitRequeue);
        // Some launchers (MPICH hydra's mpiexec after it forwarded the signal) exit 0 whatever the
        // ranks return, so the stop is also recorded in a file the job script names.
        if (world_rank == 0) write_stop_file(d.step, d.signal);
        break;
      case StopReason::stop_at_step:
        log::info("stopping after step %lld as [train] stop_at_step asks; continue with --resume", step);
        break;
      case StopReason::time_limit:
        log::info("stopping after step %lld: [train] time_limit_min = %g is near; continue with --resume", step,
                  limits_.time_limit_min);
        break;
      case StopReason::none:
      case StopReason::end_of_run:
        break;
    }
  }
  return exit_status(d.reason, final_saved);
}

}  // namespace trident
