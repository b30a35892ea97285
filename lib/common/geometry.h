// The one description of an im2col window geometry and its index math, shared
// by the CPU and CUDA kernels (host and device code).
//
// Conventions, per spatial dimension d:
//   the input has `in[d]` elements; `lhs_dilation[d]` inserts holes between
//   them; `pad_lo[d]` (may be negative) is added before; the kernel has
//   `kernel[d]` taps spaced `rhs_dilation[d]` apart; windows start every
//   `stride[d]` positions. Output position o and kernel tap k read the dilated,
//   padded input at p = o * stride + k * rhs_dilation - pad_lo.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define IM2COL_HD __host__ __device__ __forceinline__
#else
#define IM2COL_HD inline
#endif

namespace im2col {

constexpr int kMaxSpatial = 3;

struct Geometry {
  int nd = 0;
  int64_t in[kMaxSpatial] = {1, 1, 1};
  int64_t out[kMaxSpatial] = {1, 1, 1};
  int64_t kernel[kMaxSpatial] = {1, 1, 1};
  int64_t stride[kMaxSpatial] = {1, 1, 1};
  int64_t rhs_dilation[kMaxSpatial] = {1, 1, 1};
  int64_t lhs_dilation[kMaxSpatial] = {1, 1, 1};
  int64_t pad_lo[kMaxSpatial] = {0, 0, 0};
  int64_t in_size = 1;      // prod(in)
  int64_t out_size = 1;     // prod(out), "L"
  int64_t kernel_size = 1;  // prod(kernel), "K"
  bool any_lhs_dilation = false;
  // The taps that read one input coordinate are spaced tap_step apart, their
  // output positions out_step apart (see taps_reading).
  int64_t tap_step[kMaxSpatial] = {1, 1, 1};
  int64_t out_step[kMaxSpatial] = {1, 1, 1};
};

IM2COL_HD int64_t dilated_extent(int64_t n, int64_t dilation) {
  return n <= 0 ? 0 : (n - 1) * dilation + 1;
}

// Number of window positions along one dimension, 0 when no window fits.
IM2COL_HD int64_t output_extent(int64_t in, int64_t kernel, int64_t stride,
                                int64_t rhs_dilation, int64_t lhs_dilation,
                                int64_t pad_lo, int64_t pad_hi) {
  const int64_t span = dilated_extent(in, lhs_dilation) + pad_lo + pad_hi -
                       dilated_extent(kernel, rhs_dilation);
  return span < 0 ? 0 : span / stride + 1;
}

// Whether every spatial quantity (extents, padded and dilated spans, strides,
// dilations, paddings, products) stays below 2**31, so that the index math
// may run in 32 bits.
inline bool fits_32_bits(const Geometry& g, const int64_t* pad_hi) {
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  if (g.in_size > kMax || g.out_size > kMax || g.kernel_size > kMax) return false;
  for (int d = 0; d < g.nd; ++d) {
    const int64_t span = dilated_extent(g.in[d], g.lhs_dilation[d]) +
                         (g.pad_lo[d] > 0 ? g.pad_lo[d] : -g.pad_lo[d]) +
                         (pad_hi[d] > 0 ? pad_hi[d] : -pad_hi[d]);
    const int64_t window = dilated_extent(g.kernel[d], g.rhs_dilation[d]);
    if (span > kMax || window > kMax || g.stride[d] > kMax ||
        g.out[d] * g.stride[d] + window > kMax)
      return false;
  }
  return true;
}

// Fills out[], in_size, out_size and kernel_size from the other fields and
// the high paddings.
inline void finish_geometry(Geometry& g, const int64_t* pad_hi) {
  g.in_size = g.out_size = g.kernel_size = 1;
  g.any_lhs_dilation = false;
  for (int d = 0; d < g.nd; ++d) {
    g.out[d] = output_extent(g.in[d], g.kernel[d], g.stride[d],
                             g.rhs_dilation[d], g.lhs_dilation[d], g.pad_lo[d],
                             pad_hi[d]);
    g.in_size *= g.in[d];
    g.out_size *= g.out[d];
    g.kernel_size *= g.kernel[d];
    g.any_lhs_dilation |= g.lhs_dilation[d] != 1;
    int64_t a = g.stride[d], b = g.rhs_dilation[d] % g.stride[d];
    while (b != 0) {
      const int64_t r = a % b;
      a = b;
      b = r;
    }
    g.tap_step[d] = g.stride[d] / a;  // a = gcd(stride, rhs_dilation)
    g.out_step[d] = g.rhs_dilation[d] / a;
  }
}

// The input gradient of a convolution without lhs dilation, written as a
// convolution of the output gradient: stride 1, lhs dilation = the stride,
// the same kernel read backwards (its tap k is the original tap K - 1 - k),
// and low padding window - 1 - pad_lo, the high padding chosen so that its
// output has the input's extents. False where g has lhs dilation.
inline bool transposed_geometry(const Geometry& g, Geometry* t) {
  if (g.any_lhs_dilation) return false;
  Geometry r;
  r.nd = g.nd;
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  for (int d = 0; d < g.nd; ++d) {
    const int64_t window = dilated_extent(g.kernel[d], g.rhs_dilation[d]);
    r.in[d] = g.out[d];
    r.kernel[d] = g.kernel[d];
    r.rhs_dilation[d] = g.rhs_dilation[d];
    r.lhs_dilation[d] = g.stride[d];
    r.stride[d] = 1;
    r.pad_lo[d] = window - 1 - g.pad_lo[d];
    pad_hi[d] = g.in[d] + window - 1 - dilated_extent(g.out[d], g.stride[d]) - r.pad_lo[d];
  }
  finish_geometry(r, pad_hi);
  for (int d = 0; d < g.nd; ++d)
    if (r.out[d] != g.in[d]) return false;
  *t = r;
  return true;
}

// The input gradient of a strided convolution without lhs dilation, one phase
// at a time. Phase r (r[d] < stride[d]) holds the input positions
// i = r + stride * j; the taps that reach them are k = k0 + tap_step * t (the
// k with k * rhs_dilation == r + pad_lo mod stride), and
//   dx[r + stride * j] = sum_t dy[j + c - t * out_step] w[k0 + tap_step * t],
// c = (r + pad_lo - k0 * rhs_dilation) / stride: a stride-1 convolution of dy
// with the sub-filter read backwards, whose outputs land stride apart. No
// lhs-dilated zeros are multiplied. Each tap belongs to exactly one phase per
// dimension, so the sub-filters together are the filter.
struct GradientPhase {
  Geometry g;  // the stride-1 convolution of dy (in = the forward's out)
  // Its output position j lands on input position first + stride * j.
  int64_t first[kMaxSpatial] = {0, 0, 0};
  // Its tap u is the forward's tap tap_first - tap_step * u (Geometry::tap_step).
  int64_t tap_first[kMaxSpatial] = {0, 0, 0};
  bool has_positions = true;  // some input position lies in the phase
  bool has_taps = true;       // some tap reaches it (else its gradient is 0)
};

// Phases of g's input gradient: the product of the strides.
inline int64_t gradient_phase_count(const Geometry& g) {
  int64_t count = 1;
  for (int d = 0; d < g.nd; ++d) count *= g.stride[d];
  return count;
}

// Phase `index` (row-major over the strides) of g's input gradient. False
// where g has lhs dilation.
inline bool gradient_phase(const Geometry& g, int64_t index, GradientPhase* phase) {
  if (g.any_lhs_dilation) return false;
  GradientPhase ph;
  ph.g.nd = g.nd;
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0}, positions[kMaxSpatial] = {1, 1, 1};
  for (int d = g.nd - 1; d >= 0; --d) {
    const int64_t s = g.stride[d], rd = g.rhs_dilation[d], K = g.kernel[d];
    const int64_t r = index % s;
    index /= s;
    positions[d] = r < g.in[d] ? (g.in[d] - r + s - 1) / s : 0;
    int64_t k0 = 0;
    while (k0 < g.tap_step[d] && ((k0 * rd - r - g.pad_lo[d]) % s + s) % s != 0) ++k0;
    const int64_t taps =
        k0 < g.tap_step[d] && k0 < K ? (K - k0 + g.tap_step[d] - 1) / g.tap_step[d] : 0;
    ph.has_positions &= positions[d] > 0;
    ph.has_taps &= taps > 0;
    const int64_t D = g.out_step[d], span = (taps > 0 ? taps - 1 : 0) * D;
    const int64_t c = (r + g.pad_lo[d] - k0 * rd) / s;  // exact
    ph.first[d] = r;
    ph.tap_first[d] = k0 + g.tap_step[d] * (taps > 0 ? taps - 1 : 0);
    ph.g.in[d] = g.out[d];
    ph.g.kernel[d] = taps > 0 ? taps : 1;
    ph.g.rhs_dilation[d] = D;
    ph.g.pad_lo[d] = span - c;
    pad_hi[d] = positions[d] - g.out[d] - ph.g.pad_lo[d] + span;
  }
  finish_geometry(ph.g, pad_hi);
  for (int d = 0; d < g.nd; ++d)
    if (ph.has_positions && ph.has_taps && ph.g.out[d] != positions[d]) return false;
  *phase = ph;
  return true;
}

