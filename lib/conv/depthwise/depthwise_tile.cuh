// Depthwise convolution, channels-last, 2-D and 3-D, without lhs dilation, on
// shared-memory tiles (the forward, and with `flip` the unit-stride input
// gradient on transposed_geometry).
//
// A block takes th x tw output positions of one output plane (the last two
// dimensions) and a slice of vb channel vectors of 16 bytes. It stages the
// slice's weights ([tap][channel], accumulator type) and the input patch under
// its positions (cp.async, padding as zeros) in shared memory. A thread then
// takes one vector of one tile column and kDepthwiseRows tile rows: each tap's weights
// are read once for those outputs, and every input vector comes from
// shared memory, so global memory sees each input element about once (plus
// the patch's halo) where the per-position kernels read it once per tap. In
// 3-D the block loops over the kernel's depth taps, staging the patch of each
// input plane in turn.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/device_util.cuh"
#include "common/geometry.h"
#include "conv/direct/direct_util.cuh"

namespace im2col::cuda {

constexpr int log2_of(int v) { return v <= 1 ? 0 : 1 + log2_of(v / 2); }

// Output rows per thread: R * V accumulators (32 registers for float).
template <typename T>
constexpr int kDepthwiseRows = sizeof(T) == 2 ? 4 : 8;

struct DepthwiseTile {
  int32_t vb = 1, vb_shift = 0;     // 16-byte vectors per slice (1, 2 or 4), log2
  int32_t slices = 1;               // C / (V * vb)
  int32_t tw = 1, th = 1;           // output tile: columns, rows (row_groups * rows per thread)
  int32_t row_groups = 1;
  int32_t pw = 1, ph = 1;           // input patch
  int32_t tiles_x = 1, tiles_y = 1;
  int64_t patch_bytes = 0, smem = 0, blocks = 0;
  int64_t dy_bytes = 0;  // the filter gradient's dy tile
  // Divisions of the block and thread indices, fixed at launch.
  FastDiv by_slices, by_tiles_x, by_tiles_y, by_depth, by_tw;
};

// The input patch (rows, columns) under th x tw output positions of the last
// two dimensions.
inline void patch_extent(const Geometry& g, int64_t th, int64_t tw, int32_t* ph, int32_t* pw) {
  const int Y = g.nd - 2, X = g.nd - 1;
  *pw = static_cast<int32_t>((tw - 1) * g.stride[X] + (g.kernel[X] - 1) * g.rhs_dilation[X] + 1);
  *ph = static_cast<int32_t>((th - 1) * g.stride[Y] + (g.kernel[Y] - 1) * g.rhs_dilation[Y] + 1);
}

// The channel slices and tile columns (at most 32, balanced) of both plans.
inline bool plan_slices_and_columns(const Geometry& g, int64_t c, size_t elem_bytes, DepthwiseTile* t) {
  const int vector = static_cast<int>(16 / elem_bytes);
  if (g.nd < 2 || g.any_lhs_dilation || c % vector != 0) return false;
  const int64_t vectors = c / vector;
  t->vb = vectors % 4 == 0 ? 4 : vectors % 2 == 0 ? 2 : 1;
  t->vb_shift = t->vb == 4 ? 2 : t->vb == 2 ? 1 : 0;
  t->slices = static_cast<int32_t>(vectors / t->vb);
  const int64_t out_x = g.out[g.nd - 1];
  t->tiles_x = static_cast<int32_t>((out_x + 31) / 32);
  t->tw = static_cast<int32_t>((out_x + t->tiles_x - 1) / t->tiles_x);
  t->by_slices = FastDiv(t->slices);
  t->by_tiles_x = FastDiv(t->tiles_x);
  t->by_tw = FastDiv(t->tw);
  return true;
}

// The tile of a depthwise channels-last forward with C channels of
// elem_bytes, `rows` output rows per thread and accumulators of acc_bytes;
// false where it does not apply (1-D, lhs dilation, channels not a multiple
// of the vector, a patch or weight table past 48 KB, too many blocks).
inline bool plan_depthwise_tile(const Geometry& g, int64_t n, int64_t c, size_t elem_bytes, int rows,
                                size_t acc_bytes, DepthwiseTile* out) {
  DepthwiseTile t;
  if (!plan_slices_and_columns(g, c, elem_bytes, &t)) return false;
  const int Y = g.nd - 2;
  const int64_t rows_needed = (g.out[Y] + rows - 1) / rows;
  t.row_groups = static_cast<int32_t>(std::min<int64_t>(std::max(1, kThreads / (t.vb * t.tw)), rows_needed));
  const int64_t weight_bytes = g.kernel_size * t.vb * static_cast<int64_t>(16 / elem_bytes * acc_bytes);
  for (;; t.row_groups /= 2) {
    t.th = t.row_groups * rows;
    patch_extent(g, t.th, t.tw, &t.ph, &t.pw);
    t.patch_bytes = int64_t{16} * t.pw * t.ph * t.vb;
    t.smem = t.patch_bytes + weight_bytes;
    if (t.smem <= 48 * 1024) break;
    if (t.row_groups == 1) return false;
  }
  t.tiles_y = static_cast<int32_t>((g.out[Y] + t.th - 1) / t.th);
  t.by_tiles_y = FastDiv(t.tiles_y);
  t.by_depth = FastDiv(g.nd == 3 ? g.out[0] : 1);
  t.blocks = n * (g.nd == 3 ? g.out[0] : 1) * t.tiles_y * t.tiles_x * t.slices;
  if (t.blocks >= (int64_t{1} << 31)) return false;
  *out = t;
  return true;
}

// Copies (cp.async, neither committed nor waited for) the ph x pw x 2^vb_shift 16-byte
// vectors of the patch whose first pixel is (iy0, ix0) of the H x W plane xp
// (C channels per pixel, starting at the slice's first channel) to `patch`;
// pixels outside the plane read as zeros. The division of the copy index by
// the patch row advances by carries.
template <typename T>
__device__ __forceinline__ void stage_patch(T* patch, const T* xp, int32_t iy0, int32_t ix0,
                                            int32_t H, int32_t W, int64_t C, int32_t ph, int32_t pw,
                                            int32_t vb_shift) {
  constexpr int V = 16 / sizeof(T);
  const int32_t row_vectors = pw << vb_shift, mask = (1 << vb_shift) - 1;
  const int32_t step_rows = blockDim.x / row_vectors, step_rest = blockDim.x - step_rows * row_vectors;
  int32_t py = threadIdx.x / row_vectors, rest = threadIdx.x - py * row_vectors;
  for (int32_t i = threadIdx.x; i < ph * row_vectors; i += blockDim.x) {
    const int32_t iy = iy0 + py, ix = ix0 + (rest >> vb_shift);
    const bool valid = static_cast<uint32_t>(iy) < static_cast<uint32_t>(H) &&
                       static_cast<uint32_t>(ix) < static_cast<uint32_t>(W);
    const T* src = valid ? xp + (static_cast<int64_t>(iy) * W + ix) * C + (rest & mask) * V : xp;
    copy_async(shared_address(patch + static_cast<int64_t>(i) * V), src, valid);
    py += step_rows;
    rest += step_rest;
    if (rest >= row_vectors) {
      rest -= row_vectors;
      ++py;
    }
  }
}

// The tiles of the 2-D channels-last depthwise filter gradient
// (direct_filter.cu): one block per (slice of `rows` output rows, channel
// slice), tiles at most 8 rows high (th), two tiles' patches and dy (double
// buffered) in at most kFilterTileSmem bytes (past the default 48 KB: a
// dilated kernel's patch needs ~60 KB for two tiles of 2 rows).
constexpr int64_t kFilterTileSmem = 96 * 1024;

inline bool plan_depthwise_filter_tile(const Geometry& g, int64_t c, int64_t rows,
                                       int64_t slices, size_t elem_bytes, DepthwiseTile* out) {
  DepthwiseTile t;
  if (g.nd != 2 || !plan_slices_and_columns(g, c, elem_bytes, &t)) return false;
  for (t.th = static_cast<int32_t>(std::min<int64_t>(rows, 8));; t.th /= 2) {
    patch_extent(g, t.th, t.tw, &t.ph, &t.pw);
    t.patch_bytes = int64_t{16} * t.pw * t.ph * t.vb;
    t.dy_bytes = int64_t{16} * t.th * t.tw * t.vb;
    // 1 KB is left for the kernel's static table of taps.
    if (2 * (t.patch_bytes + t.dy_bytes) <= kFilterTileSmem - 1024) break;
    if (t.th == 1) return false;
  }
  t.blocks = slices * t.slices;
  if (t.blocks >= (int64_t{1} << 31)) return false;
  *out = t;
  return true;
}

template <int ND, typename T, typename TY>
__global__ void __launch_bounds__(kThreads)
depthwise_cl_tile_kernel(const T* __restrict__ x, const T* __restrict__ w, TY* __restrict__ y,
                         Geometry g, DepthwiseTile t, int64_t C, bool flip) {
  using A = typename Acc<TY>::type;
  constexpr int V = 16 / sizeof(T), Y = ND - 2, X = ND - 1, R = kDepthwiseRows<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  Pack<T, V>* patch = reinterpret_cast<Pack<T, V>*>(smem);
  A* weights = reinterpret_cast<A*>(smem + t.patch_bytes);

  // Block: slice fastest, so that neighbouring blocks read neighbouring
  // channels of the same pixels.
  int32_t b = static_cast<int32_t>(blockIdx.x), slice, tx, ty, oz = 0;
  t.by_slices.divmod(b, b, slice);
  t.by_tiles_x.divmod(b, b, tx);
  t.by_tiles_y.divmod(b, b, ty);
  if constexpr (ND == 3) t.by_depth.divmod(b, b, oz);
  const int64_t n = b;

  const int32_t K = static_cast<int32_t>(g.kernel_size), lanes = t.vb * V, lane_shift = t.vb_shift + log2_of(V);
  const int64_t c0 = static_cast<int64_t>(slice) * lanes;
  for (int32_t i = threadIdx.x; i < K * lanes; i += blockDim.x) {
    const int32_t kk = i >> lane_shift, c = i & (lanes - 1);
    weights[i] = static_cast<A>(to_acc(w[(c0 + c) * K + (flip ? K - 1 - kk : kk)]));
  }

  int32_t vb = static_cast<int32_t>(threadIdx.x) & (t.vb - 1), rg, col;
  t.by_tw.divmod(static_cast<int32_t>(threadIdx.x) >> t.vb_shift, rg, col);
  const bool active = rg < t.row_groups;
  const int32_t KW = static_cast<int32_t>(g.kernel[X]), KH = static_cast<int32_t>(g.kernel[Y]);
  const int32_t KD = ND == 3 ? static_cast<int32_t>(g.kernel[0]) : 1;
  const int32_t sx = static_cast<int32_t>(g.stride[X]), sy = static_cast<int32_t>(g.stride[Y]);
  const int32_t dx = static_cast<int32_t>(g.rhs_dilation[X]), dy = static_cast<int32_t>(g.rhs_dilation[Y]);
  const int32_t H = static_cast<int32_t>(g.in[Y]), W = static_cast<int32_t>(g.in[X]);
  const int32_t iy0 = ty * t.th * sy - static_cast<int32_t>(g.pad_lo[Y]);
  const int32_t ix0 = tx * t.tw * sx - static_cast<int32_t>(g.pad_lo[X]);
  const int32_t row_step = sy * t.pw * t.vb;  // one output row, in patch vectors

  A acc[R][V];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int v = 0; v < V; ++v) acc[r][v] = A(0);

