#include "kernels/adamw.hpp"

#include "core/kmath.hpp"
#include "kernels/instantiate.hpp"

#include <cmath>

namespace trident {

template <class T>
void adamw_update(View1<T> param, View1<const T> grad, View1<T> exp_avg, View1<T> exp_avg_sq, const AdamWStep& s) {
  const T decay = static_cast<T>(1.0 - s.lr * s.weight_decay);
  const T b1 = static_cast<T>(s.beta1), b2 = static_cast<T>(s.beta2);
  const T step_size = static_cast<T>(s.lr / (1.0 - std::pow(s.beta1, static_cast<double>(s.step))));
  const T bc2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(s.beta2, static_cast<double>(s.step))));
  const T eps = static_cast<T>(s.eps);
  const T gs = static_cast<T>(s.grad_scale);
  Kokkos::parallel_for(
      "trident::adamw_update", Kokkos::RangePolicy<ExecSpace>(0, param.extent(0)), KOKKOS_LAMBDA(const size_t i) {
        const T g = grad(i) * gs;
        T p = param(i) * decay;
        const T m = b1 * exp_avg(i) + (T(1) - b1) * g;
        const T v = b2 * exp_avg_sq(i) + (T(1) - b2) * g * g;
        p -= step_size * m / (kmath::sqrt(v) / bc2_sqrt + eps);
        param(i) = p;
        exp_avg(i) = m;
        exp_avg_sq(i) = v;
      });
}

#define TRIDENT_INST(T) \
  template void adamw_update<T>(View1<T>, View1<const T>, View1<T>, View1<T>, const AdamWStep&);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
