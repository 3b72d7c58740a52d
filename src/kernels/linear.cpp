#include "kernels/linear.hpp"

#include "kernels/gemm.hpp"
#include "kernels/instantiate.hpp"

namespace trident {

template <class T>
void linear_forward(View2<T> out, View2<const T> inp, View2<const T> weight, View1<const T> bias, GemmInputs inputs) {
  gemm<T>('N', 'T', T(1), inp, weight, T(0), out, inputs);
  if (bias.extent(0) == 0) return;
  const int OC = static_cast<int>(out.extent(1));
  Kokkos::parallel_for(
      "trident::linear_forward_bias", Kokkos::RangePolicy<ExecSpace>(0, out.extent(0)), KOKKOS_LAMBDA(const size_t n) {
        for (int o = 0; o < OC; ++o) out(n, o) += bias(o);
      });
}

template <class T>
void add_bias(View2<T> out, View1<const T> bias) {
  if (bias.extent(0) == 0) return;
  const int OC = static_cast<int>(out.extent(1));
  Kokkos::parallel_for(
      "trident::add_bias", Kokkos::RangePolicy<ExecSpace>(0, out.extent(0)), KOKKOS_LAMBDA(const size_t n) {
        for (int o = 0; o < OC; ++o) out(n, o) += bias(o);
      });
}

template <class T>
void linear_backward(View2<T> dinp, View2<T> dweight, View1<T> dbias, View2<const T> dout, View2<const T> inp,
                     View2<const T> weight, bool accumulate_dinp, GemmInputs inputs) {
  if (dinp.extent(0) > 0) gemm<T>('N', 'N', T(1), dout, weight, accumulate_dinp ? T(1) : T(0), dinp, inputs);
  gemm<T>('T', 'N', T(1), dout, inp, T(1), dweight, inputs);
  if (dbias.extent(0) == 0) return;
  const long N = static_cast<long>(dout.extent(0));
  Kokkos::parallel_for(
      "trident::linear_backward_bias", Kokkos::RangePolicy<ExecSpace>(0, dout.extent(1)),
      KOKKOS_LAMBDA(const size_t o) {
        T acc = 0;
        for (long n = 0; n < N; ++n) acc += dout(n, o);
        dbias(o) += acc;
      });
}

#define TRIDENT_INST(T)                                                                                   \
  template void linear_forward<T>(View2<T>, View2<const T>, View2<const T>, View1<const T>, GemmInputs); \
  template void add_bias<T>(View2<T>, View1<const T>);                                                     \
  template void linear_backward<T>(View2<T>, View2<T>, View1<T>, View2<const T>, View2<const T>,          \
                                   View2<const T>, bool, GemmInputs);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
