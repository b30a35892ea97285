// Turns the FFI attributes and buffer shapes of a call into a Geometry, and
// checks that the buffers agree with it. Host code shared by the CPU and CUDA
// handlers; the Python side has already validated everything, so a failure
// here means a malformed custom call and is reported as an FFI error.
#pragma once

#include <cstdint>
#include <string>

#include "common/geometry.h"
#include "xla/ffi/api/ffi.h"

namespace im2col {

namespace ffi = xla::ffi;
using I64Span = ffi::Span<const int64_t>;

struct WindowAttrs {
  I64Span kernel, stride, rhs_dilation, lhs_dilation, padding;
};

// Image tensors are (N, C, *spatial) or, channels-last, (N, *spatial, C).
struct ImageShape {
  int64_t n = 0, c = 0;
  int nd = 0;
  int64_t spatial[kMaxSpatial] = {1, 1, 1};
};

inline ffi::Error image_shape(ffi::AnyBuffer::Dimensions dims,
                              bool channels_last, ImageShape* s) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (rank < 3 || rank > 2 + kMaxSpatial)
    return ffi::Error::InvalidArgument("image tensor must have rank 3 to 5");
  s->nd = static_cast<int>(rank - 2);
  s->n = dims[0];
  s->c = channels_last ? dims[rank - 1] : dims[1];
  for (int d = 0; d < s->nd; ++d)
    s->spatial[d] = dims[channels_last ? 1 + d : 2 + d];
  return ffi::Error::Success();
}

inline ffi::Error make_geometry(const WindowAttrs& a, const ImageShape& s,
                                Geometry* g) {
  const size_t nd = static_cast<size_t>(s.nd);
  if (a.kernel.size() != nd || a.stride.size() != nd ||
      a.rhs_dilation.size() != nd || a.lhs_dilation.size() != nd ||
      a.padding.size() != 2 * nd)
    return ffi::Error::InvalidArgument(
        "window attributes do not match the number of spatial dimensions");
  g->nd = s.nd;
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  for (int d = 0; d < s.nd; ++d) {
    g->in[d] = s.spatial[d];
    g->kernel[d] = a.kernel[d];
    g->stride[d] = a.stride[d];
    g->rhs_dilation[d] = a.rhs_dilation[d];
    g->lhs_dilation[d] = a.lhs_dilation[d];
    g->pad_lo[d] = a.padding[2 * d];
    pad_hi[d] = a.padding[2 * d + 1];
    if (g->kernel[d] < 1 || g->stride[d] < 1 || g->rhs_dilation[d] < 1 ||
        g->lhs_dilation[d] < 1)
      return ffi::Error::InvalidArgument(
          "kernel, strides and dilations must be positive");
  }
  finish_geometry(*g, pad_hi);
  if (!fits_32_bits(*g, pad_hi))
    return ffi::Error::InvalidArgument("window geometry exceeds 2**31 positions or extents");
  return ffi::Error::Success();
}

// The columns of a whole batch: (N, C*K, L), or (N, L, K*C) channels-last.
inline ffi::Error check_columns(ffi::AnyBuffer::Dimensions dims,
                                const ImageShape& s, const Geometry& g,
                                bool channels_last) {
  const int64_t rows = s.c * g.kernel_size;
  const bool ok = dims.size() == 3 && dims[0] == s.n &&
                  dims[1] == (channels_last ? g.out_size : rows) &&
                  dims[2] == (channels_last ? rows : g.out_size);
  return ok ? ffi::Error::Success()
            : ffi::Error::InvalidArgument(
                  "columns shape does not match the window geometry");
}

inline ColumnsLayout whole_batch_layout(const ImageShape& s, const Geometry& g) {
  ColumnsLayout c;
  c.l0 = 0;
  c.lc = g.out_size;
  c.row_stride = g.out_size;
  c.image_stride = s.c * g.kernel_size * g.out_size;
  c.groups = 1;
  return c;
}

}  // namespace im2col
