// tests/fd.hpp: finite-difference oracle for backward passes, in double, and the host <-> device
// helpers of the kernel and model tests.
// Central differences with step h = 1e-6 have truncation error O(h^2 |f'''|) ~ 1e-12 and
// rounding error O(eps |f| / h) ~ 1e-10 for the O(1) objectives used here, so analytic and
// numerical gradients must agree to ~1e-7 absolute; the tests use 1e-6 relative-or-absolute.
//
// One test body, every backend: test data lives in device views (Buffer, View1), as in training;
// the host fills and inspects it only through host mirrors and deep_copy (host(), device_array(),
// random_buffer()). On a host build the mirrors are the views themselves, so nothing is copied.
#pragma once

#include "core/host_copy.hpp"
#include "core/types.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace trident::test {

/// Host view of a device buffer's current contents (a copy on a device, the buffer itself on the host).
template <class V>
auto host(const V& v) {
  return Kokkos::create_mirror_view_and_copy(HostSpace(), v);
}

/// Device buffer holding `values`.
template <class T>
Buffer<T> device_array(const std::vector<T>& values, const std::string& label = "test") {
  Buffer<T> b(label, values.size());
  copy_to_device(View1<T>(b.data(), b.extent(0)), values.data());
  return b;
}

/// Device buffer of doubles, filled with N(0, scale) from a fixed seed (drawn on the host).
inline Buffer<double> random_buffer(std::int64_t n, std::uint32_t seed, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(n));
  std::mt19937 gen(seed);
  std::normal_distribution<double> d(0.0, scale);
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = d(gen);
  return device_array(v);
}

template <class T>
View1<T> v1(const Buffer<T>& b) {
  return View1<T>(b.data(), b.extent(0));
}
template <class T>
View2<T> v2(const Buffer<T>& b, std::int64_t rows, std::int64_t cols) {
  return as_matrix(b.data(), rows, cols);
}

/// Compares grad[i] with the central difference of loss() wrt x[i] for every i (or `max_checks`
/// evenly spaced elements). |analytic - numeric| <= tol * max(1, |numeric|). x and grad are
/// device views; loss() runs the kernels on x and returns a host scalar.
inline void expect_gradient(const std::string& what, View1<double> x, View1<const double> grad,
                            const std::function<double()>& loss, double tol = 1e-6, std::int64_t max_checks = 1 << 30) {
  const double h = 1e-6;
  const auto n = static_cast<std::int64_t>(x.extent(0));
  const std::vector<double> x0 = to_host_vector(x), g = to_host_vector(grad);
  auto set = [&](std::int64_t i, double v) { Kokkos::deep_copy(Kokkos::subview(x, static_cast<size_t>(i)), v); };
  const std::int64_t stride = n > max_checks ? n / max_checks : 1;
  int failures = 0;
  for (std::int64_t i = 0; i < n; i += stride) {
    const double saved = x0[static_cast<size_t>(i)], gi = g[static_cast<size_t>(i)];
    set(i, saved + h);
    const double lp = loss();
    set(i, saved - h);
    const double lm = loss();
    set(i, saved);
    const double num = (lp - lm) / (2 * h);
    if (std::fabs(gi - num) > tol * std::max(1.0, std::fabs(num)) && failures++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: analytic " << gi << " vs finite difference " << num;
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " elements disagree";
}

}  // namespace trident::test
