// CUDA unfold (im2col) and fold (col2im as a gather) kernels.
//
// unfold: the tiled kernels below (input staged in shared memory, tile.cuh)
// where the tile fits and pays; otherwise, and for wide channels-last rows,
// kernels in which a thread handles a run of V elements contiguous in the
// array it writes (16 bytes when the layout allows), so that the index math
// is paid once per run and stores are full vectors. fold: a gather over the
// taps that read each element (taps_reading / for_each_tap_run), V elements
// per thread: consecutive channels (channels-last) or consecutive elements of
// a line stepped through their taps together (channels-first; on aligned
// vectors of the columns where lines allow, stride 1 or 2, fold_vector.cuh;
// before it and after it, whole planes staged in shared memory where they
// fit, fold_staged.cuh). What those were not written for (1- and 16-byte
// elements, the integer, bool, float8 and complex folds) takes the generic
// kernels (columns_generic.cuh) or, where its bytes allow, the specialised
// kernels of another element size (launch_unfold, launch_fold).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>
#include <cstdint>

#include "columns/columns.h"
#include "columns/columns_generic.cuh"
#include "columns/fold_cf_window.cuh"
#include "columns/fold_cl_taps.cuh"
#include "columns/fold_staged.cuh"
#include "columns/fold_vector.cuh"
#include "columns/unfold_cf_flat_strided.cuh"
#include "columns/unfold_cf_strided.cuh"
#include "columns/unfold_cf_vectors.cuh"
#include "columns/unfold_cl_groups.cuh"
#include "columns/unfold_cl_index.cuh"
#include "columns/unfold_cl_taps.cuh"
#include "columns/unfold_cl_write.cuh"
#include "columns/unfold_planes.cuh"
#include "columns/unfold_write.cuh"
#include "common/device_info.h"
#include "common/device_util.cuh"
#include "common/switches.h"
#include "common/tile.cuh"

namespace im2col::cuda {
namespace {

// Channels-first: a thread takes a run of V output positions of one (n, c)
// and writes them for every kernel tap, so its index math is paid once for
// K * V elements; each store is V contiguous elements of row (c * K + k).
template <int ND, typename U, int V>
__global__ void __launch_bounds__(kThreads)
unfold_cf_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g,
                 int64_t C, int64_t n0, ColumnsLayout lay, int64_t rows,
                 int64_t runs_per_row, bool vector_store) {
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
        const int64_t s = v < count ? source_offset_at<ND>(g, origin[v], k) : -1;
        p.v[v] = s >= 0 ? __ldg(xc + s) : U(0);
      }
      if (vector_store && count == V) {
        *reinterpret_cast<Pack<U, V>*>(dst) = p;
      } else {
        for (int v = 0; v < count; ++v) dst[v] = p.v[v];
      }
    }
  }
}

// Channels-first on 16-byte vectors of positions (unfold_cf_vectors.cuh):
// thread t the vector t % vectors of row (n, c) = t / vectors; positions
// and threads fit 31 bits.
struct CfVectorDivisors {
  FastDiv vectors, channels;
  FastDiv out[kMaxSpatial];
};

template <int ND>
CfVectorDivisors cf_vector_divisors(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t V) {
  CfVectorDivisors dv;
  dv.vectors = FastDiv(lay.lc / V);
  dv.channels = FastDiv(C);
  for (int d = 1; d < ND; ++d) dv.out[d] = FastDiv(g.out[d]);
  return dv;
}

// STRIDED: stride 2 along the last dimension (unfold_cf_strided.cuh).
template <int ND, typename U, bool STREAM, bool STRIDED = false>
__global__ void __launch_bounds__(kThreads, kCfTapBlocks<ND>)
unfold_cf_vector_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g, int64_t C, int64_t n0,
                        ColumnsLayout lay, int64_t threads, CfVectorDivisors dv) {
  constexpr int V = 16 / sizeof(U);
  for (int64_t t = grid_start(); t < threads; t += grid_step()) {
    int32_t row, vec, n, c;
    dv.vectors.divmod(static_cast<int32_t>(t), row, vec);
    dv.channels.divmod(row, n, c);
    int32_t o[kMaxSpatial], origin[kMaxSpatial];
    unravel_fast<ND>(static_cast<int32_t>(lay.l0) + vec * V, dv.out, o);
    window_origin<ND>(g, o, origin);
    const uint4* xc = reinterpret_cast<const uint4*>(x + ((n0 + n) * C + c) * g.in_size);
    uint4* dst = reinterpret_cast<uint4*>(cols + n * lay.image_stride + c * g.kernel_size * lay.row_stride +
                                          static_cast<int64_t>(vec) * V);
    if constexpr (STRIDED)
      copy_cf_taps_strided<ND, STREAM>(xc, dst, g, origin, lay.row_stride / V);
    else
      copy_cf_taps<ND, kCfTapBatch, STREAM, V, kCfTapLines<ND>>(xc, dst, g, origin, lay.row_stride / V);
  }
}

// Channels-last: a thread takes V channels of one (n, l) and copies them for
// every kernel tap into row (n, l), at (group, tap, channel-in-group);
// BATCH > 0 (16-byte vectors, no lhs dilation): by copy_cl_taps, BATCH taps
// of LINES lines' loads at a time.
template <int ND, typename U, int V, bool STREAM, int MIN_BLOCKS = 1, bool FAST = false, int BATCH = 0, int LINES = 1>
__global__ void __launch_bounds__(kThreads, MIN_BLOCKS)
unfold_cl_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g,
                 int64_t C, int64_t n0, ColumnsLayout lay, int64_t rows,
                 int64_t units_per_row, ClUnfoldDivisors dv = {}) {
  const int64_t K = g.kernel_size, Cg = C / lay.groups;
  for (int64_t t = grid_start(); t < rows * units_per_row; t += grid_step()) {
    int32_t o[kMaxSpatial], origin[kMaxSpatial];
    const auto [row, unit, n, l, gi, j0] = cl_unfold_unit<ND, V, FAST>(t, g, lay, units_per_row, Cg, dv, o);
    window_origin<ND>(g, o, origin);
    const U* xn = x + (n0 + n) * g.in_size * C + unit * V;
    U* dst = cols + row * C * K + gi * K * Cg + j0;
    if constexpr (BATCH > 0) {
      static_assert(V * sizeof(U) == sizeof(uint4), "16-byte vectors");
      copy_cl_taps<ND, BATCH, STREAM, uint4, LINES>(reinterpret_cast<const uint4*>(xn), reinterpret_cast<uint4*>(dst),
                                                    g, origin, C / V, Cg / V);
    } else {
      int32_t k[kMaxSpatial] = {};
      for (int64_t kk = 0; kk < K; ++kk, dst += Cg, increment<ND>(k, g.kernel)) {
        const int64_t s = source_offset_at<ND>(g, origin, k);
        Pack<U, V> p;
        if (s >= 0) {
          p = *reinterpret_cast<const Pack<U, V>*>(xn + s * C);
        } else {
#pragma unroll
          for (int v = 0; v < V; ++v) p.v[v] = U(0);
        }
        store_maybe_streaming<STREAM>(reinterpret_cast<Pack<U, V>*>(dst), p);
      }
    }
  }
}

