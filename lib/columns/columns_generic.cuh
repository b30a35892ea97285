// The generic unfold and fold (columns.cu chooses them): what the
// specialised kernels were not written for. unfold of 1- and 16-byte
// elements (bool, int8, uint8, float8, complex128) channels-first, and of
// 1-byte elements channels-last where a group's channels are an odd number
// of bytes (other channels-last rows are copied as 2-, 4- or 8-byte elements
// by the specialised kernels: columns.cu's launch_unfold); fold of the
// element types of common/fold_elements.h (integers, bool, float8, complex:
// channels-last complex goes to the float fold as pairs of channels).
//
// They are the plain per-thread gathers the specialised kernels started
// from, with every load and store of any element size: no shared memory, no
// barrier, so a host test runs their threads one after another
// (tests/host/columns/columns_generic_on_host.cc).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/device_util.cuh"
#include "common/fold_elements.h"
#include "common/geometry.h"

namespace im2col::cuda {

// The carrier of 16-byte elements (complex128) for unfold.
struct alignas(16) Bytes16 {
  uint32_t w[4];
};

// V elements of T at p (aligned to their size) in one read-only load of
// sizeof(T) * V bytes (1, 2, 4, 8 or 16).
template <typename T, int V = 1>
__device__ __forceinline__ Pack<T, V> load_pack(const T* p) {
  constexpr size_t kBytes = sizeof(T) * V;
  Pack<T, V> v;
  if constexpr (kBytes == 1) {
    const unsigned char r = __ldg(reinterpret_cast<const unsigned char*>(p));
    memcpy(&v, &r, kBytes);
  } else if constexpr (kBytes == 2) {
    const unsigned short r = __ldg(reinterpret_cast<const unsigned short*>(p));
    memcpy(&v, &r, kBytes);
  } else if constexpr (kBytes == 4) {
    const unsigned int r = __ldg(reinterpret_cast<const unsigned int*>(p));
    memcpy(&v, &r, kBytes);
  } else if constexpr (kBytes == 8) {
    const uint2 r = __ldg(reinterpret_cast<const uint2*>(p));
    memcpy(&v, &r, kBytes);
  } else {
    static_assert(kBytes == 16, "1, 2, 4, 8 or 16 bytes");
    const uint4 r = __ldg(reinterpret_cast<const uint4*>(p));
    memcpy(&v, &r, kBytes);
  }
  return v;
}

template <typename T>
__device__ __forceinline__ T load_element(const T* p) {
  return load_pack<T, 1>(p).v[0];
}

// Positions a thread of the channels-first unfold copies: 8 one-byte
// elements (an 8-byte store; 16 held 16 origins a thread), one 16-byte one.
template <typename U>
constexpr int generic_unfold_run() {
  return sizeof(U) == 1 ? 8 : 1;
}

// Channels-first: a thread takes a run of V output positions of one (n, c)
// and writes them for every kernel tap (unfold_cf_kernel's scheme); a store
// of V elements where vector_store (the columns and their rows aligned to
// V elements) and the run is whole.
template <int ND, typename U, int V>
__global__ void __launch_bounds__(kThreads)
unfold_cf_generic_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g, int64_t C, int64_t n0,
                         ColumnsLayout lay, int64_t rows, int64_t runs_per_row, bool vector_store) {
  const int64_t K = g.kernel_size;
  for (int64_t t = grid_start(); t < rows * runs_per_row; t += grid_step()) {
    int64_t row, run, n, c;
    divmod(t, runs_per_row, row, run);
    divmod(row, C, n, c);
    const int64_t e0 = run * V;
    const int64_t count = lay.lc - e0 < V ? lay.lc - e0 : V;
    int32_t o[kMaxSpatial], origin[V][kMaxSpatial], k[kMaxSpatial];
    unravel<ND>(lay.l0 + e0, g.out, o);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      window_origin<ND>(g, o, origin[v]);
      increment<ND>(o, g.out);
    }
    const U* xc = x + ((n0 + n) * C + c) * g.in_size;
    U* dst = cols + n * lay.image_stride + c * K * lay.row_stride + e0;
#pragma unroll
    for (int d = 0; d < ND; ++d) k[d] = 0;
    for (int64_t kk = 0; kk < K; ++kk, dst += lay.row_stride, increment<ND>(k, g.kernel)) {
      Pack<U, V> p;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const int32_t s = v < count ? source_offset_at<ND>(g, origin[v], k) : -1;
        if (s >= 0) {
          p.v[v] = load_element(xc + s);
        } else {
          memset(&p.v[v], 0, sizeof(U));
        }
      }
      if (vector_store && count == V) {
        *reinterpret_cast<Pack<U, V>*>(dst) = p;
      } else {
        for (int v = 0; v < count; ++v) dst[v] = p.v[v];
      }
    }
  }
}

