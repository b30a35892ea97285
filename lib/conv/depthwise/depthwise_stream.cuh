// The channels-last depthwise forward of 3 x 3 windows at unit dilation
// (MobileNet's layers), streamed down the rows: a thread owns one vector of
// channels at one output column, holds its channels' 9 weights and the 3 x 3
// input vectors under its current output in registers, and walks `rows`
// output rows, loading each step only the input rows the window slides onto
// (one at stride 1, two at stride 2), the next step's while it computes this
// one. No shared memory and no barrier: at 9 FMAs per element moved these
// layers are memory-bound, and the tiled kernel's rounds of stage, wait and
// compute left DRAM idle between them (1.0-1.5 TB/s on an H200). The threads
// of a warp hold neighbouring vectors of one pixel, then neighbouring
// columns, whose overlapping input columns come from L1.
//
// Also the unit-stride input gradient: its one phase (dw_phase) is a forward
// of dy whose weight map flips the filter; the output map must be the
// identity. No XLA headers: the host tests run dw_stream_thread thread by
// thread (tests/host/conv/depthwise/depthwise_conv_on_host.cc).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/device_util.cuh"
#include "conv/depthwise/depthwise_plan.h"

namespace im2col::cuda {

constexpr int kDwStreamK = 3;              // the window, kDwStreamK x kDwStreamK
constexpr int kDwStreamThreads = 256;
constexpr int32_t kDwStreamMinRows = 4;    // rows a thread walks, at least (the window's warm-up is 2 rows)
constexpr int64_t kDwStreamFillBlocks = 2048;  // ~8 waves of two blocks on 132 SMs
// Steps ahead of the loads that a thread asks L2 for the input rows: a step's
// own loads keep one row of a warp in flight, too few bytes to cover DRAM's
// latency at the occupancy these registers allow.
constexpr int kDwStreamPrefetch = 4;

// The grid of a kernel whose threads each own one channel vector of one
// column and walk down its rows: blocks of threads across the columns, then
// row tiles, then images (the streamed forward's, the cells').
struct DwColumnGrid {
  int32_t vectors = 1;     // C / V
  int32_t columns = 1;     // columns x vectors: the threads of a row tile
  int32_t col_blocks = 1;  // blocks across them
  int32_t rows = 1;        // rows a thread walks
  int32_t row_tiles = 1;
  int64_t blocks = 0;      // col_blocks x row_tiles x images
  FastDiv by_vectors, by_col_blocks, by_row_tiles;
};
struct DwStreamPlan : DwColumnGrid {};

// That grid for `vectors` channel vectors over `cols` columns and `total_rows`
// rows of n images, blocks of `threads`: rows halved from all of them (not
// under min_rows) until the grid holds kDwStreamFillBlocks blocks, the tiles
// then evened. False past 32-bit thread and block indices.
inline bool plan_dw_columns(int64_t vectors, int64_t cols, int32_t total_rows, int64_t n, int32_t threads,
                            int32_t min_rows, DwColumnGrid* out) {
  const int64_t columns = vectors * cols;
  if (columns >= (int64_t{1} << 30)) return false;
  DwColumnGrid s;
  s.vectors = static_cast<int32_t>(vectors);
  s.columns = static_cast<int32_t>(columns);
  s.col_blocks = static_cast<int32_t>((columns + threads - 1) / threads);
  const auto blocks_of = [&](int32_t rows) {
    return int64_t{s.col_blocks} * n * ((total_rows + rows - 1) / rows);
  };
  s.rows = total_rows;
  while (s.rows > min_rows && blocks_of(s.rows) < kDwStreamFillBlocks) s.rows = (s.rows + 1) / 2;
  s.row_tiles = (total_rows + s.rows - 1) / s.rows;
  s.rows = (total_rows + s.row_tiles - 1) / s.row_tiles;  // even tiles
  s.blocks = blocks_of(s.rows);
  if (s.blocks >= (int64_t{1} << 31)) return false;
  s.by_vectors = FastDiv(s.vectors);
  s.by_col_blocks = FastDiv(s.col_blocks);
  s.by_row_tiles = FastDiv(s.row_tiles);
  *out = s;
  return true;
}

// Thread tid's place in block `block` of that grid (threads: channel vector
// fastest, then column); false for the threads past the columns.
struct DwColumnPlace {
  int64_t image;
  int32_t row_tile, col, vec;
};

__device__ __forceinline__ bool dw_column_place(const DwColumnGrid& s, int32_t threads, int64_t block,
                                                int32_t tid, DwColumnPlace* at) {
  int32_t b = static_cast<int32_t>(block), cb;
  s.by_col_blocks.divmod(b, b, cb);
  s.by_row_tiles.divmod(b, b, at->row_tile);
  at->image = b;
  const int32_t col = cb * threads + tid;
  if (col >= s.columns) return false;
  s.by_vectors.divmod(col, at->col, at->vec);
  return true;
}

// Whether the streaming kernel takes phases p of n images with C channels of
// elem bytes (channels-last; the caller checks the layout and alignment),
// and its plan: rows halved from whole columns until the grid fills the GPU.
// Whether g with C channels of elem bytes is in the streaming kernels'
// domain: 2-D 3 x 3 windows at unit dilation, stride 1 or 2 along H, any
// along W, identity output map, whole channel vectors of v.
inline bool dw_stream_domain(const DwGeom& g, int64_t C, size_t elem, int32_t v) {
  if (g.nd != 2 || g.zero != 0 || g.out[1] < 1 || g.out[2] < 1) return false;
  if (g.kernel[1] != kDwStreamK || g.kernel[2] != kDwStreamK || g.dil[1] != 1 || g.dil[2] != 1) return false;
  if (g.stride[1] < 1 || g.stride[1] > 2 || g.stride[2] < 1) return false;
  for (int d = 1; d < 3; ++d)
    if (g.o_first[d] != 0 || g.o_step[d] != 1 || g.yk[d] != g.out[d]) return false;
  if (elem != 2 && elem != 4 && elem != 8) return false;
  return C >= 1 && C % v == 0;
}

inline bool plan_dw_stream(const DwPhases& p, int64_t n, int64_t C, size_t elem, DwStreamPlan* out) {
  if (p.count != 1 || n < 1) return false;
  const DwGeom& g = p.g[0];
  // 8 bytes for half types: the 9 taps' weights stay 36 floats.
  if (!dw_stream_domain(g, C, elem, dw_vector(elem, true))) return false;
  return plan_dw_columns(C / dw_vector(elem, true), g.out[2], g.out[1], n, kDwStreamThreads, kDwStreamMinRows, out);
}

// Whether streaming g pays where a thread walks `rows` output rows: the
// window's warm-up rows (K - SY, re-read by the rows above) are at most a
// quarter of the input rows it walks. Measured (H200, bfloat16,
// MobileNetV2's layers at batch 64): 28x28 maps at stride 1 walk 4 rows a
// thread (1.5x the reads) and took 1.07-1.14x the tiled kernel's time;
// larger maps and stride 2, 0.59-0.86x.
inline bool dw_stream_rows_pay(const DwGeom& g, int64_t rows) {
  const int32_t warm_up = kDwStreamK > g.stride[1] ? kDwStreamK - g.stride[1] : 0;
  return 4 * int64_t{warm_up} <= rows * g.stride[1];
}
inline bool dw_stream_pays(const DwGeom& g, const DwStreamPlan& s) { return dw_stream_rows_pay(g, s.rows); }

// The input under one thread's window column: its K input columns from ix0
// (those inside the image in col_ok), addressed from the element offset of
// column ix0 in row 0 of the image, a row every row_elems elements.
template <typename T, int V, int K>
struct DwStreamColumn {
  const T* __restrict__ x;
  int64_t col_base, row_elems, C;
  int32_t IH, sx;
  bool col_ok[K];

