// How fold sums each element type that is not a float16 / bfloat16 / float32
// / float64 (those keep their own paths: cpu/half.h, common/device_util.cuh's
// Acc). Host and device code, shared by the CPU fold (cpu/kernels.h) and the
// CUDA generic fold (columns/columns_generic.cuh), so both sum alike.
//
// A sum type S names the element's storage (S::Storage), its accumulator
// (S::Acc) and three operations: S::zero(), S::from(storage) (an element as
// an accumulator: where fold adds to what x holds), S::add(acc, storage) and
// S::store(acc). Every fold sums the taps of an element in increasing order.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/float8.h"
#include "common/geometry.h"  // IM2COL_HD

namespace im2col {

// Integers of U's width, signed or unsigned alike: the sum modulo 2^bits,
// kept in U's width widened to at least 32 bits (uint32 for 1-4 bytes,
// uint64 for 8). The low bits of a sum do not depend on how wide it was
// accumulated, so this is exactly numpy's int64 sum cast back to the type
// (wrap-around), e.g. int8 100 + 100 = -56; and two's complement makes the
// signed sum's bits the unsigned sum's.
template <typename U>
struct IntegerSum {
  static_assert(std::is_unsigned_v<U>, "the unsigned type of the element's width");
  using Storage = U;
  using Acc = std::conditional_t<(sizeof(U) < 8), uint32_t, uint64_t>;
  IM2COL_HD static Acc zero() { return 0; }
  IM2COL_HD static Acc from(U v) { return v; }
  IM2COL_HD static void add(Acc& a, U v) { a += v; }
  IM2COL_HD static U store(Acc a) { return static_cast<U>(a); }
};

// bool: logical or (numpy's addition of bools), True where any tap that
// reads the element holds True. XLA stores bools as bytes 0 and 1.
struct BoolAny {
  using Storage = uint8_t;
  using Acc = uint32_t;
  IM2COL_HD static Acc zero() { return 0; }
  IM2COL_HD static Acc from(uint8_t v) { return v; }
  IM2COL_HD static void add(Acc& a, uint8_t v) { a |= v; }
  IM2COL_HD static uint8_t store(Acc a) { return a != 0 ? 1 : 0; }
};

// float8: summed in float32, rounded once to the format (F: Float8E4M3FN or
// Float8E5M2), as the half types are.
template <typename F>
struct Float8Sum {
  using Storage = uint8_t;
  using Acc = float;
  IM2COL_HD static Acc zero() { return 0.0f; }
  IM2COL_HD static Acc from(uint8_t v) { return float8_to_float<F>(v); }
  IM2COL_HD static void add(Acc& a, uint8_t v) { a += float8_to_float<F>(v); }
  IM2COL_HD static uint8_t store(Acc a) { return float_to_float8<F>(a); }
};

// complex64 / complex128 as XLA stores them: real, then imaginary part.
template <typename F>
struct alignas(2 * sizeof(F)) ComplexOf {
  F re, im;
};

// Complex numbers in their own precision: real and imaginary parts summed
// apart, as numpy and XLA add complex numbers.
template <typename F>
struct ComplexSum {
  using Storage = ComplexOf<F>;
  using Acc = ComplexOf<F>;
  IM2COL_HD static Acc zero() { return Acc{F(0), F(0)}; }
  IM2COL_HD static Acc from(Storage v) { return v; }
  IM2COL_HD static void add(Acc& a, Storage v) {
    a.re += v.re;
    a.im += v.im;
  }
  IM2COL_HD static Storage store(Acc a) { return a; }
};

}  // namespace im2col
