// The convolution's XLA FFI handlers: conv_forward, conv_backward_data and
// conv_backward_filter. Each checks its buffers against the attributes, then
// runs the algorithm the lowering chose (the `algorithm` attribute; see
// conv/conv_call.h and src/jax_im2col/conv/selection.py) on XLA's stream,
// with scratch memory only from the workspace result XLA allocated.
#include <cstdint>

#include "conv/conv1d/conv_1d_cf_conv.h"
#include "conv/conv_call.h"
#include "conv/depthwise/depthwise_conv.h"
#include "conv/direct/direct_conv.h"
#include "conv/gemm/blas_handles.h"
#include "conv/gemm/gemm_conv.h"
#include "conv/implicit/implicit_conv.h"
#include "ffi/cuda_handlers.h"
#include "ffi/window_attrs.h"

namespace im2col::cuda {
namespace {

DirectShapes direct_shapes(const ConvShapes& s) {
  return DirectShapes{s.image.n, s.image.c, s.O, s.G, s.cl};
}

// The depthwise kernels' own check of the call (the lowering's mirror is
// depthwise_applies in src/jax_im2col/conv/depthwise_plan.py).
ffi::Error depthwise_check(DwOp op, const ConvShapes& s, DataType type) {
  if (!depthwise_applies(op, s.g, s.cl, type, s.G, s.image.c, s.O))
    return ffi::Error::InvalidArgument(
        "conv: the depthwise kernels (algorithm 7) take groups == C == O, no lhs dilation, f16/bf16/f32/f64");
  return ffi::Error::Success();
}

ffi::Error forward(cudaStream_t stream, int32_t device, ffi::AnyBuffer x, ffi::AnyBuffer w,
                   ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> workspace,
                   const ConvAttrs& a) {
  ConvShapes s;
  if (auto e = conv_shapes(x.dimensions(), w.dimensions(), y->dimensions(), a, &s); e.failure())
    return e;
  const DataType in = x.element_type(), out = y->element_type();
  if (w.element_type() != in || !(out == in || (is_half(in) && out == DataType::F32)))
    return ffi::Error::InvalidArgument("conv_forward: unsupported dtypes");
  switch (a.algorithm) {
    case kAlgorithmConv1dCf:
      return conv_1d_cf_conv(stream, x, w, *y, s, a, /*input_gradient=*/false);
    case kAlgorithmImplicit:
    case kAlgorithmPacked:
      return implicit_conv(stream, x, w, *y, *workspace, s, a, /*input_gradient=*/false);
    case kAlgorithmDirect:
      return cuda_error(direct_forward(x.untyped_data(), w.untyped_data(), y->untyped_data(), in,
                                       out, s.g, direct_shapes(s), stream),
                        "direct conv");
    case kAlgorithmDepthwise:
      if (auto e = depthwise_check(DwOp::kForward, s, in); e.failure()) return e;
      return cuda_error(depthwise_forward(x.untyped_data(), w.untyped_data(), y->untyped_data(), in, out, s.g,
                                          s.image.n, s.image.c, s.cl, stream),
                        "depthwise conv");
    case kAlgorithmGemm:
      return gemm_forward(stream, device, x, w, y, workspace, s, a);
    default:
      return ffi::Error::InvalidArgument("conv_forward: algorithms 4 and 5 are filter gradients");
  }
}

ffi::Error backward_data(cudaStream_t stream, int32_t device, ffi::AnyBuffer dy,
                         ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> dx,
                         ffi::Result<ffi::AnyBuffer> workspace, const ConvAttrs& a) {
  ConvShapes s;
  if (auto e = conv_shapes(dx->dimensions(), w.dimensions(), dy.dimensions(), a, &s); e.failure())
    return e;
  const DataType in = dy.element_type(), out = dx->element_type();
  if (w.element_type() != in || out != in)
    return ffi::Error::InvalidArgument("conv_backward_data: unsupported dtypes");
  switch (a.algorithm) {
    case kAlgorithmConv1dCf:
      return conv_1d_cf_conv(stream, dy, w, *dx, s, a, /*input_gradient=*/true);
    case kAlgorithmImplicit:
    case kAlgorithmPacked:
      return implicit_conv(stream, dy, w, *dx, *workspace, s, a, /*input_gradient=*/true);
    case kAlgorithmDirect:
      return cuda_error(direct_backward_data(dy.untyped_data(), w.untyped_data(),
                                             dx->untyped_data(), in, s.g, direct_shapes(s),
                                             stream),
                        "direct conv input gradient");
    case kAlgorithmDepthwise:
      if (auto e = depthwise_check(DwOp::kInputGradient, s, in); e.failure()) return e;
      return cuda_error(depthwise_backward_data(dy.untyped_data(), w.untyped_data(), dx->untyped_data(), in, s.g,
                                                s.image.n, s.image.c, s.cl, stream),
                        "depthwise conv input gradient");
    case kAlgorithmGemm:
      return gemm_backward_data(stream, device, dy, w, dx, workspace, s, a);
    default:
      return ffi::Error::InvalidArgument(
          "conv_backward_data: algorithms 4 and 5 are filter gradients");
  }
}

ffi::Error backward_filter(cudaStream_t stream, int32_t device, ffi::AnyBuffer dy,
                           ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> dw,
                           ffi::Result<ffi::AnyBuffer> workspace, const ConvAttrs& a) {
  ConvShapes s;
  if (auto e = conv_shapes(x.dimensions(), dw->dimensions(), dy.dimensions(), a, &s); e.failure())
    return e;
  const DataType in = x.element_type(), out = dw->element_type();
  if (dy.element_type() != in || out != in)
    return ffi::Error::InvalidArgument("conv_backward_filter: unsupported dtypes");
  switch (a.algorithm) {
    case kAlgorithmImplicit:
    case kAlgorithmPacked:
      return implicit_backward_filter(stream, dy, x, *dw, *workspace, s, a);
    case kAlgorithmConv1dCf:
      return conv_1d_cf_backward_filter(stream, dy, x, *dw, *workspace, s, a);
    case kAlgorithmDirect: {
      const FilterSlices slices = filter_slices(s.image.n, s.g.out[0], a.chunk_positions);
      if (workspace->size_bytes() < filter_partials_bytes(slices, s.O * s.CgK, in == DataType::F64))
        return ffi::Error::InvalidArgument("conv: workspace buffer is smaller than the plan needs");
      return cuda_error(direct_backward_filter(dy.untyped_data(), x.untyped_data(),
                                               dw->untyped_data(), workspace->untyped_data(),
                                               slices, in, s.g, direct_shapes(s), stream),
                        "direct conv filter gradient");
    }
    case kAlgorithmDepthwise: {
      if (auto e = depthwise_check(DwOp::kFilterGradient, s, in); e.failure()) return e;
      const FilterSlices slices = filter_slices(s.image.n, s.g.out[0], a.chunk_positions);
      if (workspace->size_bytes() < filter_partials_bytes(slices, s.O * s.CgK, in == DataType::F64))
        return ffi::Error::InvalidArgument("conv: workspace buffer is smaller than the depthwise plan needs");
      return cuda_error(depthwise_backward_filter(dy.untyped_data(), x.untyped_data(), dw->untyped_data(),
                                                  workspace->untyped_data(), slices, in, s.g, s.image.n,
                                                  s.image.c, s.cl, stream),
                        "depthwise conv filter gradient");
    }
    default:  // kAlgorithmGemm, kAlgorithmGemmChannelsLast, kAlgorithmGemmPerImage
      return gemm_backward_filter(stream, device, dy, x, dw, workspace, s, a);
  }
}

template <typename Op>
auto conv_handler(Op op) {
  return [op](cudaStream_t stream, int32_t device, ffi::AnyBuffer a, ffi::AnyBuffer b,
              ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> ws, I64Span kernel,
              I64Span stride, I64Span rhs_dilation, I64Span lhs_dilation, I64Span padding,
              bool channels_last, int64_t groups, int64_t precision, int64_t chunk_images,
              int64_t chunk_positions, int64_t algorithm) {
    const ConvAttrs attrs{{kernel, stride, rhs_dilation, lhs_dilation, padding},
                          channels_last, groups, precision, chunk_images, chunk_positions,
                          algorithm};
    return op(stream, device, a, b, out, ws, attrs);
  };
}

auto conv_binding() {
  return bind_window(ffi::Ffi::Bind()
                         .Ctx<ffi::PlatformStream<cudaStream_t>>()
                         .Ctx<ffi::DeviceOrdinal>()
                         .Arg<ffi::AnyBuffer>()
                         .Arg<ffi::AnyBuffer>()
                         .Ret<ffi::AnyBuffer>()
                         .Ret<ffi::AnyBuffer>())
      .Attr<int64_t>("groups")
      .Attr<int64_t>("precision")
      .Attr<int64_t>("chunk_images")
      .Attr<int64_t>("chunk_positions")
      .Attr<int64_t>("algorithm");
}

ffi::Error initialize(int32_t device) { return prepare_blas_handle(device); }

}  // namespace

// The initialize stage runs before every execution, outside any graph
// capture: it fills the device's cuBLAS handle pool, so that execute never
// creates one.
XLA_FFI_DEFINE_HANDLER_SYMBOL(jax_im2col_conv_initialize_cuda, initialize,
                              ffi::Ffi::BindInitialize().Ctx<ffi::DeviceOrdinal>());
// Execute launches the same work on every call (a function of the attributes
// and shapes alone), on XLA's stream and buffers, with no host
// synchronisation, allocation or host-to-device copy, and binds the pooled
// cuBLAS handle to the stream and workspace at each call: XLA may record it
// into a command buffer (CUDA graph) and replay it.
XLA_FFI_DEFINE_HANDLER_SYMBOL(jax_im2col_conv_forward_cuda, conv_handler(forward), conv_binding(),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(jax_im2col_conv_backward_data_cuda, conv_handler(backward_data),
                              conv_binding(), {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(jax_im2col_conv_backward_filter_cuda, conv_handler(backward_filter),
                              conv_binding(), {ffi::Traits::kCmdBufferCompatible});

}  // namespace im2col::cuda
