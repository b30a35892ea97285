// Direct convolution kernels for depthwise and small-group convolutions,
// where the GEMM of each group is too thin to use tensor cores well and the
// columns would cost more memory traffic than the arithmetic they feed.
// The Python side chooses them (the `algorithm` attribute); shapes and layouts
// are those of conv.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/geometry.h"
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

// The filter gradient sums over output positions in slices, each `rows`
// output rows (along the first spatial dimension) of one image, slice
// i * per_image + j covering rows [j * rows, (j + 1) * rows) of image i. Each
// slice's partial sums go to a workspace, then are summed in a fixed order:
// the result is deterministic.
struct FilterSlices {
  int64_t rows = 1;
  int64_t per_image = 0;  // ceil(out[0] / rows)
  int64_t count = 0;      // N * per_image
};

inline FilterSlices filter_slices(int64_t n, int64_t out0, int64_t rows) {
  FilterSlices f;
  f.rows = rows < 1 ? 1 : rows;
  f.per_image = (out0 + f.rows - 1) / f.rows;
  f.count = n * f.per_image;
  return f;
}

// Bytes of the partial sums: float32 (float64 for float64) per slice and
// filter element.
inline size_t filter_partials_bytes(const FilterSlices& f, int64_t filter_elements, bool f64) {
  return static_cast<size_t>(f.count * filter_elements) * (f64 ? 8 : 4);
}

// dw = conv_backward_filter(dy, x); `partials` holds filter_partials_bytes().
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
