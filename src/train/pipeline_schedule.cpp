#include "train/pipeline_schedule.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <string>

namespace trident {

PipelineSchedule::PipelineSchedule(PipelineScheduleKind kind, int num_micro_batches, int pp_size, int pp_rank)
    : num_micro_batches_(num_micro_batches) {
  if (num_micro_batches < 1 || pp_size < 1 || pp_rank < 0 || pp_rank >= pp_size)
    throw Error("PipelineSchedule: need at least one micro-batch and a stage 0 <= pp_rank < pp_size (got M = " +
                std::to_string(num_micro_batches) + ", pp_rank " + std::to_string(pp_rank) + " of " +
                std::to_string(pp_size) + ")");
  const int M = num_micro_batches;
  auto forward = [&](int m) { actions_.push_back({PipelineAction::Pass::forward, m}); };
  auto backward = [&](int m) { actions_.push_back({PipelineAction::Pass::backward, m}); };
  actions_.reserve(static_cast<size_t>(2 * M));
  if (kind == PipelineScheduleKind::gpipe) {
    stashes_ = M;
    for (int m = 0; m < M; ++m) forward(m);
    for (int m = 0; m < M; ++m) backward(m);
    return;
  }
  // 1F1B: a stage's first backward needs the gradient that has passed through the pp - stage - 1
  // stages after it, so it can run that many forwards ahead (warm-up) and then alternate.
  stashes_ = std::min(M, pp_size - pp_rank);
  const int warm = std::min(pp_size - pp_rank - 1, M);
  for (int m = 0; m < warm; ++m) forward(m);
  for (int m = 0; m < M - warm; ++m) {
    forward(warm + m);
    backward(m);
  }
  for (int m = M - warm; m < M; ++m) backward(m);
}

}  // namespace trident
