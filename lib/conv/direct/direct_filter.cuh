// Direct filter gradient (direct_conv.h): pass 1 writes, per slice of output
// positions, the partial sums of dw; pass 2 sums the slices in a fixed order.
// The kernels of one spatial rank, instantiated by direct_filter_{1,2,3}d.cu
// (one compilation each, so that the build runs them side by side) and
// dispatched by direct_filter.cu.
//
// Pass 1 has three kernels, and the strip kernel of depthwise_rows.cuh for
// channels-first 3x3 and 5x5 depthwise filters at unit stride along rows:
// - depthwise channels-first: the input under a band of output rows is staged
//   in shared memory (tile.cuh), as for the forward; a group of threads takes
//   a channel, each thread every group-th position with one sum per tap in
//   registers, then the group meets in a warp (and shared-memory) reduction;
// - depthwise channels-last: a thread takes V consecutive channels, one
//   vector load per tap, with the block's rows of threads on interleaved
//   positions summed in shared memory;
// - anything else (small groups): one thread per (slice, output channel),
//   its Cg * K sums in shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/device_info.h"
#include "common/device_util.cuh"
#include "common/tile.cuh"
#include "conv/depthwise/depthwise_rows.cuh"
#include "conv/depthwise/depthwise_tile.cuh"
#include "conv/direct/direct_conv.h"
#include "conv/direct/direct_util.cuh"

