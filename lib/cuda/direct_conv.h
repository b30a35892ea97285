// Direct convolution kernels for depthwise and small-group convolutions,
// where the GEMM of each group is too thin to use tensor cores well and the
// columns would cost more memory traffic than the arithmetic they feed.
// The Python side chooses them (the `algorithm` attribute); shapes and layouts
// are those of conv.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../geometry.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

struct DirectShapes {
  int64_t n, c, o, groups;
  bool channels_last;
};

// y = conv(x, w); y may be float32 for half x and w.
cudaError_t direct_forward(const void* x, const void* w, void* y, xla::ffi::DataType in,
                           xla::ffi::DataType out, const Geometry& g, const DirectShapes& s,
                           cudaStream_t stream);

// dx = conv_backward_data(dy, w).
cudaError_t direct_backward_data(const void* dy, const void* w, void* dx,
                                 xla::ffi::DataType type, const Geometry& g,
                                 const DirectShapes& s, cudaStream_t stream);

// dw = conv_backward_filter(dy, x), reduced deterministically in two passes:
// `slices` partial sums over runs of `positions_per_slice` (n, l) positions
// go to `partials` (float32, or float64 for float64), then are summed in order.
cudaError_t direct_backward_filter(const void* dy, const void* x, void* dw, void* partials,
                                   int64_t positions_per_slice, xla::ffi::DataType type,
                                   const Geometry& g, const DirectShapes& s,
                                   cudaStream_t stream);

// The largest Cg * K the filter-gradient kernel accumulates per thread.
constexpr int64_t kDirectMaxTaps = 32;

}  // namespace im2col::cuda
