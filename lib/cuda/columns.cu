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

// Channels-first: rows (n, c, k), each a run of lc output positions.
template <int ND, typename U, int V>
__global__ void __launch_bounds__(kThreads)
unfold_cf_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g,
                 int64_t C, int64_t n0, ColumnsLayout lay, int64_t rows,
                 int64_t runs_per_row, bool vector_store) {
  const int64_t K = g.kernel_size;
  for (int64_t t = grid_start(); t < rows * runs_per_row; t += grid_step()) {
    int64_t row, run, n, ck, c, kk;
    divmod(t, runs_per_row, row, run);
    divmod(row, C * K, n, ck);
    divmod(ck, K, c, kk);
    int64_t k[kMaxSpatial], o[kMaxSpatial];
    unravel<ND>(kk, g.kernel, k);
    const int64_t e0 = run * V;
    unravel<ND>(lay.l0 + e0, g.out, o);
    const U* xc = x + ((n0 + n) * C + c) * g.in_size;
    U* dst = cols + n * lay.image_stride + ck * lay.row_stride + e0;
    const int64_t count = lay.lc - e0 < V ? lay.lc - e0 : V;
    Pack<U, V> p;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      p.v[v] = U(0);
      if (v < count) {
        const int64_t s = source_offset<ND>(g, o, k);
        if (s >= 0) p.v[v] = __ldg(xc + s);
        increment<ND>(o, g.out);
      }
    }
    if (vector_store && count == V) {
      *reinterpret_cast<Pack<U, V>*>(dst) = p;
    } else {
      for (int v = 0; v < count; ++v) dst[v] = p.v[v];
    }
  }
}

// Channels-last: rows (n, l), each (group, kernel tap, channel-in-group);
// a thread copies V channels of one tap.
template <int ND, typename U, int V>
__global__ void __launch_bounds__(kThreads)
unfold_cl_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g,
                 int64_t C, int64_t n0, ColumnsLayout lay, int64_t rows,
                 int64_t units_per_row) {
  const int64_t K = g.kernel_size, Cg = C / lay.groups, vecs = Cg / V;
  for (int64_t t = grid_start(); t < rows * units_per_row; t += grid_step()) {
    int64_t row, unit, n, l, gk, jv, gi, kk;
    divmod(t, units_per_row, row, unit);
    divmod(row, lay.lc, n, l);
    divmod(unit, vecs, gk, jv);
    divmod(gk, K, gi, kk);
    int64_t k[kMaxSpatial], o[kMaxSpatial];
    unravel<ND>(kk, g.kernel, k);
    unravel<ND>(lay.l0 + l, g.out, o);
    const int64_t s = source_offset<ND>(g, o, k);
    Pack<U, V> p;
    if (s >= 0) {
      p = *reinterpret_cast<const Pack<U, V>*>(
          x + ((n0 + n) * g.in_size + s) * C + gi * Cg + jv * V);
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) p.v[v] = U(0);
    }
    *reinterpret_cast<Pack<U, V>*>(cols + row * C * K + gk * Cg + jv * V) = p;
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
    int64_t q[kMaxSpatial], k[kMaxSpatial];
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
    int64_t q[kMaxSpatial], k[kMaxSpatial];
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
    const int64_t rows = nc * C * g.kernel_size;
    const int64_t runs = (lay.lc + V - 1) / V;
    const bool vec = aligned16(cols) && lay.row_stride % V == 0 &&
                     lay.image_stride % V == 0;
    unfold_cf_kernel<ND, U, V><<<blocks_for(rows * runs), kThreads, 0, stream>>>(
        x, cols, g, C, n0, lay, rows, runs, vec);
  } else {
    const int64_t rows = nc * lay.lc;
    const int64_t Cg = C / lay.groups;
    if (Cg % V == 0 && aligned16(x) && aligned16(cols)) {
      const int64_t units = lay.groups * g.kernel_size * (Cg / V);
      unfold_cl_kernel<ND, U, V><<<blocks_for(rows * units), kThreads, 0, stream>>>(
          x, cols, g, C, n0, lay, rows, units);
    } else {
      const int64_t units = lay.groups * g.kernel_size * Cg;
      unfold_cl_kernel<ND, U, 1><<<blocks_for(rows * units), kThreads, 0, stream>>>(
          x, cols, g, C, n0, lay, rows, units);
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