namespace im2col::cuda {
namespace {

using DataType = xla::ffi::DataType;

constexpr int kWarps = kThreads / 32;

// The depthwise kernels keep KB (times V) sums in registers. With the block
// size alone as a bound, ptxas caps them at 40-64 registers and spills; three
// blocks per SM allow 80 (two took 96-127, and ncu showed them latency-bound
// at 24% occupancy).
constexpr int kFilterBlocksPerSM = 3;

// Positions whose loads a thread of the channels-first kernel issues
// together: fewer for many taps, whose sums take the registers.
template <int KB>
constexpr int kPositions = KB > 9 ? 4 : 8;

// --- depthwise, channels-first -------------------------------------------------

// Adds to totals[ci * K + k], for each channel ci of the block and tap k, the
// sum over the band's positions l of dy[l] * x[src(l, k)]. A group of LANES
// threads takes a channel (kThreads / LANES groups side by side), each thread
// every LANES-th position; the lanes meet in a warp reduction, then (LANES >
// 32) the group's warps in warp_sums (kWarps x KB), in a fixed order.
template <int LANES, int KB, int ND, typename T, typename A>
__device__ __forceinline__ void filter_band(const T* tile, const int32_t* taps, const T* dy_block,
                                            A* totals, A* warp_sums, const Geometry& g,
                                            const TilePlan& t, const TileBlock& b) {
  constexpr int32_t groups = kThreads / LANES, group_warps = LANES / 32;
  const int32_t group = threadIdx.x / LANES, first = threadIdx.x % LANES;
  const int32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t K = static_cast<int32_t>(g.kernel_size);
  int32_t tap[KB];
#pragma unroll
  for (int kk = 0; kk < KB; ++kk) tap[kk] = kk < K ? taps[kk] : 0;
  // Every thread runs every round (the block synchronizes in it).
  for (int32_t round = 0; round < b.channels; round += groups) {
    const int32_t ci = round + group;
    const bool active = ci < b.channels;
    A acc[KB];
#pragma unroll
    for (int kk = 0; kk < KB; ++kk) acc[kk] = A(0);
    if (active) {
      const T* src = tile + ci * t.plane;
      const T* dyc = dy_block + static_cast<int64_t>(ci) * g.out_size;
      // kPositions<KB> loads of dy in flight, then their taps from the tile.
      for (int32_t e0 = b.p_begin + first; e0 < b.p_end; e0 += kPositions<KB> * LANES) {
        A d[kPositions<KB>];
        int32_t pos[kPositions<KB>];
#pragma unroll
        for (int j = 0; j < kPositions<KB>; ++j) {
          const int32_t e = e0 + j * LANES;
          d[j] = e < b.p_end ? static_cast<A>(to_acc(__ldg(dyc + e))) : A(0);
          pos[j] = e < b.p_end ? position_offset<ND>(g, t, e, b.row0) : 0;
        }
#pragma unroll
        for (int j = 0; j < kPositions<KB>; ++j) {
          const T* at = src + pos[j];
#pragma unroll
          for (int kk = 0; kk < KB; ++kk)
            if (kk < K) acc[kk] += d[j] * static_cast<A>(to_acc(at[tap[kk]]));
        }
      }
    }
#pragma unroll
    for (int kk = 0; kk < KB; ++kk) acc[kk] = warp_sum(acc[kk]);
    if constexpr (LANES == 32) {
      if (active && lane == 0) {
#pragma unroll
        for (int kk = 0; kk < KB; ++kk)
          if (kk < K) totals[ci * K + kk] += acc[kk];
      }
    } else {
      if (lane == 0) {
#pragma unroll
        for (int kk = 0; kk < KB; ++kk)
          if (kk < K) warp_sums[warp * KB + kk] = acc[kk];
      }
      __syncthreads();
      if (active && first < K) {
        A sum = A(0);
#pragma unroll
        for (int w = 0; w < group_warps; ++w) sum += warp_sums[(group * group_warps + w) * KB + first];
        totals[ci * K + first] += sum;
      }
      __syncthreads();
    }
  }
}

// The widest group that still leaves every thread at least kPositions<KB>
// positions of the band, or that the block's few channels need to keep its
// threads busy.
template <int KB, int ND, typename T, typename A>
__device__ __forceinline__ void filter_band_any(const T* tile, const int32_t* taps, const T* dy_block,
                                                A* totals, A* warp_sums, const Geometry& g,
                                                const TilePlan& t, const TileBlock& b) {
  const int32_t positions = b.p_end - b.p_begin;
  if (positions >= kPositions<KB> * 256 || b.channels <= 1) {
    filter_band<256, KB, ND>(tile, taps, dy_block, totals, warp_sums, g, t, b);
  } else if (positions >= kPositions<KB> * 128 || b.channels <= 2) {
    filter_band<128, KB, ND>(tile, taps, dy_block, totals, warp_sums, g, t, b);
  } else if (positions >= kPositions<KB> * 64 || b.channels <= 4) {
    filter_band<64, KB, ND>(tile, taps, dy_block, totals, warp_sums, g, t, b);
  } else {
    filter_band<32, KB, ND>(tile, taps, dy_block, totals, warp_sums, g, t, b);
  }
}

// Block (slice, channel block): loops over the bands of its slice, staging
// each band's input in the tile, and writes its channels' sums to partials.
template <int KB, int ND, typename T>
__global__ void __launch_bounds__(kThreads, kFilterBlocksPerSM)
depthwise_filter_cf_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                           typename Acc<T>::type* __restrict__ partials, Geometry g, TilePlan t,
                           FilterSlices f) {
  using A = typename Acc<T>::type;
  extern __shared__ __align__(16) unsigned char smem[];
  int32_t* taps = reinterpret_cast<int32_t*>(smem);
  T* tile = reinterpret_cast<T*>(smem + table_bytes(t.table));
  A* warp_sums = reinterpret_cast<A*>(smem + tile_end(t, sizeof(T)));
  A* totals = warp_sums + kWarps * KB;
  const int64_t C = t.channels_total;
  int64_t slice, cb;
  divmod(static_cast<int64_t>(blockIdx.x), static_cast<int64_t>(t.channel_blocks), slice, cb);
  const SliceRows r = slice_rows(f, g, slice);
  TileBlock b;
  b.n = r.n;
  b.c0 = static_cast<int32_t>(cb) * t.channels;
  b.channels = t.channels < C - b.c0 ? t.channels : static_cast<int32_t>(C - b.c0);
  const int32_t K = static_cast<int32_t>(g.kernel_size);
  for (int32_t kk = threadIdx.x; kk < K; kk += kThreads) taps[kk] = tap_offset<ND>(g, t, kk);
  for (int32_t i = threadIdx.x; i < b.channels * K; i += kThreads) totals[i] = A(0);
  const T* x_block = x + (b.n * C + b.c0) * g.in_size;
  const T* dy_block = dy + (b.n * C + b.c0) * g.out_size;
  for (int32_t row0 = r.row_begin; row0 < r.row_end; row0 += t.band) {
    b.row0 = row0;
    b.p_begin = row0 * t.rest;
    b.p_end = (row0 + t.band < r.row_end ? row0 + t.band : r.row_end) * t.rest;
    __syncthreads();  // the previous band's reads of the tile are done
    fill_channels_first<ND, kDepthwiseFill>(tile, x_block, g, t, b);
    __syncthreads();
    filter_band_any<KB, ND>(tile, taps, dy_block, totals, warp_sums, g, t, b);
  }
  __syncthreads();
  A* out = partials + (slice * C + b.c0) * K;
  for (int32_t i = threadIdx.x; i < b.channels * K; i += kThreads) out[i] = totals[i];
}

// The strip kernel (depthwise_rows.cuh) where it applies: 2-D, 3x3 or 5x5.
template <typename T>
bool depthwise_filter_rows(const T* dy, const T* x, typename Acc<T>::type* partials, const Geometry& g,
                           const DirectShapes& s, const FilterSlices& f, cudaStream_t stream) {
  FilterRowsPlan p;
  if (!plan_depthwise_filter_rows(g, f.rows, f.per_image, s.c, sizeof(T), sizeof(typename Acc<T>::type), &p))
    return false;
  const int64_t blocks = f.count * s.c;
  if (blocks >= (int64_t{1} << 31)) return false;
  const unsigned grid = static_cast<unsigned>(blocks);
  if (g.kernel[0] == 3)
    depthwise_filter_rows_kernel<3, T><<<grid, p.threads, p.tile.smem, stream>>>(dy, x, partials, g, p);
  else
    depthwise_filter_rows_kernel<5, T><<<grid, p.threads, p.tile.smem, stream>>>(dy, x, partials, g, p);
  return true;
}

template <int KB, int ND, typename T>
bool depthwise_filter_cf(const T* dy, const T* x, typename Acc<T>::type* partials,
                         const Geometry& g, const DirectShapes& s, const FilterSlices& f,
                         cudaStream_t stream) {
  using A = typename Acc<T>::type;
  if constexpr (ND == 2) {
    if (depthwise_filter_rows(dy, x, partials, g, s, f, stream)) return true;
  }
  ColumnsLayout lay;
  lay.lc = std::min(f.rows, g.out[0]) * (g.out_size / g.out[0]);
  TilePlan t;
  if (!plan_tile(g, lay, s.c, false, sizeof(T), &t, kWarps * KB * sizeof(A), g.kernel_size * sizeof(A)))
    return false;
  const int64_t blocks = f.count * t.channel_blocks;
  if (blocks >= (int64_t{1} << 31)) return false;
  depthwise_filter_cf_kernel<KB, ND, T><<<static_cast<unsigned>(blocks), kThreads, t.smem, stream>>>(
      dy, x, partials, g, t, f);
  return true;
}

// --- depthwise, channels-last --------------------------------------------------

// Block (slice, unit block): `span` units of V channels side by side, and
// kThreads / span rows of threads taking interleaved positions of the slice;
// the rows' sums meet in shared memory, one tap at a time. Windows inside the
// input read tap k at a staged displacement, without per-tap bounds checks.
template <int KB, int ND, typename T, int V>
__global__ void __launch_bounds__(kThreads, kFilterBlocksPerSM)
depthwise_filter_cl_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                           typename Acc<T>::type* __restrict__ partials, Geometry g, int64_t C,
                           FilterSlices f, int32_t span) {
  using A = typename Acc<T>::type;
  __shared__ Pack<A, V> row_sums[kThreads];
  __shared__ int32_t taps[KB];  // tap_displacement in the input, for windows inside it
  const int32_t units = static_cast<int32_t>(C / V), rows = kThreads / span;
  const int64_t unit_blocks = (units + span - 1) / span;
  int64_t slice, ub;
  divmod(static_cast<int64_t>(blockIdx.x), unit_blocks, slice, ub);
  const SliceRows r = slice_rows(f, g, slice);
  const int32_t row = threadIdx.x / span, ul = threadIdx.x % span;
  const int32_t u = static_cast<int32_t>(ub) * span + ul;
  const int32_t K = static_cast<int32_t>(g.kernel_size);
  const int32_t rest = static_cast<int32_t>(g.out_size / g.out[0]);
  for (int32_t kk = threadIdx.x; kk < K; kk += kThreads) taps[kk] = tap_displacement<ND>(g, g.in, kk);
  __syncthreads();
  A acc[KB][V];
#pragma unroll
  for (int kk = 0; kk < KB; ++kk)
#pragma unroll
    for (int v = 0; v < V; ++v) acc[kk][v] = A(0);
  if (row < rows && u < units) {
    const T* dyn = dy + r.n * g.out_size * C + u * V;
    const T* xn = x + r.n * g.in_size * C + u * V;
    for (int32_t l = r.row_begin * rest + row; l < r.row_end * rest; l += rows) {
      int32_t o[kMaxSpatial], origin[kMaxSpatial], k[kMaxSpatial];
      unravel<ND>(l, g.out, o);
      window_origin<ND>(g, o, origin);
#pragma unroll
      for (int d = 0; d < ND; ++d) k[d] = 0;
      const Pack<T, V> dp = *reinterpret_cast<const Pack<T, V>*>(dyn + static_cast<int64_t>(l) * C);
      A d[V];
#pragma unroll
      for (int v = 0; v < V; ++v) d[v] = static_cast<A>(to_acc(dp.v[v]));
      const bool inside = window_inside<ND>(g, origin);
      const int32_t base = flat_offset<ND>(g.in, origin);
#pragma unroll
      for (int kk = 0; kk < KB; ++kk) {
        if (kk < K) {
          int32_t s = base + taps[kk];
          if (!inside) {
            s = source_offset_at<ND>(g, origin, k);
            increment<ND>(k, g.kernel);
          }
          if (s >= 0) multiply_add<V>(acc[kk], xn + static_cast<int64_t>(s) * C, d);
        }
      }
    }
  }
  A* out = partials + (slice * C + static_cast<int64_t>(u) * V) * K;
#pragma unroll
  for (int kk = 0; kk < KB; ++kk) {
    if (kk < K) {
#pragma unroll
      for (int v = 0; v < V; ++v) row_sums[threadIdx.x].v[v] = acc[kk][v];
      __syncthreads();
      if (row == 0 && u < units) {
        Pack<A, V> sum = row_sums[ul];
        for (int32_t rr = 1; rr < rows; ++rr) {
#pragma unroll
          for (int v = 0; v < V; ++v) sum.v[v] += row_sums[rr * span + ul].v[v];
        }
#pragma unroll
        for (int v = 0; v < V; ++v) out[v * K + kk] = sum.v[v];
      }
      __syncthreads();
    }
  }
}