// Launched with kThreads threads, at least MIN_BLOCKS blocks a
// multiprocessor (unfold_typed: 6 at 40 registers, where ncu once showed the
// kernel issue-bound at the 5 that 48 allow; 8 at 32 where that measured
// faster, docs/optimization-log.md, step 74); STREAM: the write phase's stores
// streaming (write_elements only: 4-byte types, which never take pairs).
template <int ND, typename U, int MIN_BLOCKS, bool STREAM>
__global__ void __launch_bounds__(kThreads, MIN_BLOCKS)
unfold_cf_tiled_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g,
                       int64_t C, int64_t n0, ColumnsLayout lay, TilePlan t) {
  static_assert(!STREAM || sizeof(U) == 4, "streaming stores in write_elements' 4-byte path only");
  extern __shared__ __align__(16) unsigned char smem[];
  int32_t* taps = reinterpret_cast<int32_t*>(smem);
  U* tile = reinterpret_cast<U*>(smem + table_bytes(t.table));
  const TileBlock b = tile_block(t, C, lay);
  const int32_t K = static_cast<int32_t>(g.kernel_size);
  constexpr bool kPairs = sizeof(U) == 2 && ND > 1;
  for (int32_t kk = threadIdx.x; kk < K; kk += blockDim.x) {
    const int32_t tap = t.lead + tap_offset<ND>(g, t, kk);
    taps[kk] = kPairs && t.pairs ? pair_tap_offset(tap, t.channels * t.plane)
                                 : tap * static_cast<int32_t>(sizeof(U));  // bytes
  }
  // A vector at a time where the plan has lines of whole vectors; the
  // channels' whole input read flat where the tile holds all of it; else a
  // warp per line where lines are whole warps wide, several lines a warp
  // where they are narrower (plain geometries); in 1-D (a block has one line
  // a channel, too few for its warps) one run per channel; element by
  // element with lhs dilation.
  const U* x_block = x + ((n0 + b.n) * C + b.c0) * g.in_size;
  const uint32_t origin = line_origin(x_block, b.row0, g);  // 1-D vector fills
  bool filled = false;
  if constexpr (ND > 1) {
    filled = t.width.d >= 32 || !g.any_lhs_dilation;
    if (t.vector > 0) {
      fill_tile_by_vectors<ND>(tile, x_block, b.channels, b.row0, g, t);
    } else if (t.whole) {
      zero_tile(tile, static_cast<size_t>(b.channels) * t.plane * sizeof(U));
      __syncthreads();
      fill_tile_whole<ND>(tile, x_block, b.channels, g, t);
    } else if (t.width.d >= 32) {
      fill_tile_by_lines<ND>(tile, x_block, b.channels, b.row0, g, t);
    } else if (filled) {
      fill_tile_by_narrow_lines<ND>(tile, x_block, b.channels, b.row0, g, t);
    }
  } else {
    filled = !g.any_lhs_dilation;
    if (filled && t.vector > 0) {
      fill_tile_1d_vectors(tile, x_block, b.channels, b.row0, g, t, origin);
    } else if (filled) {
      fill_tile_1d(tile, x_block, b.channels, b.row0, g, t);
    }
  }
  if (!filled) fill_channels_first<ND>(tile, x_block, g, t, b);
  __syncthreads();
  U* image = cols + b.n * lay.image_stride + b.c0 * g.kernel_size * lay.row_stride;
  if constexpr (kPairs) {
    if (t.pairs) {
      shift_tile_copy(tile, b.channels * t.plane, t.channels * t.plane);
      __syncthreads();
      write_pairs<ND>(tile, taps, image, g, t, lay, b);
      return;
    }
  }
  write_elements<ND, U, STREAM>(tile, taps, image, g, t, lay, b, origin);
}

// Small channels-first maps whose columns leave no gaps: runs of planes
// written flat, a 16-byte vector a thread a run (unfold_planes.cuh); at least
// MIN_BLOCKS blocks of the most threads a multiprocessor.
template <int ND, typename U, bool VECTOR_LOADS, bool STREAM, int MIN_BLOCKS = 2>
__global__ void __launch_bounds__(kPlanesMaxThreads, MIN_BLOCKS)
unfold_cf_planes_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g, PlanesPlan p) {
  extern __shared__ __align__(16) unsigned char smem[];
  U* staged = reinterpret_cast<U*>(smem);
  const int64_t run0 = static_cast<int64_t>(blockIdx.x) * p.runs;
  const int32_t runs = static_cast<int32_t>(p.run_count - run0 < p.runs ? p.run_count - run0 : p.runs);
  const PlanesLoads<VECTOR_LOADS, U> loads = load_planes<VECTOR_LOADS>(x + run0 * p.run_elements, p, runs);
  const PlaneOffsets<U> off = plane_offsets<ND, U>(g, p);
  stage_planes<VECTOR_LOADS>(staged, loads, p, runs);
  __syncthreads();
  write_planes<STREAM>(staged, cols + run0 * p.run_planes * g.kernel_size * g.out_size, off, p, runs);
}

// 1-D channels-first columns at stride 2 without gaps, a 16-byte vector of
// them a thread (unfold_cf_flat_strided.cuh).
template <typename U, bool STREAM>
__global__ void __launch_bounds__(kThreads)
unfold_cf_flat_strided_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g, FlatStridedPlan p) {
  for (int64_t t = grid_start(); t < p.vectors; t += grid_step()) write_flat_strided_vector<STREAM>(x, cols, g, p, t);
}

// 2-D channels-last rows of few channels in groups of positions that are
// whole 16-byte vectors (unfold_cl_groups.cuh).
template <typename U, bool STREAM>
__global__ void __launch_bounds__(kClGroupsMaxThreads)
unfold_cl_groups_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g, int64_t C, ClGroupsPlan p) {
  extern __shared__ __align__(16) unsigned char smem[];
  U* tile = reinterpret_cast<U*>(smem);
  int32_t n, block;
  p.row_blocks.divmod(static_cast<int32_t>(blockIdx.x), n, block);
  const int32_t line0 = p.first_line + block * p.lines;
  const int32_t lines = min(p.lines, p.first_line + p.chunk_lines - line0);
  const U* x_image = x + static_cast<int64_t>(n) * g.in_size * C;
  const ClGroupsLoads loads = load_cl_groups(x_image, g, p, line0);
  const ClGroupOffsets<U> off = cl_group_offsets<U>(g, C, p, static_cast<int32_t>(threadIdx.x) % p.vectors);
  stage_cl_groups(tile, loads, g, C, p, line0);
  __syncthreads();
  U* cols_line = cols + (static_cast<int64_t>(n) * p.chunk_lines + (line0 - p.first_line)) * g.out[1] *
                            g.kernel_size * C;
  write_cl_groups<STREAM>(tile, cols_line, g, C, off, p, lines);
}

