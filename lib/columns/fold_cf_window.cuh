// Channels-first fold with the window fixed at compile time (columns.cu
// chooses it): T taps along every dimension, the same stride (1 or 2) along
// every one, no lhs dilation; rhs dilation, padding and extents are read at
// run time. At unit stride a thread sums E consecutive elements of one input
// line (E = 2 for 2-byte elements: they share the decomposition of the
// thread's index and the outer dimensions' taps); at stride 2 a cell of 2^ND
// (fold_cf_window_s2_kernel below; 2-byte elements only in 2-D and 3-D where
// the cell's taps are known at compile time). Every tap's position, validity and address is
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

// Elements a thread at unit stride: two of a 2-byte type, else one. Four
// took 56 registers for 40 and were 9-12% slower on the 7 x 7 and 14 x 14
// maps and the 3-D row, level elsewhere (docs/optimization-log.md, step 116).
template <typename TC>
constexpr int fold_window_elements() {
  return sizeof(TC) == 2 ? 2 : 1;
}

struct FoldWindowPlan {
  int32_t items = 0;        // threads of work: nc * C * cells
  FastDiv runs_div;         // cells along the last dimension
  FastDiv in[kMaxSpatial];  // cells along dimensions 0..ND-2
  FastDiv channels;         // C
};

// Whether the kernels apply: T taps along every dimension and the same
// stride S, 1 or 2, along every one, no lhs dilation, the whole columns (no
// chunk of positions), every index of the work and every offset within one
// image's channel of the columns in 32 bits. A thread's cell of elements:
// E along the last dimension at unit stride, 2 along every dimension at
// stride 2. Fills *p.
inline bool plan_fold_window(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc, int64_t E,
                             FoldWindowPlan* p) {
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  const int nd = g.nd;
  const int64_t S = g.stride[0];
  if (g.any_lhs_dilation || C <= 0 || nc <= 0 || (S != 1 && S != 2)) return false;
  for (int d = 0; d < nd; ++d) {
    if (g.kernel[d] != kFoldWindowTaps || g.stride[d] != S) return false;
    // q + pad_lo - j * dilation in 32 bits for every coordinate q and tap j.
    const int64_t pad = g.pad_lo[d] < 0 ? -g.pad_lo[d] : g.pad_lo[d];
    if (g.rhs_dilation[d] > kMax || pad > kMax || g.in[d] + pad + (kFoldWindowTaps - 1) * g.rhs_dilation[d] > kMax)
      return false;
  }
  // Whole columns (chunks of positions go to the other folds), offsets within
  // an (n, c) block of rows in 32 bits.
  if (lay.l0 != 0 || lay.lc != g.out_size || lay.row_stride > kMax / g.kernel_size) return false;
  if (g.out_size > kMax || g.in_size > kMax) return false;
  int64_t cells = nc * C;
  for (int d = 0; d < nd; ++d) {
    const int64_t cell = d == nd - 1 && S == 1 ? E : S, n = (g.in[d] + cell - 1) / cell;
    if (cells > kMax / n) return false;
    cells *= n;
    if (d < nd - 1) p->in[d] = FastDiv(n);
    else p->runs_div = FastDiv(n);
  }
  p->items = static_cast<int32_t>(cells);
  p->channels = FastDiv(C);
  return true;
}

// Along dimension d, for input coordinate q: the output position o[j] at
// which tap j reads it, and whether one does (ok[j]).
template <int T>
__device__ __forceinline__ void window_positions(const Geometry& g, int d, int32_t q, int32_t* o, bool* ok) {
  const int32_t a = q + static_cast<int32_t>(g.pad_lo[d]), dil = static_cast<int32_t>(g.rhs_dilation[d]);
  const int32_t out = static_cast<int32_t>(g.out[d]);
#pragma unroll
  for (int j = 0; j < T; ++j) {
    o[j] = a - j * dil;
    ok[j] = o[j] >= 0 && o[j] < out;
  }
}

// Where a tap reads nothing the thread adds -0, which leaves every sum as it
// is (x + -0 == x, -0 included), so no predicate outlives the loads.
template <typename T>
__device__ __forceinline__ T negative_zero() {
  return store_value<T>(static_cast<typename Acc<T>::type>(-0.0));
}

