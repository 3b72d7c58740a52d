#include "train/numerics.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

namespace trident {

StepHealth agree_step_health(Communicator& world, int world_rank, double loss, double grad_norm) {
  const bool bad = !std::isfinite(loss) || !std::isfinite(grad_norm);
  const double lowest = -std::numeric_limits<double>::max();
  // max of: the bad flag, the finite losses, minus the ranks that saw a bad value (the lowest rank
  // wins), the bad-loss flag.
  double v[4] = {bad ? 1.0 : 0.0, std::isfinite(loss) ? loss : lowest, bad ? -static_cast<double>(world_rank) : lowest,
                 std::isfinite(loss) ? 0.0 : 1.0};
  world.all_reduce(v, v, 4, DataType::f64, ReduceOp::max);
  StepHealth h;
  h.finite = v[0] == 0.0;
  h.loss_finite = v[3] == 0.0;
  h.loss = v[1] == lowest ? std::nan("") : v[1];
  h.first_bad_rank = h.finite ? -1 : static_cast<int>(-v[2]);
  return h;
}

NonfiniteVerdict NonfinitePolicy::decide(bool finite) {
  if (finite) {
    consecutive_ = 0;
    return NonfiniteVerdict::apply;
  }
  if (action_ == NonfiniteAction::stop) return NonfiniteVerdict::stop;
  ++consecutive_;
  ++total_;
  return consecutive_ >= max_consecutive_ ? NonfiniteVerdict::stop : NonfiniteVerdict::skip;
}

LossScaler::LossScaler(const TrainConfig& t)
    : LossScaler(uses_loss_scaling(t), t.loss_scale_init, t.loss_scale_growth_interval, t.loss_scale_growth,
                 t.loss_scale_backoff, t.loss_scale_min) {}

LossScaler::LossScaler(bool enabled, double init, std::int64_t growth_interval, double growth, double backoff,
                       double min_scale)
    : enabled_(enabled), scale_(init), interval_(growth_interval), growth_(growth), backoff_(backoff),
      min_(min_scale) {}

ScaleVerdict LossScaler::update(bool grads_finite) {
  if (!enabled_) return ScaleVerdict::apply;
  if (!grads_finite) {
    good_ = 0;
    if (scale_ <= min_) return ScaleVerdict::stop;
    ++overflows_;
    scale_ = std::max(scale_ * backoff_, min_);  // Megatron-LM: max(scale * backoff, min_scale)
    return ScaleVerdict::overflow;
  }
  if (++good_ >= interval_) {
    // The scale multiplies the loss gradient in float: it grows only while it stays a finite float.
    const double grown = scale_ * growth_;
    if (grown <= static_cast<double>(FLT_MAX)) scale_ = grown;
    good_ = 0;
  }
  return ScaleVerdict::apply;
}

double SpikeDetector::zscore(double loss) const {
  const auto n = static_cast<std::int64_t>(values_.size());
  if (window_ <= 0 || n < window_) return std::nan("");
  double sum = 0.0;
  for (double v : values_) sum += v;
  const double mean = sum / static_cast<double>(n);
  double ss = 0.0;
  for (double v : values_) ss += (v - mean) * (v - mean);
  const double sd = std::sqrt(ss / static_cast<double>(n));
  const double d = loss - mean;
  if (sd == 0.0) return d == 0.0 ? 0.0 : std::copysign(std::numeric_limits<double>::infinity(), d);
  return d / sd;
}

void SpikeDetector::push(double loss) {
  if (window_ <= 0) return;
  values_.push_back(loss);
  if (static_cast<std::int64_t>(values_.size()) > window_) values_.erase(values_.begin());
}

void SpikeDetector::restore(const std::vector<double>& values) {
  values_.clear();
  if (window_ <= 0) return;
  const auto n = static_cast<std::int64_t>(values.size());
  values_.assign(values.begin() + std::max<std::int64_t>(0, n - window_), values.end());
}

SpikeVerdict SpikePolicy::decide(double z, std::int64_t last_checkpoint) {
  if (!(z > zscore_)) return SpikeVerdict::none;  // NaN compares false: no verdict without a full window
  if (!rollback_ || last_checkpoint < 0) return SpikeVerdict::warn;
  if (last_checkpoint != checkpoint_) {
    checkpoint_ = last_checkpoint;
    count_ = 0;
  }
  if (count_ >= max_rollbacks_) return SpikeVerdict::stop;
  ++count_;
  return SpikeVerdict::rollback;
}

}  // namespace trident
