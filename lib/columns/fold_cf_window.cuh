// Channels-first fold with the window fixed at compile time (columns.cu
// chooses it): T taps along every dimension and stride S (1 or 2) along every
// dimension, no lhs dilation; rhs dilation, padding and extents are read at
// run time. A thread sums E consecutive elements of one input line (E = 2 for
// 2-byte elements: they share the decomposition of the thread's index and the
// outer dimensions' taps). Every tap's position, validity and address is
// straight-line code, all T^ND x E loads are issued before the first add, and
// each warp's load of one tap is one contiguous run of the columns.
//
// This is the shape of XLA's fusion of the VJP of pad + strided slices + stack,
// which ran channels-first folds at the read ceiling where the run-time tap
// loops of the other kernels reached 68% of it (docs/optimization-log.md,
// steps 101 and 116). Each element sums its taps in increasing order, starting
// from x's value with accumulate (deterministic, the order of the others).
#pragma once

#include <cstdint>

#include "common/device_util.cuh"
#include "common/geometry.h"

namespace im2col::cuda {

constexpr int64_t kFoldWindowTaps = 3;

// Elements a thread: two of a 2-byte type, else one.
template <typename TC>
constexpr int fold_window_elements() {
  return sizeof(TC) == 2 ? 2 : 1;
}

struct FoldWindowPlan {
  int32_t runs = 0;       // per line: ceil(in[ND - 1] / E)
  int32_t items = 0;      // nc * C * lines * runs (threads of work)
  FastDiv runs_div;       // runs
  FastDiv in[kMaxSpatial];  // g.in[0..ND-2]
  FastDiv channels;       // C
};

// Whether the kernel applies: T taps and stride S (1 or 2) along every
// dimension, no lhs dilation, the whole columns (no chunk of positions), every
// index of the work and every offset within one image's channel of the
// columns in 32 bits. Fills *p.
inline bool plan_fold_window(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc, int64_t E,
                             FoldWindowPlan* p) {
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  const int nd = g.nd;
  if (g.any_lhs_dilation || C <= 0 || nc <= 0) return false;
  for (int d = 0; d < nd; ++d) {
    if (g.kernel[d] != kFoldWindowTaps || g.stride[d] != g.stride[0]) return false;
    if (g.rhs_dilation[d] > kMax / kFoldWindowTaps || g.pad_lo[d] > kMax / 2 || g.pad_lo[d] < -kMax / 2) return false;
  }
  if (g.stride[0] != 1 && g.stride[0] != 2) return false;
  const int64_t width = g.in[nd - 1], runs = (width + E - 1) / E;
  const int64_t lines = g.in_size / width;
  if (g.out_size > kMax || g.in_size > kMax || nc * C > kMax / lines || nc * C * lines > kMax / runs) return false;
  // Whole columns (chunks of positions go to the other folds), offsets within
  // an (n, c) block of rows in 32 bits.
  if (lay.l0 != 0 || lay.lc != g.out_size || lay.row_stride > kMax / g.kernel_size) return false;
  p->runs = static_cast<int32_t>(runs);
  p->items = static_cast<int32_t>(nc * C * lines * runs);
  p->runs_div = FastDiv(runs);
  for (int d = 0; d < nd - 1; ++d) p->in[d] = FastDiv(g.in[d]);
  p->channels = FastDiv(C);
  return true;
}

// Along dimension d, for input coordinate q: the output position o[j] at
// which tap j reads it, and whether one does (ok[j]).
template <int T, int S>
__device__ __forceinline__ void window_positions(const Geometry& g, int d, int32_t q, int32_t* o, bool* ok) {
  const int32_t a = q + static_cast<int32_t>(g.pad_lo[d]), dil = static_cast<int32_t>(g.rhs_dilation[d]);
  const int32_t out = static_cast<int32_t>(g.out[d]);
#pragma unroll
  for (int j = 0; j < T; ++j) {
    const int32_t r = a - j * dil;  // o * S when a tap reads q
    o[j] = S == 1 ? r : r >> 1;
    ok[j] = r >= 0 && (S == 1 || (r & (S - 1)) == 0) && o[j] < out;
  }
}

// Where a tap reads nothing the thread adds -0, which leaves every sum as it
// is (x + -0 == x, -0 included), so no predicate outlives the loads.
template <typename T>
__device__ __forceinline__ T negative_zero() {
  return store_value<T>(static_cast<typename Acc<T>::type>(-0.0));
}

template <int ND, int T, int S, typename TC, typename TX, int E>
__global__ void __launch_bounds__(kThreads)
fold_cf_window_kernel(const TC* __restrict__ cols, TX* __restrict__ x, Geometry g, int64_t C, int64_t n0,
                      ColumnsLayout lay, FoldWindowPlan p, bool accumulate, bool vector_store) {
  using A = typename Acc<TX>::type;
  constexpr int K = ND == 1 ? T : ND == 2 ? T * T : T * T * T;
  const int32_t width = static_cast<int32_t>(g.in[ND - 1]);
  const int32_t row_stride = static_cast<int32_t>(lay.row_stride);
  const int32_t block = K * row_stride;  // one (n, c) of the columns: K rows
  TX* const x_images = x + n0 * C * g.in_size;
  // items < 2^31 and at most 2^28 threads: no wrap in 32 unsigned bits.
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < static_cast<uint32_t>(p.items);
       t += gridDim.x * blockDim.x) {
    int32_t line, run, plane, n, c;
    p.runs_div.divmod(static_cast<int32_t>(t), line, run);
    int32_t q[kMaxSpatial];
    plane = line;
#pragma unroll
    for (int d = ND - 2; d >= 0; --d) p.in[d].divmod(plane, plane, q[d]);
    p.channels.divmod(plane, n, c);
    const int32_t w0 = run * E;
    // Flat output position of each tap's outer part (dimensions 0..ND-2).
    int32_t outer[K / T];
    bool outer_ok[K / T];
    if constexpr (ND == 1) {
      outer[0] = 0;
      outer_ok[0] = true;
    } else {
      int32_t o0[T], o1[T];
      bool ok0[T], ok1[T];
      window_positions<T, S>(g, 0, q[0], o0, ok0);
      if constexpr (ND == 2) {
#pragma unroll
        for (int i = 0; i < T; ++i) {
          outer[i] = o0[i] * static_cast<int32_t>(g.out[1]);
          outer_ok[i] = ok0[i];
        }
      } else {
        window_positions<T, S>(g, 1, q[1], o1, ok1);
#pragma unroll
        for (int i = 0; i < T; ++i)
#pragma unroll
          for (int j = 0; j < T; ++j) {
            outer[i * T + j] = (o0[i] * static_cast<int32_t>(g.out[1]) + o1[j]) * static_cast<int32_t>(g.out[2]);
            outer_ok[i * T + j] = ok0[i] && ok1[j];
          }
      }
    }
    int32_t last[E][T];
    bool last_ok[E][T];
#pragma unroll
    for (int e = 0; e < E; ++e) window_positions<T, S>(g, ND - 1, w0 + e, last[e], last_ok[e]);
    // Offsets within the (n, c) block fit 32 bits (the plan).
    const TC* base = cols + n * lay.image_stride + static_cast<int64_t>(c) * block;
    keep_in_register(base);  // a wide multiply-add a load from here, not a 64-bit index sum
    TC v[E][K];
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int e = 0; e < E; ++e)
        v[e][k] = outer_ok[k / T] && last_ok[e][k % T] ? __ldg(base + (k * row_stride + outer[k / T] + last[e][k % T]))
                                                        : negative_zero<TC>();
    // Planes of x are whole lines: (n, c, line within the plane) is line.
    TX* xr = x_images + static_cast<int64_t>(line) * width + w0;
    const bool whole = w0 + E <= width;
    A acc[E];
    if (accumulate && vector_store && whole) {
      const Pack<TX, E> old = *reinterpret_cast<const Pack<TX, E>*>(xr);
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] = static_cast<A>(to_acc(old.v[e]));
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] = accumulate && w0 + e < width ? static_cast<A>(to_acc(xr[e])) : A(0);
    }
#pragma unroll
    for (int e = 0; e < E; ++e)
#pragma unroll
      for (int k = 0; k < K; ++k) acc[e] += static_cast<A>(to_acc(v[e][k]));
    Pack<TX, E> out;
#pragma unroll
    for (int e = 0; e < E; ++e) out.v[e] = store_value<TX>(acc[e]);
    if (vector_store && whole) {
      *reinterpret_cast<Pack<TX, E>*>(xr) = out;
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e)
        if (w0 + e < width) xr[e] = out.v[e];
    }
  }
}

}  // namespace im2col::cuda
