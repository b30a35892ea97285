// The per-job index math of the copy-engine unfold and fold (columns_tma.cu):
// where each job's boxes start, where a tap reads in a box, and the
// consumers' work on one box. Free of copies and barriers, so that
// tests/host runs it as host code against a float64 reference.
#pragma once

#include <cstdint>

#include "../geometry.h"
#include "columns_tma_plan.h"
#include "device_util.cuh"

namespace im2col::cuda {

__device__ __forceinline__ int32_t floor_mod(int32_t a, int32_t b) { return ((a % b) + b) % b; }

// A job: one band of one plane (image, channel).
struct BoxJob {
  int64_t plane, band, n, c;
};

__device__ __forceinline__ BoxJob box_job(const ColumnsTmaPlan& p, int64_t job) {
  BoxJob j;
  j.plane = job / p.bands;
  j.band = job - j.plane * p.bands;
  j.n = j.plane / p.channels;
  j.c = j.plane - j.n * p.channels;
  return j;
}

template <int ND>
__device__ __forceinline__ void tap_coordinates(const ColumnsTmaPlan& p, int32_t kk, int32_t (&k)[kMaxSpatial]) {
#pragma unroll
  for (int d = ND - 1; d >= 0; --d) {
    k[d] = kk % p.kernel[d];
    kk /= p.kernel[d];
  }
}

// Offset (elements) in a box of the spatial extents box_extent of the
// coordinates c (spatial order).
template <int ND>
__device__ __forceinline__ int32_t box_offset(const ColumnsTmaPlan& p, const int32_t (&c)[kMaxSpatial]) {
  int32_t off = 0;
#pragma unroll
  for (int d = 0; d < ND; ++d) off = off * p.box_extent[d] + c[d];
  return off;
}

// --- unfold ------------------------------------------------------------------------

// The output row (dimension 0) where job j's band starts.
__device__ __forceinline__ int64_t unfold_band_row(const ColumnsTmaPlan& p, const BoxJob& j) {
  return p.first_row + j.band * p.band;
}

// Coordinates of job j's input box, innermost first: from the origin of the
// band's first window, `lead` elements earlier along the last dimension (a
// 16-byte boundary), in plane j.plane.
template <int ND>
__device__ __forceinline__ void unfold_box_start(const ColumnsTmaPlan& p, const BoxJob& j,
                                                 int32_t (&c)[ND + 1]) {
#pragma unroll
  for (int d = 0; d < ND; ++d) {
    const int32_t o = d == 0 ? static_cast<int32_t>(unfold_band_row(p, j)) : 0;
    c[ND - 1 - d] = o * p.stride[d] - p.pad[d] - (d == ND - 1 ? p.lead : 0);
  }
  c[ND] = static_cast<int32_t>(j.plane);
}

// Tap kk's offset (elements) in the box from a window's origin, split into a
// multiple of the vector and the shift within it.
template <int ND, int V>
__device__ __forceinline__ void unfold_tap(const ColumnsTmaPlan& p, int32_t kk, int32_t& offset, int32_t& shift) {
  int32_t k[kMaxSpatial];
  tap_coordinates<ND>(p, kk, k);
#pragma unroll
  for (int d = 0; d < ND; ++d) k[d] = k[d] * p.dilation[d] + (d == ND - 1 ? p.lead : 0);
  const int32_t off = box_offset<ND>(p, k);
  shift = off % V;  // box rows are whole vectors: only the last dimension's part counts
  offset = off - shift;
}

// The box offset (elements, a multiple of the vector) of the window origin of
// output position pos (flat over the whole output) in the band from row r0.
template <int ND>
__device__ __forceinline__ int32_t unfold_position(const ColumnsTmaPlan& p, int64_t pos, int64_t r0) {
  int32_t o[kMaxSpatial];
  int32_t rest = static_cast<int32_t>(pos - r0 * p.rest);
#pragma unroll
  for (int d = ND - 1; d > 0; --d) {
    o[d] = rest % p.extent[d];
    rest /= p.extent[d];
  }
  o[0] = rest;
#pragma unroll
  for (int d = 0; d < ND; ++d) o[d] *= p.stride[d];
  return box_offset<ND>(p, o);
}

// Job j's columns from its box: for each vector u = first, first + step, ...
// of the band's positions in the chunk, its entries for every tap (taps[kk]:
// offset, shift), each a 16-byte store into row (c * K + kk).
template <int ND, typename U>
__device__ __forceinline__ void unfold_from_box(const ColumnsTmaPlan& p, const BoxJob& j,
                                                const Pack<U, 16 / sizeof(U)>* box, const int2* taps,
                                                U* __restrict__ cols, int32_t first, int32_t step) {
  constexpr int V = 16 / sizeof(U);
  const ColumnsLayout& lay = p.layout;
  const int64_t r0 = unfold_band_row(p, j);
  const int64_t begin = max(r0 * p.rest, lay.l0);
  const int64_t end = min((r0 + p.band) * p.rest, lay.l0 + lay.lc);
  const int32_t vectors = end > begin ? static_cast<int32_t>((end - begin) / V) : 0;
  U* row = cols + j.n * lay.image_stride + j.c * p.kernel_size * lay.row_stride + (begin - lay.l0);
  for (int32_t u = first; u < vectors; u += step) {
    const int32_t origin = unfold_position<ND>(p, begin + static_cast<int64_t>(u) * V, r0) / V;
    U* dst = row + static_cast<int64_t>(u) * V;
    for (int32_t kk = 0; kk < p.kernel_size; ++kk, dst += lay.row_stride) {
      const int2 t = taps[kk];
      const Pack<U, V>* at = box + origin + t.x / V;
      const Pack<U, V> a = at[0];
      const Pack<U, V> b = t.y != 0 ? at[1] : a;
      *reinterpret_cast<Pack<U, V>*>(dst) = shifted<U, V>(a, b, t.y);
    }
  }
}

// --- fold --------------------------------------------------------------------------

// Coordinates of the box of the columns that tap kk of job j reads,
// innermost first, and the shift of its entries: from the output position
// that the band's first input element takes from tap kk (a chunk-relative row
// along dimension 0), less `shift` along the last dimension (a 16-byte
// boundary); row (c * K + kk) of image n.
template <int ND, int V>
__device__ __forceinline__ void fold_box_start(const ColumnsTmaPlan& p, const BoxJob& j, int32_t kk,
                                               int32_t (&c)[ND + 2], int32_t& shift) {
  int32_t k[kMaxSpatial];
  tap_coordinates<ND>(p, kk, k);
#pragma unroll
  for (int d = 0; d < ND; ++d) {
    int32_t o = p.pad[d] - k[d] * p.dilation[d];
    if (d == 0) o += static_cast<int32_t>(j.band) * p.band - p.first_row;
    if (d == ND - 1) {
      shift = floor_mod(o, V);
      o -= shift;
    }
    c[ND - 1 - d] = o;
  }
  c[ND] = static_cast<int32_t>(j.c * p.kernel_size + kk);
  c[ND + 1] = static_cast<int32_t>(j.n);
}

// The shift of tap kk's entries (fold_box_start's).
template <int ND, int V>
__device__ __forceinline__ int32_t fold_tap_shift(const ColumnsTmaPlan& p, int32_t kk) {
  int32_t k[kMaxSpatial];
  tap_coordinates<ND>(p, kk, k);
  return floor_mod(p.pad[ND - 1] - k[ND - 1] * p.dilation[ND - 1], V);
}

// Input elements of job j (its band's rows, clipped to the input).
__device__ __forceinline__ int32_t fold_job_elements(const ColumnsTmaPlan& p, const BoxJob& j) {
  const int64_t rows = min(static_cast<int64_t>(p.band), p.rows - j.band * p.band);
  return static_cast<int32_t>(rows * p.rest);
}

// The box offset (elements, a multiple of the vector) of job element q.
template <int ND>
__device__ __forceinline__ int32_t fold_position(const ColumnsTmaPlan& p, int32_t q) {
  int32_t o[kMaxSpatial];
#pragma unroll
  for (int d = ND - 1; d > 0; --d) {
    o[d] = q % p.extent[d];
    q /= p.extent[d];
  }
  o[0] = q;
  return box_offset<ND>(p, o);
}

// Adds tap box `box` (entries shifted by `shift`) to the sums of the job's
// vectors first + u * step, u < VEC.
template <int ND, typename TC, typename A, int VEC>
__device__ __forceinline__ void fold_add_box(const ColumnsTmaPlan& p, const Pack<TC, 16 / sizeof(TC)>* box,
                                             int32_t shift, int32_t vectors, int32_t first, int32_t step,
                                             A (&acc)[VEC][16 / sizeof(TC)]) {
  constexpr int V = 16 / sizeof(TC);
#pragma unroll
  for (int u = 0; u < VEC; ++u) {
    const int32_t vec = first + u * step;
    if (vec < vectors) {
      const Pack<TC, V>* at = box + fold_position<ND>(p, vec * V) / V;
      const Pack<TC, V> a = at[0];
      const Pack<TC, V> b = shift != 0 ? at[1] : a;
      const Pack<TC, V> s = shifted<TC, V>(a, b, shift);
#pragma unroll
      for (int v = 0; v < V; ++v) acc[u][v] += static_cast<A>(to_acc(s.v[v]));
    }
  }
}

}  // namespace im2col::cuda
