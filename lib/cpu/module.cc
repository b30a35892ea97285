// XLA FFI handlers for unfold and fold on the host, and the nanobind module
// that hands them to Python. Target names match the CUDA module's.
#include <cstdint>

#include "cpu/kernels.h"
#include "ffi/window_attrs.h"
#include "nanobind/nanobind.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cpu {
namespace {

namespace ffi = xla::ffi;

ffi::Error unfold_impl(ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> cols,
                       I64Span kernel, I64Span stride, I64Span rhs_dilation,
                       I64Span lhs_dilation, I64Span padding, bool channels_last) {
  UnfoldCall call;
  if (auto e = plan_unfold_call(x.dimensions(), cols->dimensions(),
                                {kernel, stride, rhs_dilation, lhs_dilation, padding},
                                channels_last, &call);
      e.failure())
    return e;
  const auto& s = call.image;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    unfold_chunk<T>(static_cast<const T*>(x.untyped_data()),
                    static_cast<T*>(cols->untyped_data()), call.geometry, s.c, 0,
                    s.n, call.layout, channels_last);
  };
  switch (ffi::ByteWidth(x.element_type())) {
    case 2: run(uint16_t{}); break;
    case 4: run(uint32_t{}); break;
    case 8: run(uint64_t{}); break;
    default: return ffi::Error::InvalidArgument("unfold: unsupported dtype");
  }
  return ffi::Error::Success();
}

ffi::Error fold_impl(ffi::AnyBuffer cols, ffi::Result<ffi::AnyBuffer> x,
                     I64Span kernel, I64Span stride, I64Span rhs_dilation,
                     I64Span lhs_dilation, I64Span padding, bool channels_last) {
  UnfoldCall call;
  if (auto e = plan_unfold_call(x->dimensions(), cols.dimensions(),
                                {kernel, stride, rhs_dilation, lhs_dilation, padding},
                                channels_last, &call);
      e.failure())
    return e;
  if (cols.element_type() != x->element_type())
    return ffi::Error::InvalidArgument("fold: dtype mismatch");
  const auto& s = call.image;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    fold_chunk<T, T>(static_cast<const T*>(cols.untyped_data()),
                     static_cast<T*>(x->untyped_data()), call.geometry, s.c, 0,
                     s.n, call.layout, channels_last, /*accumulate=*/false);
  };
  switch (x->element_type()) {
    case ffi::DataType::F16: run(f16{}); break;
    case ffi::DataType::BF16: run(bf16{}); break;
    case ffi::DataType::F32: run(float{}); break;
    case ffi::DataType::F64: run(double{}); break;
    default: return ffi::Error::InvalidArgument("fold: unsupported dtype");
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jax_im2col_unfold_cpu, unfold_impl,
                              bind_window(ffi::Ffi::Bind()
                                              .Arg<ffi::AnyBuffer>()
                                              .Ret<ffi::AnyBuffer>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(jax_im2col_fold_cpu, fold_impl,
                              bind_window(ffi::Ffi::Bind()
                                              .Arg<ffi::AnyBuffer>()
                                              .Ret<ffi::AnyBuffer>()));

}  // namespace im2col::cpu

namespace nb = nanobind;

NB_MODULE(_cpu, m) {
  m.def("registrations", []() {
    nb::dict d;
    d["jax_im2col_unfold"] = nb::capsule(reinterpret_cast<void*>(im2col::cpu::jax_im2col_unfold_cpu));
    d["jax_im2col_fold"] = nb::capsule(reinterpret_cast<void*>(im2col::cpu::jax_im2col_fold_cpu));
    return d;
  });
}