// Channels-last with few channels (unfold_cl_write.cuh), positions in pairs
// where PAIRS.
template <int ND, typename U, int CHUNK, bool STREAM, bool PAIRS>
__global__ void __launch_bounds__(kThreads)
unfold_cl_tiled_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g,
                       int64_t C, int64_t n0, ColumnsLayout lay, TilePlan t) {
  extern __shared__ __align__(16) unsigned char smem[];
  const TileBlock b = tile_block(t, C, lay);
  stage_cl_block<ND>(smem, x, g, C, n0, lay, t, b);
  __syncthreads();
  write_cl_block<ND, CHUNK, STREAM, PAIRS>(smem, cols, g, C, lay, t, b);
}

// Channels-first: a thread sums V consecutive elements of one line (along the
// last spatial dimension) of one (n, c). The taps along the other dimensions
// are the same for the V elements; along the last one each element has its
// own run of taps, and the thread steps through the V runs together, so V
// independent loads are in flight (the kernel is bound by load latency).
// Each element still sums its taps in increasing order. For each tap,
// neighbouring threads read neighbouring column entries.
template <int ND, typename TC, typename TX, int V>
__global__ void __launch_bounds__(kThreads)
fold_cf_kernel(const TC* __restrict__ cols, TX* __restrict__ x, Geometry g,
               int64_t C, int64_t n0, ColumnsLayout lay, int64_t lines,
               int64_t runs_per_line, bool accumulate, bool vector_store) {
  using A = typename Acc<TX>::type;
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
    TX* xr = x + ((n0 + n) * C + c) * g.in_size + inner * width + w0;
    A acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v)
      acc[v] = accumulate && v < count ? static_cast<A>(to_acc(xr[v])) : A(0);
    const TC* base = cols + n * lay.image_stride + c * K * lay.row_stride - l0;
    if (most > 0) {
      for_each_outer_tap<ND>(g, q, [&](int32_t k_outer, int32_t o_outer) {
        const TC* src[V];
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
              acc[v] += static_cast<A>(to_acc(__ldg(src[v])));
            src[v] += step;
            tp[v] -= o_step;
          }
        }
      });
    }
    Pack<TX, V> p;
#pragma unroll
    for (int v = 0; v < V; ++v) p.v[v] = store_value<TX>(acc[v]);
    if (vector_store && count == V) {
      *reinterpret_cast<Pack<TX, V>*>(xr) = p;
    } else {
      for (int v = 0; v < count; ++v) xr[v] = p.v[v];
    }
  }
}

// Channels-last: rows (n, q), each C channels; a thread sums V channels.
template <int ND, typename TC, typename TX, int V>
__global__ void __launch_bounds__(kThreads)
fold_cl_kernel(const TC* __restrict__ cols, TX* __restrict__ x, Geometry g,
               int64_t C, int64_t n0, ColumnsLayout lay, int64_t rows,
               int64_t units_per_row, bool accumulate) {
  using A = typename Acc<TX>::type;
  const int64_t K = g.kernel_size, Cg = C / lay.groups;
  const int32_t l0 = static_cast<int32_t>(lay.l0), lc = static_cast<int32_t>(lay.lc);
  for (int64_t t = grid_start(); t < rows * units_per_row; t += grid_step()) {
    int64_t row, unit, n, qi, gi, j0;
    divmod(t, units_per_row, row, unit);
    divmod(row, g.in_size, n, qi);
    divmod(unit * V, Cg, gi, j0);
    int32_t q[kMaxSpatial];
    unravel<ND>(qi, g.in, q);
    TX* xq = x + ((n0 + n) * g.in_size + qi) * C + unit * V;
    const TC* base = cols + n * lay.lc * C * K + gi * K * Cg + j0;
    A acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v)
      acc[v] = accumulate ? static_cast<A>(to_acc(xq[v])) : A(0);
    for_each_tap_run<ND>(g, q, [&](int32_t kk, int32_t tp, const TapRun<int32_t>& run) {
      const TC* src = base + (tp - l0) * C * K + kk * Cg;
      const int64_t step = run.k_step * Cg - run.o_step * C * K;
#pragma unroll 4
      for (int32_t i = 0; i < run.count; ++i, src += step, tp -= run.o_step) {
        if (static_cast<uint32_t>(tp - l0) < static_cast<uint32_t>(lc)) {
          const Pack<TC, V> p = *reinterpret_cast<const Pack<TC, V>*>(src);
#pragma unroll
          for (int v = 0; v < V; ++v) acc[v] += static_cast<A>(to_acc(p.v[v]));
        }
      }
    });
    Pack<TX, V> out;
#pragma unroll
    for (int v = 0; v < V; ++v) out.v[v] = store_value<TX>(acc[v]);
    *reinterpret_cast<Pack<TX, V>*>(xq) = out;
  }
}

// JAX_IM2COL_NO_CL_PLAIN_TAPS=1: the channels-last vector unfold's taps by
// the general loop (source_offset_at a tap) where copy_cl_taps would take
// them (docs/optimization-log.md, step 94).
bool cl_plain_taps_on() {
  static const bool on = switch_on(Switch::kClPlainTaps);
  return on;
}

// JAX_IM2COL_NO_CF_VECTORS=1 leaves the channels-first columns that the
// vector unfold could write to the planes and tiled unfolds (docs/optimization-log.md,
// step 96).
bool cf_vectors_on() {
  static const bool on = switch_on(Switch::kCfVectors);
  return on;
}

// JAX_IM2COL_NO_CL_TAP_LINES=1: copy_cl_taps a line of taps at a time
// (LINES 1, no bound on registers; docs/optimization-log.md, step 95).
bool cl_tap_lines_on() {
  static const bool on = switch_on(Switch::kClTapLines);
  return on;
}

// JAX_IM2COL_NO_CL_FAST_INDEX=1: the channels-last vector unfold's index
// math by run-time divisions (unfold_cl_kernel's FAST;
// docs/optimization-log.md, step 92).
bool cl_fast_index_on() {
  static const bool on = switch_on(Switch::kClFastIndex);
  return on;
}

