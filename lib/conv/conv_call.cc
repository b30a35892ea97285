#include "conv/conv_call.h"

#include <string>

#include "common/relayout.h"

namespace im2col::cuda {

ffi::Error conv_shapes(ffi::AnyBuffer::Dimensions x_dims, ffi::AnyBuffer::Dimensions w_dims,
                       ffi::AnyBuffer::Dimensions y_dims, const ConvAttrs& a,
                       ConvShapes* s) {
  s->cl = a.channels_last;
  if (auto e = image_shape(x_dims, s->cl, &s->image); e.failure()) return e;
  if (auto e = make_geometry(a.window, s->image, &s->g); e.failure()) return e;
  ImageShape y;
  if (auto e = image_shape(y_dims, s->cl, &y); e.failure()) return e;
  const int nd = s->image.nd;
  s->G = a.groups;
  s->O = y.c;
  if (s->G < 1 || s->image.c % s->G != 0 || s->O % s->G != 0)
    return ffi::Error::InvalidArgument("conv: channels do not divide into groups");
  s->Cg = s->image.c / s->G;
  s->Og = s->O / s->G;
  s->CgK = s->Cg * s->g.kernel_size;
  bool ok = y.n == s->image.n && y.nd == nd && static_cast<int>(w_dims.size()) == nd + 2 &&
            w_dims[0] == s->O && w_dims[s->cl ? nd + 1 : 1] == s->Cg;
  for (int d = 0; d < nd; ++d)
    ok = ok && y.spatial[d] == s->g.out[d] && w_dims[s->cl ? 1 + d : 2 + d] == s->g.kernel[d];
  if (!ok) return ffi::Error::InvalidArgument("conv: operand shapes do not match the geometry");
  s->identity = true;
  for (int d = 0; d < nd; ++d)
    s->identity = s->identity && s->g.kernel[d] == 1 && s->g.stride[d] == 1 &&
                  s->g.lhs_dilation[d] == 1 && s->g.pad_lo[d] == 0 && s->g.out[d] == s->g.in[d];
  if (a.algorithm < kAlgorithmGemm || a.algorithm > kAlgorithmDepthwise)
    return ffi::Error::InvalidArgument("conv: unknown algorithm");
  if (a.chunk_images < 1 || a.chunk_positions < 1 ||
      (a.algorithm == kAlgorithmGemm && a.chunk_positions < s->g.out_size && a.chunk_images != 1))
    return ffi::Error::InvalidArgument("conv: invalid chunking");
  return ffi::Error::Success();
}

ffi::Error cuda_error(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string("jax_im2col ") + what + ": " + cudaGetErrorString(e));
}

ffi::Error chunk_to_channels_last(const void* image, int64_t n0, int64_t nc, int64_t c,
                                  int64_t size, size_t elem_bytes, void* dst,
                                  cudaStream_t stream) {
  return cuda_error(image_to_channels_last(static_cast<const char*>(image) +
                                               n0 * c * size * elem_bytes,
                                           dst, elem_bytes, nc, c, size, stream),
                    "channels-last copy");
}

}  // namespace im2col::cuda
