// float8_e4m3fn and float8_e5m2 (OCP FP8) to and from float32, as integer bit
// operations shared by the CPU and CUDA folds (host and device code; a
// software conversion, so that both platforms round alike). Matches
// ml_dtypes, which JAX uses: round to nearest, ties to even; out of range to
// NaN for e4m3fn (it has no infinity) and to infinity for e5m2; NaN stays
// NaN with its sign (e4m3fn S.1111.111, e5m2 S.11111.10). Only fold does
// arithmetic on these types (it accumulates in float32); unfold copies bits.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/geometry.h"  // IM2COL_HD

namespace im2col {

struct Float8E4M3FN {
  static constexpr int kMantissa = 3, kBias = 7;
  static constexpr uint32_t kMaxFinite = 0x7e;  // 448
  static constexpr bool kHasInf = false;
  static constexpr uint8_t kNaN = 0x7f, kOverflow = 0x7f;
  IM2COL_HD static bool is_nan(uint8_t b) { return (b & 0x7f) == 0x7f; }
  IM2COL_HD static bool is_inf(uint8_t) { return false; }
};

struct Float8E5M2 {
  static constexpr int kMantissa = 2, kBias = 15;
  static constexpr uint32_t kMaxFinite = 0x7b;  // 57344
  static constexpr bool kHasInf = true;
  static constexpr uint8_t kNaN = 0x7e, kOverflow = 0x7c;  // overflow: infinity
  IM2COL_HD static bool is_nan(uint8_t b) { return (b & 0x7f) > 0x7c; }
  IM2COL_HD static bool is_inf(uint8_t b) { return (b & 0x7f) == 0x7c; }
};

IM2COL_HD float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

IM2COL_HD uint32_t float_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

// The float32 value of a float8 bit pattern (exact: every float8 value is a
// float32 value).
template <typename F>
IM2COL_HD float float8_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80) << 24;
  if (F::is_nan(b)) return bits_to_float(sign | 0x7fc00000u);
  if (F::is_inf(b)) return bits_to_float(sign | 0x7f800000u);
  const uint32_t e = (b & 0x7f) >> F::kMantissa, m = b & ((1u << F::kMantissa) - 1);
  if (e == 0) {  // subnormal or zero: m * 2^(1 - bias - mantissa bits), exact
    const float unit = bits_to_float(static_cast<uint32_t>(127 + 1 - F::kBias - F::kMantissa) << 23);
    const float v = static_cast<float>(m) * unit;
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((e + 127 - F::kBias) << 23) | (m << (23 - F::kMantissa)));
}

// float32 to float8, rounding to nearest, ties to even.
template <typename F>
IM2COL_HD uint8_t float_to_float8(float f) {
  const uint32_t u = float_to_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | F::kNaN;
  if (a == 0x7f800000u) return sign | F::kOverflow;
  const int32_t exponent = static_cast<int32_t>(a >> 23);  // float32's, biased by 127
  constexpr int kDrop = 23 - F::kMantissa;
  if (exponent - 127 + F::kBias >= 1) {  // a normal float8 (or overflow)
    // Round the dropped bits to nearest even; a carry moves into the
    // exponent, as it should.
    uint32_t r = (a + ((1u << (kDrop - 1)) - 1) + ((a >> kDrop) & 1)) >> kDrop;
    r -= static_cast<uint32_t>(127 - F::kBias) << F::kMantissa;
    return r > F::kMaxFinite ? static_cast<uint8_t>(sign | F::kOverflow) : static_cast<uint8_t>(sign | r);
  }
  // Subnormal float8 or zero: the significand (24 bits, value m * 2^(e-150))
  // in units of the smallest subnormal, 2^(1 - bias - mantissa bits).
  if (exponent == 0) return sign;  // float32 subnormals round to zero
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const int32_t shift = 150 + 1 - F::kBias - F::kMantissa - exponent;  // >= kDrop + 1
  if (shift >= 25) return sign;  // below half the smallest subnormal
  uint32_t q = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u))) ++q;  // may become the smallest normal
  return static_cast<uint8_t>(sign | q);
}

}  // namespace im2col
