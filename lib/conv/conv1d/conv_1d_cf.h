// Channels-first 1-D convolutions on tensor cores (mma.sync, Ampere and
// newer), float32 as TF32 truncated (XLA's DEFAULT), accumulated in float32: grouped 1-D convolutions such as jax#13800's read as they are,
// where the implicit GEMM would first make x and dy channels-last.
//
// A channels-first row of positions is the operand mma.sync wants: for the
// convolution, a tile of 128 positions of a group's rows (plus the window's
// reach) in shared memory is the B operand of every tap, shifted by the tap;
// for the filter gradient, dy's and x's rows are both contiguous along the
// reduction (the positions). Stride 1 only: the input gradient of a stride-1
// convolution is a stride-1 convolution of dy (taps reversed, filter
// transposed per group), so one kernel serves the forward and the input
// gradient.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/geometry.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

// One convolution in forward form, out = conv(image, filter), per group:
//   out[n, g co + m, q] = sum_{k, r} A[m, k, r] image[n, g ci + r, q + k d - pad_lo]
// with image positions outside [0, in_w) read as zeros. For the forward,
// A[m, k, r] = w[g co + m, r, k] (ci = Cg, co = Og); for the input gradient
// (input_gradient), A[m, k, r] = w[g ci + r, m, taps - 1 - k] (ci = Og,
// co = Cg, pad_lo the transposed window's). w is the filter as given,
// (O, Cg, taps).
struct Conv1dCf {
  const float* image;
  const float* w;
  float* out;
  int64_t n, groups, ci, co, in_w, out_w, taps, dilation, pad_lo;
  bool input_gradient;
};

// dw[g og + o, c, k] = sum_{n, p} dy[n, g og + o, p] x[n, g cg + c, p + k d - pad_lo]
// in parts over the (image, tile of positions) pairs, at most `slices`
// (partials' room): part s goes to partials[s] (float32, O x taps * cg,
// columns (tap, channel)), which implicit_filter_finish sums in order.
struct Conv1dCfFilterGradient {
  const float* x;
  const float* dy;
  float* partials;
  int64_t n, groups, cg, og, in_w, out_w, taps, dilation, pad_lo, slices;
};

// Output positions per tile.
constexpr int64_t kConv1dCfPositions = 128;
// Channels per group (of the image read and of the output) at most; a
// multiple of 16 each.
constexpr int64_t kConv1dCfMaxChannels = 64;
// Shared memory per block at most (every Ampere and newer GPU allows it).
constexpr int64_t kConv1dCfSharedBytes = 96 * 1024;

// Shared memory of the convolution's blocks and of the filter gradient's
// with `stages` tile buffers. Mirrored, for two, by _conv_1d_cf_shared in
// jax_im2col/_conv_primitives.py (the kernels take a third where the device
// allows).
int64_t conv_1d_cf_shared_bytes(int64_t ci, int64_t co, int64_t taps, int64_t dilation,
                                int64_t stages);
int64_t conv_1d_cf_filter_shared_bytes(int64_t cg, int64_t og, int64_t taps, int64_t dilation,
                                       int64_t stages);

// Whether these kernels take a geometry: float32 as TF32, one spatial
// dimension, stride 1, no lhs dilation, channels per group (ci: the image
// read, co: the output written) multiples of 16 up to kConv1dCfMaxChannels,
// rows of the image read in whole 16-byte vectors (image_w % 4 == 0), two
// tile buffers within kConv1dCfSharedBytes. Mirrored by conv_1d_cf in
// jax_im2col/_conv_primitives.py.
bool conv_1d_cf_applies(xla::ffi::DataType in, bool tf32, const Geometry& g, int64_t ci,
                        int64_t co, int64_t image_w);

cudaError_t conv_1d_cf(const Conv1dCf& p, cudaStream_t stream);

// Needs x's and dy's rows in whole 16-byte vectors and at most 65535 groups.
// *slices: the parts written (as many as one wave of blocks holds, within
// p.slices); the same for every call of one geometry on one device.
cudaError_t conv_1d_cf_filter_gradient(const Conv1dCfFilterGradient& p, int64_t* slices,
                                       cudaStream_t stream);

}  // namespace im2col::cuda
