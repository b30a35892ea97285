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
// unfold's fill and write phases each wait on their own latency
// (BENCHMARKS.md, step 96).
#pragma once

#include <cstdint>

#include "../geometry.h"
#include "device_util.cuh"

namespace im2col::cuda {

// Taps loaded before their stores: BATCH along the last dimension.
constexpr int kCfTapBatch = 3;

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

// Copies the V positions whose window starts at `origin` (the first
// position's; x_plane: the (n, c) input plane as vectors) at each tap, to
// dst (the first tap's row), rows row_vectors apart.
template <int ND, int BATCH, bool STREAM, int V>
__device__ __forceinline__ void copy_cf_taps(const uint4* x_plane, uint4* dst, const Geometry& g,
                                             const int32_t* origin, int64_t row_vectors) {
  constexpr int32_t kBytes = 16 / V;
  const int32_t KW = static_cast<int32_t>(g.kernel[ND - 1]), dW = static_cast<int32_t>(g.rhs_dilation[ND - 1]);
  const int32_t line_vectors = static_cast<int32_t>(g.in[ND - 1]) / V;
  const int32_t lines = static_cast<int32_t>(g.kernel_size) / KW;
  int32_t k[kMaxSpatial] = {};
  for (int32_t line = 0; line < lines; ++line, increment<ND - 1>(k, g.kernel)) {
    bool inside = true;
    int32_t pos = 0;
#pragma unroll
    for (int d = 0; d < ND - 1; ++d) {
      const int32_t c = origin[d] + k[d] * static_cast<int32_t>(g.rhs_dilation[d]);
      inside = inside && static_cast<uint32_t>(c) < static_cast<uint32_t>(g.in[d]);
      pos = pos * static_cast<int32_t>(g.in[d]) + c;
    }
    // Formed for every line, read only where inside.
    const uint4* src = x_plane + static_cast<int64_t>(pos) * line_vectors;
    int32_t s = origin[ND - 1];
    auto load = [&](int32_t q) { return inside && static_cast<uint32_t>(q) < static_cast<uint32_t>(line_vectors)
                                            ? __ldg(src + q) : make_uint4(0, 0, 0, 0); };
    auto tap = [&](int32_t at, uint4& lo, uint4& hi, int32_t& bytes) {
      const int32_t q = at >= 0 ? at / V : -((V - 1 - at) / V);  // floor
      bytes = (at - q * V) * kBytes;
      lo = load(q);
      hi = bytes != 0 ? load(q + 1) : make_uint4(0, 0, 0, 0);
    };
    int32_t kw = 0;
#pragma unroll 1
    for (; kw + BATCH <= KW; kw += BATCH, s += BATCH * dW, dst += BATCH * row_vectors) {
      uint4 lo[BATCH], hi[BATCH];
      int32_t bytes[BATCH];
#pragma unroll
      for (int b = 0; b < BATCH; ++b) tap(s + b * dW, lo[b], hi[b], bytes[b]);
#pragma unroll
      for (int b = 0; b < BATCH; ++b)
        store_maybe_streaming<STREAM>(dst + b * row_vectors, vector_at(lo[b], hi[b], bytes[b]));
    }
#pragma unroll 1
    for (; kw < KW; ++kw, s += dW, dst += row_vectors) {
      uint4 lo, hi;
      int32_t bytes;
      tap(s, lo, hi, bytes);
      store_maybe_streaming<STREAM>(dst, vector_at(lo, hi, bytes));
    }
  }
}

}  // namespace im2col::cuda
