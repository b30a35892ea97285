// Direct depthwise / small-group convolution kernels (see direct_conv.h):
// forward and input gradient; the filter gradient is in direct_filter.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/device_util.cuh"
#include "common/tile.cuh"
#include "conv/depthwise/depthwise_rows.h"
#include "conv/depthwise/depthwise_tile.cuh"
#include "conv/direct/direct_conv.h"
#include "conv/direct/direct_util.cuh"

namespace im2col::cuda {
namespace {

using DataType = xla::ffi::DataType;

template <int ND, typename T, typename TY>
__global__ void __launch_bounds__(kThreads)
forward_kernel(const T* __restrict__ x, const T* __restrict__ w, TY* __restrict__ y,
               Geometry g, DirectShapes sh) {
  using A = typename Acc<TY>::type;
  const int64_t K = g.kernel_size, Cg = sh.c / sh.groups, Og = sh.o / sh.groups;
  const int64_t total = sh.n * sh.o * g.out_size;
  for (int64_t t = grid_start(); t < total; t += grid_step()) {
    int64_t n, o, l, gi, oo;
    image_coords(sh.channels_last, t, sh.o, g.out_size, n, o, l);
    divmod(o, Og, gi, oo);
    const int64_t c0 = gi * Cg;
    int32_t oc[kMaxSpatial], origin[kMaxSpatial], k[kMaxSpatial];
    unravel<ND>(l, g.out, oc);
    window_origin<ND>(g, oc, origin);
#pragma unroll
    for (int d = 0; d < ND; ++d) k[d] = 0;
    A acc = 0;
    for (int64_t kk = 0; kk < K; ++kk, increment<ND>(k, g.kernel)) {
      const int64_t s = source_offset_at<ND>(g, origin, k);
      if (s < 0) continue;
      for (int64_t j = 0; j < Cg; ++j)
        acc += static_cast<A>(to_acc(__ldg(x + image_index(sh.channels_last, n, c0 + j, s, sh.c, g.in_size)))) *
               static_cast<A>(to_acc(__ldg(w + filter_index(sh.channels_last, o, j, kk, Cg, K))));
    }
    y[t] = store_value<TY>(acc);
  }
}

// Depthwise (one input and one output channel per group), channels-first: a
// block stages the input under a band of output rows for some channels in
// shared memory (tile.cuh), then consecutive threads take consecutive output
// positions (LANES: the block, or a warp for bands smaller than the block)
// and sum their kPositions windows tap by tap; the weight of a tap is one
// broadcast load for the warp.
constexpr int kPositions = 4;

template <int LANES, int ND, typename T, typename TY>
__device__ __forceinline__ void depthwise_band(const T* tile, const int32_t* taps, const T* w,
                                               TY* y, const Geometry& g, const TilePlan& t,
                                               const TileBlock& b) {
  using A = typename Acc<TY>::type;
  constexpr int32_t groups = kThreads / LANES;
  const int32_t group = threadIdx.x / LANES, first = threadIdx.x % LANES;
  const int32_t K = static_cast<int32_t>(g.kernel_size);
  for (int32_t e0 = b.p_begin + first; e0 < b.p_end; e0 += LANES * kPositions) {
    int32_t pos[kPositions];
#pragma unroll
    for (int j = 0; j < kPositions; ++j) {
      const int32_t e = e0 + j * LANES;
      pos[j] = e < b.p_end ? position_offset<ND>(g, t, e, b.row0) : -1;
    }
    for (int32_t ci = group; ci < b.channels; ci += groups) {
      const T* src = tile + ci * t.plane;
      const T* wc = w + (b.c0 + ci) * g.kernel_size;
      A acc[kPositions];
#pragma unroll
      for (int j = 0; j < kPositions; ++j) acc[j] = A(0);
      for (int32_t kk = 0; kk < K; ++kk) {
        const A wk = static_cast<A>(to_acc(__ldg(wc + kk)));
        const T* tap = src + taps[kk];
#pragma unroll
        for (int j = 0; j < kPositions; ++j)
          if (pos[j] >= 0) acc[j] += wk * static_cast<A>(to_acc(tap[pos[j]]));
      }
      TY* out = y + (b.n * t.channels_total + b.c0 + ci) * g.out_size + e0;
#pragma unroll
      for (int j = 0; j < kPositions; ++j)
        if (pos[j] >= 0) out[j * LANES] = store_value<TY>(acc[j]);
    }
  }
}

template <int ND, typename T, typename TY>
__global__ void __launch_bounds__(kThreads)
depthwise_cf_tiled_kernel(const T* __restrict__ x, const T* __restrict__ w, TY* __restrict__ y,
                          Geometry g, ColumnsLayout lay, TilePlan t, bool flip) {
  extern __shared__ __align__(16) unsigned char smem[];
  int32_t* taps = reinterpret_cast<int32_t*>(smem);
  T* tile = reinterpret_cast<T*>(smem + table_bytes(t.table));
  const TileBlock b = tile_block(t, t.channels_total, lay);
  const int32_t K = static_cast<int32_t>(g.kernel_size);
  for (int32_t kk = threadIdx.x; kk < K; kk += blockDim.x) taps[kk] = tap_offset<ND>(g, t, flip ? K - 1 - kk : kk);
  fill_channels_first<ND, kDepthwiseFill>(tile, x + (b.n * t.channels_total + b.c0) * g.in_size, g, t, b);
  __syncthreads();
  if (b.p_end - b.p_begin >= kThreads) {
    depthwise_band<kThreads, ND>(tile, taps, w, y, g, t, b);
  } else {
    depthwise_band<32, ND>(tile, taps, w, y, g, t, b);
  }
}

template <int ND, typename T>
__global__ void __launch_bounds__(kThreads)
backward_data_kernel(const T* __restrict__ dy, const T* __restrict__ w, T* __restrict__ dx,
                     Geometry g, DirectShapes sh) {
  using A = typename Acc<T>::type;
  const int64_t K = g.kernel_size, Cg = sh.c / sh.groups, Og = sh.o / sh.groups;
  const int64_t total = sh.n * sh.c * g.in_size;
  for (int64_t t = grid_start(); t < total; t += grid_step()) {
    int64_t n, c, q;
    image_coords(sh.channels_last, t, sh.c, g.in_size, n, c, q);
    int64_t gi, j;
    divmod(c, Cg, gi, j);
    int32_t qc[kMaxSpatial];
    unravel<ND>(q, g.in, qc);
    A acc = 0;
    for_each_tap_reading<ND>(g, qc, [&](int32_t kk, int32_t l) {
      for (int64_t oo = 0; oo < Og; ++oo) {
        const int64_t o = gi * Og + oo;
        acc += static_cast<A>(to_acc(__ldg(dy + image_index(sh.channels_last, n, o, l, sh.o, g.out_size)))) *
               static_cast<A>(to_acc(__ldg(w + filter_index(sh.channels_last, o, j, kk, Cg, K))));
      }
    });
    dx[t] = store_value<T>(acc);
  }
}

// Stages in shared memory the (C, K) depthwise weights as [tap][channel], in
// the accumulator type, so that a tap's weights for V channels are one read,
// and after them each tap's displacement in extents dims (tap_displacement),
// for the windows away from the edges. Returns the displacements.
template <int ND, typename T, typename A>
__device__ __forceinline__ const int32_t* stage_weights(const T* w, A* weights, const Geometry& g,
                                                        const int64_t* dims, int32_t C) {
  const int32_t K = static_cast<int32_t>(g.kernel_size);
  int32_t* taps = reinterpret_cast<int32_t*>(weights + K * C);
  for (int32_t i = threadIdx.x; i < K * C; i += blockDim.x) {
    const int32_t kk = i / C, c = i - kk * C;
    weights[i] = static_cast<A>(to_acc(w[c * K + kk]));
  }
  for (int32_t kk = threadIdx.x; kk < K; kk += blockDim.x) taps[kk] = tap_displacement<ND>(g, dims, kk);
  __syncthreads();
  return taps;
}

// Shared memory of stage_weights. The displacements get room for a whole
// number of 16-byte reads: nvcc reads two at a time in window_sum's loop
// remainder before it knows that a second one is left (an 8-byte read past
// the last of an odd count, which compute-sanitizer's memcheck reported as
// out of bounds of the block's shared memory).
template <typename A>
size_t staged_weights_bytes(const Geometry& g, int64_t C) {
  return static_cast<size_t>(g.kernel_size * C) * sizeof(A) +
         round16(static_cast<size_t>(g.kernel_size) * sizeof(int32_t));
}

// The V channels of output position o of a channels-last depthwise conv,
// summed over the taps in increasing order (weights staged by
// stage_weights, taps its displacements). Windows away from the edges (most
// of them) read each tap at its displacement, without bounds checks.
template <int ND, int V, typename T, typename A>
__device__ __forceinline__ void window_sum(A (&acc)[V], const T* xn, const A* wu, const int32_t* taps,
                                           const Geometry& g, const int32_t* o, int64_t C) {
  const int32_t K = static_cast<int32_t>(g.kernel_size), C32 = static_cast<int32_t>(C);
  int32_t origin[kMaxSpatial], k[kMaxSpatial];
  window_origin<ND>(g, o, origin);
#pragma unroll
  for (int d = 0; d < ND; ++d) k[d] = 0;
  if (window_inside<ND>(g, origin)) {
    const int32_t base = flat_offset<ND>(g.in, origin);
    for (int32_t kk = 0; kk < K; ++kk)
      multiply_add<V>(acc, xn + static_cast<int64_t>(base + taps[kk]) * C, wu + kk * C32);
  } else {
    for (int32_t kk = 0; kk < K; ++kk, increment<ND>(k, g.kernel)) {
      const int32_t s = source_offset_at<ND>(g, origin, k);
      if (s >= 0) multiply_add<V>(acc, xn + static_cast<int64_t>(s) * C, wu + kk * C32);
    }
  }
}

// A run of kRun consecutive output positions along the last dimension, where
// that dimension has unit stride and dilation and at most kRunTaps taps: the
// run's windows share input vectors, and each kernel row's kRun + taps - 1
// vectors are loaded once for the run (window_sum loads kRun * taps). The
// same sums in the same order as window_sum; false (nothing summed) unless
// every window of the run is inside the input.
constexpr int kRun = 4, kRunTaps = 5;

template <int ND, int V, typename T, typename A>
__device__ __forceinline__ bool run_sum(A (&acc)[kRun][V], const T* xn, const A* wu, const int32_t* taps,
                                        const Geometry& g, const int32_t* o, int64_t C) {
  const int32_t K = static_cast<int32_t>(g.kernel_size), C32 = static_cast<int32_t>(C);
  const int32_t taps_last = static_cast<int32_t>(g.kernel[ND - 1]);
  int32_t origin[kMaxSpatial];
  window_origin<ND>(g, o, origin);
  if (!window_inside<ND>(g, origin) ||
      origin[ND - 1] + kRun - 1 + taps_last - 1 >= static_cast<int32_t>(g.in[ND - 1]))
    return false;
  const int32_t base = flat_offset<ND>(g.in, origin);
  for (int32_t k0 = 0; k0 < K; k0 += taps_last) {  // a kernel row: taps k0 .. k0 + taps_last - 1
    const T* row = xn + static_cast<int64_t>(base + taps[k0]) * C;
    Pack<T, V> xv[kRun + kRunTaps - 1];
#pragma unroll
    for (int i = 0; i < kRun + kRunTaps - 1; ++i)
      if (i < kRun + taps_last - 1) xv[i] = *reinterpret_cast<const Pack<T, V>*>(row + static_cast<int64_t>(i) * C);
#pragma unroll
    for (int j = 0; j < kRunTaps; ++j) {
      if (j < taps_last) {
        const A* wj = wu + (k0 + j) * C32;
#pragma unroll
        for (int p = 0; p < kRun; ++p)
#pragma unroll
          for (int v = 0; v < V; ++v) acc[p][v] += wj[v] * static_cast<A>(to_acc(xv[p + j].v[v]));
      }
    }
  }
  return true;
}

// Depthwise, channels-last: a thread sums V consecutive channels (16-byte
// loads of the input per tap) of one output position, or with RUNS of a run
// of kRun positions (run_sum); the block first stages the weights in shared
// memory as [tap][channel] (accumulator type), so that a tap's V weights are
// one vector read.
template <int ND, typename T, typename TY, int V, bool RUNS>
__global__ void __launch_bounds__(kThreads)
depthwise_cl_kernel(const T* __restrict__ x, const T* __restrict__ w, TY* __restrict__ y,
                    Geometry g, int64_t N, int64_t C) {
  using A = typename Acc<TY>::type;
  extern __shared__ __align__(16) unsigned char smem[];
  A* weights = reinterpret_cast<A*>(smem);
  const int32_t* taps = stage_weights<ND>(w, weights, g, g.in, static_cast<int32_t>(C));
  const int64_t units = C / V;
  const int32_t last = static_cast<int32_t>(g.out[ND - 1]);
  const int32_t per_line = RUNS ? (last + kRun - 1) / kRun : last;
  const int64_t lines = g.out_size / last;
  for (int64_t t = grid_start(); t < N * lines * per_line * units; t += grid_step()) {
    int64_t item, unit, line_n, r, n, line;
    divmod(t, units, item, unit);
    divmod(item, static_cast<int64_t>(per_line), line_n, r);
    divmod(line_n, lines, n, line);
    const int32_t first = static_cast<int32_t>(RUNS ? r * kRun : r);
    const int64_t l0 = line * last + first;
    int32_t o[kMaxSpatial];
    unravel<ND>(l0, g.out, o);
    const T* xn = x + n * g.in_size * C + unit * V;
    const A* wu = weights + unit * V;
    TY* out = y + (n * g.out_size + l0) * C + unit * V;
    if constexpr (RUNS) {
      A acc[kRun][V];
#pragma unroll
      for (int p = 0; p < kRun; ++p)
#pragma unroll
        for (int v = 0; v < V; ++v) acc[p][v] = A(0);
      const int32_t count = last - first < kRun ? last - first : kRun;
      if (count == kRun && run_sum<ND, V>(acc, xn, wu, taps, g, o, C)) {
#pragma unroll
        for (int p = 0; p < kRun; ++p) store_channels<V>(out + p * C, acc[p]);
      } else {
        for (int32_t p = 0; p < count; ++p, ++o[ND - 1]) {
          window_sum<ND, V>(acc[0], xn, wu, taps, g, o, C);
          store_channels<V>(out + p * C, acc[0]);
#pragma unroll
          for (int v = 0; v < V; ++v) acc[0][v] = A(0);
        }
      }
    } else {
      A acc[V];
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] = A(0);
      window_sum<ND, V>(acc, xn, wu, taps, g, o, C);
      store_channels<V>(out, acc);
    }
  }
}

// Depthwise input gradient, channels-last: a thread sums V consecutive
// channels of one input position over the taps that read it (16-byte loads
// of dy), in increasing tap order like backward_data_kernel; positions away
// from the edges (unit stride) read tap k at a staged displacement.
template <int ND, typename T, int V>
__global__ void __launch_bounds__(kThreads)
depthwise_backward_data_cl_kernel(const T* __restrict__ dy, const T* __restrict__ w,
                                  T* __restrict__ dx, Geometry g, int64_t N, int64_t C) {
  using A = typename Acc<T>::type;
  extern __shared__ __align__(16) unsigned char smem[];
  A* weights = reinterpret_cast<A*>(smem);
  const int32_t K = static_cast<int32_t>(g.kernel_size), C32 = static_cast<int32_t>(C);
  const int32_t* taps = stage_weights<ND>(w, weights, g, g.out, C32);
  const int64_t units = C / V;
  for (int64_t t = grid_start(); t < N * g.in_size * units; t += grid_step()) {
    int64_t row, unit, n, q;
    divmod(t, units, row, unit);
    divmod(row, g.in_size, n, q);
    int32_t qc[kMaxSpatial];
    unravel<ND>(q, g.in, qc);
    const T* dyn = dy + n * g.out_size * C + unit * V;
    const A* wu = weights + unit * V;
    A acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = A(0);
    if (all_taps_read<ND>(g, qc)) {
      int32_t a[kMaxSpatial];
#pragma unroll
      for (int d = 0; d < ND; ++d) a[d] = qc[d] + static_cast<int32_t>(g.pad_lo[d]);
      const int32_t base = flat_offset<ND>(g.out, a);
      for (int32_t kk = 0; kk < K; ++kk)
        multiply_add<V>(acc, dyn + static_cast<int64_t>(base - taps[kk]) * C, wu + kk * C32);
    } else {
      for_each_tap_reading<ND>(g, qc, [&](int32_t kk, int32_t l) {
        multiply_add<V>(acc, dyn + static_cast<int64_t>(l) * C, wu + kk * C32);
      });
    }
    store_channels<V>(dx + row * C + unit * V, acc);
  }
}

// Depthwise, channels-first, on the tile; false where the tile does not
// apply. With `flip`, the kernel is read backwards (transposed_geometry).
template <int ND, typename T, typename TY>
bool depthwise_cf(const T* x, const T* w, TY* y, const Geometry& g, const DirectShapes& s,
                  bool flip, cudaStream_t stream) {
  ColumnsLayout lay;
  lay.lc = g.out_size;
  TilePlan t;
  if (!plan_tile(g, lay, s.c, false, sizeof(T), &t) || tile_blocks(t, s.n) >= (int64_t{1} << 31))
    return false;
  depthwise_cf_tiled_kernel<ND, T, TY><<<static_cast<unsigned>(tile_blocks(t, s.n)), kThreads, t.smem, stream>>>(
      x, w, y, g, lay, t, flip);
  return true;
}

// The depthwise kernels above, where they apply; false leaves the call to
// forward_kernel.
template <int ND, typename T, typename TY>
bool depthwise_forward(const T* x, const T* w, TY* y, const Geometry& g, const DirectShapes& s,
                       cudaStream_t stream) {
  using A = typename Acc<TY>::type;
  if (!s.depthwise()) return false;
  if (!s.channels_last) return depthwise_cf<ND>(x, w, y, g, s, false, stream);
  if (depthwise_cl_tiled<ND>(x, w, y, g, s.n, s.c, false, stream)) return true;
  constexpr int V = 16 / sizeof(T);
  // Runs take 4 channels per thread in every type (8-byte loads for half
  // types): 8 channels of a run took 128 registers and measured no faster.
  constexpr int VR = V < 4 ? V : 4;
  const size_t smem = staged_weights_bytes<A>(g, s.c);
  if (s.c % V != 0 || smem > 48 * 1024 || !aligned_to(x, 16) || !aligned_to(y, sizeof(TY) * V))
    return false;
  const bool runs = !g.any_lhs_dilation && g.stride[ND - 1] == 1 && g.rhs_dilation[ND - 1] == 1 &&
                    g.kernel[ND - 1] <= kRunTaps && g.out[ND - 1] >= kRun;
  // Few blocks, each looping: every block stages all the weights.
  const int64_t lines = s.n * (g.out_size / g.out[ND - 1]);
  if (runs) {
    const unsigned blocks =
        std::min(blocks_for(lines * ((g.out[ND - 1] + kRun - 1) / kRun) * (s.c / VR)), 4096u);
    depthwise_cl_kernel<ND, T, TY, VR, true><<<blocks, kThreads, smem, stream>>>(x, w, y, g, s.n, s.c);
    return true;
  }
  const unsigned blocks = std::min(blocks_for(lines * g.out[ND - 1] * (s.c / V)), 4096u);
  depthwise_cl_kernel<ND, T, TY, V, false><<<blocks, kThreads, smem, stream>>>(x, w, y, g, s.n, s.c);
  return true;
}

// Depthwise input gradient, channels-first: the forward kernel on dy with
// the transposed geometry.
template <int ND, typename T>
bool depthwise_backward_data_cf(const T* dy, const T* w, T* dx, const Geometry& g,
                                const DirectShapes& s, cudaStream_t stream) {
  Geometry t;
  if (!s.depthwise() || !transposed_geometry(g, &t)) return false;
  return depthwise_cf<ND>(dy, w, dx, t, s, true, stream);
}

}  // namespace