// Channels-last: a thread copies the Cg channels of one (position, group,
// tap) into row (n, l) at (group, tap, channel-in-group), zeros where the
// tap reads padding: consecutive threads write consecutive runs.
template <int ND, typename U>
__global__ void __launch_bounds__(kThreads)
unfold_cl_generic_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g, int64_t C, int64_t n0,
                         ColumnsLayout lay, int64_t items) {
  const int64_t K = g.kernel_size, G = lay.groups, Cg = C / G;
  for (int64_t t = grid_start(); t < items; t += grid_step()) {
    int64_t row, rest, gi, kk, n, l;
    divmod(t, G * K, row, rest);
    divmod(rest, K, gi, kk);
    divmod(row, lay.lc, n, l);
    int32_t o[kMaxSpatial], k[kMaxSpatial];
    unravel<ND>(lay.l0 + l, g.out, o);
    unravel<ND>(kk, g.kernel, k);
    const int32_t s = source_offset<ND, int32_t>(g, o, k);
    U* dst = cols + row * C * K + (gi * K + kk) * Cg;
    if (s < 0) {
      for (int64_t j = 0; j < Cg; ++j) memset(dst + j, 0, sizeof(U));
      continue;
    }
    const U* src = x + ((n0 + n) * g.in_size + s) * C + gi * Cg;
    for (int64_t j = 0; j < Cg; ++j) dst[j] = load_element(src + j);
  }
}

// Channels-first fold: a thread sums V consecutive elements of one line
// (along the last dimension) of one (n, c), stepping through their runs of
// taps together (fold_cf_kernel's scheme), each element's taps in
// increasing order, as the sum type S says; a store of V elements where
// vector_store (x aligned to them, lines whole runs).
template <typename E>
constexpr int generic_fold_run() {
  return 16 / sizeof(E) < 4 ? static_cast<int>(16 / sizeof(E)) : 4;
}