// a / b and a % b for non-negative operands, in 32 bits when both fit (the
// GPU has no 64-bit divider; this keeps the common case cheap).
IM2COL_HD void divmod(int64_t a, int64_t b, int64_t& q, int64_t& r) {
  if (((a | b) >> 32) == 0) {
    const uint32_t a32 = static_cast<uint32_t>(a), b32 = static_cast<uint32_t>(b);
    q = a32 / b32;
    r = a32 - static_cast<uint32_t>(q) * b32;
  } else {
    q = a / b;
    r = a - q * b;
  }
}

IM2COL_HD void divmod(int32_t a, int32_t b, int32_t& q, int32_t& r) {
  q = a / b;
  r = a - q * b;
}

// The helpers below take the number of spatial dimensions as a template
// argument: with it known at compile time, loops unroll and coordinate arrays
// stay in registers (a run-time bound puts them in local memory on the GPU).
// dispatch_rank() turns a run-time rank into that argument.

// Row-major coordinates of `flat` in `dims`. Callers guarantee that the
// product of dims fits in 32 bits (checked on the Python side), so the
// divisions are 32-bit ones, which matter on the GPU.
template <int ND, typename I>
IM2COL_HD void unravel(int64_t flat, const int64_t* dims, I* coords) {
  uint32_t f = static_cast<uint32_t>(flat);
#pragma unroll
  for (int d = ND - 1; d > 0; --d) {
    const uint32_t n = static_cast<uint32_t>(dims[d]);
    coords[d] = f % n;
    f /= n;
  }
  coords[0] = f;
}