template <int KB, int ND, typename T>
bool depthwise_filter_cl(const T* dy, const T* x, typename Acc<T>::type* partials,
                         const Geometry& g, const DirectShapes& s, const FilterSlices& f,
                         cudaStream_t stream) {
  // KB * V sums in registers: four channels per thread up to 9 taps (two in
  // float64), two up to 16, one beyond.
  constexpr int V = KB > 16 ? 1 : sizeof(T) == 8 || KB > 9 ? 2 : 4;
  if (s.c % V != 0 || !aligned_to(dy, sizeof(T) * V) || !aligned_to(x, sizeof(T) * V)) return false;
  const int64_t units = s.c / V;
  const int32_t span = static_cast<int32_t>(std::min<int64_t>(units, kThreads));
  const int64_t blocks = f.count * ((units + span - 1) / span);
  if (blocks >= (int64_t{1} << 31)) return false;
  depthwise_filter_cl_kernel<KB, ND, T, V><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      dy, x, partials, g, s.c, f, span);
  return true;
}

// --- depthwise, channels-last, 2-D, on tiles ------------------------------------

// Block (slice, channel slice of vb vectors): the slice's positions in tiles
// of th x tw, each tile's input patch and dy staged in shared memory
// (stage_patch, as for the tiled forward; dy in one copy, not a load per
// position whose latency each thread would wait on in turn), double
// buffered: the next tile's copies are in flight during this one's sums. A thread
// takes S consecutive channels of the slice (sub-vector sv) and every P-th
// position of each tile, with its KB x S sums in registers. At the end the
// block's P rows of threads meet in shared memory one tap at a time: each
// thread sums S rows of one channel, then `lanes` threads sum those in a
// fixed order.
template <int KB, int S, typename T>
__global__ void __launch_bounds__(kThreads, kFilterBlocksPerSM)
depthwise_filter_cl_tile_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                typename Acc<T>::type* __restrict__ partials, Geometry g, int64_t C,
                                FilterSlices f, DepthwiseTile t) {
  using A = typename Acc<T>::type;
  constexpr int V = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t tile_bytes = t.patch_bytes + t.dy_bytes;  // per buffer: patch, then dy
  A* row_sums = reinterpret_cast<A*>(smem);  // after the last tile: kThreads * S, then kThreads
  __shared__ int32_t taps[KB];                // tap k's element offset in the patch
  int32_t slice, cs;
  t.by_slices.divmod(static_cast<int32_t>(blockIdx.x), slice, cs);
  const SliceRows r = slice_rows(f, g, slice);
  const int32_t lanes = t.vb * V, subs = lanes / S, P = kThreads / subs;
  const int32_t sv = threadIdx.x % subs, pl = threadIdx.x / subs;
  const int64_t c0 = static_cast<int64_t>(cs) * lanes;
  const int32_t K = static_cast<int32_t>(g.kernel_size), KW = static_cast<int32_t>(g.kernel[1]);
  const int32_t sy = static_cast<int32_t>(g.stride[0]), sx = static_cast<int32_t>(g.stride[1]);
  const int32_t H = static_cast<int32_t>(g.in[0]), W = static_cast<int32_t>(g.in[1]);
  const int32_t OW = static_cast<int32_t>(g.out[1]);
  for (int32_t kk = threadIdx.x; kk < K; kk += blockDim.x) {
    const int32_t ky = kk / KW, kx = kk - ky * KW;
    taps[kk] = (ky * static_cast<int32_t>(g.rhs_dilation[0]) * t.pw + kx * static_cast<int32_t>(g.rhs_dilation[1])) * lanes;
  }
  A acc[KB][S];
#pragma unroll
  for (int kk = 0; kk < KB; ++kk)
#pragma unroll
    for (int s = 0; s < S; ++s) acc[kk][s] = A(0);
  const T* xn = x + r.n * g.in_size * C + c0;
  const T* dyn = dy + r.n * g.out_size * C + c0;
  const int32_t OH = static_cast<int32_t>(g.out[0]);
  const int32_t tiles = (r.row_end - r.row_begin + t.th - 1) / t.th * t.tiles_x;
  const auto tile_origin = [&](int32_t i, int32_t& y0, int32_t& x0) {
    int32_t ty, tx;
    t.by_tiles_x.divmod(i, ty, tx);
    y0 = r.row_begin + ty * t.th;
    x0 = tx * t.tw;
  };
  const auto stage = [&](int32_t i) {
    int32_t y0, x0;
    tile_origin(i, y0, x0);
    T* patch = reinterpret_cast<T*>(smem + (i & 1) * tile_bytes);
    stage_patch(patch, xn, y0 * sy - static_cast<int32_t>(g.pad_lo[0]),
                x0 * sx - static_cast<int32_t>(g.pad_lo[1]), H, W, C, t.ph, t.pw, t.vb_shift);
    stage_patch(reinterpret_cast<T*>(smem + (i & 1) * tile_bytes + t.patch_bytes), dyn, y0, x0, OH, OW, C,
                t.th, t.tw, t.vb_shift);
    commit_copies();
  };
  stage(0);
  for (int32_t i = 0; i < tiles; ++i) {
    if (i + 1 < tiles) {
      stage(i + 1);  // its buffer's last reader, tile i - 1, finished at the barrier below
      wait_copies<1>();
    } else {
      wait_copies<0>();
    }
    __syncthreads();  // tile i's copies (and the taps) visible to all
    int32_t y0, x0;
    tile_origin(i, y0, x0);
    const T* patch = reinterpret_cast<const T*>(smem + (i & 1) * tile_bytes);
    const T* dy_tile = reinterpret_cast<const T*>(smem + (i & 1) * tile_bytes + t.patch_bytes);
    const int32_t rows = t.th < r.row_end - y0 ? t.th : r.row_end - y0;
    const int32_t cols = t.tw < OW - x0 ? t.tw : OW - x0;
    // Position p = py * cols + px of the tile, advanced by P with carries.
    int32_t py = pl / cols, px = pl - py * cols;
    for (; py < rows; px += P) {
      while (px >= cols) {
        px -= cols;
        ++py;
      }
      if (py >= rows) break;
      const Pack<T, S> dp = *reinterpret_cast<const Pack<T, S>*>(dy_tile + (py * t.tw + px) * lanes + sv * S);
      A d[S];
#pragma unroll
      for (int s = 0; s < S; ++s) d[s] = static_cast<A>(to_acc(dp.v[s]));
      const T* base = patch + (py * sy * t.pw + px * sx) * lanes + sv * S;
#pragma unroll
      for (int kk = 0; kk < KB; ++kk) {
        if (kk < K) {
          const Pack<T, S> xv = *reinterpret_cast<const Pack<T, S>*>(base + taps[kk]);
#pragma unroll
          for (int s = 0; s < S; ++s) acc[kk][s] += d[s] * static_cast<A>(to_acc(xv.v[s]));
        }
      }
    }
    __syncthreads();  // tile i's buffer free for tile i + 2
  }
  // Row q of threads holds S channels per thread: channel ch = sv * S + s of
  // row q sits at row_sums[q * lanes + ch]. Thread (segment, ch) sums rows
  // segment * S .. segment * S + S - 1 (P = segments * S), then thread ch sums
  // the segments.
  A* segment_sums = row_sums + kThreads * S;
  const int32_t ch = threadIdx.x % lanes, segment = threadIdx.x / lanes, segments = kThreads / lanes;
  A* out = partials + (slice * C + c0 + ch) * K;
#pragma unroll
  for (int kk = 0; kk < KB; ++kk) {
    if (kk < K) {
      __syncthreads();
#pragma unroll
      for (int s = 0; s < S; ++s) row_sums[pl * lanes + sv * S + s] = acc[kk][s];
      __syncthreads();
      A sum = row_sums[segment * S * lanes + ch];
#pragma unroll
      for (int q = 1; q < S; ++q) sum += row_sums[(segment * S + q) * lanes + ch];
      segment_sums[segment * lanes + ch] = sum;
      __syncthreads();
      if (segment == 0) {
        A total = segment_sums[ch];
        for (int32_t q = 1; q < segments; ++q) total += segment_sums[q * lanes + ch];
        out[kk] = total;
      }
    }
  }
}

