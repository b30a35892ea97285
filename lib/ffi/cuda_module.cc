// The nanobind module that hands the CUDA FFI handlers to Python. Target
// names match the CPU module's.
#include "conv/implicit/implicit_gemm.h"
#include "ffi/cuda_handlers.h"
#include "nanobind/nanobind.h"

namespace nb = nanobind;
using namespace im2col::cuda;

namespace {
nb::capsule capsule(XLA_FFI_Error* (*fn)(XLA_FFI_CallFrame*)) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

nb::dict conv_stages(XLA_FFI_Error* (*execute)(XLA_FFI_CallFrame*)) {
  nb::dict d;
  d["initialize"] = capsule(jax_im2col_conv_initialize_cuda);
  d["execute"] = capsule(execute);
  return d;
}
}  // namespace

NB_MODULE(_cuda, m) {
  m.def("registrations", []() {
    nb::dict d;
    d["jax_im2col_unfold"] = capsule(jax_im2col_unfold_cuda);
    d["jax_im2col_fold"] = capsule(jax_im2col_fold_cuda);
    d["jax_im2col_conv_forward"] = conv_stages(jax_im2col_conv_forward_cuda);
    d["jax_im2col_conv_backward_data"] = conv_stages(jax_im2col_conv_backward_data_cuda);
    d["jax_im2col_conv_backward_filter"] = conv_stages(jax_im2col_conv_backward_filter_cuda);
    return d;
  });
  // Whether the implicit GEMM takes wgmma on an sm_90 GPU (float32 operands
  // then truncated to TF32 rather than rounded to nearest).
  m.def("hopper_kernels", &hopper_kernels_compiled);
}
