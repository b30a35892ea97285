// The convolution by implicit GEMM on tensor cores (kAlgorithmImplicit, and
// kAlgorithmPacked for small groups packed into 64-channel ones): the
// columns are gathered tile by tile into shared memory, never written.
#pragma once

#include <cuda_runtime.h>

#include "conv/conv_call.h"

namespace im2col::cuda {

// The forward, or (input_gradient) the input gradient as forward
// convolutions of dy, one per phase of the input (gradient_phase).
ffi::Error implicit_conv(cudaStream_t stream, const ffi::AnyBuffer& image, const ffi::AnyBuffer& w,
                         ffi::AnyBuffer& out, const ffi::AnyBuffer& workspace, const ConvShapes& s,
                         const ConvAttrs& a, bool input_gradient);

// The filter gradient, its reduction over positions split into parts summed
// in a fixed order.
ffi::Error implicit_backward_filter(cudaStream_t stream, const ffi::AnyBuffer& dy,
                                    const ffi::AnyBuffer& x, ffi::AnyBuffer& dw,
                                    const ffi::AnyBuffer& workspace, const ConvShapes& s,
                                    const ConvAttrs& a);

}  // namespace im2col::cuda
