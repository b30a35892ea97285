// Layout changes that feed the implicit GEMM (implicit_gemm.h): a
// channels-first image to channels-last, and a filter to the row layout the
// kernel reads, for the forward or (flipped and transposed per group) for
// the input gradient; and a float32 filter gradient summed in the
// channels-last order, as a channels-first filter.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/geometry.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

// out (n, size, c) = x (n, c, size) for elements of elem_bytes (2, 4 or 8).
cudaError_t image_to_channels_last(const void* x, void* out, size_t elem_bytes, int64_t n,
                                   int64_t c, int64_t size, cudaStream_t stream);

// dw (o, cg, taps) of `type` (float32, bfloat16 or float16) = acc (o, taps,
// cg), float32.
cudaError_t filter_to_channels_first(const float* acc, void* dw, xla::ffi::DataType type,
                                     int64_t o, int64_t taps, int64_t cg, cudaStream_t stream);

// Which of the filter's taps each tap of the rows reads: tap u (row-major over
// `kernel`) reads, per dimension, the filter's tap first + step * u of its
// window `w_kernel`.
struct TapMap {
  int nd = 0;
  int64_t kernel[kMaxSpatial] = {1, 1, 1}, w_kernel[kMaxSpatial] = {1, 1, 1};
  int64_t first[kMaxSpatial] = {0, 0, 0}, step[kMaxSpatial] = {1, 1, 1};
};

// Every tap of a window of g.kernel in order (the forward's rows).
TapMap all_taps(const Geometry& g);
// The taps of a phase of the input gradient, read backwards (gradient_phase).
TapMap phase_taps(const Geometry& g, const GradientPhase& phase);

// Filter rows of the implicit GEMM from w, (O, Cg, K) channels-first or
// (O, K, Cg) channels-last, O = groups * og, for each of `count` tap maps, the
// rows of map i right after those of map i - 1. For the T = prod(kernel) taps
// of a map, tap(u) the filter's tap that row tap u reads:
//   forward:        (groups * og, T, cg),  [g, o, u, c] = w[g * og + o, c, tap(u)]
//   input gradient: (groups * cg, T, og),  [g, c, u, o] = w[g * og + o, c, tap(u)]
// With pack > 1, every `pack` consecutive groups become one of pack times the
// rows and row length, their filters on the diagonal and zeros elsewhere
// (pack times the size).
cudaError_t implicit_filter(const void* w, void* out, size_t elem_bytes, bool w_channels_last,
                            int64_t groups, int64_t og, int64_t cg, const TapMap* taps, int count,
                            bool input_gradient, int64_t pack, cudaStream_t stream);

}  // namespace im2col::cuda
