#include "kernels/layernorm.hpp"

#include "core/kmath.hpp"
#include "kernels/instantiate.hpp"

namespace trident {

template <class T>
void layernorm_forward(View2<T> out, View1<T> mean, View1<T> rstd, View2<const T> inp, View1<const T> weight,
                       View1<const T> bias) {
  const int C = static_cast<int>(inp.extent(1));
  const bool has_bias = bias.extent(0) > 0;
  Kokkos::parallel_for(
      "trident::layernorm_forward", Kokkos::RangePolicy<ExecSpace>(0, inp.extent(0)), KOKKOS_LAMBDA(const size_t n) {
        T m = 0;
        for (int c = 0; c < C; ++c) m += inp(n, c);
        m /= C;
        T v = 0;
        for (int c = 0; c < C; ++c) {
          const T d = inp(n, c) - m;
          v += d * d;
        }
        v /= C;
        const T s = T(1) / kmath::sqrt(v + T(1e-5));
        for (int c = 0; c < C; ++c) {
          const T y = (inp(n, c) - m) * s * weight(c);
          out(n, c) = has_bias ? y + bias(c) : y;
        }
        mean(n) = m;
        rstd(n) = s;
      });
}

template <class T>
void layernorm_backward(View2<T> dinp, View1<T> dweight, View1<T> dbias, View2<const T> dout, View2<const T> inp,
                        View1<const T> weight, View1<const T> mean, View1<const T> rstd) {
  const int C = static_cast<int>(inp.extent(1));
  const long N = static_cast<long>(inp.extent(0));
  Kokkos::parallel_for(
      "trident::layernorm_backward_dinp", Kokkos::RangePolicy<ExecSpace>(0, N), KOKKOS_LAMBDA(const long n) {
        const T m = mean(n), s = rstd(n);
        T dnorm_mean = 0, dnorm_norm_mean = 0;
        for (int c = 0; c < C; ++c) {
          const T xhat = (inp(n, c) - m) * s;
          const T dnorm = dout(n, c) * weight(c);
          dnorm_mean += dnorm;
          dnorm_norm_mean += dnorm * xhat;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        for (int c = 0; c < C; ++c) {
          const T xhat = (inp(n, c) - m) * s;
          const T dnorm = dout(n, c) * weight(c);
          dinp(n, c) += (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * s;
        }
      });
  const bool has_bias = dbias.extent(0) > 0;
  // Parameter gradients: one thread per channel sums the rows in order (deterministic).
  Kokkos::parallel_for(
      "trident::layernorm_backward_dweight", Kokkos::RangePolicy<ExecSpace>(0, C), KOKKOS_LAMBDA(const int c) {
        T dw = 0, db = 0;
        for (long n = 0; n < N; ++n) {
          dw += dout(n, c) * (inp(n, c) - mean(n)) * rstd(n);
          db += dout(n, c);
        }
        dweight(c) += dw;
        if (has_bias) dbias(c) += db;
      });
}

#define TRIDENT_INST(T)                                                                                         \
  template void layernorm_forward<T>(View2<T>, View1<T>, View1<T>, View2<const T>, View1<const T>,              \
                                     View1<const T>);                                                           \
  template void layernorm_backward<T>(View2<T>, View1<T>, View1<T>, View2<const T>, View2<const T>,             \
                                      View1<const T>, View1<const T>, View1<const T>);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
