// CUDA unfold (im2col) and fold (col2im as a gather) kernels.
//
// Each thread handles a short run of V elements that are contiguous in the
// array it writes (16 bytes when the layout allows), so that the index math
// (a few 32-bit divisions) is paid once per run and stores are full vectors.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>
#include <cstdint>

#include "columns.h"
#include "device_util.cuh"

namespace im2col::cuda {
namespace {

inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

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

// Channels-last: a thread takes V channels of one (n, l) and copies them for
// every kernel tap into row (n, l), at (group, tap, channel-in-group).
template <int ND, typename U, int V>
__global__ void __launch_bounds__(kThreads)
unfold_cl_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g,
                 int64_t C, int64_t n0, ColumnsLayout lay, int64_t rows,
                 int64_t units_per_row) {
  const int64_t K = g.kernel_size, Cg = C / lay.groups;
  for (int64_t t = grid_start(); t < rows * units_per_row; t += grid_step()) {
    int64_t row, unit, n, l, gi, j0;
    divmod(t, units_per_row, row, unit);
    divmod(row, lay.lc, n, l);
    divmod(unit * V, Cg, gi, j0);
    int32_t o[kMaxSpatial], origin[kMaxSpatial], k[kMaxSpatial];
    unravel<ND>(lay.l0 + l, g.out, o);
    window_origin<ND>(g, o, origin);
    const U* xn = x + (n0 + n) * g.in_size * C + unit * V;
    U* dst = cols + row * C * K + gi * K * Cg + j0;
#pragma unroll
    for (int d = 0; d < ND; ++d) k[d] = 0;
    for (int64_t kk = 0; kk < K; ++kk, dst += Cg, increment<ND>(k, g.kernel)) {
      const int64_t s = source_offset_at<ND>(g, origin, k);
      Pack<U, V> p;
      if (s >= 0) {
        p = *reinterpret_cast<const Pack<U, V>*>(xn + s * C);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) p.v[v] = U(0);
      }
      *reinterpret_cast<Pack<U, V>*>(dst) = p;
    }
  }
}

// Channels-first: rows (n, c), each a run of in_size input positions; every
// element sums, over kernel taps in order, the column entries that read it.
template <int ND, typename TC, typename TX, int V>
__global__ void __launch_bounds__(kThreads)
fold_cf_kernel(const TC* __restrict__ cols, TX* __restrict__ x, Geometry g,
               int64_t C, int64_t n0, ColumnsLayout lay, int64_t rows,
               int64_t runs_per_row, bool accumulate, bool vector_store) {
  using A = typename Acc<TX>::type;
  const int64_t K = g.kernel_size, l_end = lay.l0 + lay.lc;
  for (int64_t t = grid_start(); t < rows * runs_per_row; t += grid_step()) {
    int64_t row, run, n, c;
    divmod(t, runs_per_row, row, run);
    divmod(row, C, n, c);
    const int64_t e0 = run * V;
    const int64_t count = g.in_size - e0 < V ? g.in_size - e0 : V;
    int32_t q[kMaxSpatial], k[kMaxSpatial];
    unravel<ND>(e0, g.in, q);
    const TC* base = cols + n * lay.image_stride + c * K * lay.row_stride;
    TX* xr = x + ((n0 + n) * C + c) * g.in_size + e0;
    Pack<TX, V> p;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if (v < count) {
        A acc = accumulate ? static_cast<A>(to_acc(xr[v])) : A(0);
        for (int d = 0; d < ND; ++d) k[d] = 0;
        for (int64_t kk = 0; kk < K; ++kk) {
          const int64_t tp = target_position<ND>(g, q, k);
          if (tp >= lay.l0 && tp < l_end)
            acc += static_cast<A>(to_acc(__ldg(base + kk * lay.row_stride + tp - lay.l0)));
          increment<ND>(k, g.kernel);
        }
        p.v[v] = store_value<TX>(acc);
        increment<ND>(q, g.in);
      }
    }
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
  const int64_t K = g.kernel_size, Cg = C / lay.groups, l_end = lay.l0 + lay.lc;
  for (int64_t t = grid_start(); t < rows * units_per_row; t += grid_step()) {
    int64_t row, unit, n, qi, gi, j0;
    divmod(t, units_per_row, row, unit);
    divmod(row, g.in_size, n, qi);
    divmod(unit * V, Cg, gi, j0);
    int32_t q[kMaxSpatial], k[kMaxSpatial];
    unravel<ND>(qi, g.in, q);
    TX* xq = x + ((n0 + n) * g.in_size + qi) * C + unit * V;
    A acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v)
      acc[v] = accumulate ? static_cast<A>(to_acc(xq[v])) : A(0);
    for (int d = 0; d < ND; ++d) k[d] = 0;
    for (int64_t kk = 0; kk < K; ++kk) {
      const int64_t tp = target_position<ND>(g, q, k);
      if (tp >= lay.l0 && tp < l_end) {
        const Pack<TC, V> p = *reinterpret_cast<const Pack<TC, V>*>(
            cols + (n * lay.lc + tp - lay.l0) * C * K + (gi * K + kk) * Cg + j0);
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] += static_cast<A>(to_acc(p.v[v]));
      }
      increment<ND>(k, g.kernel);
    }
    Pack<TX, V> out;
#pragma unroll
    for (int v = 0; v < V; ++v) out.v[v] = store_value<TX>(acc[v]);
    *reinterpret_cast<Pack<TX, V>*>(xq) = out;
  }
}

