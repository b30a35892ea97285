// Channels-first unfold and fold kernels in which every thread owns one
// 16-byte vector of the array it writes, so that each store is a full vector
// and the index math is paid once per vector (columns.cu chooses them).
//
// unfold: rows of whole vectors (the positions of a chunk a multiple of V).
// A thread writes V consecutive positions of one row (one kernel tap); when
// they lie on one line of output positions (the common case) the line's
// outer coordinates are checked once and the V elements are V reads along
// one input line, else each element is located on its own. Blocks take the
// work of a plane in units of positions for every tap, so that the input is
// read from L1 for all the taps.
//
// fold: unit stride along the last spatial dimension and lines of positions
// that are whole 16-byte vectors of the columns. A thread sums V consecutive
// elements of one input line; for each kernel tap along the last dimension,
// the V column entries they read are V consecutive elements of one line of
// the columns, shifted by the same amount (mod V) for every thread, so they
// come from two aligned 16-byte loads and a shift known per tap.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../geometry.h"
#include "device_util.cuh"

namespace im2col::cuda {

// Divisors of the index math: the output extents and the kernel's.
struct WindowDivisors {
  FastDiv out[kMaxSpatial];
  FastDiv kernel[kMaxSpatial];
  explicit WindowDivisors(const Geometry& g) {
    for (int d = 0; d < kMaxSpatial; ++d) {
      out[d] = FastDiv(g.out[d]);
      kernel[d] = FastDiv(g.kernel[d]);
    }
  }
};

template <int ND>
__device__ __forceinline__ void unravel_fast(int32_t flat, const FastDiv* dims, int32_t* c) {
#pragma unroll
  for (int d = ND - 1; d > 0; --d) dims[d].divmod(flat, flat, c[d]);
  c[0] = flat;
}

// V elements of one input line starting at coordinate p0, `step` apart, for
// the V coordinates p0 + v * step that lie in [0, width) (zeros elsewhere).
template <typename U, int V>
__device__ __forceinline__ Pack<U, V> read_line(const U* line, int32_t p0, int32_t step, int32_t width) {
  Pack<U, V> p;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int32_t q = p0 + v * step;
    p.v[v] = static_cast<uint32_t>(q) < static_cast<uint32_t>(width) ? __ldg(line + q) : U(0);
  }
  return p;
}

// The same for 2-byte elements at unit step, read as 4-byte words: five
// word loads instead of eight 2-byte ones, shifted by a half word when p0 is
// odd, then masked. The loads are clamped to the words that hold the line's
// elements, which lie inside the array when it starts on a word and has an
// even number of elements.
template <int V>
__device__ __forceinline__ Pack<uint16_t, V> read_line_pairs(const uint16_t* line, int32_t p0, int32_t width,
                                                             const uint32_t* words) {
  static_assert(V == 8, "a 16-byte vector of 2-byte elements");
  const int64_t first = (line - reinterpret_cast<const uint16_t*>(words));  // element index of line[0]
  const int64_t lo = first >> 1, hi = (first + width - 1) >> 1;
  const int64_t a = first + p0;
  const int64_t w0 = a >> 1;  // floor, also for negative a
  const bool odd = (a & 1) != 0;
  uint32_t w[5];
#pragma unroll
  for (int i = 0; i < 5; ++i) {
    int64_t wi = w0 + i;
    wi = wi < lo ? lo : (wi > hi ? hi : wi);
    w[i] = __ldg(words + wi);
  }
  Pack<uint16_t, V> p;
  uint32_t* out = reinterpret_cast<uint32_t*>(p.v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t pair = odd ? __byte_perm(w[i], w[i + 1], 0x5432) : w[i];
    const bool low = static_cast<uint32_t>(p0 + 2 * i) < static_cast<uint32_t>(width);
    const bool high = static_cast<uint32_t>(p0 + 2 * i + 1) < static_cast<uint32_t>(width);
    pair &= (low ? 0x0000FFFFu : 0u) | (high ? 0xFFFF0000u : 0u);
    out[i] = pair;
  }
  return p;
}