// Index type I: int64_t by default. Kernels may use int32_t: every spatial
// quantity of a geometry fits in 31 bits (fits_32_bits(), required by both the
// Python side and the FFI handlers), and 32-bit arithmetic halves the
// instruction count of this index math on the GPU.

// The part of an output position's read coordinate that does not depend on
// the kernel tap: o * stride - pad_lo, per dimension.
template <int ND, typename I = int64_t>
IM2COL_HD void window_origin(const Geometry& g, const I* o, I* origin) {
#pragma unroll
  for (int d = 0; d < ND; ++d)
    origin[d] = o[d] * static_cast<I>(g.stride[d]) - static_cast<I>(g.pad_lo[d]);
}

// Flat input spatial offset read by kernel tap k of the window at `origin`,
// or -1 when that tap falls on padding or on a hole of the lhs dilation.
template <int ND, typename I = int64_t>
IM2COL_HD I source_offset_at(const Geometry& g, const I* origin, const I* k) {
  I flat = 0;
#pragma unroll
  for (int d = 0; d < ND; ++d) {
    I p = origin[d] + k[d] * static_cast<I>(g.rhs_dilation[d]);
    if (p < 0) return -1;
    if (g.any_lhs_dilation) {
      I r;
      divmod(p, static_cast<I>(g.lhs_dilation[d]), p, r);
      if (r != 0) return -1;
    }
    if (p >= static_cast<I>(g.in[d])) return -1;
    flat = flat * static_cast<I>(g.in[d]) + p;
  }
  return flat;
}

// Whether every tap of the window at `origin` reads the input itself (no
// padding, no holes): then tap k reads flat offset
// flat_offset(g.in, origin) + tap_displacement(g, g.in, k).
template <int ND, typename I>
IM2COL_HD bool window_inside(const Geometry& g, const I* origin) {
  if (g.any_lhs_dilation) return false;
#pragma unroll
  for (int d = 0; d < ND; ++d)
    if (origin[d] < 0 ||
        origin[d] + static_cast<I>((g.kernel[d] - 1) * g.rhs_dilation[d]) >= static_cast<I>(g.in[d]))
      return false;
  return true;
}

