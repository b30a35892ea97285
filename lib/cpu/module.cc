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

// The 16-byte elements (complex128) that unfold copies.
struct Bytes16 {
  uint64_t lo, hi;
};

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
  // Every dtype, by its size: unfold copies bits.
  switch (ffi::ByteWidth(x.element_type())) {
    case 1: run(uint8_t{}); break;
    case 2: run(uint16_t{}); break;
    case 4: run(uint32_t{}); break;
    case 8: run(uint64_t{}); break;
    case 16: run(Bytes16{}); break;
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
  auto run = [&](auto sum) {
    using S = decltype(sum);
    using T = typename S::Storage;
    fold_chunk<S>(static_cast<const T*>(cols.untyped_data()), static_cast<T*>(x->untyped_data()),
                  call.geometry, s.c, 0, s.n, call.layout, channels_last, /*accumulate=*/false);
  };
  // Integers sum modulo 2^bits whatever their sign (fold_elements.h), so
  // each width has one sum.
  switch (x->element_type()) {
    case ffi::DataType::F16: run(FloatSum<f16>{}); break;
    case ffi::DataType::BF16: run(FloatSum<bf16>{}); break;
    case ffi::DataType::F32: run(FloatSum<float>{}); break;
    case ffi::DataType::F64: run(FloatSum<double>{}); break;
    case ffi::DataType::PRED: run(BoolAny{}); break;
    case ffi::DataType::S8:
    case ffi::DataType::U8: run(IntegerSum<uint8_t>{}); break;
    case ffi::DataType::S16:
    case ffi::DataType::U16: run(IntegerSum<uint16_t>{}); break;
    case ffi::DataType::S32:
    case ffi::DataType::U32: run(IntegerSum<uint32_t>{}); break;
    case ffi::DataType::S64:
    case ffi::DataType::U64: run(IntegerSum<uint64_t>{}); break;
    case ffi::DataType::F8E4M3FN: run(Float8Sum<Float8E4M3FN>{}); break;
    case ffi::DataType::F8E5M2: run(Float8Sum<Float8E5M2>{}); break;
    case ffi::DataType::C64: run(ComplexSum<float>{}); break;
    case ffi::DataType::C128: run(ComplexSum<double>{}); break;
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
