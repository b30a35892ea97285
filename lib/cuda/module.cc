// The nanobind module that hands the CUDA FFI handlers to Python. Target
// names match the CPU module's.
#include <cstdint>
#include <string>
#include <vector>

#include "columns_tma_plan.h"
#include "handlers.h"
#include "implicit_gemm.h"
#include "nanobind/nanobind.h"
#include "nanobind/stl/string.h"
#include "nanobind/stl/vector.h"

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
// The copy-engine plan of a whole-batch channels-first unfold or fold (kind
// "unfold" / "fold") on an sm_90 GPU of 132 multiprocessors, or None where
// those kernels do not apply: the tests' check of which geometries they take.
nb::object columns_tma_plan(const std::string& kind, const std::vector<int64_t>& spatial,
                            const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                            const std::vector<int64_t>& dilation, const std::vector<int64_t>& padding,
                            int64_t channels, int64_t images, int64_t elem_bytes) {
  const size_t nd = spatial.size();
  if (nd < 1 || nd > im2col::kMaxSpatial || kernel.size() != nd || stride.size() != nd ||
      dilation.size() != nd || padding.size() != 2 * nd || (kind != "unfold" && kind != "fold"))
    throw nb::value_error("columns_tma_plan: malformed window");
  im2col::Geometry g;
  g.nd = static_cast<int>(nd);
  int64_t pad_hi[im2col::kMaxSpatial] = {0, 0, 0};
  for (size_t d = 0; d < nd; ++d) {
    g.in[d] = spatial[d];
    g.kernel[d] = kernel[d];
    g.stride[d] = stride[d];
    g.rhs_dilation[d] = dilation[d];
    g.pad_lo[d] = padding[2 * d];
    pad_hi[d] = padding[2 * d + 1];
  }
  im2col::finish_geometry(g, pad_hi);
  im2col::ColumnsLayout lay;
  lay.lc = lay.row_stride = g.out_size;
  lay.image_stride = channels * g.kernel_size * g.out_size;
  ColumnsTmaPlan p;
  const size_t e = static_cast<size_t>(elem_bytes);
  const bool ok = kind == "unfold" ? plan_unfold_tma(g, lay, channels, images, e, 132, &p)
                                   : plan_fold_tma(g, lay, channels, images, e, 132, &p);
  if (!ok) return nb::none();
  nb::dict d;
  d["band"] = p.band;
  d["bands"] = p.bands;
  d["box_bytes"] = p.box_bytes;
  d["slots"] = p.slots;
  d["blocks"] = p.blocks;
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
  m.def("columns_tma_plan", &columns_tma_plan);
}