cudaError_t direct_forward(const void* x, const void* w, void* y, DataType in, DataType out,
                           const Geometry& g, const DirectShapes& s, cudaStream_t stream) {
  const int64_t total = s.n * s.o * g.out_size;
  if (total == 0) return cudaSuccess;
  bool grouped = false;
  if (const cudaError_t e = grouped_forward(x, w, y, in, out, g, s, &grouped, stream); e != cudaSuccess || grouped)
    return e;
  if (s.depthwise() && !s.channels_last) {
    bool done = false;
    if (const cudaError_t e = depthwise_rows(x, w, y, in, out, g, s.n, s.c, false, &done, stream);
        e != cudaSuccess || done)
      return e;
  }
  return dispatch_rank(g.nd, [&](auto rank) {
    constexpr int ND = decltype(rank)::value;
    return with_types(in, out, [&](auto tag, auto out_tag) {
      using T = decltype(tag);
      using TY = decltype(out_tag);
      const T* xt = static_cast<const T*>(x);
      const T* wt = static_cast<const T*>(w);
      TY* yt = static_cast<TY*>(y);
      if (!depthwise_forward<ND>(xt, wt, yt, g, s, stream))
        forward_kernel<ND, T, TY><<<blocks_for(total), kThreads, 0, stream>>>(xt, wt, yt, g, s);
      return cudaGetLastError();
    });
  });
}

