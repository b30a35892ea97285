// Channels-first 1-D convolutions read as they are (kAlgorithmConv1dCf),
// every op at stride 1: a channels-first row of positions is already the
// operand the tensor cores want.
#pragma once

#include <cuda_runtime.h>

#include "conv/conv_call.h"

namespace im2col::cuda {

// The forward, or (input_gradient) the input gradient as the stride-1
// convolution of dy with the taps reversed and the filter transposed per group.
ffi::Error conv_1d_cf_conv(cudaStream_t stream, const ffi::AnyBuffer& image,
                           const ffi::AnyBuffer& w, ffi::AnyBuffer& out, const ConvShapes& s,
                           const ConvAttrs& a, bool input_gradient);

// The filter gradient in at most chunk_positions slices, summed in order.
ffi::Error conv_1d_cf_backward_filter(cudaStream_t stream, const ffi::AnyBuffer& dy,
                                      const ffi::AnyBuffer& x, ffi::AnyBuffer& dw,
                                      const ffi::AnyBuffer& workspace, const ConvShapes& s,
                                      const ConvAttrs& a);

}  // namespace im2col::cuda
