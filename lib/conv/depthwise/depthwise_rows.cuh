// Channels-first depthwise convolution on strips of output rows (2-D and
// 3-D, KH taps at unit stride and dilation along the row dimension ND - 2):
// the forward, and the input gradient as the forward of dy on the
// transposed geometry with the filter read backwards (`flip`).
//
// A block stages the input under its band (tile.cuh's plan and extents,
// channels-first) in shared memory, one warp per tile line, and its
// channels' weights as float in the order the tile's taps are read. Each
// thread then takes kStripRows output rows at one position of the last
// dimension (consecutive threads: consecutive positions, so that the tile's
// reads are free of bank conflicts and the stores coalesce). For each tap
// along the last dimension it reads the kStripRows + KH - 1 input rows under
// the strip once and adds each to the KH outputs that read it: about a third
// of the shared-memory reads of one read per (output, tap), the cost that
// made the per-position kernel (direct_conv.cu) issue-bound.
//
// Split into fill and compute device functions so that the host test
// (tests/host/depthwise_rows_on_host.cc) can run all threads of one phase
// before the other.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/device_util.cuh"
#include "common/geometry.h"
#include "common/tile.cuh"

namespace im2col::cuda {

constexpr int kStripRows = 8;
constexpr int32_t kRowsMaxThreads = 512;
// Items (threads) a forward block aims at. A block waits for its whole tile
// before computing, so the loads an SM has in flight are the tiles of the
// blocks filling at the time: small blocks, many per SM, keep more of them in
// flight (the first plan, whole 56 x 56 planes in 416 threads, two blocks per
// SM, moved about 1 TB/s).
constexpr int32_t kRowsBlockItems = 128;
constexpr int kRowsBlocksPerSM = 2;  // with kRowsMaxThreads: at most 64 registers

struct RowsPlan {
  TilePlan tile;             // band along dimension 0, channels per block
  int32_t strips = 0;        // strips of kStripRows rows along dimension ND - 2 per depth row
  int32_t depth = 1;         // 3-D: output rows of dimension 0 per band; 2-D: 1
  int32_t threads = 0;       // per block
  size_t tile_bytes = 0;     // tile and the strips' overrun, 16-byte rounded
  FastDiv width;             // out[ND - 1]
  FastDiv strips_div;
  FastDiv depth_div;
};

// Whether the strip kernel takes g (KH its template bound, g.kernel[ND - 2]).
inline bool depthwise_rows_applies(const Geometry& g) {
  if (g.nd < 2) return false;
  const int r = g.nd - 2;
  return g.stride[r] == 1 && g.rhs_dilation[r] == 1 &&
         (g.kernel[r] == 3 || g.kernel[r] == 5 || g.kernel[r] == 7);
}

// Plans the blocks: whole bands of strips and as many channels as keep a
// block near kRowsBlockItems items (one per thread; at most kRowsMaxThreads
// threads, which loop where one row has more) and its shared memory at most
// kTileSmemMax. False where the kernel does not apply.
inline bool plan_depthwise_rows(const Geometry& g, int64_t C, size_t elem_bytes, size_t acc_bytes,
                                RowsPlan* p) {
  // Offsets within one channel's image are int32.
  if (!depthwise_rows_applies(g) || g.out_size == 0 || C == 0 || g.in_size >= (int64_t{1} << 31) ||
      g.out_size >= (int64_t{1} << 31))
    return false;
  ColumnsLayout lay;
  lay.lc = g.out_size;
  TilePlan t;
  if (!tile_extents(g, lay, &t)) return false;
  const int nd = g.nd, r = nd - 2;
  const int64_t W = g.out[nd - 1], rows = g.out[r];
  const int64_t strips_total = (rows + kStripRows - 1) / kStripRows;
  // Items (threads) per output row of dimension 0: 2-D a strip's W, 3-D a
  // depth row's strips * W.
  const int64_t per_row = nd == 2 ? W : strips_total * W;
  const int64_t units = nd == 2 ? strips_total : g.out[0];  // bands are made of these
  int64_t per_band = std::max<int64_t>(1, std::min<int64_t>(units, kRowsBlockItems / per_row));
  per_band = (units + (units + per_band - 1) / per_band - 1) / ((units + per_band - 1) / per_band);
  int64_t channels = std::max<int64_t>(1, std::min<int64_t>(C, kRowsBlockItems / (per_band * per_row)));
  const int64_t pitch = t.extent[nd - 1];
  auto layout = [&](int64_t per_band_, int64_t channels_, size_t* tile_bytes) {
    const int64_t band = nd == 2 ? per_band_ * kStripRows : per_band_;
    int64_t plane = band_extent(g, band);
    for (int d = 1; d < nd; ++d) plane *= t.extent[d];
    *tile_bytes = round16(static_cast<size_t>(channels_ * plane + kStripRows * pitch) * elem_bytes);
    return *tile_bytes + static_cast<size_t>(channels_ * g.kernel_size) * acc_bytes;
  };
  size_t tile_bytes = 0;
  while (layout(per_band, channels, &tile_bytes) > kTileSmemPreferred && channels > 1)
    channels = (channels + 1) / 2;
  while (layout(per_band, channels, &tile_bytes) > kTileSmemMax && per_band > 1)
    per_band = (per_band + 1) / 2;
  const size_t smem = layout(per_band, channels, &tile_bytes);
  if (smem > kTileSmemMax) return false;
  const int64_t band = nd == 2 ? per_band * kStripRows : per_band;
  size_tile(g, lay, C, false, band, channels, 0, smem, &t);
  p->tile = t;
  p->strips = static_cast<int32_t>(nd == 2 ? per_band : strips_total);
  p->depth = static_cast<int32_t>(nd == 2 ? 1 : per_band);
  const int64_t items = channels * per_band * per_row;
  p->threads = static_cast<int32_t>(std::min<int64_t>(kRowsMaxThreads, (items + 31) / 32 * 32));
  p->tile_bytes = tile_bytes;
  p->width = FastDiv(W);
  p->strips_div = FastDiv(p->strips);
  p->depth_div = FastDiv(p->depth);
  return true;
}

// The image, channels and band of this block.
__device__ __forceinline__ TileBlock rows_block(const Geometry& g, const RowsPlan& p) {
  ColumnsLayout lay;
  lay.lc = g.out_size;
  return tile_block(p.tile, p.tile.channels_total, lay);
}

// Fills block b's tile (its channels of image n under its band) and its
// weights, [ci][tap] in the order the tile's taps are read: with `flip`,
// tap j takes the filter's tap K - 1 - j.
template <int ND, typename T, typename A>
__device__ __forceinline__ void depthwise_rows_fill(unsigned char* smem, const T* x, const T* w,
                                                    const Geometry& g, const RowsPlan& p, bool flip,
                                                    const TileBlock& b) {
  const TilePlan& t = p.tile;
  A* weights = reinterpret_cast<A*>(smem + p.tile_bytes);
  const int32_t K = static_cast<int32_t>(g.kernel_size);
  for (int32_t i = threadIdx.x; i < b.channels * K; i += blockDim.x) {
    const int32_t ci = i / K, j = i - ci * K;
    weights[i] = static_cast<A>(to_acc(__ldg(w + static_cast<int64_t>(b.c0 + ci) * K + (flip ? K - 1 - j : j))));
  }
  fill_tile_by_lines<ND>(reinterpret_cast<T*>(smem), x + (b.n * t.channels_total + b.c0) * g.in_size,
                               b.channels, b.row0, g, t);
}

// The outputs of the block's strips from the filled tile and weights.
template <int KH, int ND, typename T, typename TY>
__device__ __forceinline__ void depthwise_rows_compute(const unsigned char* smem, TY* y,
                                                       const Geometry& g, const RowsPlan& p,
                                                       const TileBlock& b) {
  using A = typename Acc<TY>::type;
  constexpr int H = kStripRows, R = H + KH - 1;
  const TilePlan& t = p.tile;
  const T* tile = reinterpret_cast<const T*>(smem);
  const A* weights = reinterpret_cast<const A*>(smem + p.tile_bytes);
  constexpr int last = ND - 1, row_dim = ND - 2;
  const int32_t W = static_cast<int32_t>(p.width.d), pitch = t.extent[last];
  const int32_t K = static_cast<int32_t>(g.kernel_size), KW = static_cast<int32_t>(g.kernel[last]);
  const int32_t x_step = static_cast<int32_t>(g.stride[last]), kw_step = static_cast<int32_t>(g.rhs_dilation[last]);
  // 3-D: the depth taps and output rows, a tile plane apart.
  const int32_t depth_plane = ND == 3 ? t.extent[1] * pitch : 0;
  const int32_t KD = ND == 3 ? static_cast<int32_t>(g.kernel[0]) : 1;
  const int32_t kd_step = ND == 3 ? static_cast<int32_t>(g.rhs_dilation[0]) * depth_plane : 0;
  const int32_t dp_step = ND == 3 ? static_cast<int32_t>(g.stride[0]) * depth_plane : 0;
  const int32_t rows = static_cast<int32_t>(g.out[row_dim]);
  const int32_t items = b.channels * p.depth * p.strips * W;
  for (int32_t item = threadIdx.x; item < items; item += blockDim.x) {
    int32_t x, rest, s, ci, dp = 0;
    p.width.divmod(item, rest, x);
    p.strips_div.divmod(rest, rest, s);
    if (ND == 3) {
      p.depth_div.divmod(rest, ci, dp);
      if (b.row0 + dp >= static_cast<int32_t>(g.out[0])) continue;
    } else {
      ci = rest;
    }
    // First output row of the strip along row_dim, in the band (2-D) or the image (3-D).
    const int32_t h0 = s * H;
    const int32_t row_first = ND == 2 ? b.row0 + h0 : h0;
    const int32_t valid = rows - row_first;
    if (valid <= 0) continue;
    const T* src = tile + ci * t.plane + dp * dp_step + h0 * pitch + x * x_step;
    const A* wc = weights + ci * K;
    A acc[H];
#pragma unroll
    for (int h = 0; h < H; ++h) acc[h] = A(0);
    for (int32_t kd = 0; kd < KD; ++kd) {
      for (int32_t kw = 0; kw < KW; ++kw) {
        const T* col = src + kd * kd_step + kw * kw_step;
        A v[R];
#pragma unroll
        for (int r = 0; r < R; ++r) v[r] = static_cast<A>(to_acc(col[r * pitch]));
        const A* wk = wc + kd * KH * KW + kw;
#pragma unroll
        for (int kh = 0; kh < KH; ++kh) {
          const A wv = wk[kh * KW];
#pragma unroll
          for (int h = 0; h < H; ++h) acc[h] += wv * v[h + kh];
        }
      }
    }
    const int64_t row_index = ND == 2 ? row_first : static_cast<int64_t>(b.row0 + dp) * rows + row_first;
    TY* out = y + (b.n * t.channels_total + b.c0 + ci) * g.out_size + row_index * W + x;
#pragma unroll
    for (int h = 0; h < H; ++h)
      if (h < valid) out[h * W] = store_value<TY>(acc[h]);
  }
}

template <int KH, int ND, typename T, typename TY>
__global__ void __launch_bounds__(kRowsMaxThreads, kRowsBlocksPerSM)
depthwise_rows_kernel(const T* __restrict__ x, const T* __restrict__ w, TY* __restrict__ y, Geometry g,
                      RowsPlan p, bool flip) {
  extern __shared__ __align__(16) unsigned char smem[];
  const TileBlock b = rows_block(g, p);
  depthwise_rows_fill<ND, T, typename Acc<TY>::type>(smem, x, w, g, p, flip, b);
  __syncthreads();
  depthwise_rows_compute<KH, ND, T, TY>(smem, y, g, p, b);
}

// --- the filter gradient -------------------------------------------------------
// 2-D, KH x KH taps (3 or 5) at unit stride and dilation along dimension 0:
// dw[c][kh][kw] = sum over output positions (r, x) of dy[r][x] times the
// input under tap (kh, kw). A block takes one slice of output rows of one
// image (direct_conv.h's FilterSlices) and one channel; its threads take
// strips as in the forward, each holding the strip's kStripRows values of dy
// and its KH * KH sums in registers, and meet in one reduction at the end.

struct FilterRowsPlan {
  TilePlan tile;           // one channel's band of strips * kStripRows rows
  int32_t strips = 0;      // per band
  int32_t threads = 0;     // per block
  int64_t slice_rows = 0;  // FilterSlices::rows
  int64_t per_image = 0;   // FilterSlices::per_image
  size_t tile_bytes = 0;   // then kRowsMaxThreads / 32 * K sums of the reduction
  FastDiv width;           // out[1]
  FastDiv channels, slices_per_image;  // the block index's parts: C, per_image
};

// Fewer items per band than this leave most of a block's threads idle (small
// images): the per-position kernel (direct_filter.cuh) takes those.
constexpr int32_t kFilterRowsMinItems = 64;

inline bool depthwise_filter_rows_applies(const Geometry& g) {
  return g.nd == 2 && g.stride[0] == 1 && g.rhs_dilation[0] == 1 && g.kernel[0] == g.kernel[1] &&
         (g.kernel[0] == 3 || g.kernel[0] == 5);
}

inline bool plan_depthwise_filter_rows(const Geometry& g, int64_t slice_rows, int64_t per_image, int64_t C,
                                       size_t elem_bytes, size_t acc_bytes, FilterRowsPlan* p) {
  if (!depthwise_filter_rows_applies(g) || g.out_size == 0 || C == 0 || slice_rows < 1 ||
      g.in_size >= (int64_t{1} << 31) || g.out_size >= (int64_t{1} << 31))
    return false;
  const int64_t rows = std::min(slice_rows, g.out[0]), W = g.out[1];
  ColumnsLayout lay;
  lay.lc = rows * W;
  TilePlan t;
  if (!tile_extents(g, lay, &t)) return false;
  const int64_t strips = (rows + kStripRows - 1) / kStripRows;
  int64_t per_band = std::max<int64_t>(1, std::min<int64_t>(strips, kRowsMaxThreads / W));
  per_band = (strips + (strips + per_band - 1) / per_band - 1) / ((strips + per_band - 1) / per_band);
  if (per_band * W < kFilterRowsMinItems) return false;
  auto bytes = [&](int64_t per_band_, size_t* tile_bytes) {
    *tile_bytes = round16(static_cast<size_t>(tile_plane(g, t, per_band_ * kStripRows)) * elem_bytes);
    return *tile_bytes + static_cast<size_t>(kRowsMaxThreads / 32 * g.kernel_size) * acc_bytes;
  };
  size_t tile_bytes = 0;
  while (bytes(per_band, &tile_bytes) > kTileSmemMax && per_band > 1) per_band = (per_band + 1) / 2;
  const size_t smem = bytes(per_band, &tile_bytes);
  if (smem > kTileSmemMax) return false;
  size_tile(g, lay, C, false, per_band * kStripRows, 1, 0, smem, &t);
  p->tile = t;
  p->strips = static_cast<int32_t>(per_band);
  p->threads = static_cast<int32_t>(std::min<int64_t>(kRowsMaxThreads, (per_band * W + 31) / 32 * 32));
  p->slice_rows = slice_rows;
  p->per_image = per_image;
  p->tile_bytes = tile_bytes;
  p->width = FastDiv(W);
  p->channels = FastDiv(C);
  p->slices_per_image = FastDiv(per_image);
  return true;
}

// Adds to acc this thread's strips of the band starting at output row row0
// (rows past row_end, the slice's end, read as zero gradient).
template <int KH, typename T, typename A>
__device__ __forceinline__ void depthwise_filter_rows_band(const T* tile, const T* dy_plane, A (&acc)[KH][KH],
                                                           int32_t row0, int32_t row_end, const Geometry& g,
                                                           const FilterRowsPlan& p) {
  constexpr int H = kStripRows, R = H + KH - 1;
  const int32_t W = static_cast<int32_t>(p.width.d), pitch = p.tile.extent[1];
  const int32_t x_step = static_cast<int32_t>(g.stride[1]), kw_step = static_cast<int32_t>(g.rhs_dilation[1]);
  const int32_t items = p.strips * W;
  for (int32_t item = threadIdx.x; item < items; item += blockDim.x) {
    int32_t s, x;
    p.width.divmod(item, s, x);
    const int32_t h0 = s * H, valid = row_end - (row0 + h0);
    if (valid <= 0) continue;
    const T* dy_strip = dy_plane + static_cast<int64_t>(row0 + h0) * W + x;
    A d[H];
#pragma unroll
    for (int h = 0; h < H; ++h) d[h] = h < valid ? static_cast<A>(to_acc(__ldg(dy_strip + h * W))) : A(0);
    const T* src = tile + h0 * pitch + x * x_step;
#pragma unroll
    for (int kw = 0; kw < KH; ++kw) {
      const T* col = src + kw * kw_step;
      A v[R];
#pragma unroll
      for (int r = 0; r < R; ++r) v[r] = static_cast<A>(to_acc(col[r * pitch]));
#pragma unroll
      for (int kh = 0; kh < KH; ++kh)
#pragma unroll
        for (int h = 0; h < H; ++h) acc[kh][kw] += d[h] * v[h + kh];
    }
  }
}

// Block (slice, channel): its bands in turn, then the block's sums, in a
// fixed order, to partials[(slice * C + c) * K + tap].
template <int KH, typename T>
__global__ void __launch_bounds__(kRowsMaxThreads, kRowsBlocksPerSM)
depthwise_filter_rows_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                             typename Acc<T>::type* __restrict__ partials, Geometry g, FilterRowsPlan p) {
  using A = typename Acc<T>::type;
  constexpr int K = KH * KH;
  extern __shared__ __align__(16) unsigned char smem[];
  T* tile = reinterpret_cast<T*>(smem);
  A* warp_sums = reinterpret_cast<A*>(smem + p.tile_bytes);
  const int64_t C = p.tile.channels_total;
  int32_t slice, c, n, part;
  p.channels.divmod(static_cast<int32_t>(blockIdx.x), slice, c);
  p.slices_per_image.divmod(slice, n, part);
  const int32_t row_begin = part * static_cast<int32_t>(p.slice_rows);
  const int32_t slice_end = row_begin + static_cast<int32_t>(p.slice_rows);
  const int32_t row_end = slice_end < static_cast<int32_t>(g.out[0]) ? slice_end : static_cast<int32_t>(g.out[0]);
  const T* x_plane = x + (n * C + c) * g.in_size;
  const T* dy_plane = dy + (n * C + c) * g.out_size;  // n * C: 64-bit
  A acc[KH][KH];
#pragma unroll
  for (int kh = 0; kh < KH; ++kh)
#pragma unroll
    for (int kw = 0; kw < KH; ++kw) acc[kh][kw] = A(0);
  for (int32_t row0 = row_begin; row0 < row_end; row0 += p.tile.band) {
    __syncthreads();  // the previous band's reads of the tile are done
    fill_tile_by_lines<2>(tile, x_plane, 1, row0, g, p.tile);
    __syncthreads();
    depthwise_filter_rows_band<KH>(tile, dy_plane, acc, row0, row_end, g, p);
  }
  const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int kh = 0; kh < KH; ++kh)
#pragma unroll
    for (int kw = 0; kw < KH; ++kw) {
      const A v = warp_sum(acc[kh][kw]);
      if (lane == 0) warp_sums[warp * K + kh * KH + kw] = v;
    }
  __syncthreads();
  if (threadIdx.x < K) {
    A sum = A(0);
    for (int32_t w = 0; w < static_cast<int32_t>(blockDim.x / 32); ++w) sum += warp_sums[w * K + threadIdx.x];
    partials[(slice * C + c) * K + threadIdx.x] = sum;  // slice * C: 64-bit
  }
}

}  // namespace im2col::cuda
