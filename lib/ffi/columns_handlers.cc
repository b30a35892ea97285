// XLA FFI handlers for unfold and fold on CUDA devices.
#include <string>

#include "columns/columns.h"
#include "ffi/cuda_handlers.h"
#include "ffi/window_attrs.h"

namespace im2col::cuda {
namespace {

ffi::Error launched(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string("jax_im2col ") + what + ": " + cudaGetErrorString(e));
}

ffi::Error unfold_impl(cudaStream_t stream, ffi::AnyBuffer x,
                       ffi::Result<ffi::AnyBuffer> cols, I64Span kernel,
                       I64Span stride, I64Span rhs_dilation, I64Span lhs_dilation,
                       I64Span padding, bool channels_last) {
  UnfoldCall call;
  if (auto e = plan_unfold_call(x.dimensions(), cols->dimensions(),
                                {kernel, stride, rhs_dilation, lhs_dilation, padding},
                                channels_last, &call);
      e.failure())
    return e;
  return launched(
      launch_unfold(x.untyped_data(), cols->untyped_data(), ffi::ByteWidth(x.element_type()),
                    call.geometry, call.image.c, 0, call.image.n, call.layout,
                    channels_last, /*streaming=*/true, stream),
      "unfold");
}

ffi::Error fold_impl(cudaStream_t stream, ffi::AnyBuffer cols,
                     ffi::Result<ffi::AnyBuffer> x, I64Span kernel, I64Span stride,
                     I64Span rhs_dilation, I64Span lhs_dilation, I64Span padding,
                     bool channels_last) {
  UnfoldCall call;
  if (auto e = plan_unfold_call(x->dimensions(), cols.dimensions(),
                                {kernel, stride, rhs_dilation, lhs_dilation, padding},
                                channels_last, &call);
      e.failure())
    return e;
  return launched(
      launch_fold(cols.untyped_data(), cols.element_type(), x->untyped_data(),
                  x->element_type(), call.geometry, call.image.c, 0, call.image.n,
                  call.layout, channels_last, /*accumulate=*/false, stream),
      "fold");
}

}  // namespace

// Both handlers only launch kernels on XLA's stream, on XLA's buffers, with
// no host synchronization or allocation, so XLA may capture them into CUDA
// graphs (command buffers) and replay them. Their launch parameters depend on
// shapes and on 16-byte alignment, which XLA's buffers always have.
XLA_FFI_DEFINE_HANDLER_SYMBOL(jax_im2col_unfold_cuda, unfold_impl,
                              bind_window(ffi::Ffi::Bind()
                                              .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                              .Arg<ffi::AnyBuffer>()
                                              .Ret<ffi::AnyBuffer>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(jax_im2col_fold_cuda, fold_impl,
                              bind_window(ffi::Ffi::Bind()
                                              .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                              .Arg<ffi::AnyBuffer>()
                                              .Ret<ffi::AnyBuffer>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace im2col::cuda
