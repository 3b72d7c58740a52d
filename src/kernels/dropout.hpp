// kernels/dropout.hpp: counter-based dropout masks (Srivastava et al. 2014, inverted dropout).
//
// Layer: kernels. A mask bit is a pure function of (seed, site, step, global element index),
// computed again in backward instead of being stored, and identical for any dp/tp layout because
// the index is global (global sample index, global head, position, channel).
#pragma once

#include "core/rng.hpp"

#include <cstdint>

namespace trident {

/// Where and when a dropout mask is drawn. p == 0 disables dropout (evaluation, or dropout off).
struct DropoutKey {
  std::uint64_t seed = 0;
  std::uint32_t site = 0;   ///< which dropout in the network (layer * 8 + kind)
  std::uint32_t step = 0;   ///< optimizer step (masks change every step)
  std::uint64_t offset = 0; ///< global element index of element 0 of the tensor
  double p = 0.0;           ///< drop probability

  /// True when element `i` (relative to offset) is kept. Device-safe, local.
  KOKKOS_INLINE_FUNCTION bool keep(std::uint64_t i) const { return keep_at(offset + i); }
  /// True when the element with absolute global index `idx` is kept (offset ignored).
  KOKKOS_INLINE_FUNCTION bool keep_at(std::uint64_t idx) const {
    const std::uint64_t q = idx >> 2;
    auto r = philox4(lo32(seed), hi32(seed) ^ site, lo32(q), hi32(q), step, 0x0D0D0D0Du);
    const std::uint32_t w = r.v[idx & 3u];
    return (static_cast<double>(w) + 0.5) * (1.0 / 4294967296.0) >= p;
  }
  /// 1/(1-p): the inverted-dropout scale of kept elements.
  KOKKOS_INLINE_FUNCTION double scale() const { return 1.0 / (1.0 - p); }
  bool active() const { return p > 0.0; }
};

}  // namespace trident
