#include "train/optimizer.hpp"

#include "kernels/adamw.hpp"
#include "kernels/elementwise.hpp"

#include <algorithm>

namespace trident {

template <class T>
AdamW<T>::AdamW(const ParamLayout& layout, std::int64_t begin, std::int64_t end, const TrainConfig& cfg)
    : begin_(begin),
      end_(end),
      beta1_(cfg.beta1),
      beta2_(cfg.beta2),
      eps_(cfg.eps),
      weight_decay_(cfg.weight_decay),
      exp_avg_("trident::adamw::exp_avg", end - begin, MemCategory::optimizer),
      exp_avg_sq_("trident::adamw::exp_avg_sq", end - begin, MemCategory::optimizer) {
  for (const TensorSpec& t : layout.tensors()) {
    const std::int64_t a = std::max(begin, t.offset), b = std::min(end, t.offset + t.numel);
    if (a < b) ranges_.push_back({a, b - a, t.decay});
  }
  fill<T>(exp_avg_.all(), T(0));
  fill<T>(exp_avg_sq_.all(), T(0));
}

template <class T>
void AdamW<T>::step(View1<T> params, View1<const T> grads, double lr, double grad_scale) {
  ++step_count_;
  AdamWStep s;
  s.lr = lr;
  s.beta1 = beta1_;
  s.beta2 = beta2_;
  s.eps = eps_;
  s.step = step_count_;
  s.grad_scale = grad_scale;
  for (const Range& r : ranges_) {
    s.weight_decay = r.decay ? weight_decay_ : 0.0;
    adamw_update<T>(View1<T>(params.data() + r.offset, static_cast<size_t>(r.count)),
                    View1<const T>(grads.data() + r.offset, static_cast<size_t>(r.count)),
                    exp_avg_.slice(r.offset - begin_, r.count), exp_avg_sq_.slice(r.offset - begin_, r.count), s);
  }
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace trident
