// kernels/vmath.hpp: element-wise math over a contiguous host array, vectorised through glibc's
// vector math library (internal to the kernels layer; host code only).
//
// Layer: kernels. kernels/vmath.cpp is compiled with -ffast-math (GCC; src/CMakeLists.txt), as
// gelu.cpp is, so that GCC calls libmvec's expf/exp (<= 4 ulp) for whole vectors instead of the
// scalar function per element. The functions have no reductions: the flag changes no summation
// order. An element's result depends on that element and on the path that computed it: the loop
// body (16 lanes), an 8-lane epilogue or the scalar function for the last few elements of an
// array (within 4 ulp of each other). Callers whose arrays differ between layouts (a vocabulary
// shard, a slice of a tensor) pass whole, 64-byte aligned blocks of 16 so every element takes the
// loop body (cross_entropy.cpp, fill_normal's box_muller with blocks of 512).
#pragma once

#include <cstdint>

namespace trident::detail {

/// a[i] = exp(a[i] - shift) for i in [0, n). Local; host memory. Within 4 ulp of std::exp; a NaN
/// element stays NaN and -inf gives 0 (libmvec handles both at run time; the loop has nothing the
/// compiler could fold under -ffinite-math-only): unit_kernels' VectorExpMatchesStdExp checks this,
/// since a diverged run must still show its NaN loss.
void exp_shifted_inplace(float* a, std::int64_t n, float shift);
void exp_shifted_inplace(double* a, std::int64_t n, double shift);

/// z[i] = sqrt(-2 log u) cos(2 pi v), u = (a[i] + 1) / 2^32, v = (b[i] + 1) / 2^32, for i in
/// [0, n): core/rng.hpp's normal_from (Box-Muller, first output) through libmvec's double log and
/// cos (<= 4 ulp) instead of the scalar functions, about 4x faster (fill_normal on the host: the
/// initialisation of an 85M-parameter model). Local; host memory. unit_kernels'
/// VectorBoxMullerMatchesNormalFrom bounds the difference to normal_from.
void box_muller(double* z, const std::uint32_t* a, const std::uint32_t* b, std::int64_t n);

}  // namespace trident::detail