// The channels-first tiled unfold stores 2-D 4-byte columns of the unfold
// primitive as streaming stores (docs/optimization-log.md, step 86);
// JAX_IM2COL_NO_CF_STREAMING=1 stores them plainly.
bool cf_streaming_on() {
  static const bool on = switch_on(Switch::kCfStreaming);
  return on;
}

// JAX_IM2COL_NO_UNFOLD_PAIRS=1 writes 2-byte channels-first columns an
// element at a time everywhere (unfold_write.cuh; docs/optimization-log.md, step 69).
bool unfold_pairs_on() {
  static const bool on = switch_on(Switch::kUnfoldPairs);
  return on;
}

// The channels-last vector unfold of 1-D geometries is bound to 8 blocks a
// multiprocessor (32 registers, was 40-42): wav2vec 1.1x; in 2-D and 3-D the
// bound cost 1-8% (docs/optimization-log.md, step 75). JAX_IM2COL_NO_CL_UNFOLD_BOUND=1
// runs it unbound, for the same-run comparison.
bool cl_unfold_bound_on() {
  static const bool on = switch_on(Switch::kClUnfoldBound);
  return on;
}

// The channels-first tiled unfold fills its tile a vector at a time where
// the input's lines are a whole number of 16-, 8- or 4-byte vectors of two
// elements or more (plan_tile's line_vector; docs/optimization-log.md, step 76);
// JAX_IM2COL_NO_VECTOR_FILL=1 leaves them to the line fills.
bool vector_fill_on() {
  static const bool on = switch_on(Switch::kVectorFill);
  return on;
}

// Small channels-first maps are written a run of planes at a time
// (unfold_planes.cuh; docs/optimization-log.md, step 78); JAX_IM2COL_NO_PLANES_UNFOLD=1
// leaves them to the tiled unfold.
bool planes_unfold_on() {
  static const bool on = switch_on(Switch::kPlanesUnfold);
  return on;
}

// Stride 2 along the last dimension goes to the vector unfold where its
// lines fit (unfold_cf_strided.cuh; docs/optimization-log.md, step 99);
// JAX_IM2COL_NO_CF_STRIDED=1 leaves it to the tiled unfold.
bool cf_strided_on() {
  static const bool on = switch_on(Switch::kCfStrided);
  return on;
}

// 1-D channels-first columns at stride 2 are written flat where they leave
// no gaps (unfold_cf_flat_strided.cuh; docs/optimization-log.md, step 100);
// JAX_IM2COL_NO_CF_FLAT_STRIDED=1 leaves them to the tiled unfold.
bool cf_flat_strided_on() {
  static const bool on = switch_on(Switch::kCfFlatStrided);
  return on;
}

// The planes unfold stages its runs skewed (unfold_planes.cuh, fewer bank
// conflicts; docs/optimization-log.md, step 97); JAX_IM2COL_NO_PLANES_SKEW=1 stages
// them flat.
bool planes_skew_on() {
  static const bool on = switch_on(Switch::kPlanesSkew);
  return on;
}

// 2-D channels-last rows of few channels go in groups of positions where
// those are whole vectors (unfold_cl_groups.cuh; docs/optimization-log.md, step 98);
// JAX_IM2COL_NO_CL_GROUPS=1 leaves them to the tiled unfold.
bool cl_groups_on() {
  static const bool on = switch_on(Switch::kClGroups);
  return on;
}

// The line vector (elements) for plan_tile: input lines of `column`
// elements a position (C channels-last, else 1) and whole vectors.
int32_t fill_vector(const Geometry& g, const void* x, size_t elem_bytes, int64_t column) {
  if (g.any_lhs_dilation || !vector_fill_on()) return 0;
  // 1-D lines take a lead each (fill_tile_1d_vectors): any x, 16 bytes.
  if (g.nd == 1) return column == 1 ? static_cast<int32_t>(16 / elem_bytes) : 0;
  const int64_t line_bytes = g.in[g.nd - 1] * column * static_cast<int64_t>(elem_bytes);
  for (size_t bytes = 16; bytes >= 2 * elem_bytes && bytes >= 4; bytes /= 2)
    if (aligned_to(x, bytes) && line_bytes % static_cast<int64_t>(bytes) == 0)
      return static_cast<int32_t>(bytes / elem_bytes);
  return 0;
}

