// Host side of the implicit GEMM (algorithms kAlgorithmImplicit and
// kAlgorithmPacked): the passes of a call, the filter in the kernels' row
// layout, channels-first operands made channels-last a chunk of images at a
// time, and the launches of implicit_gemm.h / implicit_filter_gradient.h.
#include "conv/implicit/implicit_conv.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/relayout.h"
#include "conv/gemm/conv_workspace.h"
#include "conv/implicit/implicit_filter_gradient.h"
#include "conv/implicit/implicit_gemm.h"

namespace im2col::cuda {
namespace {

// The input gradient has at most this many phases (gradient_phase): strides
// whose product is larger take im2col + GEMM. Mirrored by MAX_PHASES in
// src/jax_im2col/conv/selection.py.
constexpr int64_t kMaxGradientPhases = 64;

// The passes of the forward (one, on the forward's geometry) or of the input
// gradient (one per phase whose positions some tap reaches; `zeros`: some
// other phase has positions, so the output must be zeroed first), and the
// filter taps each one's rows take. The rows are set later.
ffi::Error implicit_passes(const ConvShapes& s, bool input_gradient,
                           std::vector<ImplicitPass>* passes, std::vector<TapMap>* taps,
                           bool* zeros) {
  *zeros = false;
  if (!input_gradient) {
    passes->push_back({s.g, nullptr, {}});
    taps->push_back(all_taps(s.g));
    return ffi::Error::Success();
  }
  const int64_t count = gradient_phase_count(s.g);
  if (count > kMaxGradientPhases)
    return ffi::Error::InvalidArgument("conv_backward_data: too many phases for the implicit GEMM");
  for (int64_t i = 0; i < count; ++i) {
    GradientPhase ph;
    if (!gradient_phase(s.g, i, &ph))
      return ffi::Error::InvalidArgument("conv_backward_data: the implicit GEMM does not apply");
    if (!ph.has_positions) continue;
    if (!ph.has_taps) {
      *zeros = true;
      continue;
    }
    OutputPlacement at;
    at.nd = s.g.nd;
    for (int d = 0; d < s.g.nd; ++d) {
      at.extent[d] = s.g.in[d];
      at.first[d] = ph.first[d];
      at.step[d] = s.g.stride[d];
    }
    passes->push_back({ph.g, nullptr, at});
    taps->push_back(phase_taps(s.g, ph));
  }
  return ffi::Error::Success();
}

// out = the passes' convolutions of `image`, out_size positions per image of
// out, kMaxPasses a launch (each pass a launch of its own with a split
// reduction: their parts share the workspace). A channels-first image is made
// channels-last a chunk of images at a time in the workspace, every pass
// reading each chunk; the kernel writes either layout.
ffi::Error implicit_run(const void* image, int64_t c_in, const std::vector<ImplicitPass>& passes,
                        void* out, int64_t c_out, int64_t out_size, int64_t groups,
                        const ConvShapes& s, const ConvAttrs& a, DataType in, DataType out_type,
                        char* chunk, float* partials, cudaStream_t stream) {
  const int64_t N = s.image.n, splits = a.chunk_positions;
  const size_t e = ffi::ByteWidth(in), eo = ffi::ByteWidth(out_type);
  const int64_t in_size = passes.front().g.in_size;
  return for_each_image_chunk(N, s.cl ? N : a.chunk_images, [&](int64_t n0, int64_t nc) {
    const void* x = image;
    if (!s.cl) {
      if (auto err = chunk_to_channels_last(image, n0, nc, c_in, in_size, e, chunk, stream);
          err.failure())
        return err;
      x = chunk;
    }
    void* part = static_cast<char*>(out) + n0 * c_out * out_size * eo;
    const ImplicitConv conv{x, part, nc, c_in, c_out, groups, s.cl, splits, partials};
    const int64_t per_launch = splits > 1 ? 1 : kMaxPasses, count = passes.size();
    for (int64_t i = 0; i < count; i += per_launch) {
      const int n = static_cast<int>(std::min(per_launch, count - i));
      if (auto err = cuda_error(implicit_conv(conv, passes.data() + i, n, in, out_type, stream),
                                "implicit GEMM");
          err.failure())
        return err;
    }
    return ffi::Error::Success();
  });
}

// image_channels, out_channels, out_size: those of the implicit GEMM's
// geometry (the input gradient's are the transposed ones; out_size the
// largest of its passes).
ffi::ErrorOr<char*> implicit_workspace_of(const ffi::AnyBuffer& ws, const ConvShapes& s,
                                          const ConvAttrs& a, size_t filter_bytes,
                                          int64_t image_elements, size_t elem_bytes,
                                          int64_t out_channels, int64_t out_size,
                                          ImplicitWorkspace* plan) {
  const int64_t images = s.cl ? s.image.n : std::min(a.chunk_images, s.image.n);
  *plan = implicit_workspace(
      filter_bytes, s.cl ? 0 : a.chunk_images * image_elements * elem_bytes,
      implicit_partials_bytes(a.chunk_positions, images, out_size, out_channels));
  if (ws.size_bytes() < plan->total)
    return ffi::Unexpected<ffi::Error>(
        ffi::Error::InvalidArgument("conv: workspace buffer is smaller than the plan needs"));
  return static_cast<char*>(ws.untyped_data());
}

}  // namespace

// The forward, or (input_gradient) the input gradient as forward
// convolutions of dy, one per phase of the input (gradient_phase: the
// sub-filter of the taps that reach it, flipped and transposed per group;
// one phase for unit strides). a.algorithm: kAlgorithmImplicit, or
// kAlgorithmPacked (groups packed into one, packed_groups).
ffi::Error implicit_conv(cudaStream_t stream, const ffi::AnyBuffer& image, const ffi::AnyBuffer& w,
                         ffi::AnyBuffer& out, const ffi::AnyBuffer& workspace, const ConvShapes& s,
                         const ConvAttrs& a, bool input_gradient) {
  const std::string what = input_gradient ? "conv_backward_data" : "conv_forward";
  const int64_t image_cg = input_gradient ? s.Og : s.Cg;
  const int64_t pack = a.algorithm == kAlgorithmPacked ? packed_groups(image_cg, s.G) : 1;
  if (pack == 0) return ffi::Error::InvalidArgument(what + ": the groups do not pack");
  const DataType in = image.element_type();
  std::vector<ImplicitPass> passes;
  std::vector<TapMap> taps;
  bool zeros = false;
  if (auto err = implicit_passes(s, input_gradient, &passes, &taps, &zeros); err.failure())
    return err;
  int64_t pass_out_size = 0;
  for (const ImplicitPass& pass : passes) {
    if (!implicit_applies(in, a.precision == 0, pass.g, image_cg * pack, s.G / pack))
      return ffi::Error::InvalidArgument(what + ": the implicit GEMM does not apply");
    pass_out_size = std::max(pass_out_size, pass.g.out_size);
  }
  const size_t e = ffi::ByteWidth(in);
  const int64_t c_in = input_gradient ? s.O : s.image.c, c_out = input_gradient ? s.image.c : s.O;
  const int64_t image_size = input_gradient ? s.g.out_size : s.g.in_size;
  const int64_t out_size = input_gradient ? s.g.in_size : s.g.out_size;
  // The kernel reads channels-last forward rows (O, K, Cg) as they are.
  const bool relayout = input_gradient || !s.cl || pack > 1;
  ImplicitWorkspace plan;
  auto ws = implicit_workspace_of(workspace, s, a, relayout ? pack * s.O * s.CgK * e : 0,
                                  c_in * image_size, e, c_out, pass_out_size, &plan);
  if (ws.has_error()) return ws.error();
  if (zeros) {
    if (auto err = cuda_error(cudaMemsetAsync(out.untyped_data(), 0, out.size_bytes(), stream),
                              "zero fill");
        err.failure())
      return err;
  }
  char* rows = *ws + plan.filter;  // the passes' rows end to end
  for (size_t i = 0; i < passes.size(); ++i) {
    if (!relayout) {
      passes[i].w = w.untyped_data();
      continue;
    }
    passes[i].w = rows;
    rows += pack * s.O * s.Cg * passes[i].g.kernel_size * e;
  }
  if (relayout && !passes.empty()) {
    if (auto err = cuda_error(implicit_filter(w.untyped_data(), *ws + plan.filter, e, s.cl, s.G,
                                              s.Og, s.Cg, taps.data(), static_cast<int>(taps.size()),
                                              input_gradient, pack, stream),
                              "filter layout");
        err.failure())
      return err;
  }
  return implicit_run(image.untyped_data(), c_in, passes, out.untyped_data(), c_out, out_size,
                      s.G / pack, s, a, in, out.element_type(), *ws + plan.image,
                      reinterpret_cast<float*>(*ws + plan.partials), stream);
}

// The filter gradient as an implicit GEMM (implicit_filter_gradient.h): one
// call for channels-last operands; channels-first x and dy made
// channels-last a chunk of images at a time, each chunk adding to the float32
// parts; then the parts summed in order into dw. With kAlgorithmPacked,
// `pack` consecutive small groups (packed_groups of x's channels) are one:
// the GEMM computes their whole block of (pack * Og) x (pack * Cg) per tap,
// and the sum keeps its diagonal.
ffi::Error implicit_backward_filter(cudaStream_t stream, const ffi::AnyBuffer& dy,
                                    const ffi::AnyBuffer& x, ffi::AnyBuffer& dw,
                                    const ffi::AnyBuffer& workspace, const ConvShapes& s,
                                    const ConvAttrs& a) {
  const DataType in = x.element_type();
  const int64_t N = s.image.n, L = s.g.out_size, C = s.image.c, K = s.g.kernel_size;
  const int64_t images = s.cl ? N : std::min(a.chunk_images, N), splits = a.chunk_positions;
  const int64_t pack = a.algorithm == kAlgorithmPacked ? packed_groups(s.Cg, s.G) : 1;
  if (pack == 0) return ffi::Error::InvalidArgument("conv_backward_filter: the groups do not pack");
  const int64_t groups = s.G / pack;
  if (!implicit_filter_applies(in, a.precision == 0, s.g, s.Cg * pack, s.Og * pack, groups,
                               images * L))
    return ffi::Error::InvalidArgument("conv_backward_filter: the implicit GEMM does not apply");
  const size_t e = ffi::ByteWidth(in);
  const ImplicitFilterWorkspace plan = implicit_filter_workspace(
      s.cl ? 0 : images * C * s.g.in_size * e, s.cl ? 0 : images * s.O * L * e,
      implicit_filter_partials_bytes(splits, s.O, s.Cg * pack, K));
  if (workspace.size_bytes() < plan.total)
    return ffi::Error::InvalidArgument("conv: workspace buffer is smaller than the plan needs");
  char* ws = static_cast<char*>(workspace.untyped_data());
  ImplicitFilterGradient p{x.untyped_data(), dy.untyped_data(), N, C, s.O, groups,
                           splits, reinterpret_cast<float*>(ws + plan.partials), false};
  auto chunk = [&](int64_t n0, int64_t nc) -> ffi::Error {
    if (!s.cl) {
      if (auto err = chunk_to_channels_last(x.untyped_data(), n0, nc, C, s.g.in_size, e,
                                            ws + plan.image, stream);
          err.failure())
        return err;
      if (auto err = chunk_to_channels_last(dy.untyped_data(), n0, nc, s.O, L, e,
                                            ws + plan.gradient, stream);
          err.failure())
        return err;
      p.x = ws + plan.image;
      p.dy = ws + plan.gradient;
    }
    p.n = nc;
    p.accumulate = n0 > 0;
    return cuda_error(implicit_filter_gradient(p, s.g, in, stream), "implicit GEMM");
  };
  if (auto err = for_each_image_chunk(N, images, chunk); err.failure()) return err;
  return cuda_error(implicit_filter_finish(p.partials, dw.untyped_data(), dw.element_type(), s.O,
                                           s.Og, s.Cg, K, splits, pack, s.cl, stream),
                    "filter gradient sum");
}

}  // namespace im2col::cuda
