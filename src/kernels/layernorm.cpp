#include "kernels/layernorm.hpp"

#include "core/kmath.hpp"
#include "kernels/instantiate.hpp"
#include "kernels/row_parallel.hpp"

namespace trident {

// Forward and the input gradient are short-row kernels (kernels/row_parallel.hpp): a team thread
// per row, its vector lanes over the C channels, so a GPU warp reads a row's consecutive floats and
// reduces the row's mean, variance and backward dot products by a shuffle tree. The expressions
// are those of the former one-thread-per-row loops; on the host they run in the same order.
template <class T>
void layernorm_forward(View2<T> out, View1<T> mean, View1<T> rstd, View2<const T> inp, View1<const T> weight,
                       View1<const T> bias) {
  const int C = static_cast<int>(inp.extent(1));
  const std::int64_t N = static_cast<std::int64_t>(inp.extent(0));
  const bool has_bias = bias.extent(0) > 0;
  Kokkos::parallel_for(
      "trident::layernorm_forward", short_row_policy(N), KOKKOS_LAMBDA(const TeamMember& team) {
        for_each_row(team, N, [&](const std::int64_t n) {
          T m;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, C), [&](const int c, T& acc) { acc += inp(n, c); }, m);
          m /= C;
          T v;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, C),
              [&](const int c, T& acc) {
                const T d = inp(n, c) - m;
                acc += d * d;
              },
              v);
          v /= C;
          const T s = T(1) / kmath::sqrt(v + T(1e-5));
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, C), [&](const int c) {
            const T y = (inp(n, c) - m) * s * weight(c);
            out(n, c) = has_bias ? y + bias(c) : y;
          });
          Kokkos::single(Kokkos::PerThread(team), [&] {
            mean(n) = m;
            rstd(n) = s;
          });
        });
      });
}

template <class T>
void layernorm_backward(View2<T> dinp, View1<T> dweight, View1<T> dbias, View2<const T> dout, View2<const T> inp,
                        View1<const T> weight, View1<const T> mean, View1<const T> rstd) {
  const int C = static_cast<int>(inp.extent(1));
  const std::int64_t N = static_cast<std::int64_t>(inp.extent(0));
  Kokkos::parallel_for(
      "trident::layernorm_backward_dinp", short_row_policy(N), KOKKOS_LAMBDA(const TeamMember& team) {
        for_each_row(team, N, [&](const std::int64_t n) {
          const T m = mean(n), s = rstd(n);
          // Both row means in one pass (one shuffle tree for the pair on a GPU).
          SumPair<T> sums;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, C),
              [&](const int c, SumPair<T>& acc) {
                const T xhat = (inp(n, c) - m) * s;
                const T dnorm = dout(n, c) * weight(c);
                acc.a += dnorm;
                acc.b += dnorm * xhat;
              },
              sums);
          const T dnorm_mean = sums.a / C, dnorm_norm_mean = sums.b / C;
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, C), [&](const int c) {
            const T xhat = (inp(n, c) - m) * s;
            const T dnorm = dout(n, c) * weight(c);
            dinp(n, c) += (dnorm - dnorm_mean - xhat * dnorm_norm_mean) * s;
          });
        });
      });
  // Parameter gradients sum over the N rows: a column reduction (a team per block of channels,
  // its threads over rows, partials added in thread order: deterministic, no atomics).
  const bool has_bias = dbias.extent(0) > 0;
  column_sums<SumPair<T>>(
      "trident::layernorm_backward_dweight", C,
      KOKKOS_LAMBDA(const int c, const std::int64_t first, const std::int64_t stride) {
        T dw = 0, db = 0;
        for (std::int64_t n = first; n < N; n += stride) {
          dw += dout(n, c) * (inp(n, c) - mean(n)) * rstd(n);
          db += dout(n, c);
        }
        return SumPair<T>{dw, db};
      },
      KOKKOS_LAMBDA(const int c, const SumPair<T>& sum) {
        dweight(c) += sum.a;
        if (has_bias) dbias(c) += sum.b;
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
