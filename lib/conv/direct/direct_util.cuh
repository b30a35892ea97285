// Index helpers, channel-vector arithmetic and type dispatch shared by the
// direct convolution kernels (direct_conv.cu, direct_filter.cu, grouped_conv.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/device_util.cuh"
#include "common/geometry.h"
#include "conv/direct/direct_conv.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

// Element (n, c, spatial offset s) of an image with C channels.
__device__ __forceinline__ int64_t image_index(bool cl, int64_t n, int64_t c, int64_t s,
                                               int64_t C, int64_t size) {
  return cl ? (n * size + s) * C + c : (n * C + c) * size + s;
}

// Element (o, j, kk) of a filter: (O, Cg, K) channels-first, (O, K, Cg) last.
__host__ __device__ __forceinline__ int64_t filter_index(bool cl, int64_t o, int64_t j, int64_t kk,
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

// The image and output rows [row_begin, row_end) of a filter-gradient slice.
struct SliceRows {
  int64_t n;
  int32_t row_begin, row_end;
};

__device__ __forceinline__ SliceRows slice_rows(const FilterSlices& f, const Geometry& g,
                                                int64_t slice) {
  int64_t n, part;
  divmod(slice, f.per_image, n, part);
  const int64_t begin = part * f.rows;
  const int64_t end = begin + f.rows < g.out[0] ? begin + f.rows : g.out[0];
  return {n, static_cast<int32_t>(begin), static_cast<int32_t>(end)};
}

// Calls fn(T{}) with the CUDA element type of t.
template <typename Fn>
cudaError_t with_type(xla::ffi::DataType t, Fn&& fn) {
  using xla::ffi::DataType;
  switch (t) {
    case DataType::F16: return fn(__half{});
    case DataType::BF16: return fn(__nv_bfloat16{});
    case DataType::F32: return fn(float{});
    case DataType::F64: return fn(double{});
    default: return cudaErrorInvalidValue;
  }
}

// Calls fn(T{}) with the CUDA element type of a 16-bit float t (the
// tensor-core kernels' types).
template <typename Fn>
cudaError_t with_half_type(xla::ffi::DataType t, Fn&& fn) {
  using xla::ffi::DataType;
  switch (t) {
    case DataType::F16: return fn(__half{});
    case DataType::BF16: return fn(__nv_bfloat16{});
    default: return cudaErrorInvalidValue;
  }
}

// Calls fn(T{}, TY{}) for input type `in` and output type `out`: TY is T, or
// float for half inputs with a float32 output (the forward's
// preferred_element_type).
template <typename Fn>
cudaError_t with_types(xla::ffi::DataType in, xla::ffi::DataType out, Fn&& fn) {
  return with_type(in, [&](auto tag) {
    using T = decltype(tag);
    if (out == xla::ffi::DataType::F32 && !std::is_same_v<T, float>) {
      if constexpr (std::is_same_v<T, double>) return cudaErrorInvalidValue;
      else return fn(tag, float{});
    }
    return fn(tag, tag);
  });
}

// acc[v] += weights[v] * src[v] for the V channels at src (aligned to the
// V-vector).
template <int V, typename T, typename A>
__device__ __forceinline__ void multiply_add(A (&acc)[V], const T* src, const A* weights) {
  const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(src);
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] += weights[v] * static_cast<A>(to_acc(p.v[v]));
}

template <int V, typename TY, typename A>
__device__ __forceinline__ void store_channels(TY* dst, const A (&acc)[V]) {
  Pack<TY, V> out;
#pragma unroll
  for (int v = 0; v < V; ++v) out.v[v] = store_value<TY>(acc[v]);
  *reinterpret_cast<Pack<TY, V>*>(dst) = out;
}

}  // namespace im2col::cuda
