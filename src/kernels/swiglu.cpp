#include "kernels/swiglu.hpp"

#include "core/kmath.hpp"
#include "kernels/instantiate.hpp"

namespace trident {

template <class T>
void swiglu_forward(View2<T> h, View2<const T> gu) {
  const std::int64_t F = static_cast<std::int64_t>(h.extent(1)), n = static_cast<std::int64_t>(h.extent(0)) * F;
  Kokkos::parallel_for(
      "trident::swiglu_forward", Kokkos::RangePolicy<ExecSpace>(0, n), KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t r = i / F, c = i % F;
        const T g = gu(r, c);
        const T sig = T(1) / (T(1) + kmath::exp(-g));
        h(r, c) = g * sig * gu(r, F + c);
      });
}

template <class T>
void swiglu_backward(View2<T> dgu, View2<const T> dh, View2<const T> gu) {
  const std::int64_t F = static_cast<std::int64_t>(dh.extent(1)), n = static_cast<std::int64_t>(dh.extent(0)) * F;
  Kokkos::parallel_for(
      "trident::swiglu_backward", Kokkos::RangePolicy<ExecSpace>(0, n), KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t r = i / F, c = i % F;
        const T g = gu(r, c), u = gu(r, F + c), d = dh(r, c);
        const T sig = T(1) / (T(1) + kmath::exp(-g));
        dgu(r, c) = d * u * sig * (T(1) + g * (T(1) - sig));
        dgu(r, F + c) = d * g * sig;
      });
}

#define TRIDENT_INST(T)                                                      \
  template void swiglu_forward<T>(View2<T>, View2<const T>);                 \
  template void swiglu_backward<T>(View2<T>, View2<const T>, View2<const T>);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
