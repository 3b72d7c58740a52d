#include "kernels/gelu.hpp"

#include "core/kmath.hpp"
#include "kernels/convert.hpp"
#include "kernels/instantiate.hpp"

#include <algorithm>
#include <type_traits>

namespace trident {

namespace {
/// 0.5 x (1 + erf(x / sqrt 2)). Device-safe.
template <class T>
KOKKOS_INLINE_FUNCTION T gelu_of(T x) {
  return T(0.5) * x * (T(1) + kmath::erf(x * T(0.70710678118654752440)));
}
}  // namespace

template <class T>
void gelu_forward(View1<T> out, View1<const T> inp) {
  Kokkos::parallel_for(
      "trident::gelu_forward", Kokkos::RangePolicy<ExecSpace>(0, out.extent(0)), KOKKOS_LAMBDA(const size_t i) {
        out(i) = gelu_of<T>(inp(i));
      });
}

void gelu_forward_bf16(View1<bf16_t> out, View1<const float> inp) {
#if defined(KOKKOS_ENABLE_SERIAL)
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Serial>) {
    // gelu_forward<float> on blocks of kBlock (a multiple of the 16 lanes of its vector loop), then
    // rounded: every element takes the path it takes in gelu_forward over the whole array (loop
    // body, 8-lane epilogue or scalar tail; under -ffast-math they may differ in the sign of a zero
    // or, through libmvec, in the last bits), so the result is bitwise the rounded float output.
    constexpr size_t kBlock = 4096;
    alignas(64) float buf[kBlock];
    const size_t n = out.extent(0);
    for (size_t i = 0; i < n; i += kBlock) {
      const size_t m = std::min(kBlock, n - i);
      gelu_forward<float>(View1<float>(buf, m), View1<const float>(inp.data() + i, m));
      bf16_t* const o = out.data() + i;
      for (size_t j = 0; j < m; ++j) o[j] = to_bf16(buf[j]);
    }
    return;
  }
#endif
  Kokkos::parallel_for(
      "trident::gelu_forward_bf16", Kokkos::RangePolicy<ExecSpace>(0, out.extent(0)), KOKKOS_LAMBDA(const size_t i) {
        out(i) = to_bf16(gelu_of<float>(inp(i)));
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
