#include "kernels/rope.hpp"

#include "core/kmath.hpp"
#include "kernels/instantiate.hpp"

#include <cmath>

namespace trident {

template <class T>
void rope_table(View1<T> table, int seq_len, int HS, double theta) {
  const int half = HS / 2;
  const std::int64_t n = static_cast<std::int64_t>(seq_len) * half;
  const double log_theta = std::log(theta);
  Kokkos::parallel_for(
      "trident::rope_table", Kokkos::RangePolicy<ExecSpace>(0, n), KOKKOS_LAMBDA(const std::int64_t j) {
        const int k = static_cast<int>(j % half);
        const double angle = static_cast<double>(j / half) * kmath::exp(-log_theta * (2.0 * k) / HS);
        table(j) = static_cast<T>(kmath::cos(angle));
        table(n + j) = static_cast<T>(kmath::sin(angle));
      });
}

namespace {
/// (row, head, pair) as a 3-D range (no integer division per element): sign +1 forward, -1 backward.
template <class T>
void rope_apply(View2<T> x, View1<const T> table, int seq_len, int n_heads, int HS, T sign) {
  const int half = HS / 2;
  const std::int64_t rows = static_cast<std::int64_t>(x.extent(0)), n = static_cast<std::int64_t>(seq_len) * half;
  Kokkos::parallel_for(
      "trident::rope",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>({0, 0, 0}, {rows, static_cast<std::int64_t>(n_heads),
                                                                    static_cast<std::int64_t>(half)}),
      KOKKOS_LAMBDA(const std::int64_t row, const std::int64_t h, const std::int64_t k) {
        const std::int64_t j = (row % seq_len) * half + k;
        const T c = table(j), s = sign * table(n + j);
        T& a = x(row, h * HS + k);
        T& b = x(row, h * HS + k + half);
        const T x1 = a, x2 = b;
        a = x1 * c - x2 * s;
        b = x2 * c + x1 * s;
      });
}
}  // namespace

template <class T>
void rope_forward(View2<T> x, View1<const T> table, int seq_len, int n_heads, int head_size) {
  rope_apply<T>(x, table, seq_len, n_heads, head_size, T(1));
}

template <class T>
void rope_backward(View2<T> dx, View1<const T> table, int seq_len, int n_heads, int head_size) {
  rope_apply<T>(dx, table, seq_len, n_heads, head_size, T(-1));
}

#define TRIDENT_INST(T)                                                               \
  template void rope_table<T>(View1<T>, int, int, double);                            \
  template void rope_forward<T>(View2<T>, View1<const T>, int, int, int);             \
  template void rope_backward<T>(View2<T>, View1<const T>, int, int, int);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