template <int ND, typename U, bool STREAM>
cudaError_t unfold_typed(const void* xv, void* colsv, const Geometry& g,
                         int64_t C, int64_t n0, int64_t nc,
                         const ColumnsLayout& lay, bool channels_last,
                         cudaStream_t stream) {
  constexpr int V = 16 / sizeof(U);
  const U* x = static_cast<const U*>(xv);
  U* cols = static_cast<U*>(colsv);
  if (!channels_last && cf_vectors_on()) {
    const bool plain = cf_vector_unfold_fits(g, lay, sizeof(U), x + n0 * C * g.in_size, cols);
    const int64_t threads = nc * C * (lay.lc / V);
    if constexpr (sizeof(U) == 4) {
      if (!plain && cf_strided_on() && cf_strided_unfold_fits(g, lay, sizeof(U), x + n0 * C * g.in_size, cols) &&
          threads < (int64_t{1} << 31)) {
        unfold_cf_vector_kernel<ND, U, STREAM, true><<<blocks_for(threads), kThreads, 0, stream>>>(
            x, cols, g, C, n0, lay, threads, cf_vector_divisors<ND>(g, lay, C, V));
        return cudaGetLastError();
      }
    }
    if (plain && threads < (int64_t{1} << 31)) {
      unfold_cf_vector_kernel<ND, U, STREAM><<<blocks_for(threads), kThreads, 0, stream>>>(
          x, cols, g, C, n0, lay, threads, cf_vector_divisors<ND>(g, lay, C, V));
      return cudaGetLastError();
    }
  }
  if constexpr (ND == 1 && sizeof(U) <= 4) {
    FlatStridedPlan fp;
    const U* x_chunk = x + n0 * C * g.in_size;
    if (!channels_last && cf_flat_strided_on() &&
        plan_cf_flat_strided(g, lay, C, nc, sizeof(U), x_chunk, cols, &fp)) {
      unfold_cf_flat_strided_kernel<U, STREAM><<<blocks_for(fp.vectors), kThreads, 0, stream>>>(x_chunk, cols, g, fp);
      return cudaGetLastError();
    }
  }
  if (!channels_last && planes_unfold_on()) {
    const U* x_chunk = x + n0 * C * g.in_size;
    PlanesPlan p;
    if (plan_unfold_planes(g, lay, C, nc, sizeof(U), x_chunk, cols, &p, planes_skew_on())) {
      const int threads = planes_block_threads(p);
      auto launch = [&](auto kernel) -> cudaError_t {
        DeviceInfo info;
        int resident = 0;
        if (auto e = current_device_info(&info); e != cudaSuccess) return e;
        if (auto e = resident_blocks(reinterpret_cast<const void*>(kernel), threads,
                                     static_cast<int>(kPlanesSmem), &resident);
            e != cudaSuccess)
          return e;
        if (!plan_planes_grid(static_cast<int64_t>(info.multiprocessors) * resident, sizeof(U), &p))
          return cudaErrorInvalidConfiguration;
        kernel<<<p.blocks, threads, p.smem, stream>>>(x_chunk, cols, g, p);
        return cudaGetLastError();
      };
      // Inputs whose runs are not whole 16-byte vectors (rare) are staged
      // element by element and stored plainly.
      if (!p.vector_loads) return launch(unfold_cf_planes_kernel<ND, U, false, false>);
      // 4-byte types at 3 blocks a multiprocessor (40 registers, was 64):
      // c256 float32 19.5 -> 17.0 us; 2-byte ones slower so (c512 bfloat16
      // 6.5 -> 7.1 us), and spilling in 3-D (docs/optimization-log.md, step 83).
      constexpr int kBlocks = sizeof(U) == 4 ? 3 : 2;
      return launch(unfold_cf_planes_kernel<ND, U, true, STREAM, kBlocks>);
    }
  }
  TilePlan t;
  const bool cl_vectors = channels_last && (C / lay.groups) % V == 0 &&
                          C * static_cast<int64_t>(sizeof(U)) >= 64 && aligned_to(x, 16) &&
                          aligned_to(cols, 16);
  if constexpr (ND == 2) {
    ClGroupsPlan gp;
    const U* x_chunk = x + n0 * C * g.in_size;
    if (channels_last && !cl_vectors && cl_groups_on() &&
        plan_cl_groups<U>(g, lay, C, nc, x_chunk, cols, cl_groups_lines(sizeof(U)), &gp)) {
      unfold_cl_groups_kernel<U, STREAM><<<static_cast<unsigned>(gp.blocks), cl_groups_threads(gp), gp.smem, stream>>>(
          x_chunk, cols, g, C, gp);
      return cudaGetLastError();
    }
  }
  // Pairs keep a shifted copy of the tile beside it: planned as 4-byte elements.
  const bool pairs = !channels_last && sizeof(U) == 2 && unfold_pairs_on() && unfold_pairs_fit(g, lay, cols);
  // The widest line vector whose lines (led, rounded up) still fit, else none
  // (the 3-D tiles of 16 x 56 x 56 maps grew past 48 KB at 16 bytes).
  auto plan = [&](int32_t line_vector) {
    t = TilePlan();
    return plan_tile(g, lay, C, channels_last, (pairs ? 2 : 1) * sizeof(U), &t, 0, 0, nc,
                     line_vector);
  };
  bool planned = false;
  if (!cl_vectors) {
    for (int32_t v = fill_vector(g, x, sizeof(U), channels_last ? C : 1); v >= 2 && !planned; v /= 2)
      planned = plan(v);
    if (!planned) planned = plan(0);
  }
  if (planned && tile_blocks(t, nc) < (int64_t{1} << 31)) {
    t.pairs = pairs ? 1 : 0;
    const unsigned blocks = static_cast<unsigned>(tile_blocks(t, nc));
    if (!channels_last) {
      // 8 blocks a multiprocessor (32 registers, no spills) for 2-byte
      // types, and 4-byte ones in 1-D and 3-D; 6 (40 registers) for the rest
      // (docs/optimization-log.md, step 74).
      constexpr int kBlocks = sizeof(U) == 2 || (sizeof(U) == 4 && ND != 2) ? 8 : 6;
      // Streaming stores (evict-first) for 2-D 4-byte columns that nothing
      // reads back soon: 1-1.5% in the benchmark's chains; 2-byte ones level,
      // 3-D 2% slower there (its kernel spills at 32 registers), 1-D level
      // (docs/optimization-log.md, step 86).
      constexpr bool kStream = STREAM && sizeof(U) == 4 && ND == 2;
      auto kernel = kStream && cf_streaming_on() ? unfold_cf_tiled_kernel<ND, U, kBlocks, kStream>
                                                 : unfold_cf_tiled_kernel<ND, U, kBlocks, false>;
      kernel<<<blocks, kThreads, t.smem, stream>>>(x, cols, g, C, n0, lay, t);
    } else {
      with_cl_writer<U>(g, lay, t, C, cols, [&](auto chunk, auto pairs) {
        unfold_cl_tiled_kernel<ND, U, decltype(chunk)::value, STREAM, decltype(pairs)::value>
            <<<blocks, kThreads, t.smem, stream>>>(x, cols, g, C, n0, lay, t);
      });
    }
  } else if (!channels_last) {
    const int64_t rows = nc * C;
    const int64_t runs = (lay.lc + V - 1) / V;
    const bool vec = aligned_to(cols, 16) && lay.row_stride % V == 0 &&
                     lay.image_stride % V == 0;
    unfold_cf_kernel<ND, U, V><<<blocks_for(rows * runs), kThreads, 0, stream>>>(
        x, cols, g, C, n0, lay, rows, runs, vec);
  } else {
    const int64_t rows = nc * lay.lc;
    if (cl_vectors) {
      // Positions fit 31 bits (the FFI's fits_32_bits); the threads must too.
      const bool fast = rows * (C / V) < (int64_t{1} << 31) && cl_fast_index_on();
      const ClUnfoldDivisors dv = fast ? cl_unfold_divisors(g, lay, C, V) : ClUnfoldDivisors{};
      // Only with FAST, which halves the kernels compiled: grids over 2^31
      // threads (columns over 32 GB) keep the general loop.
      const bool plain = fast && !g.any_lhs_dilation && cl_plain_taps_on();
      auto launch = [&](auto min_blocks) {
        constexpr int kMin = decltype(min_blocks)::value;
        auto kernel = plain  ? unfold_cl_kernel<ND, U, V, STREAM, kMin, true, kClTapBatch<ND>>
                      : fast ? unfold_cl_kernel<ND, U, V, STREAM, kMin, true>
                             : unfold_cl_kernel<ND, U, V, STREAM, kMin>;
        if constexpr (kClTapLines<ND> > 1) {
          if (plain && cl_tap_lines_on())
            kernel = unfold_cl_kernel<ND, U, V, STREAM, kClTapBlocks<ND>, true, kClTapBatch<ND>, kClTapLines<ND>>;
        }
        kernel<<<blocks_for(rows * (C / V)), kThreads, 0, stream>>>(x, cols, g, C, n0, lay, rows, C / V, dv);
      };
      if constexpr (ND == 1) {
        if (cl_unfold_bound_on()) {
          launch(std::integral_constant<int, 8>{});
          return cudaGetLastError();
        }
      }
      launch(std::integral_constant<int, 1>{});
    } else {
      unfold_cl_kernel<ND, U, 1, false><<<blocks_for(rows * C), kThreads, 0, stream>>>(
          x, cols, g, C, n0, lay, rows, C);
    }
  }
  return cudaGetLastError();
}