  for (int32_t kz = 0; kz < KD; ++kz) {
    int64_t plane = n;  // (n, input plane) in units of H * W pixels
    if constexpr (ND == 3) {
      const int64_t iz = static_cast<int64_t>(oz) * g.stride[0] + kz * g.rhs_dilation[0] - g.pad_lo[0];
      if (iz < 0 || iz >= g.in[0]) continue;  // the same for the whole block
      plane = n * g.in[0] + iz;
    }
    __syncthreads();  // the previous plane's reads are done
    stage_patch(patch[0].v, x + plane * H * W * C + c0, iy0, ix0, H, W, C, t.ph, t.pw, t.vb_shift);
    commit_copies();
    wait_copies<0>();
    __syncthreads();
    if (!active) continue;
    const A* wk = weights + kz * KH * KW * lanes + vb * V;
    for (int32_t ky = 0; ky < KH; ++ky) {
      const Pack<T, V>* src = patch + ((rg * R * sy + ky * dy) * t.pw + col * sx) * t.vb + vb;
      for (int32_t kx = 0; kx < KW; ++kx, wk += lanes, src += dx * t.vb) {
        A wv[V];
#pragma unroll
        for (int v = 0; v < V; ++v) wv[v] = wk[v];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const Pack<T, V> p = src[r * row_step];
#pragma unroll
          for (int v = 0; v < V; ++v) acc[r][v] += wv[v] * static_cast<A>(to_acc(p.v[v]));
        }
      }
    }
  }

  const int32_t ox = tx * t.tw + col;
  if (!active || ox >= g.out[X]) return;
  const int64_t out_plane = ND == 3 ? n * g.out[0] + oz : n;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int32_t oy = ty * t.th + rg * R + r;
    if (oy < g.out[Y])
      store_channels<V>(y + ((out_plane * g.out[Y] + oy) * g.out[X] + ox) * C + c0 + vb * V, acc[r]);
  }
}

// The tiled kernel where it applies (plan_depthwise_tile and aligned
// operands); false leaves the call to the per-position kernels.
template <int ND, typename T, typename TY>
bool depthwise_cl_tiled(const T* x, const T* w, TY* y, const Geometry& g, int64_t n, int64_t c,
                        bool flip, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  using A = typename Acc<TY>::type;
  DepthwiseTile t;
  if constexpr (ND < 2) {
    return false;
  } else {
    if (!plan_depthwise_tile(g, n, c, sizeof(T), kDepthwiseRows<T>, sizeof(A), &t) || !aligned_to(x, 16) ||
        !aligned_to(y, sizeof(TY) * V))
      return false;
    depthwise_cl_tile_kernel<ND, T, TY><<<static_cast<unsigned>(t.blocks), kThreads, t.smem, stream>>>(
        x, w, y, g, t, c, flip);
    return true;
  }
}

}  // namespace im2col::cuda
