// The channels-first depthwise convolution on strips of output rows
// (depthwise_rows.cuh), for 2-D and 3-D geometries with 3, 5 or 7 taps at
// unit stride and dilation along dimension ND - 2.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/geometry.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

// y (n, c, out) = the depthwise conv of x (n, c, in) with w (c, 1, K); with
// `flip` the filter is read backwards (the input gradient on the transposed
// geometry). *done is false, and nothing is launched, where the kernel does
// not apply; y may be float32 for half x and w.
cudaError_t depthwise_rows(const void* x, const void* w, void* y, xla::ffi::DataType in,
                           xla::ffi::DataType out, const Geometry& g, int64_t n, int64_t c,
                           bool flip, bool* done, cudaStream_t stream);

}  // namespace im2col::cuda
