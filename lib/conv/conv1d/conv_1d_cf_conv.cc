// Host side of the channels-first 1-D kernels (kAlgorithmConv1dCf): checks
// and launches of conv_1d_cf.h for every op.
#include "conv/conv1d/conv_1d_cf_conv.h"

#include <string>

#include "conv/conv1d/conv_1d_cf.h"
#include "conv/implicit/implicit_filter_gradient.h"

namespace im2col::cuda {

// The forward, or (input_gradient) the input gradient as the stride-1
// convolution of dy with the taps reversed and the filter transposed per group.
ffi::Error conv_1d_cf_conv(cudaStream_t stream, const ffi::AnyBuffer& image,
                           const ffi::AnyBuffer& w, ffi::AnyBuffer& out, const ConvShapes& s,
                           const ConvAttrs& a, bool input_gradient) {
  const int64_t ci = input_gradient ? s.Og : s.Cg, co = input_gradient ? s.Cg : s.Og;
  const int64_t in_w = input_gradient ? s.g.out[0] : s.g.in[0];
  if (s.cl || !conv_1d_cf_applies(image.element_type(), a.precision == 0, s.g, ci, co, in_w))
    return ffi::Error::InvalidArgument(
        std::string(input_gradient ? "conv_backward_data" : "conv_forward") +
        ": the channels-first 1-D kernel does not apply");
  const int64_t reach = (s.g.kernel[0] - 1) * s.g.rhs_dilation[0];
  const Conv1dCf p{static_cast<const float*>(image.untyped_data()),
                   static_cast<const float*>(w.untyped_data()),
                   static_cast<float*>(out.untyped_data()),
                   s.image.n, s.G, ci, co, in_w,
                   input_gradient ? s.g.in[0] : s.g.out[0],
                   s.g.kernel[0], s.g.rhs_dilation[0],
                   input_gradient ? reach - s.g.pad_lo[0] : s.g.pad_lo[0],
                   input_gradient};
  return cuda_error(conv_1d_cf(p, stream), "channels-first 1-D conv");
}

// The filter gradient in at most chunk_positions slices, summed in order
// into dw.
ffi::Error conv_1d_cf_backward_filter(cudaStream_t stream, const ffi::AnyBuffer& dy,
                                      const ffi::AnyBuffer& x, ffi::AnyBuffer& dw,
                                      const ffi::AnyBuffer& workspace, const ConvShapes& s,
                                      const ConvAttrs& a) {
  const int64_t K = s.g.kernel[0], slices = a.chunk_positions;
  if (s.cl || s.G > 65535 || s.g.out[0] % 4 != 0 ||
      !conv_1d_cf_applies(x.element_type(), a.precision == 0, s.g, s.Cg, s.Og, s.g.in[0]))
    return ffi::Error::InvalidArgument(
        "conv_backward_filter: the channels-first 1-D kernel does not apply");
  if (workspace.size_bytes() < implicit_filter_partials_bytes(slices, s.O, s.Cg, K))
    return ffi::Error::InvalidArgument("conv: workspace buffer is smaller than the plan needs");
  float* partials = static_cast<float*>(workspace.untyped_data());
  const Conv1dCfFilterGradient p{static_cast<const float*>(x.untyped_data()),
                                 static_cast<const float*>(dy.untyped_data()), partials,
                                 s.image.n, s.G, s.Cg, s.Og, s.g.in[0], s.g.out[0], K,
                                 s.g.rhs_dilation[0], s.g.pad_lo[0], slices};
  int64_t written = 0;
  if (auto err = cuda_error(conv_1d_cf_filter_gradient(p, &written, stream),
                            "channels-first 1-D filter gradient");
      err.failure())
    return err;
  return cuda_error(implicit_filter_finish(partials, dw.untyped_data(), dw.element_type(), s.O,
                                           s.Og, s.Cg, K, written, 1, false, stream),
                    "filter gradient sum");
}

}  // namespace im2col::cuda
