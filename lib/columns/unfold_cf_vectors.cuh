// The channels-first unfold on 16-byte vectors of positions (columns.cu,
// unfold_cf_vector_kernel), where the last dimension has stride 1 and its
// output and input lines are whole vectors: a thread takes V consecutive
// positions of one output line of one (n, c) and writes them for every tap,
// like the channels-last vector unfold writes a vector of channels
// (unfold_cl_taps.cuh). For tap kw the V positions read V consecutive
// elements of one input line, starting s = o - pad_lo + kw * dilation: in
// the aligned vectors s / V and s / V + 1 (floored), shifted down by
// s mod V elements, the same for every thread of a warp since o is a
// multiple of V. Vectors outside the line are zeros, so padding needs no
// per-element check. No shared memory, no barrier: the channels-first tiled
// unfold's fill and write phases each wait on their own latency (ncu: 38%
// of its stalls on shared reads, 34% on the fill's loads). The suite's
// float32 rows 7-11% faster than tiled, bfloat16 2-11% (docs/optimization-log.md,
// step 96). At stride 2 (three vectors a tap, every other element) it was
// 5-20% slower than the tiled unfold, so stride 2 stays there.
#pragma once

#include <cstdint>

#include "common/device_util.cuh"
#include "common/geometry.h"

namespace im2col::cuda {

// Taps loaded before their stores: 3 along the last dimension, of 3 lines
// in 3-D at 2 blocks a multiprocessor (c3d 2% faster than one line); in 2-D
// one line, unbound (2 or 3 lines, at 2 blocks, were 4-10% slower on the
// suite's rows; docs/optimization-log.md, step 96).
constexpr int kCfTapBatch = 3;
template <int ND>
inline constexpr int kCfTapLines = ND == 3 ? 3 : 1;
template <int ND>
inline constexpr int kCfTapBlocks = ND == 3 ? 2 : 1;

// Whether the vector unfold can write these columns (see the top).
inline bool cf_vector_unfold_fits(const Geometry& g, const ColumnsLayout& lay, size_t elem_bytes, const void* x,
                                  const void* cols) {
  const int last = g.nd - 1;
  const int64_t V = 16 / static_cast<int64_t>(elem_bytes);
  return !g.any_lhs_dilation && g.kernel_size > 1 && g.stride[last] == 1 && g.out[last] % V == 0 &&
         g.in[last] % V == 0 && lay.l0 % V == 0 && lay.lc % V == 0 && lay.row_stride % V == 0 &&
         lay.image_stride % V == 0 && aligned_to(x, 16) && aligned_to(cols, 16);
}

// Bytes b (0-15) into the 32 bytes lo, hi: the 16 that start there.
__device__ __forceinline__ uint4 vector_at(const uint4& lo, const uint4& hi, int32_t b) {
  const uint32_t bits = 8u * static_cast<uint32_t>(b & 3);
  auto f = [bits](uint32_t a, uint32_t c) { return __funnelshift_r(a, c, bits); };
  switch (b >> 2) {
    case 0: return make_uint4(f(lo.x, lo.y), f(lo.y, lo.z), f(lo.z, lo.w), f(lo.w, hi.x));
    case 1: return make_uint4(f(lo.y, lo.z), f(lo.z, lo.w), f(lo.w, hi.x), f(hi.x, hi.y));
    case 2: return make_uint4(f(lo.z, lo.w), f(lo.w, hi.x), f(hi.x, hi.y), f(hi.y, hi.z));
    default: return make_uint4(f(lo.w, hi.x), f(hi.x, hi.y), f(hi.y, hi.z), f(hi.z, hi.w));
  }
}

// One tap's elements for the V positions: vectors lo and hi of the line at
// src (zeros outside the line, or where the line is outside the input), the
// first element r into lo.
struct CfTap {
  uint4 lo, hi;
  int32_t r;
};

template <int V>
__device__ __forceinline__ CfTap load_cf_tap(const uint4* src, bool inside, int32_t line_vectors, int32_t at) {
  auto load = [&](int32_t q) {
    return inside && static_cast<uint32_t>(q) < static_cast<uint32_t>(line_vectors) ? __ldg(src + q)
                                                                                    : make_uint4(0, 0, 0, 0);
  };
  CfTap t;
  const int32_t q = at >= 0 ? at / V : -((V - 1 - at) / V);  // floor
  t.r = at - q * V;
  t.lo = load(q);
  t.hi = t.r != 0 ? load(q + 1) : make_uint4(0, 0, 0, 0);
  return t;
}

template <int V>
__device__ __forceinline__ uint4 cf_tap_vector(const CfTap& t) {
  return vector_at(t.lo, t.hi, t.r * (16 / V));
}

// The input line (as vectors) of the window's line at k (the window's taps
// but the last dimension's) for the window at `origin`, formed for every
// line, read only where inside: whether it is inside the input.
template <int ND>
__device__ __forceinline__ const uint4* window_line(const uint4* x_plane, const Geometry& g, const int32_t* origin,
                                                    const int32_t* k, int32_t line_vectors, bool& inside) {
  inside = true;
  int32_t pos = 0;
#pragma unroll
  for (int d = 0; d < ND - 1; ++d) {
    const int32_t c = origin[d] + k[d] * static_cast<int32_t>(g.rhs_dilation[d]);
    inside = inside && static_cast<uint32_t>(c) < static_cast<uint32_t>(g.in[d]);
    pos = pos * static_cast<int32_t>(g.in[d]) + c;
  }
  return x_plane + static_cast<int64_t>(pos) * line_vectors;
}

// Copies the V positions whose window starts at `origin` (the first
// position's; x_plane: the (n, c) input plane as vectors) at each tap, to
// dst (the first tap's row), rows row_vectors apart: BATCH taps of LINES
// lines at a time load before their stores.
template <int ND, int BATCH, bool STREAM, int V, int LINES = 1>
__device__ __forceinline__ void copy_cf_taps(const uint4* x_plane, uint4* dst, const Geometry& g,
                                             const int32_t* origin, int64_t row_vectors) {
  const int32_t KW = static_cast<int32_t>(g.kernel[ND - 1]), dW = static_cast<int32_t>(g.rhs_dilation[ND - 1]);
  const int32_t line_vectors = static_cast<int32_t>(g.in[ND - 1]) / V;
  const int32_t lines = static_cast<int32_t>(g.kernel_size) / KW;
  int32_t k[kMaxSpatial] = {};
  auto line_at = [&](bool& inside) { return window_line<ND>(x_plane, g, origin, k, line_vectors, inside); };
  int32_t line = 0;
  if constexpr (LINES > 1) {
#pragma unroll 1
    for (; line + LINES <= lines; line += LINES, dst += LINES * KW * row_vectors) {
      bool inside[LINES];
      const uint4* src[LINES];
#pragma unroll
      for (int j = 0; j < LINES; ++j) {
        src[j] = line_at(inside[j]);
        increment<ND - 1>(k, g.kernel);
      }
      int32_t kw = 0, s = origin[ND - 1];
      uint4* out = dst;
#pragma unroll 1
      for (; kw + BATCH <= KW; kw += BATCH, s += BATCH * dW, out += BATCH * row_vectors) {
        CfTap t[LINES][BATCH];
#pragma unroll
        for (int j = 0; j < LINES; ++j)
#pragma unroll
          for (int b = 0; b < BATCH; ++b) t[j][b] = load_cf_tap<V>(src[j], inside[j], line_vectors, s + b * dW);
#pragma unroll
        for (int j = 0; j < LINES; ++j)
#pragma unroll
          for (int b = 0; b < BATCH; ++b)
            store_maybe_streaming<STREAM>(out + (j * KW + b) * row_vectors,
                                          cf_tap_vector<V>(t[j][b]));
      }
#pragma unroll 1
      for (; kw < KW; ++kw, s += dW, out += row_vectors) {
        CfTap t[LINES];
#pragma unroll
        for (int j = 0; j < LINES; ++j) t[j] = load_cf_tap<V>(src[j], inside[j], line_vectors, s);
#pragma unroll
        for (int j = 0; j < LINES; ++j)
          store_maybe_streaming<STREAM>(out + j * KW * row_vectors, cf_tap_vector<V>(t[j]));
      }
    }
  }
  for (; line < lines; ++line, increment<ND - 1>(k, g.kernel)) {
    bool inside;
    const uint4* src = line_at(inside);
    int32_t kw = 0, s = origin[ND - 1];
#pragma unroll 1
    for (; kw + BATCH <= KW; kw += BATCH, s += BATCH * dW, dst += BATCH * row_vectors) {
      CfTap t[BATCH];
#pragma unroll
      for (int b = 0; b < BATCH; ++b) t[b] = load_cf_tap<V>(src, inside, line_vectors, s + b * dW);
#pragma unroll
      for (int b = 0; b < BATCH; ++b)
        store_maybe_streaming<STREAM>(dst + b * row_vectors, cf_tap_vector<V>(t[b]));
    }
#pragma unroll 1
    for (; kw < KW; ++kw, s += dW, dst += row_vectors) {
      const CfTap t = load_cf_tap<V>(src, inside, line_vectors, s);
      store_maybe_streaming<STREAM>(dst, cf_tap_vector<V>(t));
    }
  }
}

}  // namespace im2col::cuda
