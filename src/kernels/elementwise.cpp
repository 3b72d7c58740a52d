#include "kernels/elementwise.hpp"

#include "kernels/instantiate.hpp"
#include "kernels/vmath.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace trident {

template <class T>
void residual_forward(View1<T> out, View1<const T> a, View1<const T> b) {
  Kokkos::parallel_for(
      "trident::residual_forward", Kokkos::RangePolicy<ExecSpace>(0, out.extent(0)),
      KOKKOS_LAMBDA(const size_t i) { out(i) = a(i) + b(i); });
}

template <class T>
void dropout_apply(View1<T> x, const DropoutKey& key) {
  if (!key.active()) return;
  const T s = static_cast<T>(key.scale());
  Kokkos::parallel_for(
      "trident::dropout_apply", Kokkos::RangePolicy<ExecSpace>(0, x.extent(0)),
      KOKKOS_LAMBDA(const size_t i) { x(i) = key.keep(i) ? x(i) * s : T(0); });
}

template <class T>
void accumulate(View1<T> y, View1<const T> x) {
  Kokkos::parallel_for(
      "trident::accumulate", Kokkos::RangePolicy<ExecSpace>(0, y.extent(0)),
      KOKKOS_LAMBDA(const size_t i) { y(i) += x(i); });
}

template <class T>
void scale(View1<T> x, T s) {
  Kokkos::parallel_for(
      "trident::scale", Kokkos::RangePolicy<ExecSpace>(0, x.extent(0)), KOKKOS_LAMBDA(const size_t i) { x(i) *= s; });
}

template <class T>
void fill(View1<T> x, T value) {
  Kokkos::parallel_for(
      "trident::fill", Kokkos::RangePolicy<ExecSpace>(0, x.extent(0)), KOKKOS_LAMBDA(const size_t i) { x(i) = value; });
}

template <class T>
double sum_squares(View1<const T> x) {
  // Each work item sums a block of 256 elements in 16 independent double lanes (vectorisable,
  // fixed order), so the result is deterministic and as fast as the memory allows.
  constexpr long kBlock = 256, kLanes = 16;
  const long n = static_cast<long>(x.extent(0)), blocks = (n + kBlock - 1) / kBlock;
  double s = 0.0;
  Kokkos::parallel_reduce(
      "trident::sum_squares", Kokkos::RangePolicy<ExecSpace>(0, blocks),
      KOKKOS_LAMBDA(const long blk, double& acc) {
        const long b = blk * kBlock, e = b + kBlock < n ? b + kBlock : n;
        const T* p = x.data();
        double lane[kLanes] = {};
        long i = b;
        for (; i + kLanes <= e; i += kLanes)
          for (long l = 0; l < kLanes; ++l) {
            const double v = static_cast<double>(p[i + l]);
            lane[l] += v * v;
          }
        for (; i < e; ++i) lane[0] += static_cast<double>(p[i]) * static_cast<double>(p[i]);
        double t = 0.0;
        for (long l = 0; l < kLanes; ++l) t += lane[l];
        acc += t;
      },
      s);
  return s;
}

template <class T>
bool all_finite(View1<const T> x) {
  int bad = 0;
  Kokkos::parallel_reduce(
      "trident::all_finite", Kokkos::RangePolicy<ExecSpace>(0, x.extent(0)),
      KOKKOS_LAMBDA(const size_t i, int& acc) {
        const T v = x(i);
        acc += (v - v == T(0)) ? 0 : 1;  // inf - inf and nan - nan are nan
      },
      bad);
  return bad == 0;
}

template <class T>
void fill_normal(View1<T> x, std::uint64_t seed, std::uint32_t stream, std::uint64_t offset, double stddev) {
  if constexpr (std::is_same_v<MemSpace, Kokkos::HostSpace>) {
    // Host: the same Philox words, Box-Muller over blocks through the vector math library. Every
    // block is a whole one (the last one's words past n are drawn and dropped), so every element
    // goes through the same vectorised loop body whatever the split of a tensor into shards: its
    // value depends on (seed, stream, offset + i) only.
    constexpr std::int64_t kBlock = 512;
    alignas(64) std::uint32_t a[kBlock], b[kBlock];  // aligned: no scalar peel before the vector body
    alignas(64) double z[kBlock];
    const auto n = static_cast<std::int64_t>(x.extent(0));
    for (std::int64_t i0 = 0; i0 < n; i0 += kBlock) {
      const std::int64_t m = std::min(kBlock, n - i0);
      for (std::int64_t j = 0; j < kBlock; ++j) {
        const std::uint64_t idx = offset + static_cast<std::uint64_t>(i0 + j);
        const auto r = philox4(lo32(seed), hi32(seed) ^ stream, lo32(idx), hi32(idx), 0x1A1A1A1Au, 0u);
        a[j] = r.v[0];
        b[j] = r.v[1];
      }
      detail::box_muller(z, a, b, kBlock);
      for (std::int64_t j = 0; j < m; ++j) x(static_cast<size_t>(i0 + j)) = static_cast<T>(stddev * z[j]);
    }
    return;
  }
  Kokkos::parallel_for(
      "trident::fill_normal", Kokkos::RangePolicy<ExecSpace>(0, x.extent(0)), KOKKOS_LAMBDA(const size_t i) {
        const std::uint64_t idx = offset + i;
        auto r = philox4(lo32(seed), hi32(seed) ^ stream, lo32(idx), hi32(idx), 0x1A1A1A1Au, 0u);
        x(i) = static_cast<T>(stddev * normal_from(r.v[0], r.v[1]));
      });
}

#define TRIDENT_INST(T)                                                               \
  template void residual_forward<T>(View1<T>, View1<const T>, View1<const T>);        \
  template void dropout_apply<T>(View1<T>, const DropoutKey&);                        \
  template void accumulate<T>(View1<T>, View1<const T>);                              \
  template void scale<T>(View1<T>, T);                                                \
  template void fill<T>(View1<T>, T);                                                 \
  template double sum_squares<T>(View1<const T>);                                     \
  template bool all_finite<T>(View1<const T>);                                        \
  template void fill_normal<T>(View1<T>, std::uint64_t, std::uint32_t, std::uint64_t, double);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
