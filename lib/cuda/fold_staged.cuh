// Folds staged in shared memory (columns.cu chooses them) for the shapes the
// per-thread gathers serve worst: their loads are scattered scalars there.
//
// Channels-first planes (fold_planes_*): a block takes whole planes of
// consecutive channels of one image. Their column entries are one contiguous
// run of the columns (rows of K * lc entries, no gaps between rows), copied
// into shared memory with aligned 16-byte loads; then each thread gathers
// whole elements from there. For small maps (7 x 7, 14 x 14) and for lines
// the vector fold cannot take (odd lengths: wav2vec's 3199).
//
// Channels-last lines (fold_lines_*): one group, channels that are no whole
// vectors (the 3 of a stem). A block takes a segment of one input line
// (along the last spatial dimension, channels inner); for every tap of the
// outer dimensions that reads the line, the column entries of the window
// positions the segment needs are kw * C consecutive entries per position,
// copied into shared memory by consecutive threads; then each thread sums
// its element's taps from there.
//
// Both sum each element's taps in increasing order (deterministic). The
// load and gather phases are device functions of their own, separated by a
// barrier, so that tests/host/fold_staged_on_host.cc runs them as host code.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../geometry.h"
#include "device_util.cuh"

namespace im2col::cuda {

constexpr size_t kStagedMaxBytes = 32 * 1024;        // per block
constexpr size_t kStagedPreferredBytes = 16 * 1024;  // planes: more channels per block up to this
constexpr int64_t kStagedPlaneElements = 1024;       // planes: outputs per block, at most

inline size_t staged_round16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// Copies items [0, count) with the block's threads, U items a thread at a
// time: the U loads are issued before their stores, so that a thread has U
// loads in flight (one at a time, the copies were latency-bound).
template <int U, typename T, typename Load, typename Store>
__device__ __forceinline__ void staged_copy(int32_t count, Load&& load, Store&& store) {
  for (int32_t i0 = threadIdx.x; i0 < count; i0 += U * blockDim.x) {
    T r[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int32_t i = i0 + u * static_cast<int32_t>(blockDim.x);
      if (i < count) r[u] = load(i);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int32_t i = i0 + u * static_cast<int32_t>(blockDim.x);
      if (i < count) store(i, r[u]);
    }
  }
}

// --- channels-first planes ------------------------------------------------

struct FoldPlanesPlan {
  int32_t channels = 0;        // consecutive channels per block
  int32_t channel_blocks = 0;  // ceil(C / channels)
  int32_t plane_cols = 0;      // K * lc: one channel's column entries
  int64_t blocks = 0;
  size_t smem = 0;
  FastDiv plane;               // g.in_size
  FastDiv in[kMaxSpatial];     // g.in
  FastDiv channel_blocks_div;
};

inline bool plan_fold_planes(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc,
                             size_t elem_bytes, FoldPlanesPlan* p) {
  const int64_t V = 16 / static_cast<int64_t>(elem_bytes);
  const int64_t plane_cols = g.kernel_size * lay.lc;
  auto bytes = [&](int64_t channels) {
    return staged_round16(static_cast<size_t>(channels * plane_cols + 2 * V) * elem_bytes);
  };
  if (lay.row_stride != lay.lc || bytes(1) > kStagedMaxBytes) return false;
  int64_t cb = 1;
  while (cb * 2 <= C && bytes(cb * 2) <= kStagedPreferredBytes && cb * 2 * g.in_size <= kStagedPlaneElements)
    cb *= 2;
  p->channels = static_cast<int32_t>(cb);
  p->channel_blocks = static_cast<int32_t>((C + cb - 1) / cb);
  p->plane_cols = static_cast<int32_t>(plane_cols);
  p->blocks = nc * p->channel_blocks;
  p->smem = bytes(cb);
  p->plane = FastDiv(g.in_size);
  for (int d = 0; d < g.nd; ++d) p->in[d] = FastDiv(g.in[d]);
  p->channel_blocks_div = FastDiv(p->channel_blocks);
  return p->blocks < (int64_t{1} << 31);
}

// The block's image n and first channel c0, and how many channels it takes.
struct PlanesBlock {
  int32_t n, c0, channels;
};

__device__ __forceinline__ PlanesBlock planes_block(const FoldPlanesPlan& p, int64_t C) {
  int32_t n, cb;
  p.channel_blocks_div.divmod(static_cast<int32_t>(blockIdx.x), n, cb);
  const int32_t c0 = cb * p.channels;
  return {n, c0, static_cast<int32_t>(C - c0 < p.channels ? C - c0 : p.channels)};
}

// Copies the block's column entries into the tile: entry i of the run at
// tile[head + i], head = the run's offset from a 16-byte boundary (cols is
// 16-byte aligned). Returns head.
template <typename TC>
__device__ __forceinline__ int32_t fold_planes_load(TC* tile, const TC* __restrict__ cols, const ColumnsLayout& lay,
                                                    int64_t K, const FoldPlanesPlan& p, const PlanesBlock& b) {
  constexpr int V = 16 / sizeof(TC);
  using Vec = Pack<TC, V>;
  const int64_t start = b.n * lay.image_stride + static_cast<int64_t>(b.c0) * K * lay.lc;
  const int64_t end = start + static_cast<int64_t>(b.channels) * p.plane_cols;
  const int64_t base = start - start % V;
  staged_copy<4, Vec>(
      static_cast<int32_t>((end - base + V - 1) / V),
      [&](int32_t i) {
        const int64_t e = base + static_cast<int64_t>(i) * V;
        if (e >= start && e + V <= end) return *reinterpret_cast<const Vec*>(cols + e);
        Vec v{};  // the run's first or last vector: only its entries of the run
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (e + j >= start && e + j < end) v.v[j] = cols[e + j];
        return v;
      },
      [&](int32_t i, const Vec& v) { reinterpret_cast<Vec*>(tile)[i] = v; });
  return static_cast<int32_t>(start - base);
}

// Each thread sums whole elements of the block's planes from the tile
// (column entries from tile[0], the run's first).
template <int ND, typename TC, typename TX>
__device__ __forceinline__ void fold_planes_gather(const TC* tile, TX* __restrict__ x, const Geometry& g, int64_t C,
                                                   int64_t n0, const ColumnsLayout& lay, const FoldPlanesPlan& p,
                                                   const PlanesBlock& b, bool accumulate) {
  using A = typename Acc<TX>::type;
  const int32_t l0 = static_cast<int32_t>(lay.l0), lc = static_cast<int32_t>(lay.lc);
  const int32_t elements = b.channels * static_cast<int32_t>(g.in_size);
  TX* xb = x + ((n0 + b.n) * C + b.c0) * g.in_size;
  for (int32_t e = threadIdx.x; e < elements; e += blockDim.x) {
    int32_t ci, qi, q[kMaxSpatial];
    p.plane.divmod(e, ci, qi);
#pragma unroll
    for (int d = ND - 1; d > 0; --d) p.in[d].divmod(qi, qi, q[d]);
    q[0] = qi;
    A acc = accumulate ? static_cast<A>(to_acc(xb[e])) : A(0);
    const TC* plane = tile + ci * p.plane_cols - l0;
    for_each_tap_run<ND>(g, q, [&](int32_t k, int32_t l, const TapRun<int32_t>& run) {
      for (int32_t i = 0; i < run.count; ++i, k += run.k_step, l -= run.o_step)
        if (static_cast<uint32_t>(l - l0) < static_cast<uint32_t>(lc)) acc += static_cast<A>(to_acc(plane[k * lc + l]));
    });
    xb[e] = store_value<TX>(acc);
  }
}

template <int ND, typename TC, typename TX>
__global__ void __launch_bounds__(kThreads)
fold_planes_kernel(const TC* __restrict__ cols, TX* __restrict__ x, Geometry g, int64_t C, int64_t n0,
                   ColumnsLayout lay, FoldPlanesPlan p, bool accumulate) {
  extern __shared__ __align__(16) unsigned char smem[];
  TC* tile = reinterpret_cast<TC*>(smem);
  const PlanesBlock b = planes_block(p, C);
  const int32_t head = fold_planes_load(tile, cols, lay, g.kernel_size, p, b);
  __syncthreads();
  fold_planes_gather<ND>(tile + head, x, g, C, n0, lay, p, b, accumulate);
}

// --- channels-last lines --------------------------------------------------

struct FoldLinesPlan {
  int32_t segment = 0;   // elements (position, channel) of a line per block
  int32_t segments = 0;  // per line
  int32_t span = 0;      // window positions staged per outer tap, at most
  int32_t slots = 0;     // outer taps reading one line, at most
  int32_t run = 0;       // kw * C: one position's entries per outer tap
  int64_t blocks = 0;
  size_t smem = 0;
  FastDiv channels;      // C
  FastDiv run_div;
  FastDiv segments_div, lines_div;  // the block index's parts: segments, lines per image
  FastDiv in[kMaxSpatial];
};

// Window positions along dimension d whose windows read input coordinates
// [lo, hi], as [*first, *last] (empty: *first > *last).
IM2COL_HD void positions_reading(const Geometry& g, int d, int64_t lo, int64_t hi, int64_t* first,
                                 int64_t* last) {
  const int64_t s = g.stride[d], reach = (g.kernel[d] - 1) * g.rhs_dilation[d];
  const int64_t a = lo * g.lhs_dilation[d] + g.pad_lo[d] - reach, b = hi * g.lhs_dilation[d] + g.pad_lo[d];
  *first = a <= 0 ? 0 : (a + s - 1) / s;
  *last = b < 0 ? -1 : (b / s < g.out[d] - 1 ? b / s : g.out[d] - 1);
}

inline bool plan_fold_lines(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc, size_t elem_bytes,
                            FoldLinesPlan* p) {
  const int nd = g.nd, last = nd - 1;
  if (lay.groups != 1) return false;
  const int64_t width = g.in[last] * C;
  const int64_t segment = width < kThreads ? width : kThreads;
  // A segment's elements span at most this many coordinates, read by at
  // most span window positions (positions_reading).
  const int64_t coords = (segment - 1 + C - 1) / C + 1;
  const int64_t s = g.stride[last], reach = (g.kernel[last] - 1) * g.rhs_dilation[last];
  const int64_t span = std::min<int64_t>(((coords - 1) * g.lhs_dilation[last] + reach) / s + 2, g.out[last]);
  int64_t slots = 1;
  for (int d = 0; d < last; ++d)
    slots *= std::min<int64_t>((g.kernel[d] + g.tap_step[d] - 1) / g.tap_step[d], g.out[d]);
  const int64_t run = g.kernel[last] * C;
  // The positions at the segment's edges are staged whole but read in part:
  // at most a fifth of them (wide channels or windows go to fold_cl_kernel).
  if (4 * span > 5 * (span - (reach + s - 1) / s)) return false;
  p->smem = staged_round16(static_cast<size_t>(slots * span * run) * elem_bytes);
  if (p->smem > kStagedMaxBytes) return false;
  p->segment = static_cast<int32_t>(segment);
  p->segments = static_cast<int32_t>((width + segment - 1) / segment);
  p->span = static_cast<int32_t>(span);
  p->slots = static_cast<int32_t>(slots);
  p->run = static_cast<int32_t>(run);
  const int64_t lines = g.in_size / g.in[last];
  p->blocks = nc * lines * p->segments;
  p->channels = FastDiv(C);
  p->run_div = FastDiv(run);
  p->segments_div = FastDiv(p->segments);
  p->lines_div = FastDiv(lines);
  for (int d = 0; d < nd; ++d) p->in[d] = FastDiv(g.in[d]);
  return p->blocks < (int64_t{1} << 31);
}

// The block's image, input line and segment of it: elements [e0, e1) of the
// line, window positions [o_lo, o_hi] along the last dimension reading them,
// and the taps of the outer dimensions reading the line (one run a
// dimension; slot t is their t-th combination in increasing tap order).
template <int ND>
struct LinesBlock {
  int32_t n, line, e0, e1, o_lo, o_hi, slots;
  TapRun<int32_t> outer[ND > 1 ? ND - 1 : 1];
};

template <int ND>
__device__ __forceinline__ LinesBlock<ND> lines_block(const Geometry& g, int64_t C, const FoldLinesPlan& p) {
  LinesBlock<ND> b;
  int32_t rest, segment, q[kMaxSpatial];
  p.segments_div.divmod(static_cast<int32_t>(blockIdx.x), rest, segment);
  p.lines_div.divmod(rest, b.n, b.line);
  int32_t r = b.line;
#pragma unroll
  for (int d = ND - 2; d > 0; --d) p.in[d].divmod(r, r, q[d]);
  q[0] = r;
  b.slots = 1;
#pragma unroll
  for (int d = 0; d < ND - 1; ++d) {
    b.outer[d] = taps_reading<int32_t>(g, d, q[d]);
    b.slots *= b.outer[d].count;
  }
  const int32_t width = static_cast<int32_t>(g.in[ND - 1] * C);
  b.e0 = segment * p.segment;
  b.e1 = b.e0 + p.segment < width ? b.e0 + p.segment : width;
  int64_t first, last;
  positions_reading(g, ND - 1, p.channels.div(b.e0), p.channels.div(b.e1 - 1), &first, &last);
  b.o_lo = static_cast<int32_t>(first);
  b.o_hi = static_cast<int32_t>(last);
  return b;
}

// The flat tap and window position over the outer dimensions of slot t.
template <int ND>
__device__ __forceinline__ void outer_slot(const Geometry& g, const LinesBlock<ND>& b, int32_t t, int32_t* k,
                                           int32_t* o) {
  if constexpr (ND == 1) {
    *k = *o = 0;
  } else if constexpr (ND == 2) {
    *k = b.outer[0].k + t * b.outer[0].k_step;
    *o = b.outer[0].o - t * b.outer[0].o_step;
  } else {
    const int32_t i = t / b.outer[1].count, j = t - i * b.outer[1].count;
    *k = (b.outer[0].k + i * b.outer[0].k_step) * static_cast<int32_t>(g.kernel[1]) + b.outer[1].k +
         j * b.outer[1].k_step;
    *o = (b.outer[0].o - i * b.outer[0].o_step) * static_cast<int32_t>(g.out[1]) + b.outer[1].o -
         j * b.outer[1].o_step;
  }
}

// Copies the entries of window positions [o_lo, o_hi] for each slot into the
// tile's rows slot * span + (o - o_lo); positions outside the chunk read as
// zero.
template <int ND, typename TC>
__device__ __forceinline__ void fold_lines_load(TC* tile, const TC* __restrict__ cols, const Geometry& g,
                                                int64_t C, const ColumnsLayout& lay, const FoldLinesPlan& p,
                                                const LinesBlock<ND>& b) {
  const int32_t positions = b.o_hi - b.o_lo + 1;
  if (positions <= 0 || b.slots == 0) return;
  const int32_t ow = static_cast<int32_t>(g.out[ND - 1]);
  const int32_t l0 = static_cast<int32_t>(lay.l0), lc = static_cast<int32_t>(lay.lc);
  const int64_t row = C * g.kernel_size;
  const TC* image = cols + static_cast<int64_t>(b.n) * lay.lc * row;
  const int32_t per_slot = positions * p.run;
  staged_copy<8, TC>(
      b.slots * per_slot,
      [&](int32_t f) {
        int32_t t, j, r, k, o;
        if constexpr (ND == 1) {
          t = 0, r = f;
        } else {
          t = f / per_slot, r = f - t * per_slot;
        }
        p.run_div.divmod(r, j, r);
        outer_slot<ND>(g, b, t, &k, &o);
        const int32_t l = o * ow + b.o_lo + j - l0;
        return static_cast<uint32_t>(l) < static_cast<uint32_t>(lc) ? image[l * row + k * p.run + r] : TC{};
      },
      [&](int32_t f, TC v) {
        if constexpr (ND == 1) {
          tile[f] = v;
        } else {
          const int32_t t = f / per_slot;
          tile[t * p.span * p.run + f - t * per_slot] = v;
        }
      });
}

template <int ND, typename TC, typename TX>
__device__ __forceinline__ void fold_lines_gather(const TC* tile, TX* __restrict__ x, const Geometry& g, int64_t C,
                                                  int64_t n0, const FoldLinesPlan& p, const LinesBlock<ND>& b,
                                                  bool accumulate) {
  using A = typename Acc<TX>::type;
  const int32_t e = b.e0 + static_cast<int32_t>(threadIdx.x);
  if (e >= b.e1) return;
  int32_t w, c;
  p.channels.divmod(e, w, c);
  TX* xe = x + ((n0 + b.n) * (g.in_size / g.in[ND - 1]) + b.line) * g.in[ND - 1] * C + e;
  A acc = accumulate ? static_cast<A>(to_acc(*xe)) : A(0);
  const TapRun<int32_t> last = taps_reading<int32_t>(g, ND - 1, w);
  const int32_t ci = static_cast<int32_t>(C);
  // Entry (o, k, c) of a slot at (o - o_lo) * run + k * C + c.
  const int32_t step = last.k_step * ci - last.o_step * p.run;
  const TC* first = tile + (last.o - b.o_lo) * p.run + last.k * ci + c;
  for (int32_t t = 0; t < b.slots && last.count > 0; ++t, first += p.span * p.run) {
    const TC* src = first;
    for (int32_t i = 0; i < last.count; ++i, src += step) acc += static_cast<A>(to_acc(*src));
  }
  *xe = store_value<TX>(acc);
}

template <int ND, typename TC, typename TX>
__global__ void __launch_bounds__(kThreads)
fold_lines_kernel(const TC* __restrict__ cols, TX* __restrict__ x, Geometry g, int64_t C, int64_t n0,
                  ColumnsLayout lay, FoldLinesPlan p, bool accumulate) {
  extern __shared__ __align__(16) unsigned char smem[];
  TC* tile = reinterpret_cast<TC*>(smem);
  const LinesBlock<ND> b = lines_block<ND>(g, C, p);
  fold_lines_load<ND>(tile, cols, g, C, lay, p, b);
  __syncthreads();
  fold_lines_gather<ND>(tile, x, g, C, n0, p, b, accumulate);
}

}  // namespace im2col::cuda
