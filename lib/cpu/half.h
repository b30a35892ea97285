// float16 / bfloat16 storage types for the CPU kernels, with round-to-nearest-
// even conversions. Only fold does arithmetic on them (it accumulates in
// float); unfold copies bits.
#pragma once

#include <cstdint>
#include <cstring>

namespace im2col::cpu {

struct bf16 { uint16_t bits; };
struct f16 { uint16_t bits; };

inline float to_float(float v) { return v; }
inline double to_float(double v) { return v; }

inline float to_float(bf16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float to_float(f16 v) {
  const uint32_t sign = static_cast<uint32_t>(v.bits & 0x8000u) << 16;
  uint32_t exp = (v.bits >> 10) & 0x1fu;
  uint32_t man = v.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) { man <<= 1; --exp; }
      u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <typename T> inline T from_float(float v);
template <typename T> inline T from_float(double v);
template <> inline float from_float<float>(float v) { return v; }
template <> inline double from_float<double>(double v) { return v; }

template <> inline bf16 from_float<bf16>(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

template <> inline f16 from_float<f16>(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return f16{static_cast<uint16_t>(sign | 0x7e00u)};  // NaN
  if (a >= 0x477ff000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow
  if (a < 0x38800000u) {  // subnormal or zero in half
    if (a < 0x33000000u) return f16{sign};
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 + (113 - e) - 1 + ...
    uint32_t h = m >> (shift);
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return f16{static_cast<uint16_t>(sign | h)};
  }
  uint32_t h = ((a >> 13) - ((127 - 15) << 10));
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return f16{static_cast<uint16_t>(sign | h)};
}

template <typename T> struct Accumulator { using type = float; };
template <> struct Accumulator<double> { using type = double; };

}  // namespace im2col::cpu