template <int ND, typename S, int V>
__global__ void __launch_bounds__(kThreads)
fold_cf_generic_kernel(const typename S::Storage* __restrict__ cols, typename S::Storage* __restrict__ x,
                       Geometry g, int64_t C, int64_t n0, ColumnsLayout lay, int64_t lines, int64_t runs_per_line,
                       bool accumulate, bool vector_store) {
  using E = typename S::Storage;
  using A = typename S::Acc;
  const int64_t K = g.kernel_size;
  const int32_t width = static_cast<int32_t>(g.in[ND - 1]);
  const int32_t kw = static_cast<int32_t>(g.kernel[ND - 1]), ow = static_cast<int32_t>(g.out[ND - 1]);
  const int32_t o_step = static_cast<int32_t>(g.out_step[ND - 1]);
  const int64_t step = g.tap_step[ND - 1] * lay.row_stride - o_step;
  const int64_t lines_per_plane = g.in_size / width;
  const int32_t l0 = static_cast<int32_t>(lay.l0), lc = static_cast<int32_t>(lay.lc);
  for (int64_t t = grid_start(); t < lines * runs_per_line; t += grid_step()) {
    int64_t line, run, plane, inner, n, c;
    divmod(t, runs_per_line, line, run);
    divmod(line, lines_per_plane, plane, inner);
    divmod(plane, C, n, c);
    const int32_t w0 = static_cast<int32_t>(run) * V;
    const int32_t count = width - w0 < V ? width - w0 : V;
    int32_t q[kMaxSpatial];
    unravel<ND - 1>(inner, g.in, q);
    q[ND - 1] = w0;
    // Element v's taps along the last dimension: first tap, its position, count.
    int32_t first[V], position[V], taps[V], most = 0;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const TapRun<int32_t> r = taps_reading<int32_t>(g, ND - 1, w0 + v);
      first[v] = r.k;
      position[v] = r.o;
      taps[v] = v < count ? r.count : 0;
      most = taps[v] > most ? taps[v] : most;
    }
    E* xr = x + ((n0 + n) * C + c) * g.in_size + inner * width + w0;
    A acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = accumulate && v < count ? S::from(xr[v]) : S::zero();
    const E* base = cols + n * lay.image_stride + c * K * lay.row_stride - l0;
    if (most > 0) {
      for_each_outer_tap<ND>(g, q, [&](int32_t k_outer, int32_t o_outer) {
        const E* src[V];
        int32_t tp[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
          tp[v] = o_outer * ow + position[v];
          src[v] = base + static_cast<int64_t>(k_outer * kw + first[v]) * lay.row_stride + tp[v];
        }
        for (int32_t i = 0; i < most; ++i) {
#pragma unroll
          for (int v = 0; v < V; ++v) {
            if (i < taps[v] && static_cast<uint32_t>(tp[v] - l0) < static_cast<uint32_t>(lc))
              S::add(acc[v], load_element(src[v]));
            src[v] += step;
            tp[v] -= o_step;
          }
        }
      });
    }
    Pack<E, V> p;
#pragma unroll
    for (int v = 0; v < V; ++v) p.v[v] = S::store(acc[v]);
    if (vector_store && count == V) {
      *reinterpret_cast<Pack<E, V>*>(xr) = p;
    } else {
      for (int v = 0; v < count; ++v) xr[v] = p.v[v];
    }
  }
}

// Channels-last fold: rows (n, q) of C channels; a thread sums V consecutive
// channels of a group (one load of V elements a tap: the columns and x
// aligned to them, the group's channels whole units), each element's taps in
// increasing order, as the sum type S says.
template <int ND, typename S, int V>
__global__ void __launch_bounds__(kThreads)
fold_cl_generic_kernel(const typename S::Storage* __restrict__ cols, typename S::Storage* __restrict__ x,
                       Geometry g, int64_t C, int64_t n0, ColumnsLayout lay, int64_t rows, int64_t units_per_row,
                       bool accumulate) {
  using E = typename S::Storage;
  using A = typename S::Acc;
  const int64_t K = g.kernel_size, Cg = C / lay.groups;
  const int32_t l0 = static_cast<int32_t>(lay.l0), lc = static_cast<int32_t>(lay.lc);
  for (int64_t t = grid_start(); t < rows * units_per_row; t += grid_step()) {
    int64_t row, unit, n, qi, gi, j0;
    divmod(t, units_per_row, row, unit);
    divmod(row, g.in_size, n, qi);
    divmod(unit * V, Cg, gi, j0);
    int32_t q[kMaxSpatial];
    unravel<ND>(qi, g.in, q);
    E* xq = x + ((n0 + n) * g.in_size + qi) * C + unit * V;
    const E* base = cols + n * lay.lc * C * K + gi * K * Cg + j0;
    A acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = accumulate ? S::from(xq[v]) : S::zero();
    for_each_tap_run<ND>(g, q, [&](int32_t kk, int32_t tp, const TapRun<int32_t>& run) {
      const E* src = base + (tp - l0) * C * K + kk * Cg;
      const int64_t step = run.k_step * Cg - run.o_step * C * K;
      for (int32_t i = 0; i < run.count; ++i, src += step, tp -= run.o_step) {
        if (static_cast<uint32_t>(tp - l0) < static_cast<uint32_t>(lc)) {
          const Pack<E, V> p = load_pack<E, V>(src);
#pragma unroll
          for (int v = 0; v < V; ++v) S::add(acc[v], p.v[v]);
        }
      }
    });
    Pack<E, V> out;
#pragma unroll
    for (int v = 0; v < V; ++v) out.v[v] = S::store(acc[v]);
    *reinterpret_cast<Pack<E, V>*>(xq) = out;
  }
}

}  // namespace im2col::cuda