// Whether every tap reads input position q (unit stride, no lhs dilation,
// and q away from the edges): then tap k reads it at flat output position
// flat_offset(g.out, q + pad_lo) - tap_displacement(g, g.out, k).
template <int ND, typename I>
IM2COL_HD bool all_taps_read(const Geometry& g, const I* q) {
  if (g.any_lhs_dilation) return false;
#pragma unroll
  for (int d = 0; d < ND; ++d) {
    const I a = q[d] + static_cast<I>(g.pad_lo[d]);
    if (g.stride[d] != 1 || a >= static_cast<I>(g.out[d]) ||
        a < static_cast<I>((g.kernel[d] - 1) * g.rhs_dilation[d]))
      return false;
  }
  return true;
}

// Row-major flat offset of coordinates c in extents dims.
template <int ND, typename I>
IM2COL_HD I flat_offset(const int64_t* dims, const I* c) {
  I flat = 0;
#pragma unroll
  for (int d = 0; d < ND; ++d) flat = flat * static_cast<I>(dims[d]) + c[d];
  return flat;
}

// Flat offset, in row-major extents dims (the input's, the output's, a
// shared-memory tile's), of kernel tap kk's displacement k * rhs_dilation.
template <int ND, typename I, typename D>
IM2COL_HD I tap_displacement(const Geometry& g, const D* dims, I kk) {
  I k[kMaxSpatial];
  unravel<ND>(kk, g.kernel, k);
  I off = 0;
#pragma unroll
  for (int d = 0; d < ND; ++d)
    off = off * static_cast<I>(dims[d]) + k[d] * static_cast<I>(g.rhs_dilation[d]);
  return off;
}

// Flat input spatial offset read by output position o and kernel tap k, or -1
// when that tap falls on padding or on a hole of the lhs dilation.
template <int ND, typename I = int64_t>
IM2COL_HD I source_offset(const Geometry& g, const I* o, const I* k) {
  I origin[kMaxSpatial];
  window_origin<ND, I>(g, o, origin);
  return source_offset_at<ND, I>(g, origin, k);
}

// The kernel taps along dimension d that read input coordinate q: taps k,
// k + k_step, ... (count of them, increasing) at output positions o,
// o - o_step, ... A tap reads q when k * rhs_dilation == q * lhs_dilation +
// pad_lo - o * stride, so the taps that do are an arithmetic run with step
// stride / gcd(stride, rhs_dilation). Enumerating them costs a few divisions
// per dimension, where testing every tap would cost one per tap. A tap k reads
// q at output position o exactly when source_offset(o, k) == q.
// The steps come from finish_geometry.
template <typename I>
struct TapRun {
  I k, k_step, o, o_step, count;
};

// The divisions taps_reading makes, by the dimension's stride, tap step and
// output step (non-negative dividends only). Plain `/` here; a GPU kernel that
// runs taps_reading per element passes multiply-shift divisors fixed at launch
// (fold_cl_taps.cuh: the run-time divisions were a sixth of the stem fold's
// instructions).
template <typename I>
struct StepDivisors {
  I s, k_step, o_step;
  IM2COL_HD I by_stride(I n) const { return n / s; }
  IM2COL_HD I by_k_step(I n) const { return n / k_step; }
  IM2COL_HD I by_o_step(I n) const { return n / o_step; }
};