// JAX_IM2COL_NO_CF_FOLD_WINDOW=1 leaves the 3-tap windows to the staged,
// vector and per-thread folds (docs/optimization-log.md, step 116).
bool fold_window_on() {
  static const bool on = switch_on(Switch::kFoldWindow);
  return on;
}

// JAX_IM2COL_NO_CF_FOLD_WINDOW_S2_HALF=1 leaves the 2-byte stride-2 windows
// to the vector fold (docs/optimization-log.md, step 124).
bool fold_window_s2_half_on() {
  static const bool on = switch_on(Switch::kFoldWindowS2Half);
  return on;
}

// JAX_IM2COL_NO_STAGED_FOLD=1 leaves the staged fold's shapes to the
// per-thread gather (docs/optimization-log.md, step 58).
bool staged_fold_on() {
  static const bool on = switch_on(Switch::kStagedFold);
  return on;
}

// JAX_IM2COL_NO_FOLD_TAPS=1 leaves the channels-last fold to the per-run
// loop of fold_cl_kernel (docs/optimization-log.md, step 59).
bool fold_taps_on() {
  static const bool on = switch_on(Switch::kFoldTaps);
  return on;
}

// Calls fn(std::integral_constant<int, T>{}) for a taps bound T of 2-4
// (plan_fold_taps's; the caller instantiates only the T whose T^ND slots
// that plan allows).
template <typename Fn>
void with_taps_bound(int64_t taps, Fn&& fn) {
  switch (taps) {
    case 2: fn(std::integral_constant<int, 2>{}); break;
    case 3: fn(std::integral_constant<int, 3>{}); break;
    default: fn(std::integral_constant<int, 4>{}); break;
  }
}