// The V elements of positions o .. o + V - 1 along the last dimension (one
// line of positions) for kernel tap k, from the input plane at `plane`: the
// outer coordinates are checked once, then V reads along one input line.
template <int ND, typename U, int V>
__device__ __forceinline__ Pack<U, V> read_on_line(const U* x, int64_t plane, const Geometry& g,
                                                   const int32_t* o, const int32_t* k, bool pairs) {
  const int32_t width = static_cast<int32_t>(g.in[ND - 1]), step = static_cast<int32_t>(g.stride[ND - 1]);
  int32_t line = 0;
  bool inside = true;
#pragma unroll
  for (int d = 0; d < ND - 1; ++d) {
    const int32_t q = o[d] * static_cast<int32_t>(g.stride[d]) + k[d] * static_cast<int32_t>(g.rhs_dilation[d]) -
                      static_cast<int32_t>(g.pad_lo[d]);
    inside &= static_cast<uint32_t>(q) < static_cast<uint32_t>(g.in[d]);
    line = line * static_cast<int32_t>(g.in[d]) + q;
  }
  const int32_t p0 = o[ND - 1] * step + k[ND - 1] * static_cast<int32_t>(g.rhs_dilation[ND - 1]) -
                     static_cast<int32_t>(g.pad_lo[ND - 1]);
  if (!inside) {
    Pack<U, V> p;
#pragma unroll
    for (int v = 0; v < V; ++v) p.v[v] = U(0);
    return p;
  }
  const U* src = x + plane + static_cast<int64_t>(line) * width;
  if constexpr (sizeof(U) == 2) {
    if (pairs) return read_line_pairs<V>(src, p0, width, reinterpret_cast<const uint32_t*>(x));
  }
  return read_line<U, V>(src, p0, step, width);
}

// Rows of whole vectors (lc % V == 0): the work of one input plane comes in
// units of kSpan vectors of positions for every kernel tap, tap-major (a warp
// writes kSpan vectors of one row), and a block takes `units` consecutive
// units: the input under a unit is read from L1 for its K taps, where the flat
// order above reads it from L2 once per tap.
constexpr int32_t kSpan = 32;

struct RowUnits {
  int64_t per_plane = 0;  // units per input plane
  int64_t total = 0;      // units
  int32_t per_block = 1;  // units per block
  FastDiv items;          // K * kSpan: items (vectors) per unit
};

inline RowUnits row_units(const Geometry& g, const ColumnsLayout& lay, int64_t planes, int64_t V) {
  RowUnits u;
  const int64_t vectors_per_row = lay.lc / V;
  u.per_plane = (vectors_per_row + kSpan - 1) / kSpan;
  u.total = planes * u.per_plane;
  const int64_t items = g.kernel_size * kSpan;
  u.per_block = static_cast<int32_t>(std::max<int64_t>(1, 2048 / items));
  u.items = FastDiv(items);
  return u;
}

template <int ND, typename U, int V>
__global__ void __launch_bounds__(kThreads)
unfold_cf_rows_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g, int64_t C, int64_t n0,
                      ColumnsLayout lay, WindowDivisors f, RowUnits u, bool pairs) {
  const int32_t l0 = static_cast<int32_t>(lay.l0), vectors_per_row = static_cast<int32_t>(lay.lc / V);
  const int32_t out_last = static_cast<int32_t>(g.out[ND - 1]);
  const int32_t block_items = u.per_block * static_cast<int32_t>(u.items.d);
  for (int64_t b = blockIdx.x; b * u.per_block < u.total; b += gridDim.x) {
    for (int32_t i = threadIdx.x; i < block_items; i += blockDim.x) {
      int32_t unit_in_block, r;
      u.items.divmod(i, unit_in_block, r);
      const int64_t unit = b * u.per_block + unit_in_block;
      if (unit >= u.total) break;
      int64_t plane, part, n, c;
      divmod(unit, u.per_plane, plane, part);
      const int32_t tap = r / kSpan, jv = static_cast<int32_t>(part) * kSpan + r % kSpan;
      if (jv >= vectors_per_row) continue;
      divmod(plane, C, n, c);
      int32_t k[kMaxSpatial], o[kMaxSpatial];
      unravel_fast<ND>(tap, f.kernel, k);
      unravel_fast<ND>(l0 + jv * V, f.out, o);
      const int64_t source = ((n0 + n) * C + c) * g.in_size;
      Pack<U, V> p;
      if (!g.any_lhs_dilation && o[ND - 1] + V <= out_last) {
        p = read_on_line<ND, U, V>(x, source, g, o, k, pairs);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v, increment<ND>(o, g.out)) {
          int32_t origin[kMaxSpatial];
          window_origin<ND, int32_t>(g, o, origin);
          const int32_t s = source_offset_at<ND, int32_t>(g, origin, k);
          p.v[v] = s >= 0 ? __ldg(x + source + s) : U(0);
        }
      }
      *reinterpret_cast<Pack<U, V>*>(cols + n * lay.image_stride + (c * g.kernel_size + tap) * lay.row_stride +
                                     static_cast<int64_t>(jv) * V) = p;
    }
  }
}

// fold: whether the vector kernel applies (V = 16 / sizeof(TC)).
inline bool fold_cf_vector_applies(const Geometry& g, const ColumnsLayout& lay, int64_t V) {
  const int nd = g.nd;
  const int64_t out_last = g.out[nd - 1], in_last = g.in[nd - 1];
  return !g.any_lhs_dilation && g.stride[nd - 1] == 1 && out_last % V == 0 && in_last % V == 0 &&
         lay.l0 % out_last == 0 && lay.lc % out_last == 0 && lay.row_stride % V == 0 &&
         lay.image_stride % V == 0;
}

