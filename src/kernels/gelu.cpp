#include "kernels/gelu.hpp"

#include "core/kmath.hpp"
#include "kernels/instantiate.hpp"

namespace trident {

template <class T>
void gelu_forward(View1<T> out, View1<const T> inp) {
  Kokkos::parallel_for(
      "trident::gelu_forward", Kokkos::RangePolicy<ExecSpace>(0, out.extent(0)), KOKKOS_LAMBDA(const size_t i) {
        const T x = inp(i);
        out(i) = T(0.5) * x * (T(1) + kmath::erf(x * T(0.70710678118654752440)));
      });
}

template <class T>
void gelu_backward(View1<T> dinp, View1<const T> dout, View1<const T> inp) {
  Kokkos::parallel_for(
      "trident::gelu_backward", Kokkos::RangePolicy<ExecSpace>(0, dinp.extent(0)), KOKKOS_LAMBDA(const size_t i) {
        const T x = inp(i);
        const T cdf = T(0.5) * (T(1) + kmath::erf(x * T(0.70710678118654752440)));
        const T pdf = T(0.39894228040143267794) * kmath::exp(T(-0.5) * x * x);
        dinp(i) = dout(i) * (cdf + x * pdf);
      });
}

#define TRIDENT_INST(T)                                              \
  template void gelu_forward<T>(View1<T>, View1<const T>);           \
  template void gelu_backward<T>(View1<T>, View1<const T>, View1<const T>);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
