// kernels/elementwise.hpp: element-wise and reduction kernels (residual add, dropout, scaling,
// norms, initialisation).
//
// Layer: kernels (Kokkos only, no MPI, no allocation). All functions are Local.
// Shapes are flat: n = extent of the views, which must match where two views are given.
#pragma once

#include "core/types.hpp"
#include "kernels/dropout.hpp"

namespace trident {

/// out = a + b (the residual connection). out may alias a or b.
template <class T>
void residual_forward(View1<T> out, View1<const T> a, View1<const T> b);

/// x = x * keep(i) / (1 - p), in place (inverted dropout forward and backward are the same map).
template <class T>
void dropout_apply(View1<T> x, const DropoutKey& key);

/// y += x.
template <class T>
void accumulate(View1<T> y, View1<const T> x);

/// x *= s.
template <class T>
void scale(View1<T> x, T s);

/// x = value.
template <class T>
void fill(View1<T> x, T value);

/// Sum of squares of x, accumulated in double.
template <class T>
double sum_squares(View1<const T> x);

/// True when every element of x is finite.
template <class T>
bool all_finite(View1<const T> x);

/// x[i] = stddev * N(0,1) drawn from Philox keyed by (seed, stream) at counter (offset + i):
/// the value of a global element does not depend on how the tensor is split.
template <class T>
void fill_normal(View1<T> x, std::uint64_t seed, std::uint32_t stream, std::uint64_t offset, double stddev);

}  // namespace trident