cudaError_t direct_backward_data(const void* dy, const void* w, void* dx, DataType type,
                                 const Geometry& g, const DirectShapes& s, cudaStream_t stream) {
  const int64_t total = s.n * s.c * g.in_size;
  if (total == 0) return cudaSuccess;
  bool grouped = false;
  if (const cudaError_t e = grouped_backward_data(dy, w, dx, type, g, s, &grouped, stream);
      e != cudaSuccess || grouped)
    return e;
  if (Geometry t; s.depthwise() && !s.channels_last && transposed_geometry(g, &t)) {
    bool done = false;
    if (const cudaError_t e = depthwise_rows(dy, w, dx, type, type, t, s.n, s.c, true, &done, stream);
        e != cudaSuccess || done)
      return e;
  }
  return dispatch_rank(g.nd, [&](auto rank) {
    constexpr int ND = decltype(rank)::value;
    return with_type(type, [&](auto tag) {
      using T = decltype(tag);
      using A = typename Acc<T>::type;
      constexpr int V = 16 / sizeof(T);
      const T* dyt = static_cast<const T*>(dy);
      const T* wt = static_cast<const T*>(w);
      T* dxt = static_cast<T*>(dx);
      // Unit strides: the tiled forward kernel on the transposed geometry.
      Geometry t;
      if (s.channels_last && s.depthwise() && transposed_geometry(g, &t) &&
          depthwise_cl_tiled<ND>(dyt, wt, dxt, t, s.n, s.c, true, stream))
        return cudaGetLastError();
      const size_t smem = staged_weights_bytes<A>(g, s.c);
      if (s.channels_last && s.depthwise() && s.c % V == 0 && smem <= 48 * 1024 &&
          aligned_to(dy, 16) && aligned_to(dx, 16)) {
        const unsigned blocks = std::min(blocks_for(s.n * g.in_size * (s.c / V)), 4096u);
        depthwise_backward_data_cl_kernel<ND, T, V><<<blocks, kThreads, smem, stream>>>(dyt, wt, dxt, g, s.n, s.c);
      } else if (s.channels_last || !depthwise_backward_data_cf<ND>(dyt, wt, dxt, g, s, stream)) {
        backward_data_kernel<ND, T><<<blocks_for(total), kThreads, 0, stream>>>(dyt, wt, dxt, g, s);
      }
      return cudaGetLastError();
    });
  });
}

}  // namespace im2col::cuda
