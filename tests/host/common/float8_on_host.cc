// The float8 conversions of the CPU and CUDA folds (lib/common/float8.h)
// against a reference built from the formats' definitions alone: every code's
// value from its sign, exponent and mantissa fields (float8_to_float), and
// float_to_float8 against the nearest code by brute force (ties to the even
// code, past the largest finite value by more than half its gap: NaN for
// e4m3fn, infinity for e5m2) for every code's value, every midpoint between
// neighbouring codes and a hair either side of it, and random float32 bit
// patterns over the formats' range and beyond. (Python's test_dtypes.py
// checks the same against ml_dtypes through the folds; an exhaustive check
// of all 2^32 float32 inputs against ml_dtypes was run once by hand.)
// Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "host_cuda.h"
#include "common/float8.h"
#include "host_reference.h"

using namespace im2col;

namespace {

// Format F's layout, independent of the code under test.
struct Layout {
  int exponent_bits, mantissa_bits, bias;
  bool ieee_specials;  // e5m2: exponent all ones is inf / NaN; e4m3fn: only S.1111.111 is NaN
};

template <typename F>
Layout layout();
template <>
Layout layout<Float8E4M3FN>() { return {4, 3, 7, false}; }
template <>
Layout layout<Float8E5M2>() { return {5, 2, 15, true}; }

// The value of a code from its fields (NaN for NaN codes).
double value_of(const Layout& f, int code) {
  const int sign = code >> 7, e = (code >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int m = code & ((1 << f.mantissa_bits) - 1);
  const int top = (1 << f.exponent_bits) - 1;
  double v;
  if (f.ieee_specials && e == top) {
    v = m == 0 ? INFINITY : NAN;
  } else if (!f.ieee_specials && e == top && m == (1 << f.mantissa_bits) - 1) {
    v = NAN;
  } else if (e == 0) {
    v = std::ldexp(m, 1 - f.bias - f.mantissa_bits);
  } else {
    v = std::ldexp((1 << f.mantissa_bits) + m, e - f.bias - f.mantissa_bits);
  }
  return sign ? -v : v;
}

// The code float_to_float8 must give for x: the nearest finite code (ties to
// the even code), or the overflow code where |x| is at least the largest
// finite value plus half its gap (what IEEE rounding does where there is an
// infinity; e4m3fn gives NaN instead, as ml_dtypes does), NaN for NaN.
template <typename F>
int reference_code(double x) {
  const Layout f = layout<F>();
  const int sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return sign | (f.ieee_specials ? 0x7e : 0x7f);
  const double a = std::fabs(x);
  int best = -1, largest = 0;
  for (int c = 0; c < 0x80; ++c) {
    const double v = value_of(f, c);
    if (!std::isfinite(v)) continue;
    largest = value_of(f, c) > value_of(f, largest) ? c : largest;
    if (best < 0) { best = c; continue; }
    const double d = std::fabs(v - a), db = std::fabs(value_of(f, best) - a);
    if (d < db || (d == db && (c & 1) == 0 && (best & 1) == 1)) best = c;
  }
  const double top = value_of(f, largest), gap = top - value_of(f, largest - 1);
  if (a >= top + gap / 2 && !(a == top + gap / 2 && (largest & 1) == 0))
    return sign | (f.ieee_specials ? 0x7c : 0x7f);
  return sign | best;
}

template <typename F>
bool check_decode() {
  const Layout f = layout<F>();
  for (int c = 0; c < 256; ++c) {
    const double want = value_of(f, c);
    const float got = float8_to_float<F>(static_cast<uint8_t>(c));
    const bool ok = std::isnan(want) ? std::isnan(got) && std::signbit(got) == ((c & 0x80) != 0)
                                     : static_cast<double>(got) == want && std::signbit(got) == std::signbit(want);
    if (!ok) {
      std::printf("FAIL: decode %s code 0x%02x: got %g, want %g\n", f.ieee_specials ? "e5m2" : "e4m3fn", c, got,
                  want);
      return false;
    }
  }
  return true;
}

template <typename F>
bool check_encode(float x) {
  const int want = reference_code<F>(x);
  const int got = float_to_float8<F>(x);
  if (got != want) {
    std::printf("FAIL: encode %s %.9g (0x%08x): got 0x%02x, want 0x%02x\n",
                layout<F>().ieee_specials ? "e5m2" : "e4m3fn", x, float_to_bits(x), got, want);
    return false;
  }
  return true;
}

template <typename F>
void check_format(Tally& run) {
  const Layout f = layout<F>();
  run(check_decode<F>());
  // Every finite code's value, the midpoints between neighbours (ties) and
  // one float32 ulp either side of them, signs both ways.
  std::vector<double> values;
  for (int c = 0; c < 0x80; ++c)
    if (std::isfinite(value_of(f, c))) values.push_back(value_of(f, c));
  bool ok = true;
  for (size_t i = 0; i < values.size(); ++i) {
    const double next = i + 1 < values.size() ? values[i + 1] : 2 * values[i] - values[i - 1];
    for (const double v : {values[i], (values[i] + next) / 2}) {
      const float x = static_cast<float>(v);
      for (const float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, INFINITY)})
        ok = check_encode<F>(y) && check_encode<F>(-y) && ok;
    }
  }
  run(ok);
  // Random float32 bit patterns with exponents from far below the smallest
  // subnormal to far above the largest value, NaN and infinity.
  std::mt19937 bits(20261127);
  ok = check_encode<F>(NAN) && check_encode<F>(-NAN) && check_encode<F>(INFINITY) && check_encode<F>(-INFINITY) &&
       check_encode<F>(0.0f) && check_encode<F>(-0.0f);
  for (int i = 0; i < 20000 && ok; ++i) {
    const uint32_t exponent = 127 - 30 + bits() % 60, mantissa = bits() & 0x7fffff, sign = bits() & 1;
    ok = check_encode<F>(bits_to_float(sign << 31 | exponent << 23 | mantissa));
  }
  run(ok);
}

}  // namespace

int main() {
  Tally run;
  check_format<Float8E4M3FN>(run);
  check_format<Float8E5M2>(run);
  return run.report();
}