template <typename I, typename Div>
IM2COL_HD TapRun<I> taps_reading(const Geometry& g, int d, I q, const Div& div) {
  const I s = static_cast<I>(g.stride[d]), rd = static_cast<I>(g.rhs_dilation[d]);
  const I kernel = static_cast<I>(g.kernel[d]), out = static_cast<I>(g.out[d]);
  const I a = q * static_cast<I>(g.lhs_dilation[d]) + static_cast<I>(g.pad_lo[d]);
  TapRun<I> t{0, static_cast<I>(g.tap_step[d]), 0, static_cast<I>(g.out_step[d]), 0};
  if (a < 0) return t;  // every tap reads a coordinate <= a: all padding
  // The first tap k with k * rd == a (mod s); unit stride and unit dilation,
  // the common cases, need no division.
  if (s == 1) {
    t.o = a;
  } else if (rd == 1) {
    t.o = div.by_stride(a);
    t.k = a - t.o * s;
  } else {
    I k = 0;
    while (k < t.k_step && k < kernel && k * rd <= a && a - k * rd - div.by_stride(a - k * rd) * s != 0) ++k;
    if (k == t.k_step || k == kernel || a < k * rd) return t;
    t.k = k;
    t.o = div.by_stride(a - k * rd);
  }
  if (t.o >= out) {
    const I skip = t.o_step == 1 ? t.o - out + 1 : div.by_o_step(t.o - out + t.o_step);
    t.k += skip * t.k_step;
    t.o -= skip * t.o_step;
  }
  if (t.k >= kernel || t.o < 0) return t;
  const I by_kernel = t.k_step == 1 ? kernel - t.k : div.by_k_step(kernel - t.k + t.k_step - 1);
  const I by_output = t.o_step == 1 ? t.o + 1 : div.by_o_step(t.o) + 1;
  t.count = by_kernel < by_output ? by_kernel : by_output;
  return t;
}

template <typename I>
IM2COL_HD TapRun<I> taps_reading(const Geometry& g, int d, I q) {
  const StepDivisors<I> div{static_cast<I>(g.stride[d]), static_cast<I>(g.tap_step[d]),
                            static_cast<I>(g.out_step[d])};
  return taps_reading(g, d, q, div);
}

// The output position along d at which tap k reads input coordinate q, or -1
// where it reads q from none (tap k at o reads q when
// o * stride == q * lhs_dilation + pad_lo - k * rhs_dilation). The stride s
// (== g.stride[d]) is an argument, as for strided_position below.
template <typename I>
IM2COL_HD I position_reading(const Geometry& g, int d, I q, I k, I s) {
  const I a = q * static_cast<I>(g.lhs_dilation[d]) + static_cast<I>(g.pad_lo[d]) -
              k * static_cast<I>(g.rhs_dilation[d]);
  if (a < 0 || a % s != 0) return -1;
  return a / s < static_cast<I>(g.out[d]) ? a / s : -1;
}

// With no lhs dilation along d, tap k at output position o reads input
// coordinate o * stride + reach; returns reach (k * rhs_dilation - pad_lo)
// and sets [*lo, *hi) to the positions where that lies inside the input
// (*lo == *hi where none does).
IM2COL_HD int64_t tap_inside_range(const Geometry& g, int d, int64_t k, int64_t* lo, int64_t* hi) {
  const int64_t s = g.stride[d], reach = k * g.rhs_dilation[d] - g.pad_lo[d];
  const int64_t first = reach >= 0 ? 0 : (-reach + s - 1) / s;
  const int64_t last = g.in[d] - 1 - reach;  // o * s <= last
  const int64_t end = last < 0 ? 0 : last / s + 1;
  *lo = first < g.out[d] ? first : g.out[d];
  *hi = end < *lo ? *lo : end < g.out[d] ? end : g.out[d];
  return reach;
}

// With no lhs dilation along d, tap k reads the input coordinates q with
// q + pad_lo - k * dilation a multiple of the stride s, at output position
// (q + pad_lo - k * dilation) / s. For q0 a multiple of s: the one of
// q0 .. q0 + s - 1 that tap k reads is q0 + *phase, and this is its output
// position (outside [0, out[d]) where none reads it); the later ones of its
// phase, q0 + *phase + s * v, are read at that position + v.
// The stride s is an argument (== g.stride[d]) so that kernels can pass it as
// a compile-time constant: the modulo and division are then shifts.
template <typename I>
IM2COL_HD I strided_position(const Geometry& g, int d, I q0, I k, I s, I* phase) {
  const I reach = static_cast<I>(g.pad_lo[d]) - k * static_cast<I>(g.rhs_dilation[d]);
  *phase = ((-reach) % s + s) % s;
  return (q0 + *phase + reach) / s;
}

