#include "train/lr_schedule.hpp"

#include <cmath>

namespace trident {

double LrSchedule::at(std::int64_t it) const {
  if (it < warmup_steps) return lr * static_cast<double>(it + 1) / static_cast<double>(warmup_steps + 1);
  if (it > max_steps || max_steps <= warmup_steps) return min_lr;
  const double ratio = static_cast<double>(it - warmup_steps) / static_cast<double>(max_steps - warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * ratio));
  return min_lr + coeff * (lr - min_lr);
}

}  // namespace trident
