#include "train/optimizer.hpp"

#include "kernels/adamw.hpp"
#include "kernels/elementwise.hpp"

#include <algorithm>

namespace trident {

template <class T>
AdamW<T>::AdamW(const ParamLayout& layout, const std::vector<Piece>& pieces, std::int64_t local_size,
                const TrainConfig& cfg, bool resident)
    : beta1_(cfg.beta1),
      beta2_(cfg.beta2),
      eps_(cfg.eps),
      weight_decay_(cfg.weight_decay),
      exp_avg_("trident::adamw::exp_avg", resident ? local_size : 0, MemCategory::optimizer),
      exp_avg_sq_("trident::adamw::exp_avg_sq", resident ? local_size : 0, MemCategory::optimizer) {
  for (const Piece& p : pieces)
    for (const TensorSpec& t : layout.tensors()) {
      const std::int64_t a = std::max(p.flat_offset, t.offset), b = std::min(p.flat_offset + p.count, t.offset + t.numel);
      if (a < b) ranges_.push_back({p.local_offset + (a - p.flat_offset), b - a, t.decay});
    }
  fill<T>(exp_avg_.all(), T(0));
  fill<T>(exp_avg_sq_.all(), T(0));
}

template <class T>
AdamWStep AdamW<T>::step_params(double lr, double grad_scale) const {
  AdamWStep s;
  s.lr = lr;
  s.beta1 = beta1_;
  s.beta2 = beta2_;
  s.eps = eps_;
  s.step = step_count_;
  s.grad_scale = grad_scale;
  return s;
}

template <class T>
void AdamW<T>::step(T* master, const T* grads, double lr, double grad_scale) {
  ++step_count_;
  AdamWStep s = step_params(lr, grad_scale);
  for (const Range& r : ranges_) {
    s.weight_decay = r.decay ? weight_decay_ : 0.0;
    adamw_update<T>(View1<T>(master + r.local_offset, static_cast<size_t>(r.count)),
                    View1<const T>(grads + r.local_offset, static_cast<size_t>(r.count)),
                    exp_avg_.slice(r.local_offset, r.count), exp_avg_sq_.slice(r.local_offset, r.count), s);
  }
}

template <class T>
template <class Apply>
void AdamW<T>::for_ranges(std::int64_t local_begin, std::int64_t local_end, double lr, double grad_scale,
                          const Apply& apply) const {
  AdamWStep s = step_params(lr, grad_scale);
  for (const Range& r : ranges_) {
    const std::int64_t a = std::max(r.local_offset, local_begin), b = std::min(r.local_offset + r.count, local_end);
    if (a >= b) continue;
    s.weight_decay = r.decay ? weight_decay_ : 0.0;
    apply(a, static_cast<size_t>(b - a), s);
  }
}

template <class T>
void AdamW<T>::update(std::int64_t local_begin, std::int64_t local_end, std::int64_t base, T* master, const T* grads,
                      T* m, T* v, double lr, double grad_scale) const {
  for_ranges(local_begin, local_end, lr, grad_scale, [&](std::int64_t a, size_t n, const AdamWStep& s) {
    adamw_update<T>(View1<T>(master + (a - base), n), View1<const T>(grads + (a - base), n), View1<T>(m + (a - base), n),
                    View1<T>(v + (a - base), n), s);
  });
}

template <class T>
void AdamW<T>::update_host(std::int64_t local_begin, std::int64_t local_end, std::int64_t base, T* master,
                           const T* grads, T* m, T* v, double lr, double grad_scale) const {
  for_ranges(local_begin, local_end, lr, grad_scale, [&](std::int64_t a, size_t n, const AdamWStep& s) {
    adamw_update_host<T>(HostView1<T>(master + (a - base), n), HostView1<const T>(grads + (a - base), n),
                         HostView1<T>(m + (a - base), n), HostView1<T>(v + (a - base), n), s);
  });
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace trident
