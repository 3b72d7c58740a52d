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

}  // namespace trident::detail
