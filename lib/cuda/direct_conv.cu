// Direct depthwise / small-group convolution kernels (see direct_conv.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device_util.cuh"
#include "direct_conv.h"

namespace im2col::cuda {
namespace {

using DataType = xla::ffi::DataType;

// Element (n, c, spatial offset s) of an image with C channels.
__device__ __forceinline__ int64_t image_index(bool cl, int64_t n, int64_t c, int64_t s,
                                               int64_t C, int64_t size) {
  return cl ? (n * size + s) * C + c : (n * C + c) * size + s;
}

// Element (o, j, kk) of a filter: (O, Cg, K) channels-first, (O, K, Cg) last.
__device__ __forceinline__ int64_t filter_index(bool cl, int64_t o, int64_t j, int64_t kk,
                                                int64_t Cg, int64_t K) {
  return cl ? (o * K + kk) * Cg + j : (o * Cg + j) * K + kk;
}

// Splits a flat index over an image in memory order into (n, c, spatial).
__device__ __forceinline__ void image_coords(bool cl, int64_t t, int64_t C, int64_t size,
                                             int64_t& n, int64_t& c, int64_t& s) {
  int64_t rest;
  if (cl) {
    divmod(t, C, rest, c);
    divmod(rest, size, n, s);
  } else {
    divmod(t, size, rest, s);
    divmod(rest, C, n, c);
  }
}

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
    int32_t qc[kMaxSpatial], k[kMaxSpatial];
    unravel<ND>(q, g.in, qc);
    for (int d = 0; d < ND; ++d) k[d] = 0;
    A acc = 0;
    for (int64_t kk = 0; kk < K; ++kk, increment<ND>(k, g.kernel)) {
      const int64_t l = target_position<ND>(g, qc, k);
      if (l < 0) continue;
      for (int64_t oo = 0; oo < Og; ++oo) {
        const int64_t o = gi * Og + oo;
        acc += static_cast<A>(to_acc(__ldg(dy + image_index(sh.channels_last, n, o, l, sh.o, g.out_size)))) *
               static_cast<A>(to_acc(__ldg(w + filter_index(sh.channels_last, o, j, kk, Cg, K))));
      }
    }
    dx[t] = store_value<T>(acc);
  }
}

// Pass 1: thread (slice p, channel o) sums, over the (n, l) positions of its
// slice in order, dy[n, o, l] * x[n, c, src(l, k)] for each of its Cg * K
// taps, keeping the sums in shared memory (one column per thread).
template <int ND, typename T, typename A>
__global__ void __launch_bounds__(kThreads)
backward_filter_partial_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                               A* __restrict__ partials, Geometry g, DirectShapes sh,
                               int64_t per_slice, int64_t slices) {
  extern __shared__ unsigned char smem_raw[];
  A* acc = reinterpret_cast<A*>(smem_raw);
  const int64_t K = g.kernel_size, Cg = sh.c / sh.groups, Og = sh.o / sh.groups;
  const int64_t taps = Cg * K, positions = sh.n * g.out_size;
  for (int64_t t = grid_start(); t < slices * sh.o; t += grid_step()) {
    int64_t p, o;
    divmod(t, sh.o, p, o);
    int64_t gi, oo;
    divmod(o, Og, gi, oo);
    const int64_t c0 = gi * Cg;
    for (int64_t i = 0; i < taps; ++i) acc[i * kThreads + threadIdx.x] = 0;
    const int64_t end = min(positions, (p + 1) * per_slice);
    for (int64_t pos = p * per_slice; pos < end; ++pos) {
      int64_t n, l;
      divmod(pos, g.out_size, n, l);
      const A dyv = static_cast<A>(to_acc(__ldg(dy + image_index(sh.channels_last, n, o, l, sh.o, g.out_size))));
      int32_t oc[kMaxSpatial], origin[kMaxSpatial], k[kMaxSpatial];
      unravel<ND>(l, g.out, oc);
      window_origin<ND>(g, oc, origin);
#pragma unroll
      for (int d = 0; d < ND; ++d) k[d] = 0;
      for (int64_t kk = 0; kk < K; ++kk, increment<ND>(k, g.kernel)) {
        const int64_t s = source_offset_at<ND>(g, origin, k);
        if (s < 0) continue;
        for (int64_t j = 0; j < Cg; ++j)
          acc[(j * K + kk) * kThreads + threadIdx.x] +=
              dyv * static_cast<A>(to_acc(__ldg(x + image_index(sh.channels_last, n, c0 + j, s, sh.c, g.in_size))));
      }
    }
    for (int64_t i = 0; i < taps; ++i)
      partials[(p * sh.o + o) * taps + i] = acc[i * kThreads + threadIdx.x];
  }
}