template <int KB, typename T>
bool depthwise_filter_cl_tiled(const T* dy, const T* x, typename Acc<T>::type* partials,
                               const Geometry& g, const DirectShapes& s, const FilterSlices& f,
                               cudaStream_t stream) {
  using A = typename Acc<T>::type;
  // KB * S sums in registers, as for depthwise_filter_cl.
  constexpr int S = KB > 16 ? 1 : sizeof(T) == 8 || KB > 9 ? 2 : 4;
  DepthwiseTile t;
  if (!plan_depthwise_filter_tile(g, s.c, f.rows, f.count, sizeof(T), &t) || !aligned_to(dy, 16) ||
      !aligned_to(x, 16))
    return false;
  const int64_t smem = std::max<int64_t>(2 * (t.patch_bytes + t.dy_bytes), kThreads * (S + 1) * sizeof(A));
  if (smem > 48 * 1024 &&
      allow_shared_bytes(reinterpret_cast<const void*>(depthwise_filter_cl_tile_kernel<KB, S, T>),
                         static_cast<int>(smem)) != cudaSuccess)
    return false;
  depthwise_filter_cl_tile_kernel<KB, S, T><<<static_cast<unsigned>(t.blocks), kThreads, smem, stream>>>(
      dy, x, partials, g, s.c, f, t);
  return true;
}

