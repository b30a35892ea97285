// Launchers for the CUDA unfold (im2col) and fold (col2im) kernels over one
// chunk of columns; used by the unfold/fold handlers and by the convolution.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/geometry.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

using DataType = xla::ffi::DataType;

// Writes the columns of images [n0, n0 + nc) into `cols` (see ColumnsLayout).
// `streaming`: the channels-last tiled and vector kernels store with an
// evict-first hint, for columns that leave the op (the unfold primitive); the
// convolution's columns, read back by its GEMM from L2, are stored plainly.
cudaError_t launch_unfold(const void* x, void* cols, size_t elem_bytes,
                          const Geometry& g, int64_t channels, int64_t n0,
                          int64_t nc, const ColumnsLayout& layout,
                          bool channels_last, bool streaming, cudaStream_t stream);

// Every element of images [n0, n0 + nc) of x gathers the columns that read it
// (a deterministic sum in float, double for double); with `accumulate` the sum
// is added to what x holds. Supported (cols, x) types: equal types, or float32
// columns into float16 / bfloat16 x.
cudaError_t launch_fold(const void* cols, DataType cols_type, void* x,
                        DataType x_type, const Geometry& g, int64_t channels,
                        int64_t n0, int64_t nc, const ColumnsLayout& layout,
                        bool channels_last, bool accumulate,
                        cudaStream_t stream);

}  // namespace im2col::cuda
