// The 1-D channels-first unfold at stride 2, written flat (columns.cu,
// unfold_cf_flat_strided_kernel). Where the columns leave no gaps they are
// one array of rows (n, c, k) of L positions each; a thread writes one
// 16-byte vector of it. Its V entries are most often V consecutive positions
// o.. of one row, which read every other input element from s = 2 * o +
// k * dilation - pad_lo: 2V - 1 elements, within 3 aligned vectors of the
// input taken flat (its lines follow one another). Shifted down by s mod V
// (vector_at) they are 16 consecutive elements (8 in 4-byte types), whose
// even ones the thread stores. Vectors that cross a row's end or read
// padding take their entries one at a time. The tiled unfold stored
// wav2vec's rows of 1599 positions (not whole vectors) an element at a time:
// 2-byte stores, 21.8 of each 32-byte sector written (ncu, H200,
// 2026-11-26). Against it: wav2vec bfloat16 22.2 -> 20.5 us, float32 38.7 ->
// 36.8 us (docs/optimization-log.md, step 100).
#pragma once

#include <cstdint>

#include "columns/unfold_cf_vectors.cuh"
#include "common/device_util.cuh"
#include "common/geometry.h"

namespace im2col::cuda {

struct FlatStridedPlan {
  int64_t vectors = 0;     // 16-byte vectors of the columns: one a thread
  int64_t x_elements = 0;  // elements of the chunk's input
  FastDiv positions;       // L
  FastDiv taps;            // K
};

// The plan for nc images of C channels, or false where the geometry is not
// 1-D at stride 2 without lhs dilation, the element is not 2 or 4 bytes, the
// columns leave gaps or end inside a vector, x or cols is not 16-byte
// aligned, or an index would not fit 31 bits.
inline bool plan_cf_flat_strided(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc,
                                 size_t elem_bytes, const void* x, const void* cols, FlatStridedPlan* p) {
  const int64_t V = 16 / static_cast<int64_t>(elem_bytes), L = g.out_size, K = g.kernel_size;
  if (g.nd != 1 || g.stride[0] != 2 || g.any_lhs_dilation || (elem_bytes != 2 && elem_bytes != 4) || L <= 0)
    return false;
  if (lay.l0 != 0 || lay.lc != L || lay.row_stride != L || (nc > 1 && lay.image_stride != C * K * L)) return false;
  const int64_t entries = nc * C * K * L, x_elements = nc * C * g.in_size;
  if (entries % V != 0 || entries >= (int64_t{1} << 31) || x_elements >= (int64_t{1} << 31) ||
      !aligned_to(x, 16) || !aligned_to(cols, 16))
    return false;
  p->vectors = entries / V;
  p->x_elements = x_elements;
  p->positions = FastDiv(L);
  p->taps = FastDiv(K);
  return true;
}

// The even elements of the 2V consecutive ones in a, b (a's first).
template <typename U>
__device__ __forceinline__ uint4 even_elements(const uint4& a, const uint4& b) {
  if constexpr (sizeof(U) == 4) {
    return make_uint4(a.x, a.z, b.x, b.z);
  } else {  // the low halves of each two words
    return make_uint4(__byte_perm(a.x, a.y, 0x5410), __byte_perm(a.z, a.w, 0x5410), __byte_perm(b.x, b.y, 0x5410),
                      __byte_perm(b.z, b.w, 0x5410));
  }
}

// Writes vector t of the columns (x: the chunk's input).
template <bool STREAM, typename U>
__device__ __forceinline__ void write_flat_strided_vector(const U* x, U* cols, const Geometry& g,
                                                          const FlatStridedPlan& p, int64_t t) {
  constexpr int V = 16 / sizeof(U);
  const int32_t L = static_cast<int32_t>(g.out[0]), in = static_cast<int32_t>(g.in[0]);
  const int32_t dil = static_cast<int32_t>(g.rhs_dilation[0]), pad = static_cast<int32_t>(g.pad_lo[0]);
  int32_t row, o, plane, k;
  p.positions.divmod(static_cast<int32_t>(t * V), row, o);
  p.taps.divmod(row, plane, k);
  const int32_t s = 2 * o + k * dil - pad;
  uint4* dst = reinterpret_cast<uint4*>(cols) + t;
  if (o + V <= L && s >= 0 && s + 2 * (V - 1) < in) {
    const int64_t i0 = static_cast<int64_t>(plane) * in + s, q = i0 / V;
    const int32_t r = static_cast<int32_t>(i0 - q * V);
    const int64_t needed = r >= 2 ? 3 : 2;  // vectors the 2V - 1 elements span
    if ((q + needed) * V <= p.x_elements) {
      const uint4* src = reinterpret_cast<const uint4*>(x) + q;
      const uint4 v0 = __ldg(src), v1 = __ldg(src + 1), v2 = needed == 3 ? __ldg(src + 2) : make_uint4(0, 0, 0, 0);
      const int32_t b = r * static_cast<int32_t>(sizeof(U));
      store_maybe_streaming<STREAM>(dst, even_elements<U>(vector_at(v0, v1, b), vector_at(v1, v2, b)));
      return;
    }
  }
  Pack<U, V> out;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    int32_t oj = o + j, rj = row;
    while (oj >= L) {
      oj -= L;
      ++rj;
    }
    int32_t pj, kj;
    p.taps.divmod(rj, pj, kj);
    const int32_t sj = 2 * oj + kj * dil - pad;
    out.v[j] = static_cast<uint32_t>(sj) < static_cast<uint32_t>(in) ? x[static_cast<int64_t>(pj) * in + sj] : U(0);
  }
  store_maybe_streaming<STREAM>(dst, *reinterpret_cast<const uint4*>(&out));
}

}  // namespace im2col::cuda