// Calls fn(std::integral_constant<int, S>{}): S the stride along the last
// dimension where it is 1 or 2, else 0 (read at run time).
template <typename Fn>
void with_last_stride(const Geometry& g, Fn&& fn) {
  switch (g.stride[g.nd - 1]) {
    case 1: fn(std::integral_constant<int, 1>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    default: fn(std::integral_constant<int, 0>{}); break;
  }
}

template <int ND, typename TC, typename TX>
cudaError_t fold_typed(const void* colsv, void* xv, const Geometry& g,
                       int64_t C, int64_t n0, int64_t nc,
                       const ColumnsLayout& lay, bool channels_last,
                       bool accumulate, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(TC);
  // Channels-first, 4 elements per thread at most: 8 took 104 registers
  // (2 blocks per SM) for no more loads in flight per SM.
  constexpr int Vcf = V < 4 ? V : 4;
  const TC* cols = static_cast<const TC*>(colsv);
  TX* x = static_cast<TX*>(xv);
  if (channels_last) {
    const int64_t rows = nc * g.in_size;
    const int64_t Cg = C / lay.groups;
    const bool vectors = Cg % V == 0 && aligned_to(cols, 16) && aligned_to(x, sizeof(TX) * V);
    // Few taps a position: all of a thread's loads in flight (fold_cl_taps.cuh).
    FoldTapsPlan tp;
    const int64_t scalars = Cg % 3 == 0 ? 3 : 1;  // per thread, without vectors
    if (fold_taps_on() && plan_fold_taps(g, C, lay.groups, nc, vectors ? V : scalars, &tp)) {
      with_taps_bound(tp.taps, [&](auto taps) {
        constexpr int T = decltype(taps)::value;
        if constexpr (fold_taps_slots(T, ND) <= kFoldTapsSlots) {
          if (vectors) {
            fold_cl_taps_kernel<ND, T, TC, TX, V><<<blocks_for(tp.items), kThreads, 0, stream>>>(
                cols, x, g, C, n0, lay, tp, accumulate);
          } else if (scalars == 3) {
            fold_cl_taps_kernel<ND, T, TC, TX, 1, 3><<<blocks_for(tp.items), kThreads, 0, stream>>>(
                cols, x, g, C, n0, lay, tp, accumulate);
          } else {
            fold_cl_taps_kernel<ND, T, TC, TX, 1><<<blocks_for(tp.items), kThreads, 0, stream>>>(
                cols, x, g, C, n0, lay, tp, accumulate);
          }
        }
      });
      return cudaGetLastError();
    }
    if (vectors) {
      fold_cl_kernel<ND, TC, TX, V><<<blocks_for(rows * (C / V)), kThreads, 0, stream>>>(
          cols, x, g, C, n0, lay, rows, C / V, accumulate);
    } else {
      fold_cl_kernel<ND, TC, TX, 1><<<blocks_for(rows * C), kThreads, 0, stream>>>(
          cols, x, g, C, n0, lay, rows, C, accumulate);
    }
    return cudaGetLastError();
  }
  const int64_t width = g.in[ND - 1];
  // Windows of 3 taps a dimension fixed at compile time (fold_cf_window.cuh):
  // at unit stride; at stride 2 for 4- and 8-byte elements, and for 2-byte
  // ones in 2-D and 3-D where each tap's element of the cell is known at
  // compile time (the vector fold was faster for the others, 1-D included:
  // docs/optimization-log.md, steps 116 and 124).
  constexpr int E = fold_window_elements<TC>();
  const bool s2 = g.stride[0] == 2;
  const int parity = window_cell_parity(g);
  const bool s2_fits = sizeof(TC) >= 4 || (ND >= 2 && parity >= 0 && fold_window_s2_half_on());
  FoldWindowPlan wp;
  if (fold_window_on() && (!s2 || s2_fits) && plan_fold_window(g, lay, C, nc, s2 ? 1 : E, &wp)) {
    const int64_t pair = s2 ? 2 : E;
    const bool vector_store = width % pair == 0 && aligned_to(x, sizeof(TX) * pair);
    if (s2) {
      auto launch = [&](auto par) {
        fold_cf_window_s2_kernel<ND, kFoldWindowTaps, TC, TX, decltype(par)::value>
            <<<blocks_for(wp.items), kThreads, 0, stream>>>(cols, x, g, C, n0, lay, wp, accumulate, vector_store);
      };
      if constexpr (sizeof(TC) >= 4 || ND >= 2) {
        if (parity == 0) {
          launch(std::integral_constant<int, 0>{});
        } else if (parity == 1) {
          launch(std::integral_constant<int, 1>{});
        } else if constexpr (sizeof(TC) >= 4) {
          launch(std::integral_constant<int, -1>{});
        }
      }
    } else {
      fold_cf_window_kernel<ND, kFoldWindowTaps, TC, TX, E><<<blocks_for(wp.items), kThreads, 0, stream>>>(
          cols, x, g, C, n0, lay, wp, accumulate, vector_store);
    }
    return cudaGetLastError();
  }
  const int64_t lines = nc * C * (g.in_size / width);
  // Whole planes staged in shared memory where they fit (fold_staged.cuh),
  // planned once: before the vector fold where a thread sums runs of S * 4
  // elements (strides S of 1 and 2, no lhs dilation along lines: they beat
  // it, step 58), after it with one element a thread otherwise.
  const int64_t s = g.stride[ND - 1];
  const bool on_runs = (s == 1 || s == 2) && g.lhs_dilation[ND - 1] == 1;
  FoldPlanesPlan pp;
  const bool planes = staged_fold_on() && aligned_to(cols, 16) &&
                      plan_fold_planes(g, lay, C, nc, sizeof(TC), on_runs ? s * kStagedRun : 1, &pp, sizeof(TX),
                                       aligned_to(x, (on_runs ? s * kStagedRun : 1) * sizeof(TX)));
  auto fold_planes = [&] {
    with_last_stride(g, [&](auto stride) {
      constexpr int S = decltype(stride)::value;
      const unsigned blocks = static_cast<unsigned>(pp.blocks);
      if constexpr (S > 0) {
        if (on_runs) {
          auto launch = [&](auto stores) {
            fold_planes_kernel<ND, S, kStagedRun, decltype(stores)::value, TC, TX>
                <<<blocks, kThreads, pp.smem, stream>>>(cols, x, g, C, n0, lay, pp, accumulate);
          };
          if (pp.stores == RunStores::kVector) {
            launch(std::integral_constant<RunStores, RunStores::kVector>{});
          } else if (ND == 1 && pp.stores == RunStores::kStaged) {
            if constexpr (ND == 1) launch(std::integral_constant<RunStores, RunStores::kStaged>{});
          } else {
            launch(std::integral_constant<RunStores, RunStores::kScalar>{});
          }
          return;
        }
      }
      fold_planes_kernel<ND, S, 1, RunStores::kScalar, TC, TX><<<blocks, kThreads, pp.smem, stream>>>(
          cols, x, g, C, n0, lay, pp, accumulate);
    });
    return cudaGetLastError();
  };
  if (planes && on_runs) return fold_planes();
  // On whole vectors of W elements of the columns, where the lines allow
  // (fold_vector.cuh).
  auto fold_vectors = [&](auto w) {
    constexpr int W = decltype(w)::value;
    if (!fold_cf_vector_applies(g, lay, W) || !aligned_to(cols, sizeof(TC) * W) ||
        !aligned_to(x, sizeof(TX) * W))
      return false;
    if (g.stride[ND - 1] == 2) {
      fold_cf_vector_kernel<ND, TC, TX, W, 2><<<blocks_for(lines * (width / (2 * W))), kThreads, 0, stream>>>(
          cols, x, g, C, n0, lay, lines, accumulate);
    } else {
      fold_cf_vector_kernel<ND, TC, TX, W, 1><<<blocks_for(lines * (width / W)), kThreads, 0, stream>>>(
          cols, x, g, C, n0, lay, lines, accumulate);
    }
    return true;
  };
  // 16-byte vectors, else 8-byte ones (lines of 28 bfloat16 positions, say).
  constexpr int Vh = V / 2 >= 2 ? V / 2 : V;
  if (fold_vectors(std::integral_constant<int, V>{}) ||
      (Vh != V && fold_vectors(std::integral_constant<int, Vh>{})))
    return cudaGetLastError();
  if (planes) return fold_planes();
  const int64_t runs = (width + Vcf - 1) / Vcf;
  const bool vec = aligned_to(x, sizeof(TX) * Vcf) && width % Vcf == 0;
  fold_cf_kernel<ND, TC, TX, Vcf><<<blocks_for(lines * runs), kThreads, 0, stream>>>(
      cols, x, g, C, n0, lay, lines, runs, accumulate, vec);
  return cudaGetLastError();
}

// The generic unfold (columns_generic.cuh) of U elements (1 or 16 bytes).
template <int ND, typename U>
cudaError_t unfold_generic(const void* xv, void* colsv, const Geometry& g, int64_t C, int64_t n0, int64_t nc,
                           const ColumnsLayout& lay, bool channels_last, cudaStream_t stream) {
  const U* x = static_cast<const U*>(xv);
  U* cols = static_cast<U*>(colsv);
  if (channels_last) {
    const int64_t items = nc * lay.lc * lay.groups * g.kernel_size;
    unfold_cl_generic_kernel<ND, U><<<blocks_for(items), kThreads, 0, stream>>>(x, cols, g, C, n0, lay, items);
    return cudaGetLastError();
  }
  constexpr int V = generic_unfold_run<U>();
  const int64_t rows = nc * C, runs = (lay.lc + V - 1) / V;
  const bool vec = aligned_to(cols, sizeof(U) * V) && lay.row_stride % V == 0 && lay.image_stride % V == 0;
  unfold_cf_generic_kernel<ND, U, V><<<blocks_for(rows * runs), kThreads, 0, stream>>>(x, cols, g, C, n0, lay, rows,
                                                                                      runs, vec);
  return cudaGetLastError();
}

// The generic fold (columns_generic.cuh) with the sum type S
// (common/fold_elements.h).
template <int ND, typename S>
cudaError_t fold_generic(const void* colsv, void* xv, const Geometry& g, int64_t C, int64_t n0, int64_t nc,
                         const ColumnsLayout& lay, bool channels_last, bool accumulate, cudaStream_t stream) {
  using E = typename S::Storage;
  const E* cols = static_cast<const E*>(colsv);
  E* x = static_cast<E*>(xv);
  if (channels_last) {
    // Channels-last complex numbers never come here (launch_fold folds them
    // as floats): no kernels for them.
    constexpr bool kComplex = std::is_same_v<S, ComplexSum<float>> || std::is_same_v<S, ComplexSum<double>>;
    if constexpr (kComplex) {
      return cudaErrorInvalidValue;
    } else {
      constexpr int V = static_cast<int>(16 / sizeof(E));
      const int64_t rows = nc * g.in_size;
      if (V > 1 && (C / lay.groups) % V == 0 && aligned_to(cols, 16) && aligned_to(x, 16)) {
        fold_cl_generic_kernel<ND, S, V><<<blocks_for(rows * (C / V)), kThreads, 0, stream>>>(cols, x, g, C, n0, lay,
                                                                                             rows, C / V, accumulate);
      } else {
        fold_cl_generic_kernel<ND, S, 1><<<blocks_for(rows * C), kThreads, 0, stream>>>(cols, x, g, C, n0, lay, rows,
                                                                                        C, accumulate);
      }
      return cudaGetLastError();
    }
  }
  constexpr int V = generic_fold_run<E>();
  const int64_t width = g.in[ND - 1];
  const int64_t lines = nc * C * (g.in_size / width);
  const int64_t runs = (width + V - 1) / V;
  const bool vec = aligned_to(x, sizeof(E) * V) && width % V == 0;
  fold_cf_generic_kernel<ND, S, V><<<blocks_for(lines * runs), kThreads, 0, stream>>>(cols, x, g, C, n0, lay, lines,
                                                                                     runs, accumulate, vec);
  return cudaGetLastError();
}

// unfold of elements of other sizes than the specialised kernels' 2, 4 and 8
// bytes. Channels-last rows copy a group's Cg channels per tap as one run of
// Cg * elem_bytes bytes, so where that run is a whole number of 8-, 4- or
// 2-byte elements (the widest) the specialised kernels copy it as those,
// Cg * elem_bytes / w of them: every 16-byte row, 1-byte ones of an even
// number of channels. The rest, and every channels-first one, take the
// generic kernels.
cudaError_t unfold_other_sizes(const void* x, void* cols, size_t elem_bytes, const Geometry& g, int64_t channels,
                               int64_t n0, int64_t nc, const ColumnsLayout& layout, bool channels_last,
                               bool streaming, cudaStream_t stream) {
  if (channels_last) {
    const int64_t group_bytes = channels / layout.groups * static_cast<int64_t>(elem_bytes);
    for (const int64_t w : {8, 4, 2})
      if (group_bytes % w == 0)
        return launch_unfold(x, cols, static_cast<size_t>(w), g, channels * static_cast<int64_t>(elem_bytes) / w,
                             n0, nc, layout, channels_last, streaming, stream);
  }
  return dispatch_rank(g.nd, [&](auto rank) {
    constexpr int ND = decltype(rank)::value;
    switch (elem_bytes) {
      case 1: return unfold_generic<ND, uint8_t>(x, cols, g, channels, n0, nc, layout, channels_last, stream);
      case 16: return unfold_generic<ND, Bytes16>(x, cols, g, channels, n0, nc, layout, channels_last, stream);
      default: return cudaErrorInvalidValue;
    }
  });
}

}  // namespace

