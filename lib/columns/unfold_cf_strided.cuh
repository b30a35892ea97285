// The channels-first vector unfold at stride 2 along the last dimension
// (columns.cu, unfold_cf_vector_kernel with STRIDED), for 4-byte types: as
// at stride 1 (unfold_cf_vectors.cuh), a thread takes 4 consecutive
// positions of one output line of one (n, c) and writes them for every tap,
// but a window line is loaded once for all its taps. Its positions read, at
// tap kw, every other element from s + kw * dilation (s = 2 * o - pad_lo, o
// a multiple of 4): all of a line's taps lie in the 4 aligned vectors from
// s / 4 (floored) where (KW - 1) * dilation <= 6. Their even and odd
// elements are 8 words each; tap kw's elements are 4 consecutive ones of one
// of the two, from (s mod 4 + kw * dilation) / 2, the same for the whole
// warp. The next line's vectors load while this one's taps store.
// Measured (docs/optimization-log.md, step 99): the float32 stem (7 taps a line) 72.9
// -> 65.1 us against the tiled unfold; 3 x 3 windows at stride 2 2% slower
// (3 taps share the 4 loads), the bfloat16 stem 1% slower (its split takes
// 16 byte permutes a line), so both stay tiled: at least 5 taps a line, 4-byte
// types. Loading 3 vectors a tap instead (step 96) was 5-20% slower.
#pragma once

#include <cstdint>

#include "columns/unfold_cf_vectors.cuh"
#include "common/device_util.cuh"
#include "common/geometry.h"

namespace im2col::cuda {

// Whether the strided vector unfold can write these columns (see the top).
inline bool cf_strided_unfold_fits(const Geometry& g, const ColumnsLayout& lay, size_t elem_bytes, const void* x,
                                   const void* cols) {
  const int last = g.nd - 1;
  constexpr int64_t V = 4;
  return elem_bytes == 4 && !g.any_lhs_dilation && g.stride[last] == 2 && g.kernel[last] >= 5 &&
         (g.kernel[last] - 1) * g.rhs_dilation[last] <= V + 2 && g.out[last] % V == 0 && g.in[last] % V == 0 &&
         lay.l0 % V == 0 && lay.lc % V == 0 && lay.row_stride % V == 0 && lay.image_stride % V == 0 &&
         aligned_to(x, 16) && aligned_to(cols, 16);
}

// A window line's 4 vectors from vector q of the line (zeros outside the
// line, or where the line is outside the input).
struct StridedLine {
  uint4 v[4];
};

__device__ __forceinline__ StridedLine load_strided_line(const uint4* src, bool inside, int32_t line_vectors,
                                                         int32_t q) {
  StridedLine l;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    l.v[j] = inside && static_cast<uint32_t>(q + j) < static_cast<uint32_t>(line_vectors) ? __ldg(src + q + j)
                                                                                          : make_uint4(0, 0, 0, 0);
  return l;
}

// The line's even and odd elements, 8 words each.
struct Parities {
  uint32_t even[8], odd[8];
};

__device__ __forceinline__ Parities split_parities(const StridedLine& l) {
  const uint32_t w[16] = {l.v[0].x, l.v[0].y, l.v[0].z, l.v[0].w, l.v[1].x, l.v[1].y, l.v[1].z, l.v[1].w,
                          l.v[2].x, l.v[2].y, l.v[2].z, l.v[2].w, l.v[3].x, l.v[3].y, l.v[3].z, l.v[3].w};
  Parities p;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    p.even[i] = w[2 * i];
    p.odd[i] = w[2 * i + 1];
  }
  return p;
}

// Words i .. i + 3 of w (i: 0-4, the same for the whole warp).
__device__ __forceinline__ uint4 words_from(const uint32_t (&w)[8], int32_t i) {
  switch (i) {
    case 0: return make_uint4(w[0], w[1], w[2], w[3]);
    case 1: return make_uint4(w[1], w[2], w[3], w[4]);
    case 2: return make_uint4(w[2], w[3], w[4], w[5]);
    case 3: return make_uint4(w[3], w[4], w[5], w[6]);
    default: return make_uint4(w[4], w[5], w[6], w[7]);
  }
}

// Copies the 4 positions whose window starts at `origin` (the first
// position's; x_plane: the (n, c) input plane as vectors) at each tap, to
// dst (the first tap's row), rows row_vectors apart.
template <int ND, bool STREAM>
__device__ __forceinline__ void copy_cf_taps_strided(const uint4* x_plane, uint4* dst, const Geometry& g,
                                                     const int32_t* origin, int64_t row_vectors) {
  constexpr int32_t V = 4;
  const int32_t KW = static_cast<int32_t>(g.kernel[ND - 1]), dW = static_cast<int32_t>(g.rhs_dilation[ND - 1]);
  const int32_t line_vectors = static_cast<int32_t>(g.in[ND - 1]) / V;
  const int32_t lines = static_cast<int32_t>(g.kernel_size) / KW;
  const int32_t s0 = origin[ND - 1];
  const int32_t q = s0 >= 0 ? s0 / V : -((V - 1 - s0) / V);  // floor
  const int32_t r = s0 - q * V;
  int32_t k[kMaxSpatial] = {};
  bool inside;
  const uint4* src = window_line<ND>(x_plane, g, origin, k, line_vectors, inside);
  StridedLine line = load_strided_line(src, inside, line_vectors, q);
#pragma unroll 1
  for (int32_t j = 0; j < lines; ++j) {
    StridedLine next;
    if (j + 1 < lines) {
      increment<ND - 1>(k, g.kernel);
      src = window_line<ND>(x_plane, g, origin, k, line_vectors, inside);
      next = load_strided_line(src, inside, line_vectors, q);
    }
    const Parities p = split_parities(line);
    int32_t s = r;
#pragma unroll 1
    for (int32_t kw = 0; kw < KW; ++kw, s += dW, dst += row_vectors) {
      store_maybe_streaming<STREAM>(dst, (s & 1) ? words_from(p.odd, s >> 1) : words_from(p.even, s >> 1));
    }
    line = next;
  }
}

}  // namespace im2col::cuda