template <int ND, typename U>
cudaError_t unfold_typed(const void* xv, void* colsv, const Geometry& g,
                         int64_t C, int64_t n0, int64_t nc,
                         const ColumnsLayout& lay, bool channels_last,
                         cudaStream_t stream) {
  constexpr int V = 16 / sizeof(U);
  const U* x = static_cast<const U*>(xv);
  U* cols = static_cast<U*>(colsv);
  if (!channels_last) {
    const int64_t rows = nc * C;
    const int64_t runs = (lay.lc + V - 1) / V;
    const bool vec = aligned16(cols) && lay.row_stride % V == 0 &&
                     lay.image_stride % V == 0;
    unfold_cf_kernel<ND, U, V><<<blocks_for(rows * runs), kThreads, 0, stream>>>(
        x, cols, g, C, n0, lay, rows, runs, vec);
  } else {
    const int64_t rows = nc * lay.lc;
    const int64_t Cg = C / lay.groups;
    if (Cg % V == 0 && aligned16(x) && aligned16(cols)) {
      unfold_cl_kernel<ND, U, V><<<blocks_for(rows * (C / V)), kThreads, 0, stream>>>(
          x, cols, g, C, n0, lay, rows, C / V);
    } else {
      unfold_cl_kernel<ND, U, 1><<<blocks_for(rows * C), kThreads, 0, stream>>>(
          x, cols, g, C, n0, lay, rows, C);
    }
  }
  return cudaGetLastError();
}

template <int ND, typename TC, typename TX>
cudaError_t fold_typed(const void* colsv, void* xv, const Geometry& g,
                       int64_t C, int64_t n0, int64_t nc,
                       const ColumnsLayout& lay, bool channels_last,
                       bool accumulate, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(TC);
  const TC* cols = static_cast<const TC*>(colsv);
  TX* x = static_cast<TX*>(xv);
  if (!channels_last) {
    const int64_t rows = nc * C;
    const int64_t runs = (g.in_size + V - 1) / V;
    const bool vec = reinterpret_cast<uintptr_t>(x) % (sizeof(TX) * V) == 0 &&
                     g.in_size % V == 0;
    fold_cf_kernel<ND, TC, TX, V><<<blocks_for(rows * runs), kThreads, 0, stream>>>(
        cols, x, g, C, n0, lay, rows, runs, accumulate, vec);
  } else {
    const int64_t rows = nc * g.in_size;
    const int64_t Cg = C / lay.groups;
    if (Cg % V == 0 && aligned16(cols) &&
        reinterpret_cast<uintptr_t>(x) % (sizeof(TX) * V) == 0) {
      fold_cl_kernel<ND, TC, TX, V><<<blocks_for(rows * (C / V)), kThreads, 0, stream>>>(
          cols, x, g, C, n0, lay, rows, C / V, accumulate);
    } else {
      fold_cl_kernel<ND, TC, TX, 1><<<blocks_for(rows * C), kThreads, 0, stream>>>(
          cols, x, g, C, n0, lay, rows, C, accumulate);
    }
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_unfold(const void* x, void* cols, size_t elem_bytes,
                          const Geometry& g, int64_t channels, int64_t n0,
                          int64_t nc, const ColumnsLayout& layout,
                          bool channels_last, cudaStream_t stream) {
  if (nc <= 0 || layout.lc <= 0 || channels <= 0) return cudaSuccess;
  return dispatch_rank(g.nd, [&](auto rank) {
    constexpr int ND = decltype(rank)::value;
    switch (elem_bytes) {
      case 2: return unfold_typed<ND, uint16_t>(x, cols, g, channels, n0, nc, layout, channels_last, stream);
      case 4: return unfold_typed<ND, uint32_t>(x, cols, g, channels, n0, nc, layout, channels_last, stream);
      case 8: return unfold_typed<ND, uint64_t>(x, cols, g, channels, n0, nc, layout, channels_last, stream);
      default: return cudaErrorInvalidValue;
    }
  });
}

cudaError_t launch_fold(const void* cols, DataType cols_type, void* x,
                        DataType x_type, const Geometry& g, int64_t channels,
                        int64_t n0, int64_t nc, const ColumnsLayout& layout,
                        bool channels_last, bool accumulate,
                        cudaStream_t stream) {
  if (nc <= 0 || channels <= 0 || g.in_size <= 0) return cudaSuccess;
  return dispatch_rank(g.nd, [&](auto rank) {
    constexpr int ND = decltype(rank)::value;
#define IM2COL_FOLD(TC, TX) \
  return fold_typed<ND, TC, TX>(cols, x, g, channels, n0, nc, layout, channels_last, accumulate, stream)
    if (cols_type == x_type) {
      switch (x_type) {
        case DataType::F16: IM2COL_FOLD(__half, __half);
        case DataType::BF16: IM2COL_FOLD(__nv_bfloat16, __nv_bfloat16);
        case DataType::F32: IM2COL_FOLD(float, float);
        case DataType::F64: IM2COL_FOLD(double, double);
        default: return cudaErrorInvalidValue;
      }
    }
    if (cols_type == DataType::F32 && x_type == DataType::F16) IM2COL_FOLD(float, __half);
    if (cols_type == DataType::F32 && x_type == DataType::BF16) IM2COL_FOLD(float, __nv_bfloat16);
#undef IM2COL_FOLD
    return cudaErrorInvalidValue;
  });
}

}  // namespace im2col::cuda
