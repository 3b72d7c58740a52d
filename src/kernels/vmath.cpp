// kernels/vmath.cpp: see kernels/vmath.hpp (compiled with -ffast-math on GCC).
#include "kernels/vmath.hpp"

#include <cmath>

namespace trident::detail {

void exp_shifted_inplace(float* a, std::int64_t n, float shift) {
  for (std::int64_t i = 0; i < n; ++i) a[i] = std::exp(a[i] - shift);
}

void exp_shifted_inplace(double* a, std::int64_t n, double shift) {
  for (std::int64_t i = 0; i < n; ++i) a[i] = std::exp(a[i] - shift);
}

void box_muller(double* z, const std::uint32_t* a, const std::uint32_t* b, std::int64_t n) {
  constexpr double kScale = 1.0 / 4294967296.0, kTwoPi = 6.283185307179586476925;
  for (std::int64_t i = 0; i < n; ++i) {
    const double u = (static_cast<double>(a[i]) + 1.0) * kScale, v = (static_cast<double>(b[i]) + 1.0) * kScale;
    z[i] = std::sqrt(-2.0 * std::log(u)) * std::cos(kTwoPi * v);
  }
}

}  // namespace trident::detail
