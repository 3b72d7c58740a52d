// train/lr_schedule.hpp: linear warm-up then cosine decay (Loshchilov & Hutter 2017, "SGDR",
// eq. 5, without restarts), exactly nanoGPT's get_lr() with lr_decay_iters = max_steps.
//
// Layer: train. Local, pure.
#pragma once

#include <cstdint>

namespace trident {

struct LrSchedule {
  double lr = 1e-3;
  double min_lr = 1e-4;
  std::int64_t warmup_steps = 0;
  std::int64_t max_steps = 1;

  /// Learning rate of the update made at iteration `it` (0-based: the first optimizer step uses
  /// it = 0): lr (it+1)/(warmup+1) during warm-up, then min_lr + (lr - min_lr)(1 + cos(pi r))/2
  /// with r = (it - warmup)/(max_steps - warmup), and min_lr after max_steps.
  double at(std::int64_t it) const;
};

}  // namespace trident
