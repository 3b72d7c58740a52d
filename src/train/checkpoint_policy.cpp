#include "train/checkpoint_policy.hpp"

#include "core/log.hpp"
#include "core/timer.hpp"

#include <algorithm>

namespace trident {

CheckpointPolicy::CheckpointPolicy(CheckpointSaver& saver, const CheckpointPolicyOptions& opt, std::int64_t last_saved,
                                   int world_rank)
    : saver_(saver), opt_(opt), world_rank_(world_rank), last_saved_(last_saved) {}

bool CheckpointPolicy::interval_due(std::int64_t step) const { return opt_.interval > 0 && step % opt_.interval == 0; }

void CheckpointPolicy::after_step(std::int64_t step) {
  if (interval_due(step)) save("interval", /*required=*/true, step, /*sync=*/false);
}

void CheckpointPolicy::handle_failure(const CheckpointError& e, std::int64_t step) {
  if (!opt_.continue_on_error) throw;  // the CheckpointError being handled, unchanged
  last_failed_ = step;
  log::warn("checkpoint of step %lld failed: %s; training continues ([checkpoint] on_error = continue), the last "
            "good checkpoint is %s",
            static_cast<long long>(step), e.what(), last_saved_ >= 0 ? saver_.path_for(last_saved_).c_str() : "none");
}

void CheckpointPolicy::finish_async() {
  if (!saver_.busy()) return;
  try {
    const BackgroundSaveResult r = saver_.wait();
    if (r.abandoned) {
      log::info("checkpoint: the background save of step %lld was abandoned for the stop; the last checkpoint "
                "is %s",
                static_cast<long long>(r.step), last_saved_ >= 0 ? saver_.path_for(last_saved_).c_str() : "none");
      return;
    }
    last_saved_ = std::max(last_saved_, r.step);
    log::info("checkpoint: %s written in the background in %.2f s (%.1f MiB on rank 0)", r.path.c_str(), r.seconds,
              static_cast<double>(r.bytes) / (1024.0 * 1024.0));
  } catch (const CheckpointError& e) {
    handle_failure(e, async_step_);
  }
}

void CheckpointPolicy::save(const char* why, bool required, std::int64_t step, bool sync) {
  if (!opt_.save_final && !required) return;
  finish_async();
  Timer t;
  try {
    if (saver_.can_start() && !sync) {
      saver_.start(step);
      async_step_ = step;
      last_save_seconds_ = t.seconds();
      log::info("checkpoint: step %lld (%s) snapshot in %.3f s, writing in the background",
                static_cast<long long>(step), why, last_save_seconds_);
      return;
    }
    const std::string p = saver_.save(step);
    last_save_seconds_ = t.seconds();
    last_saved_ = step;
    log::info("checkpoint: %s (%s, %.2f s)", p.c_str(), why, last_save_seconds_);
  } catch (const CheckpointError& e) {
    handle_failure(e, step);
  }
}

bool CheckpointPolicy::final_save(StopReason why, std::int64_t step) {
  const bool signal = why == StopReason::signal;
  // A signal's stop is one save away from its exit: an older step's save in flight gives way.
  if (signal && saver_.busy() && async_step_ != step) saver_.abandon();
  finish_async();
  if (last_saved_ != step && last_failed_ != step)
    save(stop_reason_name(why), /*required=*/signal, step, /*sync=*/true);
  if (last_saved_ == step) return true;
  if (!opt_.save_final && !signal) {
    log::info("no checkpoint of step %lld: [checkpoint] save_final = false", static_cast<long long>(step));
    return true;
  }
  if (world_rank_ == 0)
    log::error("the checkpoint of step %lld (%s) failed; the last good checkpoint is %s", static_cast<long long>(step),
               stop_reason_name(why),
               last_saved_ >= 0 ? saver_.path_for(last_saved_).c_str() : "none (a resume starts from step 0)");
  return false;
}

}  // namespace trident
