#include "kernels/swiglu.hpp"

#include "core/kmath.hpp"
#include "kernels/instantiate.hpp"
#include "kernels/row_parallel.hpp"

namespace trident {

// On a device, short rows (kernels/row_parallel.hpp): a team thread per row, vector lanes over the
// F columns. On the host a thread per row and a loop over its columns through restrict pointers,
// which the compiler vectorises (with the vector exp of libmvec): through views or possibly
// aliasing pointers it stays scalar and 7x slower. No integer division per element either.
template <class T>
void swiglu_forward(View2<T> h, View2<const T> gu) {
  const int F = static_cast<int>(h.extent(1));
  const std::int64_t N = static_cast<std::int64_t>(h.extent(0));
  if constexpr (kKernelsOnHost) {
    Kokkos::parallel_for(
        "trident::swiglu_forward", Kokkos::RangePolicy<ExecSpace>(0, N), KOKKOS_LAMBDA(const std::int64_t r) {
          const T* __restrict__ g = &gu(r, 0);
          const T* __restrict__ u = g + F;
          T* __restrict__ o = &h(r, 0);
          for (int c = 0; c < F; ++c) o[c] = g[c] / (T(1) + kmath::exp(-g[c])) * u[c];
        });
    return;
  }
  Kokkos::parallel_for(
      "trident::swiglu_forward", short_row_policy(N), KOKKOS_LAMBDA(const TeamMember& team) {
        for_each_row(team, N, [&](const std::int64_t r) {
          const T* g = &gu(r, 0);
          const T* u = g + F;
          T* o = &h(r, 0);
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, F), [&](const int c) {
            o[c] = g[c] / (T(1) + kmath::exp(-g[c])) * u[c];
          });
        });
      });
}

template <class T>
void swiglu_backward(View2<T> dgu, View2<const T> dh, View2<const T> gu) {
  const int F = static_cast<int>(dh.extent(1));
  const std::int64_t N = static_cast<std::int64_t>(dh.extent(0));
  if constexpr (kKernelsOnHost) {
    Kokkos::parallel_for(
        "trident::swiglu_backward", Kokkos::RangePolicy<ExecSpace>(0, N), KOKKOS_LAMBDA(const std::int64_t r) {
          const T* __restrict__ g = &gu(r, 0);
          const T* __restrict__ u = g + F;
          const T* __restrict__ d = &dh(r, 0);
          T* __restrict__ dg = &dgu(r, 0);
          T* __restrict__ du = dg + F;
          for (int c = 0; c < F; ++c) {
            const T sig = T(1) / (T(1) + kmath::exp(-g[c]));
            dg[c] = d[c] * u[c] * sig * (T(1) + g[c] * (T(1) - sig));
            du[c] = d[c] * g[c] * sig;
          }
        });
    return;
  }
  Kokkos::parallel_for(
      "trident::swiglu_backward", short_row_policy(N), KOKKOS_LAMBDA(const TeamMember& team) {
        for_each_row(team, N, [&](const std::int64_t r) {
          const T* g = &gu(r, 0);
          const T* u = g + F;
          const T* d = &dh(r, 0);
          T* dg = &dgu(r, 0);
          T* du = dg + F;
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, F), [&](const int c) {
            const T sig = T(1) / (T(1) + kmath::exp(-g[c]));
            dg[c] = d[c] * u[c] * sig * (T(1) + g[c] * (T(1) - sig));
            du[c] = d[c] * g[c] * sig;
          });
        });
      });
}

#define TRIDENT_INST(T)                                                      \
  template void swiglu_forward<T>(View2<T>, View2<const T>);                 \
  template void swiglu_backward<T>(View2<T>, View2<const T>, View2<const T>);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
