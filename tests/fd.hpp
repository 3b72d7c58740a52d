// tests/fd.hpp: finite-difference oracle for backward passes, in double.
// Central differences with step h = 1e-6 have truncation error O(h^2 |f'''|) ~ 1e-12 and
// rounding error O(eps |f| / h) ~ 1e-10 for the O(1) objectives used here, so analytic and
// numerical gradients must agree to ~1e-7 absolute; the tests use 1e-6 relative-or-absolute.
#pragma once

#include "core/types.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace trident::test {

/// Host buffer of doubles, filled with N(0, scale) from a fixed seed.
inline Buffer<double> random_buffer(std::int64_t n, std::uint32_t seed, double scale = 1.0) {
  Buffer<double> b("test", static_cast<size_t>(n));
  std::mt19937 gen(seed);
  std::normal_distribution<double> d(0.0, scale);
  for (std::int64_t i = 0; i < n; ++i) b(i) = d(gen);
  return b;
}

inline View1<double> v1(const Buffer<double>& b) { return View1<double>(b.data(), b.extent(0)); }
inline View2<double> v2(const Buffer<double>& b, std::int64_t rows, std::int64_t cols) {
  return as_matrix(b.data(), rows, cols);
}

/// Compares grad[i] with the central difference of loss() wrt x[i] for every i (or `max_checks`
/// evenly spaced elements). |analytic - numeric| <= tol * max(1, |numeric|).
inline void expect_gradient(const std::string& what, double* x, const double* grad, std::int64_t n,
                            const std::function<double()>& loss, double tol = 1e-6, std::int64_t max_checks = 1 << 30) {
  const double h = 1e-6;
  const std::int64_t stride = n > max_checks ? n / max_checks : 1;
  int failures = 0;
  for (std::int64_t i = 0; i < n; i += stride) {
    const double saved = x[i];
    x[i] = saved + h;
    const double lp = loss();
    x[i] = saved - h;
    const double lm = loss();
    x[i] = saved;
    const double num = (lp - lm) / (2 * h);
    if (std::fabs(grad[i] - num) > tol * std::max(1.0, std::fabs(num)) && failures++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: analytic " << grad[i] << " vs finite difference " << num;
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " elements disagree";
}

}  // namespace trident::test
