// The filter gradient as an implicit GEMM on tensor cores (mma.sync, Ampere
// and newer): the im2col columns of x are never written; each block gathers
// its k-tile of them from the channels-last image into shared memory, beside
// the matching rows of dy (on Hopper, in sm_90a builds, half types by TMA
// copies where channels per group fill whole 128-byte panels). Per group g,
//   dw[o, kk] = sum_m dy[m, g * Og + o] * x_cols[m, kk]     kk = (tap, channel)
// summed over every (image, output position) m. Half types multiply in their
// own precision, float32 as TF32 rounded to nearest (XLA's DEFAULT); all
// accumulate in float32.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/geometry.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

struct ImplicitFilterGradient {
  const void* x;   // channels-last image (n, *in, c)
  const void* dy;  // channels-last output gradient (n, *out, o)
  int64_t n, c, o, groups;
  // The outputs (o x taps * c / groups) are few and the reduction long, so
  // the positions are split into `splits` parts; part s sums into
  // partials[s] (float32, o x taps * c / groups), or adds to it when
  // `accumulate` (a later chunk of images). implicit_filter_finish adds the
  // parts in order: the same result on every run.
  int64_t splits;
  float* partials;
  bool accumulate;
};

// The most positions (images x output positions) of one call: its parts,
// rounded up to k-tiles, stay in 32 bits.
constexpr int64_t kMaxFilterPositions = (int64_t{1} << 31) - 64;

// Bytes of `partials` for a call.
inline size_t implicit_filter_partials_bytes(int64_t splits, int64_t o, int64_t cg, int64_t taps) {
  return static_cast<size_t>(splits * o * cg * taps) * sizeof(float);
}

// Whether implicit_filter_gradient takes this geometry for `positions` =
// images x output positions per call: float16 / bfloat16, or float32 as TF32;
// channels per group of x and of dy in whole 16-byte vectors; no lhs
// dilation; at most kMaxFilterPositions positions. Mirrored by _implicit_filter() in
// jax_im2col/_conv_primitives.py.
bool implicit_filter_applies(xla::ffi::DataType in, bool tf32, const Geometry& g, int64_t cg,
                             int64_t og, int64_t groups, int64_t positions);

// partials (+)= the parts of the filter gradient of p.x and p.dy.
cudaError_t implicit_filter_gradient(const ImplicitFilterGradient& p, const Geometry& g,
                                     xla::ffi::DataType in, cudaStream_t stream);

// dw = the sum of the `splits` parts in order, in the filter's layout
// ((O, K, Cg) channels-last, (O, Cg, K) channels-first) and type. With
// pack > 1 the parts are those of groups of `pack` (o x taps * pack * cg), of
// which output channel o keeps block (o / og) % pack.
cudaError_t implicit_filter_finish(const float* partials, void* dw, xla::ffi::DataType type,
                                   int64_t o, int64_t og, int64_t cg, int64_t taps, int64_t splits,
                                   int64_t pack, bool dw_channels_last, cudaStream_t stream);

}  // namespace im2col::cuda
