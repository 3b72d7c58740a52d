// kernels/convert.hpp: 16-bit floating-point storage -- bfloat16 (the upper 16 bits of an IEEE
// float) and IEEE 754 binary16 ("fp16", "half": 1 sign, 5 exponent, 10 mantissa bits) -- and
// conversions.
//
// Layer: kernels. Local. Mixed precision in Trident keeps bf16 and fp16 as *storage and
// communication* formats only: working parameters are stored, gathered and (optionally) reduced
// in 16 bits, and converted to the compute type at kernel boundaries, so the same kernels run
// everywhere (Micikevicius et al. 2018, "Mixed precision training", sec. 3: fp32 master weights).
// Rounding is to nearest, ties to even, as PyTorch's float -> bfloat16 / float16 casts; NaN stays
// NaN. fp16 specifics (IEEE 754-2008 sec. 4.3.1 and 7.4): |x| >= 65520 (half-way between the
// largest half, 65504, and 2^16) overflows to +-inf; magnitudes below 2^-14 become subnormals
// (steps of 2^-24), and below 2^-25 zero; every NaN becomes the quiet NaN 0x7e00 with its sign.
#pragma once

#include "core/types.hpp"

#include <cstdint>

namespace trident {

using bf16_t = std::uint16_t;
/// IEEE binary16 bits (the same storage type as bf16_t: which one a buffer holds is HalfFormat's).
using fp16_t = std::uint16_t;

/// Which 16-bit format a uint16 buffer holds.
enum class HalfFormat { bf16, fp16 };

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

/// float -> fp16, round to nearest even; overflow to inf, subnormals kept, NaN -> quiet NaN.
/// Device-safe. After F. Giesen's float_to_half_fast3_rtne (public domain,
/// https://gist.github.com/rygorous/2156668): subnormal results are aligned by adding 0.5 in float
/// arithmetic, whose own round-to-nearest-even does the rounding (no flush-to-zero assumed);
/// normal ones by an integer rounding bias.
KOKKOS_INLINE_FUNCTION fp16_t to_fp16(float f) {
  union {
    float f;
    std::uint32_t u;
  } v{f};
  const std::uint32_t sign = v.u & 0x80000000u;
  v.u ^= sign;
  std::uint32_t o;
  if (v.u >= (127u + 16u) << 23) {                          // |x| >= 2^16, inf or NaN
    o = v.u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (v.u < (113u << 23)) {                          // |x| < 2^-14: subnormal or zero
    union {
      std::uint32_t u;
      float f;
    } magic{((127u - 15u) + (23u - 10u) + 1u) << 23};       // 0.5: its ulp is 2^-24
    v.f += magic.f;
    o = v.u - magic.u;
  } else {
    const std::uint32_t mant_odd = (v.u >> 13) & 1u;
    v.u += ((15u - 127u) << 23) + 0xfffu;                   // rebias exponent, half the rounding bias
    v.u += mant_odd;                                        // ties to even
    o = v.u >> 13;                                          // a carry into exponent 31 gives inf
  }
  return static_cast<fp16_t>(o | (sign >> 16));
}

/// fp16 -> float (exact, subnormals included). Device-safe. After F. Giesen's half_to_float.
KOKKOS_INLINE_FUNCTION float from_fp16(fp16_t h) {
  union {
    std::uint32_t u;
    float f;
  } o{(static_cast<std::uint32_t>(h) & 0x7fffu) << 13};
  const std::uint32_t shifted_exp = 0x7c00u << 13;
  const std::uint32_t exp = shifted_exp & o.u;
  o.u += (127u - 15u) << 23;
  if (exp == shifted_exp) {  // inf or NaN
    o.u += (128u - 16u) << 23;
  } else if (exp == 0) {     // zero or subnormal: renormalise in float
    union {
      std::uint32_t u;
      float f;
    } magic{113u << 23};
    o.u += 1u << 23;
    o.f -= magic.f;
  }
  o.u |= (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  return o.f;
}

/// float -> the 16-bit format `fmt`. Device-safe.
KOKKOS_INLINE_FUNCTION std::uint16_t to_half(HalfFormat fmt, float f) {
  return fmt == HalfFormat::fp16 ? to_fp16(f) : to_bf16(f);
}
/// The 16-bit format `fmt` -> float (exact). Device-safe.
KOKKOS_INLINE_FUNCTION float from_half(HalfFormat fmt, std::uint16_t h) {
  return fmt == HalfFormat::fp16 ? from_fp16(h) : from_bf16(h);
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
/// out[i] = fmt(in[i]) (bf16 or fp16, nearest even). Local.
template <class T>
void convert_to_half(HalfFormat fmt, View1<std::uint16_t> out, View1<const T> in);
/// out[i] = T(in[i]) from the format `fmt` (exact). Local.
template <class T>
void convert_from_half(HalfFormat fmt, View1<T> out, View1<const std::uint16_t> in);

}  // namespace trident