// --- any groups ------------------------------------------------------------------

// Thread (slice p, output channel o) sums dy[n, o, l] * x[n, c, src(l, k)]
// over the slice's positions in order, for each of its Cg * K filter
// elements, keeping the sums in shared memory (one column per thread), in
// rounds of at most kDirectMaxTaps elements.
template <int ND, typename T, typename A>
__global__ void __launch_bounds__(kThreads)
filter_partial_kernel(const T* __restrict__ dy, const T* __restrict__ x, A* __restrict__ partials,
                      Geometry g, DirectShapes sh, FilterSlices f) {
  extern __shared__ unsigned char smem_raw[];
  A* acc = reinterpret_cast<A*>(smem_raw);
  const int64_t K = g.kernel_size, Cg = sh.c / sh.groups, Og = sh.o / sh.groups;
  const int64_t taps = Cg * K, rest = g.out_size / g.out[0];
  for (int64_t t = grid_start(); t < f.count * sh.o; t += grid_step()) {
    int64_t p, o, gi, oo;
    divmod(t, sh.o, p, o);
    divmod(o, Og, gi, oo);
    const int64_t c0 = gi * Cg;
    const SliceRows r = slice_rows(f, g, p);
    for (int64_t t0 = 0; t0 < taps; t0 += kDirectMaxTaps) {
      const int64_t round = taps - t0 < kDirectMaxTaps ? taps - t0 : kDirectMaxTaps;
      for (int64_t i = 0; i < round; ++i) acc[i * kThreads + threadIdx.x] = 0;
      for (int64_t l = r.row_begin * rest; l < r.row_end * rest; ++l) {
        const A dyv = static_cast<A>(to_acc(__ldg(dy + image_index(sh.channels_last, r.n, o, l, sh.o, g.out_size))));
        int32_t oc[kMaxSpatial], origin[kMaxSpatial], k[kMaxSpatial];
        unravel<ND>(l, g.out, oc);
        window_origin<ND>(g, oc, origin);
#pragma unroll
        for (int d = 0; d < ND; ++d) k[d] = 0;
        for (int64_t kk = 0; kk < K; ++kk, increment<ND>(k, g.kernel)) {
          const int64_t s = source_offset_at<ND>(g, origin, k);
          if (s < 0) continue;
          for (int64_t j = 0; j < Cg; ++j) {
            const int64_t i = j * K + kk - t0;
            if (i >= 0 && i < round)
              acc[i * kThreads + threadIdx.x] +=
                  dyv * static_cast<A>(to_acc(__ldg(x + image_index(sh.channels_last, r.n, c0 + j, s, sh.c, g.in_size))));
          }
        }
      }
      for (int64_t i = 0; i < round; ++i)
        partials[(p * sh.o + o) * taps + t0 + i] = acc[i * kThreads + threadIdx.x];
    }
  }
}

