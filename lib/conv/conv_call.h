// What every CUDA convolution path receives from the FFI handlers
// (ffi/conv_handlers.cu): the call's attributes, its shapes checked against
// them, and the algorithm the lowering chose (src/jax_im2col/conv/selection.py).
//
// Shapes, channels-first (cf) / channels-last (cl):
//   x  (N, C, *in)  / (N, *in, C)
//   w  (O, Cg, *K)  / (O, *K, Cg)      Cg = C / G, Og = O / G
//   y  (N, O, *out) / (N, *out, O)
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/geometry.h"
#include "ffi/buffer_shapes.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

using DataType = ffi::DataType;

// algorithm: 0 is im2col + GEMM, 1 the direct kernels (direct_conv.h), 2 the
// implicit GEMM (implicit_gemm.h for the forward and input gradient,
// implicit_filter_gradient.h for the filter gradient), 3 the implicit GEMM on
// packed groups (packed_groups); 4 and 5 are filter gradients of
// channels-first operands (gemm/gemm_conv.h); 6 the channels-first
// 1-D kernels (conv_1d_cf.h); for the direct filter gradient,
// chunk_positions is the output rows per slice (FilterSlices); for the
// implicit GEMM, chunk_images is the images made channels-last at once and
// chunk_positions the parts its reduction is split into
// (ImplicitConv::splits, ImplicitFilterGradient::splits); for the
// channels-first 1-D filter gradient, chunk_positions is its slices; 7 the
// depthwise kernels (depthwise/depthwise_conv.h: groups == C == O), whose
// forward and input gradient take no chunks and no workspace and whose
// filter gradient takes its slices' rows in chunk_positions
// (depthwise_filter_plan) and their partial sums in the workspace.
enum Algorithm : int64_t {
  kAlgorithmGemm = 0,
  kAlgorithmDirect = 1,
  kAlgorithmImplicit = 2,
  kAlgorithmPacked = 3,
  // The filter gradient of channels-first operands as im2col + GEMM on
  // channels-last copies of whole images of x and dy (gemm_backward_filter).
  kAlgorithmGemmChannelsLast = 4,
  // The filter gradient of a channels-first 1x1 window: one GEMM per image
  // over its positions, on x and dy as they are, into chunk_images float32
  // slots, summed in order (per_image_backward_filter).
  kAlgorithmGemmPerImage = 5,
  // Channels-first 1-D convolutions read as they are (conv_1d_cf.h): every
  // op, stride 1.
  kAlgorithmConv1dCf = 6,
  // Depthwise convolutions (depthwise/depthwise_conv.h): every op, either
  // layout, any window; the last algorithm (conv_shapes' range check).
  kAlgorithmDepthwise = 7
};

// Small groups packed for the implicit GEMM: `pack` consecutive groups whose
// image channels together make kPackedChannels become one group with a
// block-diagonal filter (zeros between the packed groups), so that each
// k-tile is a whole run of channels (the Hopper TMA kernel). pack times the
// arithmetic, none of the columns. Mirrored by _packed() in
// the selection (src/jax_im2col/conv/selection.py).
constexpr int64_t kPackedChannels = 64;

// The packing factor of groups with `image_cg` image channels each, or 0.
inline int64_t packed_groups(int64_t image_cg, int64_t groups) {
  if (image_cg < 1 || image_cg >= kPackedChannels || kPackedChannels % image_cg != 0) return 0;
  const int64_t pack = kPackedChannels / image_cg;
  return groups % pack == 0 ? pack : 0;
}

struct ConvAttrs {
  WindowAttrs window;
  bool channels_last;
  int64_t groups, precision, chunk_images, chunk_positions, algorithm;
};

struct ConvShapes {
  ImageShape image;  // x
  Geometry g;
  int64_t O, G, Cg, Og, CgK;
  bool cl, identity;
};

// x_dims: the input image; w_dims: the filter; y_dims: the output image.
ffi::Error conv_shapes(ffi::AnyBuffer::Dimensions x_dims, ffi::AnyBuffer::Dimensions w_dims,
                       ffi::AnyBuffer::Dimensions y_dims, const ConvAttrs& a, ConvShapes* s);

inline bool is_half(DataType t) { return t == DataType::F16 || t == DataType::BF16; }

ffi::Error cuda_error(cudaError_t e, const char* what);

// Calls body(n0, nc) for chunks [n0, n0 + nc) of `chunk` of the n images;
// once, with nc = 0, where there are none (the filter gradient then zeroes
// its parts).
template <typename Body>
ffi::Error for_each_image_chunk(int64_t n, int64_t chunk, Body body) {
  chunk = std::max<int64_t>(chunk, 1);
  int64_t n0 = 0;
  do {
    if (auto err = body(n0, std::min(chunk, n - n0)); err.failure()) return err;
    n0 += chunk;
  } while (n0 < n);
  return ffi::Error::Success();
}

// Images [n0, n0 + nc) of a channels-first image of c channels and `size`
// positions of elem_bytes each, made channels-last at dst.
ffi::Error chunk_to_channels_last(const void* image, int64_t n0, int64_t nc, int64_t c,
                                  int64_t size, size_t elem_bytes, void* dst,
                                  cudaStream_t stream);

}  // namespace im2col::cuda