// Pass 2: each filter element sums its partials over the slices, in order.
template <typename T, typename A>
__global__ void __launch_bounds__(kThreads)
backward_filter_reduce_kernel(const A* __restrict__ partials, T* __restrict__ dw,
                              Geometry g, DirectShapes sh, int64_t slices) {
  const int64_t K = g.kernel_size, Cg = sh.c / sh.groups, taps = Cg * K;
  for (int64_t t = grid_start(); t < sh.o * taps; t += grid_step()) {
    int64_t o, i;
    divmod(t, taps, o, i);
    A sum = 0;
    for (int64_t p = 0; p < slices; ++p) sum += partials[(p * sh.o + o) * taps + i];
    int64_t j, kk;
    divmod(i, K, j, kk);
    dw[filter_index(sh.channels_last, o, j, kk, Cg, K)] = store_value<T>(sum);
  }
}

template <typename Fn>
cudaError_t with_type(DataType t, Fn&& fn) {
  switch (t) {
    case DataType::F16: return fn(__half{});
    case DataType::BF16: return fn(__nv_bfloat16{});
    case DataType::F32: return fn(float{});
    case DataType::F64: return fn(double{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t direct_forward(const void* x, const void* w, void* y, DataType in, DataType out,
                           const Geometry& g, const DirectShapes& s, cudaStream_t stream) {
  const int64_t total = s.n * s.o * g.out_size;
  if (total == 0) return cudaSuccess;
  return dispatch_rank(g.nd, [&](auto rank) {
    constexpr int ND = decltype(rank)::value;
    return with_type(in, [&](auto tag) {
      using T = decltype(tag);
      if (out == DataType::F32 && !std::is_same_v<T, float>) {
        if constexpr (std::is_same_v<T, double>) return cudaErrorInvalidValue;
        else
          forward_kernel<ND, T, float><<<blocks_for(total), kThreads, 0, stream>>>(
              static_cast<const T*>(x), static_cast<const T*>(w), static_cast<float*>(y), g, s);
      } else {
        forward_kernel<ND, T, T><<<blocks_for(total), kThreads, 0, stream>>>(
            static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), g, s);
      }
      return cudaGetLastError();
    });
  });
}

cudaError_t direct_backward_data(const void* dy, const void* w, void* dx, DataType type,
                                 const Geometry& g, const DirectShapes& s, cudaStream_t stream) {
  const int64_t total = s.n * s.c * g.in_size;
  if (total == 0) return cudaSuccess;
  return dispatch_rank(g.nd, [&](auto rank) {
    constexpr int ND = decltype(rank)::value;
    return with_type(type, [&](auto tag) {
      using T = decltype(tag);
      backward_data_kernel<ND, T><<<blocks_for(total), kThreads, 0, stream>>>(
          static_cast<const T*>(dy), static_cast<const T*>(w), static_cast<T*>(dx), g, s);
      return cudaGetLastError();
    });
  });
}

cudaError_t direct_backward_filter(const void* dy, const void* x, void* dw, void* partials,
                                   int64_t positions_per_slice, DataType type, const Geometry& g,
                                   const DirectShapes& s, cudaStream_t stream) {
  const int64_t positions = s.n * g.out_size;
  const int64_t slices = (positions + positions_per_slice - 1) / positions_per_slice;
  const int64_t taps = (s.c / s.groups) * g.kernel_size;
  if (taps > kDirectMaxTaps || positions_per_slice < 1) return cudaErrorInvalidValue;
  return dispatch_rank(g.nd, [&](auto rank) {
    constexpr int ND = decltype(rank)::value;
    return with_type(type, [&](auto tag) {
      using T = decltype(tag);
      using A = typename Acc<T>::type;
      const size_t smem = static_cast<size_t>(taps) * kThreads * sizeof(A);
      if (smem > 48 * 1024) {
        // Per call, not cached: the attribute belongs to the current device's
        // context, and a call may run on any device. It is a cheap host call.
        const cudaError_t e = cudaFuncSetAttribute(backward_filter_partial_kernel<ND, T, A>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(smem));
        if (e != cudaSuccess) return e;
      }
      backward_filter_partial_kernel<ND, T, A><<<blocks_for(slices * s.o), kThreads, smem, stream>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<A*>(partials), g, s,
          positions_per_slice, slices);
      backward_filter_reduce_kernel<T, A><<<blocks_for(s.o * taps), kThreads, 0, stream>>>(
          static_cast<const A*>(partials), static_cast<T*>(dw), g, s, slices);
      return cudaGetLastError();
    });
  });
}

}  // namespace im2col::cuda
