// core/rng.hpp: counter-based random numbers (Random123 Philox-4x32-10).
//
// Layer: core (std + Kokkos + the header-only Random123 library).
// Every random number in Trident is a pure function of (seed, stream, counter): parameter
// initialisation is keyed by (seed, tensor name hash, global element index), dropout by
// (seed, step, site, global element index), data order by (seed, global sample index). Nothing
// depends on the number of ranks, and there is no RNG state to carry across a restart or a
// layout change (docs/design.md, "Randomness keyed by global indices").
// Source: Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11.
#pragma once

#include "core/kmath.hpp"

#include <Kokkos_Core.hpp>
#include <Random123/philox.h>

#include <cmath>
#include <cstdint>
#include <string>

namespace trident {

/// Four 32-bit random words for counter (c0, c1, c2, c3) under key (k0, k1). Local, device-safe.
KOKKOS_INLINE_FUNCTION r123::Philox4x32::ctr_type philox4(std::uint32_t k0, std::uint32_t k1, std::uint32_t c0,
                                                         std::uint32_t c1, std::uint32_t c2, std::uint32_t c3) {
  r123::Philox4x32 rng;
  r123::Philox4x32::ctr_type ctr = {{c0, c1, c2, c3}};
  r123::Philox4x32::key_type key = {{k0, k1}};
  return rng(ctr, key);
}

/// Uniform float in (0, 1] from 32 random bits (never 0, so log() is safe).
KOKKOS_INLINE_FUNCTION double u01_open0(std::uint32_t x) { return (static_cast<double>(x) + 1.0) * (1.0 / 4294967296.0); }

/// Standard normal from two uniform words (Box-Muller, first output). Local, device-safe.
KOKKOS_INLINE_FUNCTION double normal_from(std::uint32_t a, std::uint32_t b) {
  const double u1 = u01_open0(a);
  const double u2 = u01_open0(b);
  return kmath::sqrt(-2.0 * kmath::log(u1)) * kmath::cos(6.283185307179586476925 * u2);
}

/// 32-bit FNV-1a hash of a string: the stable stream id of a named tensor, so adding a tensor
/// never changes how another one is initialised.
inline std::uint32_t stream_id(const std::string& s) {
  std::uint32_t h = 2166136261u;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 16777619u;
  }
  return h;
}

/// Splits a 64-bit value into the low and high 32-bit words of a Philox counter or key.
KOKKOS_INLINE_FUNCTION std::uint32_t lo32(std::uint64_t v) { return static_cast<std::uint32_t>(v & 0xffffffffu); }
KOKKOS_INLINE_FUNCTION std::uint32_t hi32(std::uint64_t v) { return static_cast<std::uint32_t>(v >> 32); }

}  // namespace trident