template <int ND, int T, typename TC, typename TX, int E>
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
    p.runs_div.divmod(static_cast<int32_t>(t), line, run);  // line: of x, over (n, c) and dimensions 0..ND-2
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
      window_positions<T>(g, 0, q[0], o0, ok0);
      if constexpr (ND == 2) {
#pragma unroll
        for (int i = 0; i < T; ++i) {
          outer[i] = o0[i] * static_cast<int32_t>(g.out[1]);
          outer_ok[i] = ok0[i];
        }
      } else {
        window_positions<T>(g, 1, q[1], o1, ok1);
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
    for (int e = 0; e < E; ++e) window_positions<T>(g, ND - 1, w0 + e, last[e], last_ok[e]);
    // Offsets within the (n, c) block fit 32 bits (the plan).
    const TC* base = cols + n * lay.image_stride + static_cast<int64_t>(c) * block;
    keep_in_register(base);  // a wide multiply-add a load from here, not a 64-bit index sum
    // A tap's E entries are consecutive (last[e][j] == last[0][j] + e): one
    // address a tap, the loads of its E entries at immediate offsets from it
    // (computing each under its own predicate took four more instructions a
    // load, an LDC of the row stride among them).
    TC v[E][K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const TC* tap = base + (k * row_stride + outer[k / T] + last[0][k % T]);
      keep_in_register(tap);  // one address, not one under each load's predicate
#pragma unroll
      for (int e = 0; e < E; ++e)
        v[e][k] = outer_ok[k / T] && last_ok[e][k % T] ? __ldg(tap + e) : negative_zero<TC>();
    }
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

// Stride 2: a thread sums the 2^ND elements of one cell, coordinates 2 b + a
// (a = 0, 1) along each dimension. Along a dimension, tap j reads the one of
// the two coordinates of the parity of pad_lo - j * dilation + 2 b, so each
// of the cell's T^ND taps reads one column entry, for one element (a[j]),
// and a warp's loads of a tap are consecutive entries: no load is wasted on
// the strided positions a one-element thread would test.
//
// PAR >= 0: every dilation odd and every pad_lo of parity PAR, so tap j's
// element is (PAR + j) & 1 at compile time and each tap adds into one sum
// (with PAR < 0, read at run time, every tap is added to every sum of the
// cell, -0 where it reads for another: 2^ND times the adds).
template <int T, int PAR>
__device__ __forceinline__ void cell_positions(const Geometry& g, int d, int32_t q0, int32_t* o, int32_t* a,
                                               bool* ok) {
  const int32_t r0 = q0 + static_cast<int32_t>(g.pad_lo[d]), dil = static_cast<int32_t>(g.rhs_dilation[d]);
  const int32_t out = static_cast<int32_t>(g.out[d]), in = static_cast<int32_t>(g.in[d]);
#pragma unroll
  for (int j = 0; j < T; ++j) {
    const int32_t r = r0 - j * dil;
    a[j] = PAR < 0 ? r & 1 : (PAR + j) & 1;
    o[j] = (r + a[j]) >> 1;
    ok[j] = o[j] >= 0 && o[j] < out && q0 + a[j] < in;
  }
}

// The parity PAR of cell_positions where every dilation is odd and every
// pad_lo of one parity, else -1.
inline int window_cell_parity(const Geometry& g) {
  const int par = static_cast<int>(g.pad_lo[0] & 1);
  for (int d = 0; d < g.nd; ++d)
    if ((g.rhs_dilation[d] & 1) == 0 || static_cast<int>(g.pad_lo[d] & 1) != par) return -1;
  return par;
}

template <int ND, int T, typename TC, typename TX, int PAR = -1>
__global__ void __launch_bounds__(kThreads)
fold_cf_window_s2_kernel(const TC* __restrict__ cols, TX* __restrict__ x, Geometry g, int64_t C, int64_t n0,
                         ColumnsLayout lay, FoldWindowPlan p, bool accumulate, bool vector_store) {
  using A = typename Acc<TX>::type;
  constexpr int K = ND == 1 ? T : ND == 2 ? T * T : T * T * T;
  constexpr int kCell = 1 << ND;
  const int32_t row_stride = static_cast<int32_t>(lay.row_stride);
  const int32_t block = K * row_stride;
  TX* const x_images = x + n0 * C * g.in_size;
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < static_cast<uint32_t>(p.items);
       t += gridDim.x * blockDim.x) {
    int32_t rest, b[kMaxSpatial], n, c;
    p.runs_div.divmod(static_cast<int32_t>(t), rest, b[ND - 1]);
#pragma unroll
    for (int d = ND - 2; d >= 0; --d) p.in[d].divmod(rest, rest, b[d]);
    p.channels.divmod(rest, n, c);
    int32_t o[ND][T], a[ND][T];
    bool ok[ND][T];
#pragma unroll
    for (int d = 0; d < ND; ++d) cell_positions<T, PAR>(g, d, 2 * b[d], o[d], a[d], ok[d]);
    const TC* base = cols + n * lay.image_stride + static_cast<int64_t>(c) * block;
    keep_in_register(base);
    TC v[K];
    int32_t cell[K];  // the element of the cell tap k reads for: its a bits, dimension 0 highest
#pragma unroll
    for (int k = 0; k < K; ++k) {
      int32_t l = 0, e = 0;
      bool valid = true;
#pragma unroll
      for (int d = 0, kk = k, span = K / T; d < ND; ++d, kk %= span, span /= T) {
        const int j = kk / span;
        l = l * static_cast<int32_t>(g.out[d]) + o[d][j];
        e = e * 2 + a[d][j];
        valid = valid && ok[d][j];
      }
      cell[k] = e;
      v[k] = valid ? __ldg(base + (k * row_stride + l)) : negative_zero<TC>();
    }
    // The cell's elements in x: rows along the last dimension, pairs in them.
    int64_t row_start[kCell / 2];
    bool row_in[kCell / 2];
#pragma unroll
    for (int r = 0; r < kCell / 2; ++r) {
      int64_t flat = rest;  // (n, c), then the outer coordinates
      bool in = true;
#pragma unroll
      for (int d = 0; d < ND - 1; ++d) {
        const int32_t q = 2 * b[d] + ((r >> (ND - 2 - d)) & 1);
        flat = flat * g.in[d] + q;
        in = in && q < g.in[d];
      }
      row_start[r] = flat * g.in[ND - 1] + 2 * b[ND - 1];
      row_in[r] = in;
    }
    const bool pair_in = 2 * b[ND - 1] + 1 < g.in[ND - 1];
    A acc[kCell];
#pragma unroll
    for (int r = 0; r < kCell / 2; ++r) {
      const TX* xr = x_images + row_start[r];
      const bool read = accumulate && row_in[r];
      if (read && vector_store && pair_in) {
        const Pack<TX, 2> old = *reinterpret_cast<const Pack<TX, 2>*>(xr);
        acc[2 * r] = static_cast<A>(to_acc(old.v[0]));
        acc[2 * r + 1] = static_cast<A>(to_acc(old.v[1]));
      } else {
        acc[2 * r] = read ? static_cast<A>(to_acc(xr[0])) : A(0);
        acc[2 * r + 1] = read && pair_in ? static_cast<A>(to_acc(xr[1])) : A(0);
      }
    }
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int e = 0; e < kCell; ++e) acc[e] += cell[k] == e ? static_cast<A>(to_acc(v[k])) : static_cast<A>(-0.0);
#pragma unroll
    for (int r = 0; r < kCell / 2; ++r) {
      if (!row_in[r]) continue;
      TX* xr = x_images + row_start[r];
      Pack<TX, 2> out;
      out.v[0] = store_value<TX>(acc[2 * r]);
      out.v[1] = store_value<TX>(acc[2 * r + 1]);
      if (vector_store && pair_in) {
        *reinterpret_cast<Pack<TX, 2>*>(xr) = out;
      } else {
        xr[0] = out.v[0];
        if (pair_in) xr[1] = out.v[1];
      }
    }
  }
}

}  // namespace im2col::cuda
