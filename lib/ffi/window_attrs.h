// The attribute list shared by every handler that takes a window geometry,
// so the CPU and CUDA bindings cannot drift apart.
#pragma once

#include <utility>

#include "ffi/buffer_shapes.h"

namespace im2col {

template <typename Binding>
auto bind_window(Binding binding) {
  return std::move(binding).template Attr<I64Span>("kernel")
      .template Attr<I64Span>("stride")
      .template Attr<I64Span>("rhs_dilation")
      .template Attr<I64Span>("lhs_dilation")
      .template Attr<I64Span>("padding")
      .template Attr<bool>("channels_last");
}

// Shapes of an unfold or fold call: the image tensor and the columns.
struct UnfoldCall {
  ImageShape image;
  Geometry geometry;
  ColumnsLayout layout;
};

inline ffi::Error plan_unfold_call(ffi::AnyBuffer::Dimensions image_dims,
                                   ffi::AnyBuffer::Dimensions cols_dims,
                                   const WindowAttrs& attrs, bool channels_last,
                                   UnfoldCall* call) {
  if (auto e = image_shape(image_dims, channels_last, &call->image); e.failure()) return e;
  if (auto e = make_geometry(attrs, call->image, &call->geometry); e.failure()) return e;
  if (auto e = check_columns(cols_dims, call->image, call->geometry, channels_last);
      e.failure())
    return e;
  call->layout = whole_batch_layout(call->image, call->geometry);
  return ffi::Error::Success();
}

}  // namespace im2col