cudaError_t launch_unfold(const void* x, void* cols, size_t elem_bytes,
                          const Geometry& g, int64_t channels, int64_t n0,
                          int64_t nc, const ColumnsLayout& layout,
                          bool channels_last, bool streaming, cudaStream_t stream) {
  if (nc <= 0 || layout.lc <= 0 || channels <= 0) return cudaSuccess;
  if (elem_bytes != 2 && elem_bytes != 4 && elem_bytes != 8)
    return unfold_other_sizes(x, cols, elem_bytes, g, channels, n0, nc, layout, channels_last, streaming, stream);
  return dispatch_rank(g.nd, [&](auto rank) {
    constexpr int ND = decltype(rank)::value;
    return with_element_bytes(elem_bytes, [&](auto tag) {
      using U = decltype(tag);
      return streaming ? unfold_typed<ND, U, true>(x, cols, g, channels, n0, nc, layout, channels_last, stream)
                       : unfold_typed<ND, U, false>(x, cols, g, channels, n0, nc, layout, channels_last, stream);
    });
  });
}

cudaError_t launch_fold(const void* cols, DataType cols_type, void* x,
                        DataType x_type, const Geometry& g, int64_t channels,
                        int64_t n0, int64_t nc, const ColumnsLayout& layout,
                        bool channels_last, bool accumulate,
                        cudaStream_t stream) {
  if (nc <= 0 || channels <= 0 || g.in_size <= 0) return cudaSuccess;
  // Channels-last complex numbers are pairs of channels of their parts,
  // which sum apart: the float fold of 2 * C channels, exactly.
  if (channels_last && cols_type == x_type && (x_type == DataType::C64 || x_type == DataType::C128)) {
    const DataType part = x_type == DataType::C64 ? DataType::F32 : DataType::F64;
    return launch_fold(cols, part, x, part, g, 2 * channels, n0, nc, layout, channels_last, accumulate, stream);
  }
  return dispatch_rank(g.nd, [&](auto rank) {
    constexpr int ND = decltype(rank)::value;
#define IM2COL_FOLD(TC, TX) \
  return fold_typed<ND, TC, TX>(cols, x, g, channels, n0, nc, layout, channels_last, accumulate, stream)
#define IM2COL_FOLD_GENERIC(S) \
  return fold_generic<ND, S>(cols, x, g, channels, n0, nc, layout, channels_last, accumulate, stream)
    if (cols_type == x_type) {
      // Integers sum modulo 2^bits whatever their sign (fold_elements.h):
      // one sum a width.
      switch (x_type) {
        case DataType::F16: IM2COL_FOLD(__half, __half);
        case DataType::BF16: IM2COL_FOLD(__nv_bfloat16, __nv_bfloat16);
        case DataType::F32: IM2COL_FOLD(float, float);
        case DataType::F64: IM2COL_FOLD(double, double);
        case DataType::PRED: IM2COL_FOLD_GENERIC(BoolAny);
        case DataType::S8:
        case DataType::U8: IM2COL_FOLD_GENERIC(IntegerSum<uint8_t>);
        case DataType::S16:
        case DataType::U16: IM2COL_FOLD_GENERIC(IntegerSum<uint16_t>);
        case DataType::S32:
        case DataType::U32: IM2COL_FOLD_GENERIC(IntegerSum<uint32_t>);
        case DataType::S64:
        case DataType::U64: IM2COL_FOLD_GENERIC(IntegerSum<uint64_t>);
        case DataType::F8E4M3FN: IM2COL_FOLD_GENERIC(Float8Sum<Float8E4M3FN>);
        case DataType::F8E5M2: IM2COL_FOLD_GENERIC(Float8Sum<Float8E5M2>);
        case DataType::C64: IM2COL_FOLD_GENERIC(ComplexSum<float>);
        case DataType::C128: IM2COL_FOLD_GENERIC(ComplexSum<double>);
        default: return cudaErrorInvalidValue;
      }
    }
    if (cols_type == DataType::F32 && x_type == DataType::F16) IM2COL_FOLD(float, __half);
    if (cols_type == DataType::F32 && x_type == DataType::BF16) IM2COL_FOLD(float, __nv_bfloat16);
#undef IM2COL_FOLD
#undef IM2COL_FOLD_GENERIC
    return cudaErrorInvalidValue;
  });
}

}  // namespace im2col::cuda