  __device__ __forceinline__ DwStreamColumn(const T* __restrict__ x_, const DwGeom& g, int64_t image, int64_t C_,
                                            int64_t ch, int32_t ix0)
      : x(x_), row_elems(int64_t{g.in[2]} * C_), C(C_), IH(g.in[1]), sx(g.stride[2]) {
    col_base = (image * g.in[1] * int64_t{g.in[2]} + ix0) * C_ + ch;
#pragma unroll
    for (int kx = 0; kx < K; ++kx) col_ok[kx] = static_cast<uint32_t>(ix0 + kx) < static_cast<uint32_t>(g.in[2]);
  }

  // The K vectors of input row iy (zeros outside the image).
  __device__ __forceinline__ void load(RawWords<T, V> (&dst)[K], int32_t iy) const {
    const bool row_ok = static_cast<uint32_t>(iy) < static_cast<uint32_t>(IH);
    const int64_t base = col_base + iy * row_elems;
#pragma unroll
    for (int kx = 0; kx < K; ++kx) {
      RawWords<T, V> r{};
      if (row_ok && col_ok[kx]) r = load_raw<T, V>(x + base + kx * C);
      dst[kx] = r;
    }
  }

  // Asks L2 for input row iy (the window's first columns, up to the stride
  // along W, so that a row's threads cover every pixel).
  __device__ __forceinline__ void prefetch(int32_t iy) const {
#if defined(__CUDA_ARCH__)
    if (static_cast<uint32_t>(iy) >= static_cast<uint32_t>(IH)) return;
    const int64_t base = col_base + iy * row_elems;
#pragma unroll
    for (int kx = 0; kx < K; ++kx)
      if (kx < sx && col_ok[kx]) asm volatile("prefetch.global.L2 [%0];" ::"l"(x + base + kx * C));
#else
    (void)iy;
#endif
  }
};

// One vector store of o at p (aligned to it). In the staged forward nvcc's front end
// split a store of the Pack, or of its words as a uint2 or uint4, into one
// store an element (st.global.f32 x 4, or 16-bit stores), so the store is
// written out.
template <typename TY, int V>
__device__ __forceinline__ void dw_store_vector(TY* p, const Pack<TY, V>& o) {
  constexpr size_t B = sizeof(TY) * V;
#if defined(__CUDA_ARCH__)
  if constexpr (B == 16) {
    uint32_t u[4];
    std::memcpy(u, &o, B);
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3])
                 : "memory");
    return;
  } else if constexpr (B == 8) {
    uint32_t u[2];
    std::memcpy(u, &o, B);
    asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(u[0]), "r"(u[1]) : "memory");
    return;
  }
