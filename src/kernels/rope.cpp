#include "kernels/rope.hpp"

#include "core/kmath.hpp"
#include "kernels/instantiate.hpp"

#include <cmath>

namespace trident {

namespace {
/// One work item per (row, head, pair): sign = +1 forward, -1 backward. The angle is computed in
/// double (positions up to 2^20 times a frequency keep ~1e-10 absolute error), then rounded to T.
template <class T>
void rope_apply(View2<T> x, int seq_len, int n_heads, int HS, double theta, double sign) {
  const int half = HS / 2;
  const std::int64_t n = static_cast<std::int64_t>(x.extent(0)) * n_heads * half;
  const double log_theta = std::log(theta);
  Kokkos::parallel_for(
      "trident::rope", Kokkos::RangePolicy<ExecSpace>(0, n), KOKKOS_LAMBDA(const std::int64_t i) {
        const int k = static_cast<int>(i % half);
        const std::int64_t rh = i / half;
        const int h = static_cast<int>(rh % n_heads);
        const std::int64_t row = rh / n_heads;
        const double pos = static_cast<double>(row % seq_len);
        const double angle = pos * kmath::exp(-log_theta * (2.0 * k) / HS);
        const T c = static_cast<T>(kmath::cos(angle)), s = static_cast<T>(sign * kmath::sin(angle));
        T& a = x(row, h * HS + k);
        T& b = x(row, h * HS + k + half);
        const T x1 = a, x2 = b;
        a = x1 * c - x2 * s;
        b = x2 * c + x1 * s;
      });
}
}  // namespace

template <class T>
void rope_forward(View2<T> x, int seq_len, int n_heads, int head_size, double theta) {
  rope_apply<T>(x, seq_len, n_heads, head_size, theta, 1.0);
}

template <class T>
void rope_backward(View2<T> dx, int seq_len, int n_heads, int head_size, double theta) {
  rope_apply<T>(dx, seq_len, n_heads, head_size, theta, -1.0);
}

#define TRIDENT_INST(T)                                                  \
  template void rope_forward<T>(View2<T>, int, int, int, double);        \
  template void rope_backward<T>(View2<T>, int, int, int, double);
TRIDENT_INSTANTIATE_FLOATING(TRIDENT_INST)
#undef TRIDENT_INST

}  // namespace trident