namespace detail {
template <int D, int END, typename I, typename Fn>
IM2COL_HD void tap_nest(const Geometry& g, const TapRun<I>* runs, I k_flat,
                        I o_flat, Fn& fn) {
  if constexpr (D == END) {
    fn(k_flat, o_flat);
  } else {
    I k = runs[D].k, o = runs[D].o;
    for (I i = 0; i < runs[D].count; ++i, k += runs[D].k_step, o -= runs[D].o_step)
      tap_nest<D + 1, END>(g, runs, k_flat * static_cast<I>(g.kernel[D]) + k,
                           o_flat * static_cast<I>(g.out[D]) + o, fn);
  }
}
}  // namespace detail

// Calls fn(tap, output position), both flat over dimensions 0..ND-2 only,
// for every combination of taps along those dimensions that read input
// position q, in increasing order. The last dimension is left to the caller
// (kernels that handle several elements of one line share these taps).
template <int ND, typename I, typename Fn>
IM2COL_HD void for_each_outer_tap(const Geometry& g, const I* q, Fn&& fn) {
  TapRun<I> runs[ND > 1 ? ND - 1 : 1];
#pragma unroll
  for (int d = 0; d < ND - 1; ++d) {
    runs[d] = taps_reading<I>(g, d, q[d]);
    if (runs[d].count == 0) return;
  }
  detail::tap_nest<0, ND - 1>(g, runs, I(0), I(0), fn);
}

// Calls fn(first flat tap, its flat output position, run) for every run of
// taps that read input position q along the last dimension: the run's taps
// are first + i * run.k_step at positions o - i * run.o_step, i < run.count.
// Runs come in increasing tap order. Callers loop over a run themselves, so
// that its loads can be issued together.
template <int ND, typename I, typename Fn>
IM2COL_HD void for_each_tap_run(const Geometry& g, const I* q, Fn&& fn) {
  const TapRun<I> last = taps_reading<I>(g, ND - 1, q[ND - 1]);
  if (last.count == 0) return;
  for_each_outer_tap<ND>(g, q, [&](I k, I o) {
    fn(k * static_cast<I>(g.kernel[ND - 1]) + last.k, o * static_cast<I>(g.out[ND - 1]) + last.o, last);
  });
}

// Calls fn(flat kernel tap, flat output position) for every tap that reads
// input position q, in increasing tap order.
template <int ND, typename I, typename Fn>
IM2COL_HD void for_each_tap_reading(const Geometry& g, const I* q, Fn&& fn) {
  for_each_tap_run<ND>(g, q, [&](I k, I o, const TapRun<I>& run) {
    for (I i = 0; i < run.count; ++i, k += run.k_step, o -= run.o_step) fn(k, o);
  });
}

// Advances a row-major multi-index (an odometer) by one.
template <int ND, typename I>
IM2COL_HD void increment(I* coords, const int64_t* dims) {
#pragma unroll
  for (int d = ND - 1; d >= 0; --d) {
    if (++coords[d] < static_cast<I>(dims[d])) return;
    coords[d] = 0;
  }
}

template <int ND>
struct Rank {
  static constexpr int value = ND;
};

// Calls fn(Rank<ND>{}) for nd in 1..3.
template <typename Fn>
inline auto dispatch_rank(int nd, Fn&& fn) {
  switch (nd) {
    case 1: return fn(Rank<1>{});
    case 2: return fn(Rank<2>{});
    default: return fn(Rank<3>{});
  }
}

// Where the columns of one chunk live. A chunk covers images [n0, n0 + nc)
// and output positions [l0, l0 + lc).
//
// Channels-first columns: element (n, c, k, l) at
//   n * image_stride + (c * K + k) * row_stride + (l - l0).
// torch's layout (N, C*K, L) has image_stride = C*K*lc, row_stride = lc.
//
// Channels-last columns: element (n, l, c, k) at
//   (n * lc + (l - l0)) * C * K + (g * K + k) * Cg + j,  c = g * Cg + j,
// i.e. rows of (group, kernel tap, channel-in-group); with one group that is
// (N, L, K*C), kernel taps outer and channels inner.
struct ColumnsLayout {
  int64_t l0 = 0;
  int64_t lc = 0;            // positions in the chunk
  int64_t image_stride = 0;  // channels-first only
  int64_t row_stride = 0;    // channels-first only
  int64_t groups = 1;        // channels-last only
};

}  // namespace im2col
