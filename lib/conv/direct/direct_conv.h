// Direct convolution kernels for depthwise and small-group convolutions,
// where the GEMM of each group is too thin to use tensor cores well and the
// columns would cost more memory traffic than the arithmetic they feed.
// The Python side chooses them (the `algorithm` attribute); shapes and layouts
// are those of conv.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/geometry.h"
#include "conv/direct/filter_slices.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

struct DirectShapes {
  int64_t n, c, o, groups;
  bool channels_last;
  // One input and one output channel per group.
  bool depthwise() const { return groups == c && o == c; }
};

// y = conv(x, w); y may be float32 for half x and w.
cudaError_t direct_forward(const void* x, const void* w, void* y, xla::ffi::DataType in,
                           xla::ffi::DataType out, const Geometry& g, const DirectShapes& s,
                           cudaStream_t stream);

// dx = conv_backward_data(dy, w).
cudaError_t direct_backward_data(const void* dy, const void* w, void* dx,
                                 xla::ffi::DataType type, const Geometry& g,
                                 const DirectShapes& s, cudaStream_t stream);

// dw = conv_backward_filter(dy, x) in slices (filter_slices.h); `partials` holds
// filter_partials_bytes().
cudaError_t direct_backward_filter(const void* dy, const void* x, void* dw, void* partials,
                                   const FilterSlices& slices, xla::ffi::DataType type,
                                   const Geometry& g, const DirectShapes& s,
                                   cudaStream_t stream);

// The most Cg * K sums the scalar filter-gradient kernel keeps per thread
// (in shared memory); it takes larger filters in rounds of this many.
constexpr int64_t kDirectMaxTaps = 32;

// Grouped convolutions, either layout, with at most kGroupedMaxChannels
// input and output channels per group, depthwise excepted (grouped_conv.cu):
// *done is false where these kernels do not apply or their tiles do not fit;
// the scalar kernels then take the call. At 32 channels per group (jax#13800's
// grouped 1-D conv) im2col + GEMM measured as fast or faster on the H200
// (docs/optimization-log.md, step 13); at 8 (ResNeXt) these kernels are 2x faster.
constexpr int64_t kGroupedMaxChannels = 16;

cudaError_t grouped_forward(const void* x, const void* w, void* y, xla::ffi::DataType in,
                            xla::ffi::DataType out, const Geometry& g, const DirectShapes& s,
                            bool* done, cudaStream_t stream);

cudaError_t grouped_backward_data(const void* dy, const void* w, void* dx, xla::ffi::DataType type,
                                  const Geometry& g, const DirectShapes& s, bool* done,
                                  cudaStream_t stream);

// The partial sums of direct_backward_filter (filter_partials_bytes).
cudaError_t grouped_filter_partials(const void* dy, const void* x, void* partials,
                                    const FilterSlices& f, xla::ffi::DataType type,
                                    const Geometry& g, const DirectShapes& s, bool* done,
                                    cudaStream_t stream);

}  // namespace im2col::cuda
