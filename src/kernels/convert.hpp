// kernels/convert.hpp: bfloat16 storage (the upper 16 bits of an IEEE float) and conversions.
//
// Layer: kernels. Local. Mixed precision in Trident keeps bf16 as a *storage and communication*
// format only: working parameters are stored, gathered and (optionally) reduced in bf16, and
// converted to the compute type at kernel boundaries, so the same kernels run everywhere
// (Micikevicius et al. 2018, "Mixed precision training", sec. 3: fp32 master weights).
// Rounding is to nearest, ties to even, as PyTorch's float -> bfloat16 cast; NaN stays NaN.
#pragma once

#include "core/types.hpp"

#include <cstdint>

namespace trident {

using bf16_t = std::uint16_t;

/// float -> bf16, round to nearest even. Device-safe.
KOKKOS_INLINE_FUNCTION bf16_t to_bf16(float f) {
  union {
    float f;
    std::uint32_t u;
  } v{f};
  if ((v.u & 0x7f800000u) == 0x7f800000u && (v.u & 0x007fffffu) != 0) return static_cast<bf16_t>((v.u >> 16) | 0x40u);
  v.u += 0x7fffu + ((v.u >> 16) & 1u);
  return static_cast<bf16_t>(v.u >> 16);
}

/// bf16 -> float (exact). Device-safe.
KOKKOS_INLINE_FUNCTION float from_bf16(bf16_t h) {
  union {
    std::uint32_t u;
    float f;
  } v{static_cast<std::uint32_t>(h) << 16};
  return v.f;
}

/// out[i] = bf16(in[i]).
template <class T>
void convert_to_bf16(View1<bf16_t> out, View1<const T> in);
/// out[i] = T(in[i]).
template <class T>
void convert_from_bf16(View1<T> out, View1<const bf16_t> in);
/// x[i] = T(bf16(x[i])): what a value looks like after a round trip through bf16 storage.
template <class T>
void round_through_bf16(View1<T> x);

}  // namespace trident