// --- pass 2 ----------------------------------------------------------------------

// Block: 32 filter elements x kReduceLanes lanes. Lane w sums slices w,
// w + kReduceLanes, ... in four interleaved sums (four loads in flight); the
// lanes then meet in a fixed pairwise tree.
constexpr int kReduceLanes = 32;

template <typename T, typename A>
__global__ void __launch_bounds__(32 * kReduceLanes)
filter_reduce_kernel(const A* __restrict__ partials, T* __restrict__ dw, int64_t elements,
                     int64_t slices, int64_t Cg, int64_t K, bool cl) {
  __shared__ A sums[kReduceLanes][33];
  const int32_t x = threadIdx.x, w = threadIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * 32 + x;
  A acc[4] = {A(0), A(0), A(0), A(0)};
  if (i < elements) {
    for (int64_t p = w; p < slices; p += 4 * kReduceLanes) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t q = p + u * kReduceLanes;
        if (q < slices) acc[u] += partials[q * elements + i];
      }
    }
  }
  sums[w][x] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  __syncthreads();
  for (int32_t half = kReduceLanes / 2; half > 0; half /= 2) {
    if (w < half) sums[w][x] += sums[w + half][x];
    __syncthreads();
  }
  if (w == 0 && i < elements) {
    int64_t o, rest, j, kk;
    divmod(i, Cg * K, o, rest);
    divmod(rest, K, j, kk);
    dw[filter_index(cl, o, j, kk, Cg, K)] = store_value<T>(sums[0][x]);
  }
}

