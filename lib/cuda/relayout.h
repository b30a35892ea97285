// Layout changes that feed the implicit GEMM (implicit_gemm.h): a
// channels-first image to channels-last, and a filter to the row layout the
// kernel reads, for the forward or (flipped and transposed per group) for
// the input gradient.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace im2col::cuda {

// out (n, size, c) = x (n, c, size) for elements of elem_bytes (2, 4 or 8).
cudaError_t image_to_channels_last(const void* x, void* out, size_t elem_bytes, int64_t n,
                                   int64_t c, int64_t size, cudaStream_t stream);

// Filter rows of the implicit GEMM from w, (O, Cg, K) channels-first or
// (O, K, Cg) channels-last, O = groups * og:
//   forward:        out (groups * og, K, cg),  out[g, o, k, c] = w[g * og + o, c, k]
//   input gradient: out (groups * cg, K, og),  out[g, c, k, o] = w[g * og + o, c, K - 1 - k]
// With pack > 1, every `pack` consecutive groups become one of pack times the
// rows and row length, their filters on the diagonal and zeros elsewhere
// (pack times the size).
cudaError_t implicit_filter(const void* w, void* out, size_t elem_bytes, bool w_channels_last,
                            int64_t groups, int64_t og, int64_t cg, int64_t taps,
                            bool input_gradient, int64_t pack, cudaStream_t stream);

}  // namespace im2col::cuda