// acc[v] += the column entry of element v: entry S + v of the pair (a, b),
// where it lies on the line (0 <= first + v < out_last).
template <int S, typename TC, typename A, int V>
__device__ __forceinline__ void add_shifted(A* acc, const Pack<TC, V>& a, const Pack<TC, V>& b,
                                            int32_t first, int32_t out_last) {
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const TC e = S + v < V ? a.v[S + v] : b.v[S + v - V];
    if (static_cast<uint32_t>(first + v) < static_cast<uint32_t>(out_last)) acc[v] += static_cast<A>(to_acc(e));
  }
}

template <int S, typename TC, typename A, int V>
__device__ __forceinline__ void add_shifted_by(int32_t shift, A* acc, const Pack<TC, V>& a, const Pack<TC, V>& b,
                                               int32_t first, int32_t out_last) {
  if constexpr (S < V) {
    if (shift == S) {
      add_shifted<S>(acc, a, b, first, out_last);
    } else {
      add_shifted_by<S + 1>(shift, acc, a, b, first, out_last);
    }
  }
}

template <int ND, typename TC, typename TX, int V>
__global__ void __launch_bounds__(kThreads)
fold_cf_vector_kernel(const TC* __restrict__ cols, TX* __restrict__ x, Geometry g, int64_t C, int64_t n0,
                      ColumnsLayout lay, int64_t lines, bool accumulate) {
  using A = typename Acc<TX>::type;
  const int32_t width = static_cast<int32_t>(g.in[ND - 1]);
  const int32_t runs = width / V;
  const int32_t out_last = static_cast<int32_t>(g.out[ND - 1]), kw = static_cast<int32_t>(g.kernel[ND - 1]);
  const int32_t dilation = static_cast<int32_t>(g.rhs_dilation[ND - 1]);
  const int32_t pad = static_cast<int32_t>(g.pad_lo[ND - 1]);
  const int32_t l0 = static_cast<int32_t>(lay.l0), lc = static_cast<int32_t>(lay.lc);
  const int64_t K = g.kernel_size, lines_per_plane = g.in_size / width;
  Pack<TC, V> zero;
  unsigned char* zero_bytes = reinterpret_cast<unsigned char*>(&zero);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(zero)); ++i) zero_bytes[i] = 0;
  for (int64_t t = grid_start(); t < lines * runs; t += grid_step()) {
    int64_t line, run, plane, inner, n, c;
    divmod(t, static_cast<int64_t>(runs), line, run);
    divmod(line, lines_per_plane, plane, inner);
    divmod(plane, C, n, c);
    const int32_t w0 = static_cast<int32_t>(run) * V;
    int32_t q[kMaxSpatial];
    unravel<ND - 1>(inner, g.in, q);
    q[ND - 1] = w0;
    TX* xr = x + ((n0 + n) * C + c) * g.in_size + inner * width + w0;
    A acc[V];
    if (accumulate) {
      const Pack<TX, V> old = *reinterpret_cast<const Pack<TX, V>*>(xr);
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] = static_cast<A>(to_acc(old.v[v]));
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] = A(0);
    }
    const TC* image = cols + n * lay.image_stride + c * K * lay.row_stride - l0;
    for_each_outer_tap<ND>(g, q, [&](int32_t k_outer, int32_t o_outer) {
      const int32_t line_start = o_outer * out_last;
      if (line_start < l0 || line_start >= l0 + lc) return;  // lines are whole in the chunk
      const TC* row = image + static_cast<int64_t>(k_outer) * kw * lay.row_stride + line_start;
      for (int32_t j = 0; j < kw; ++j, row += lay.row_stride) {
        const int32_t first = w0 + pad - j * dilation;  // output position of element 0
        if (first + V <= 0 || first >= out_last) continue;
        const int32_t shift = first & (V - 1), base = first - shift;
        const Pack<TC, V> a = base >= 0 ? *reinterpret_cast<const Pack<TC, V>*>(row + base) : zero;
        const Pack<TC, V> b = shift != 0 && base + V < out_last
                                  ? *reinterpret_cast<const Pack<TC, V>*>(row + base + V)
                                  : zero;
        add_shifted_by<0>(shift, acc, a, b, first, out_last);
      }
    });
    Pack<TX, V> p;
#pragma unroll
    for (int v = 0; v < V; ++v) p.v[v] = store_value<TX>(acc[v]);
    *reinterpret_cast<Pack<TX, V>*>(xr) = p;
  }
}

}  // namespace im2col::cuda