// Calls fn(integral_constant<KB>) with the tap bound the depthwise kernels
// are compiled for: the smallest of 5, 9, 16, 32 that is at least K.
template <typename Fn>
bool with_tap_bound(int64_t K, Fn&& fn) {
  if (K <= 5) return fn(std::integral_constant<int, 5>{});
  if (K <= 9) return fn(std::integral_constant<int, 9>{});
  if (K <= 16) return fn(std::integral_constant<int, 16>{});
  if (K <= 32) return fn(std::integral_constant<int, 32>{});
  return false;
}

}  // namespace

// Pass 1 (unless the grouped kernels wrote the partial sums) and pass 2 for
// a rank-ND geometry.
template <int ND>
cudaError_t direct_backward_filter_rank(const void* dy, const void* x, void* dw, void* partials,
                                        const FilterSlices& f, DataType type, const Geometry& g,
                                        const DirectShapes& s, bool grouped, cudaStream_t stream) {
  const int64_t Cg = s.c / s.groups, taps = Cg * g.kernel_size;
  return with_type(type, [&](auto tag) {
    using T = decltype(tag);
    using A = typename Acc<T>::type;
    const T* dyt = static_cast<const T*>(dy);
    const T* xt = static_cast<const T*>(x);
    A* pt = static_cast<A*>(partials);
    const bool done = grouped || (s.depthwise() && with_tap_bound(g.kernel_size, [&](auto bound) {
      constexpr int KB = decltype(bound)::value;
      if (!s.channels_last) return depthwise_filter_cf<KB, ND>(dyt, xt, pt, g, s, f, stream);
      if constexpr (ND == 2) {
        if (depthwise_filter_cl_tiled<KB>(dyt, xt, pt, g, s, f, stream)) return true;
      }
      return depthwise_filter_cl<KB, ND>(dyt, xt, pt, g, s, f, stream);
    }));
    if (!done) {
      const size_t smem = static_cast<size_t>(std::min(taps, kDirectMaxTaps)) * kThreads * sizeof(A);
      if (smem > 48 * 1024) {
        const cudaError_t e = allow_shared_bytes(
            reinterpret_cast<const void*>(filter_partial_kernel<ND, T, A>), static_cast<int>(smem));
        if (e != cudaSuccess) return e;
      }
      filter_partial_kernel<ND, T, A><<<blocks_for(f.count * s.o), kThreads, smem, stream>>>(
          dyt, xt, pt, g, s, f);
    }
    const int64_t elements = s.o * taps;
    filter_reduce_kernel<T, A><<<static_cast<unsigned>((elements + 31) / 32), dim3(32, kReduceLanes), 0,
                                 stream>>>(pt, static_cast<T*>(dw), elements, f.count, Cg,
                                           g.kernel_size, s.channels_last);
    return cudaGetLastError();
  });
}

}  // namespace im2col::cuda