#endif
  std::memcpy(p, &o, B);
}

// Row steps a thread's loop is unrolled by: at stride 1 by the window's
// height, so that its rows rotate through register names instead of moving
// (18 moves a step); at stride 2 not (float32 and float64 spilled 24 bytes).
template <int SY>
constexpr int dw_stream_unroll() {
  return SY == 1 ? kDwStreamK : 1;
}

// Converts a row's K loaded vectors to accumulator values, once each.
template <typename T, typename A, int V, int K>
__device__ __forceinline__ void dw_stream_convert(A (&dst)[K][V], const RawWords<T, V> (&src)[K]) {
#pragma unroll
  for (int kx = 0; kx < K; ++kx) {
    Pack<T, V> p;
    std::memcpy(&p, &src[kx], sizeof(p));
#pragma unroll
    for (int e = 0; e < V; ++e) dst[kx][e] = static_cast<A>(to_acc(p.v[e]));
  }
}

// The K x K weights of channels ch .. ch + V - 1 as accumulator values, in
// the order of the window (the weight map g.w_first / g.w_step: the input
// gradient's phase reads the filter flipped).
template <typename T, typename A, int V, int K>
__device__ __forceinline__ void dw_stream_weights(A (&wt)[K][K][V], const T* __restrict__ w, const DwGeom& g,
                                                  int64_t ch) {
  const int64_t wsize = g.w_size();
#pragma unroll
  for (int ky = 0; ky < K; ++ky)
#pragma unroll
    for (int kx = 0; kx < K; ++kx) {
      const int64_t fh = g.w_first[1] + g.w_step[1] * ky, fw = g.w_first[2] + g.w_step[2] * kx;
      const int64_t tap = (int64_t{g.w_first[0]} * g.wk[1] + fh) * g.wk[2] + fw;
#pragma unroll
      for (int e = 0; e < V; ++e) wt[ky][kx][e] = static_cast<A>(to_acc(w[(ch + e) * wsize + tap]));
    }
}

