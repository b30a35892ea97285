// The convolution as im2col (or col2im) + cuBLAS GEMM, for every op: the
// general path, and the one every other algorithm falls back to.
#pragma once

#include <cuda_runtime.h>

#include "conv/conv_call.h"

namespace im2col::cuda {

// y = conv(x, w), by kAlgorithmGemm.
ffi::Error gemm_forward(cudaStream_t stream, int32_t device, ffi::AnyBuffer x, ffi::AnyBuffer w,
                        ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> workspace,
                        const ConvShapes& s, const ConvAttrs& a);

// dx from dy and w: GEMM into columns, then fold (kAlgorithmGemm).
ffi::Error gemm_backward_data(cudaStream_t stream, int32_t device, ffi::AnyBuffer dy,
                              ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> dx,
                              ffi::Result<ffi::AnyBuffer> workspace, const ConvShapes& s,
                              const ConvAttrs& a);

// dw from dy and x: kAlgorithmGemm, kAlgorithmGemmChannelsLast (channels-first
// operands copied channels-last first) or kAlgorithmGemmPerImage (a
// channels-first 1x1 window, one GEMM per image).
ffi::Error gemm_backward_filter(cudaStream_t stream, int32_t device, ffi::AnyBuffer dy,
                                ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> dw,
                                ffi::Result<ffi::AnyBuffer> workspace, const ConvShapes& s,
                                const ConvAttrs& a);

}  // namespace im2col::cuda
