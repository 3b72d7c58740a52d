#include "kernels/adamw.hpp"

#include "core/kmath.hpp"
#include "kernels/instantiate.hpp"

#include <cmath>

namespace trident {

namespace {

/// The scalars of one step in T, computed once on the host (in double, then rounded).
template <class T>
struct AdamWScalars {
  T decay, b1, b2, step_size, bc2_sqrt, eps, gs;
  explicit AdamWScalars(const AdamWStep& s)
      : decay(static_cast<T>(1.0 - s.lr * s.weight_decay)), b1(static_cast<T>(s.beta1)), b2(static_cast<T>(s.beta2)),
        step_size(static_cast<T>(s.lr / (1.0 - std::pow(s.beta1, static_cast<double>(s.step))))),
        bc2_sqrt(static_cast<T>(std::sqrt(1.0 - std::pow(s.beta2, static_cast<double>(s.step))))),
        eps(static_cast<T>(s.eps)), gs(static_cast<T>(s.grad_scale)) {}
};

/// One element of the update, in place: the only copy of the arithmetic (device and host).
template <class T>
KOKKOS_INLINE_FUNCTION void adamw_element(const AdamWScalars<T>& c, T& param, T grad, T& exp_avg, T& exp_avg_sq) {
  const T g = grad * c.gs;
  T p = param * c.decay;
  const T m = c.b1 * exp_avg + (T(1) - c.b1) * g;
  const T v = c.b2 * exp_avg_sq + (T(1) - c.b2) * g * g;
  p -= c.step_size * m / (kmath::sqrt(v) / c.bc2_sqrt + c.eps);
  param = p;
  exp_avg = m;
  exp_avg_sq = v;
}

}  // namespace

template <class T>
void adamw_update(View1<T> param, View1<const T> grad, View1<T> exp_avg, View1<T> exp_avg_sq, const AdamWStep& s) {
  const AdamWScalars<T> c(s);
  Kokkos::parallel_for(
      "trident::adamw_update", Kokkos::RangePolicy<ExecSpace>(0, param.extent(0)), KOKKOS_LAMBDA(const size_t i) {
        adamw_element(c, param(i), grad(i), exp_avg(i), exp_avg_sq(i));
      });
}

template <class T>
void adamw_update_host(HostView1<T> param, HostView1<const T> grad, HostView1<T> exp_avg, HostView1<T> exp_avg_sq,
                       const AdamWStep& s) {
  const AdamWScalars<T> c(s);
  Kokkos::parallel_for(
      "trident::adamw_update_host", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, param.extent(0)),
      [=](const size_t i) { adamw_element(c, param(i), grad(i), exp_avg(i), exp_avg_sq(i)); });
}

#define TRIDENT_INST(T) \
  template void adamw_update<T>(View1<T>, View1<const T>, View1<T>, View1<T>, const AdamWStep&); \
  template void adamw_update_host<T>(HostView1<T>, HostView1<const T>, HostView1<T>, HostView1<T>, const AdamWStep&);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