// Thread `tid` of block `block` (blocks: column block fastest, then row
// tile, then image; threads: channel vector fastest, then output column).
// SY: the stride along H (1 or 2); the stride along W is any.
template <int SY, typename T, typename TY>
__device__ __forceinline__ void dw_stream_thread(const T* __restrict__ x, const T* __restrict__ w,
                                                 TY* __restrict__ y, const DwGeom& g, const DwStreamPlan& s,
                                                 int64_t C, int64_t block, int32_t tid) {
  using A = typename Acc<T>::type;
  constexpr int K = kDwStreamK, V = dw_vector(sizeof(T), true);
  using Raw = RawWords<T, V>;
  constexpr int KEEP = K > SY ? K - SY : 0, NEW = K - KEEP;  // window rows kept, loaded a step

  DwColumnPlace at;
  if (!dw_column_place(s, kDwStreamThreads, block, tid, &at)) return;
  const int64_t image = at.image, ch = int64_t{at.vec} * V;
  const int32_t ox = at.col;
  const int32_t OH = g.out[1], OW = g.out[2];
  const int32_t oy0 = at.row_tile * s.rows, oy_end = min(OH, oy0 + s.rows);

  A wt[K][K][V];
  dw_stream_weights<T, A, V, K>(wt, w, g, ch);

  const DwStreamColumn<T, V, K> column(x, g, image, C, ch, ox * g.stride[2] - g.pad[2]);
  // The rows a step loads, asked of L2 kDwStreamPrefetch steps ahead: those
  // of the first steps here, each later one's in the loop.
  const auto prefetch_step = [&](int32_t step) {
#pragma unroll
    for (int i = 0; i < NEW; ++i) column.prefetch(step * SY - g.pad[1] + KEEP + i);
  };
  for (int32_t j = 1; j <= kDwStreamPrefetch && oy0 + j < oy_end; ++j) prefetch_step(oy0 + j);

  // The window as accumulator values, each element converted once as it
  // enters; the next step's rows held as loaded.
  A win[K][K][V];
  Raw next[NEW][K];
  const int32_t iy0 = oy0 * SY - g.pad[1];
#pragma unroll
  for (int i = 0; i < KEEP; ++i) {
    Raw r[K];
    column.load(r, iy0 + i);
    dw_stream_convert<T, A, V, K>(win[i], r);
  }
#pragma unroll
  for (int i = 0; i < NEW; ++i) column.load(next[i], iy0 + KEEP + i);

  TY* yp = y + ((image * OH + oy0) * OW + ox) * C + ch;
  const int64_t y_row = int64_t{OW} * C;
#pragma unroll(dw_stream_unroll<SY>())
  for (int32_t oy = oy0; oy < oy_end; ++oy, yp += y_row) {
#pragma unroll
    for (int i = 0; i < NEW; ++i) dw_stream_convert<T, A, V, K>(win[KEEP + i], next[i]);
    if (oy + 1 < oy_end) {
      const int32_t iy = (oy + 1) * SY - g.pad[1] + KEEP;
#pragma unroll
      for (int i = 0; i < NEW; ++i) column.load(next[i], iy + i);
      if (oy + 1 + kDwStreamPrefetch < oy_end) prefetch_step(oy + 1 + kDwStreamPrefetch);
    }
    A acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = A(0);
#pragma unroll
    for (int ky = 0; ky < K; ++ky)
#pragma unroll
      for (int kx = 0; kx < K; ++kx)
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] += wt[ky][kx][e] * win[ky][kx][e];
    Pack<TY, V> out;
#pragma unroll
    for (int e = 0; e < V; ++e) out.v[e] = store_value<TY>(acc[e]);
    *reinterpret_cast<Pack<TY, V>*>(yp) = out;
#pragma unroll
    for (int i = 0; i < KEEP; ++i)
#pragma unroll
      for (int kx = 0; kx < K; ++kx)
#pragma unroll
        for (int e = 0; e < V; ++e) win[i][kx][e] = win[i + SY][kx][e];
  }
}

template <int SY, typename T, typename TY>
__global__ void __launch_bounds__(kDwStreamThreads, 2)
dw_stream_kernel(const T* __restrict__ x, const T* __restrict__ w, TY* __restrict__ y, const DwGeom g,
                 const DwStreamPlan s, int64_t C) {
  dw_stream_thread<SY, T, TY>(x, w, y, g, s, C, blockIdx.x, static_cast<int32_t>(threadIdx.x));
}

}  // namespace im2col::cuda
