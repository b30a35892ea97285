// Convolution as an implicit GEMM on tensor cores: the im2col columns are
// never written; each block gathers its tile of them from the channels-last
// image straight into shared memory (zeros for padding) and multiplies it
// with the filter rows: by mma.sync after cp.async copies (implicit_gemm.cu,
// Ampere and newer), or on Hopper by wgmma after TMA im2col copies or cp.async
// (implicit_gemm_sm90.cu). Half types multiply in their own precision, float32
// as TF32 (XLA's DEFAULT); all accumulate in float32.
//
// The GEMM, per group g:  y[m, o] = sum_kk x_cols[m, kk] * w[g * Og + o, kk]
//   m  = (image, output position)     kk = (tap, input channel of the group)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/geometry.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

// Where the output positions of a call's geometry land in y: position o
// (per dimension) at first + step * o of y's spatial extents `extent`. By
// default (nd == 0) y has the geometry's output extents; the phases of a
// strided input gradient (gradient_phase in geometry.h) land stride apart.
struct OutputPlacement {
  int nd = 0;
  int64_t extent[kMaxSpatial] = {1, 1, 1};
  int64_t first[kMaxSpatial] = {0, 0, 0};
  int64_t step[kMaxSpatial] = {1, 1, 1};
};

// One convolution of a launch: its geometry, its filter rows
// (groups * og, K, c / groups), contiguous, and where its outputs land.
struct ImplicitPass {
  Geometry g;
  const void* w;
  OutputPlacement at;
};

// Passes one launch takes at most (the 8 phases of a 3-D stride 2).
constexpr int kMaxPasses = 8;

struct ImplicitConv {
  const void* x;  // channels-last image (n, *in, c), every pass's input
  void* y;        // (n, *out, o) when y_channels_last, else (n, o, *out)
  int64_t n, c, o, groups;
  bool y_channels_last;
  // With splits > 1 (one pass only), each block sums one of `splits` parts of
  // the reduction into `partials` (float32, splits x n * L x o), and a second
  // kernel adds the parts in order: more blocks where n * L is small and the
  // reduction long, and the same result on every run.
  int64_t splits = 1;
  float* partials = nullptr;
};

// Bytes of `partials` for a call.
inline size_t implicit_partials_bytes(int64_t splits, int64_t n, int64_t out_size, int64_t o) {
  return splits > 1 ? static_cast<size_t>(splits * n * out_size * o) * sizeof(float) : 0;
}

// Whether implicit_conv takes a convolution of this geometry whose input
// image has `cg` channels per group: float16 / bfloat16, or float32 as TF32;
// channel runs of whole 16-byte vectors; no lhs dilation; at most 65535
// groups. Mirrored by _implicit() in jax_im2col/_conv_primitives.py.
bool implicit_applies(xla::ffi::DataType in, bool tf32, const Geometry& g, int64_t cg,
                      int64_t groups);

// y = conv(c.x, pass.w) on pass.g, placed by pass.at, for each of `count`
// passes (1 to kMaxPasses) in one launch, for x of type `in` and y of type
// `out` (`in`, or float32 for half inputs). On Hopper with
// hopper_kernels_compiled(), by wgmma, with float32 operands truncated to
// TF32; elsewhere by mma.sync, rounded to nearest.
cudaError_t implicit_conv(const ImplicitConv& c, const ImplicitPass* passes, int count,
                          xla::ffi::DataType in, xla::ffi::DataType out, cudaStream_t stream);

// Whether this module carries the Hopper (wgmma) kernel: built for sm_90a.
bool hopper_kernels_compiled();

}  // namespace im2col::cuda
