// The FFI handler symbols of the CUDA module, for the nanobind registrations.
#pragma once

#include "xla/ffi/api/c_api.h"

namespace im2col::cuda {
extern "C" {
XLA_FFI_Error* jax_im2col_unfold_cuda(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jax_im2col_fold_cuda(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jax_im2col_conv_initialize_cuda(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jax_im2col_conv_forward_cuda(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jax_im2col_conv_backward_data_cuda(XLA_FFI_CallFrame* frame);
XLA_FFI_Error* jax_im2col_conv_backward_filter_cuda(XLA_FFI_CallFrame* frame);
}
}  // namespace im2col::cuda
