#include "kernels/rmsnorm.hpp"

#include "core/kmath.hpp"
#include "kernels/instantiate.hpp"
#include "kernels/row_parallel.hpp"

namespace trident {

// Short-row kernels as layernorm.cpp: a team thread per row, vector lanes over the C channels.
template <class T>
void rmsnorm_forward(View2<T> out, View1<T> rstd, View2<const T> inp, View1<const T> weight, double eps) {
  const int C = static_cast<int>(inp.extent(1));
  const std::int64_t N = static_cast<std::int64_t>(inp.extent(0));
  const T e = static_cast<T>(eps);
  Kokkos::parallel_for(
      "trident::rmsnorm_forward", short_row_policy(N), KOKKOS_LAMBDA(const TeamMember& team) {
        for_each_row(team, N, [&](const std::int64_t n) {
          T ss;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, C), [&](const int c, T& acc) { acc += inp(n, c) * inp(n, c); }, ss);
          const T s = T(1) / kmath::sqrt(ss / C + e);
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, C),
                               [&](const int c) { out(n, c) = inp(n, c) * s * weight(c); });
          Kokkos::single(Kokkos::PerThread(team), [&] { rstd(n) = s; });
        });
      });
}

template <class T>
void rmsnorm_backward(View2<T> dinp, View1<T> dweight, View2<const T> dout, View2<const T> inp, View1<const T> weight,
                      View1<const T> rstd) {
  const int C = static_cast<int>(inp.extent(1));
  const std::int64_t N = static_cast<std::int64_t>(inp.extent(0));
  Kokkos::parallel_for(
      "trident::rmsnorm_backward_dinp", short_row_policy(N), KOKKOS_LAMBDA(const TeamMember& team) {
        for_each_row(team, N, [&](const std::int64_t n) {
          const T s = rstd(n);
          T dot;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, C),
              [&](const int c, T& acc) { acc += dout(n, c) * weight(c) * inp(n, c) * s; }, dot);
          const T m = dot / C;
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, C), [&](const int c) {
            dinp(n, c) += s * (dout(n, c) * weight(c) - inp(n, c) * s * m);
          });
        });
      });
  // dweight: a deterministic column reduction over rows (no atomics), as layernorm_backward.
  column_sums<SumPair<T>>(
      "trident::rmsnorm_backward_dweight", C,
      KOKKOS_LAMBDA(const int c, const std::int64_t first, const std::int64_t stride) {
        T dw = 0;
        for (std::int64_t n = first; n < N; n += stride) dw += dout(n, c) * inp(n, c) * rstd(n);
        return SumPair<T>{dw, T(0)};
      },
      KOKKOS_LAMBDA(const int c, const SumPair<T>& sum) { dweight(c) += sum.a; });
}

#define TRIDENT_INST(T)                                                                                     \
  template void rmsnorm_forward<T>(View2<T>, View1<T>, View2<const T>, View1<const T>, double);            \
  template void rmsnorm_backward<T>(View2<T>, View1<T>, View2<const T>, View2<const T>, View1<const T>,    \
                                    View1<const T>);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
