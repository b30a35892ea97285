// The depthwise entry points (depthwise_conv.h): plans, the input gradient's
// phases, the per-element kernels where no tile fits, and the filter
// gradient's second pass. The tiled kernels are launched by
// depthwise_{forward,filter}_{cl,cf}.cu.
#include "common/switches.h"
#include "conv/depthwise/depthwise_cells.cuh"
#include "conv/depthwise/depthwise_conv.h"
#include "conv/depthwise/depthwise_kernels.cuh"
#include "conv/depthwise/depthwise_launch.h"
#include "conv/depthwise/depthwise_mma_filter_plan.h"
#include "conv/depthwise/depthwise_mma_plan.h"
#include "conv/depthwise/depthwise_stream.cuh"
#include "conv/depthwise/depthwise_stream_filter.cuh"
#include "conv/depthwise/depthwise_stream_staged.cuh"
#include "conv/depthwise/depthwise_stream_staged_filter.cuh"
#include "conv/direct/direct_util.cuh"

namespace im2col::cuda {
namespace {

using DataType = xla::ffi::DataType;

size_t element_bytes(DataType t) {
  switch (t) {
    case DataType::F16:
    case DataType::BF16: return 2;
    case DataType::F32: return 4;
    case DataType::F64: return 8;
    default: return 0;
  }
}

// The forward machinery on phases p: channels-last 16-bit windows of 7 taps
// or more along W at unit stride on the tensor cores, channels-last 3x3
// windows streamed down the rows where that pays (their rows staged in shared
// memory where the channels fill 16-byte copies), else the tiles where they
// fit, else one thread per output element.
cudaError_t run_phases(const void* x, const void* w, void* y, DataType in, DataType out, const DwPhases& p, int64_t n,
                       int64_t c, bool cl, cudaStream_t stream) {
  const size_t elem = element_bytes(in), out_elem = element_bytes(out);
  const size_t acc = in == DataType::F64 ? 8 : 4;
  const int32_t v = dw_vector(elem, true);
  DwMma mma;
  if (cl && switch_on(Switch::kDwMma) && p.count == 1 && in == out && elem == 2 && dw_mma_pays(p.g[0]) &&
      plan_dw_mma(p.g[0], n, c, &mma) && aligned_to(x, 16) && aligned_to(y, 16))
    return dw_forward_mma(in, x, w, y, p.g[0], mma, n, c, stream);
  DwStagedPlan staged;
  if (cl && switch_on(Switch::kDwStream) && switch_on(Switch::kDwStaged) && plan_dw_staged(p, n, c, elem, &staged) &&
      dw_staged_pays(p.g[0], staged) && aligned_to(x, 16) && aligned_to(y, v * out_elem))
    return dw_forward_staged(in, out, x, w, y, p.g[0], staged, c, stream);
  DwStreamPlan s;
  if (cl && switch_on(Switch::kDwStream) && plan_dw_stream(p, n, c, elem, &s) && dw_stream_pays(p.g[0], s) &&
      aligned_to(x, v * elem) && aligned_to(y, v * out_elem))
    return dw_forward_stream(in, out, x, w, y, p.g[0], s, c, stream);
  DwTile t;
  const DwGeom bound = dw_bound(p);
  if (switch_on(Switch::kDwTiles) &&
      plan_dw_tile(bound, c, cl, elem, acc, out_elem, switch_on(Switch::kDwRing),
                   switch_on(Switch::kDwNarrowRuns), n * p.count, &t, kDwSmemBudget, switch_on(Switch::kDwSectorCost))) {
    t.vector_io = cl && c % v == 0 && aligned_to(x, v * elem) && aligned_to(y, v * out_elem);
    dw_tile_launch(t, n, p.count);
    return cl ? dw_forward_tiles_cl(in, out, x, w, y, p, t, n, c, stream)
              : dw_forward_tiles_cf(in, out, x, w, y, p, t, n, c, stream);
  }
  return with_types(in, out, [&](auto tag, auto out_tag) -> cudaError_t {
    using T = decltype(tag);
    using TY = decltype(out_tag);
    for (int i = 0; i < p.count; ++i)
      dw_gather_kernel<T, TY><<<blocks_for(n * c * p.g[i].out_size()), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(w), static_cast<TY*>(y), p.g[i], n, c, cl);
    return cudaGetLastError();
  });
}

}  // namespace

cudaError_t depthwise_forward(const void* x, const void* w, void* y, DataType in, DataType out, const Geometry& g,
                              int64_t n, int64_t c, bool channels_last, cudaStream_t stream) {
  if (g.any_lhs_dilation || element_bytes(in) == 0 || element_bytes(out) == 0) return cudaErrorInvalidValue;
  if (n == 0 || c == 0 || g.out_size == 0) return cudaSuccess;
  DwPhases p;
  p.count = 1;
  p.g[0] = dw_lift(g);
  return run_phases(x, w, y, in, out, p, n, c, channels_last, stream);
}

cudaError_t depthwise_backward_data(const void* dy, const void* w, void* dx, DataType type, const Geometry& g,
                                    int64_t n, int64_t c, bool channels_last, cudaStream_t stream) {
  if (g.any_lhs_dilation || element_bytes(type) == 0) return cudaErrorInvalidValue;
  if (n == 0 || c == 0 || g.in_size == 0) return cudaSuccess;
  if (g.out_size == 0)  // no window: no input position reaches an output
    return cudaMemsetAsync(dx, 0, static_cast<size_t>(n * c * g.in_size) * element_bytes(type), stream);
  const size_t elem = element_bytes(type);
  const int32_t v = dw_vector(elem, true);
  DwCellsPlan cells;
  if (channels_last && switch_on(Switch::kDwStream) && switch_on(Switch::kDwCells) &&
      plan_dw_cells(dw_lift(g), n, c, elem, &cells) && aligned_to(dy, v * elem) && aligned_to(dx, v * elem))
    return dw_input_gradient_cells(type, dy, w, dx, dw_lift(g), cells, c, stream);
  const int64_t count = gradient_phase_count(g);
  for (int64_t i0 = 0; i0 < count; i0 += kDwMaxPhases) {
    DwPhases p;
    for (int64_t i = i0; i < std::min<int64_t>(count, i0 + kDwMaxPhases); ++i) {
      GradientPhase ph;
      if (!gradient_phase(g, i, &ph)) return cudaErrorInvalidValue;
      if (ph.has_positions) p.g[p.count++] = dw_phase(g, ph);
    }
    if (p.count == 0) continue;
    if (const cudaError_t e = run_phases(dy, w, dx, type, type, p, n, c, channels_last, stream); e != cudaSuccess)
      return e;
  }
  return cudaSuccess;
}

cudaError_t depthwise_backward_filter(const void* dy, const void* x, void* dw, void* partials,
                                      const FilterSlices& f, DataType type, const Geometry& g, int64_t n, int64_t c,
                                      bool channels_last, cudaStream_t stream) {
  const size_t elem = element_bytes(type);
  if (g.any_lhs_dilation || elem == 0) return cudaErrorInvalidValue;
  if (c == 0 || g.kernel_size == 0) return cudaSuccess;
  if (n == 0 || g.out_size == 0)  // no products: a zero gradient
    return cudaMemsetAsync(dw, 0, static_cast<size_t>(c * g.kernel_size) * elem, stream);
  if (f.count != n * f.per_image || f.per_image * f.rows < g.out[0]) return cudaErrorInvalidValue;
  const size_t acc = type == DataType::F64 ? 8 : 4;
  const DwGeom dg = dw_lift(g);
  int64_t slices = f.count;
  DwMmaFilter mma;
  DwStagedFilterPlan staged;
  DwStreamFilterPlan s;
  DwFilterTile t;
  cudaError_t e;
  if (channels_last && switch_on(Switch::kDwMmaFilter) && elem == 2 && dw_mma_filter_pays(dg) &&
      plan_dw_mma_filter(dg, f, n, c, &mma) && aligned_to(x, 16) && aligned_to(dy, 16)) {
    e = dw_filter_mma(type, dy, x, partials, dg, mma, c, stream);
    slices = mma.groups;
  } else if (channels_last && switch_on(Switch::kDwStream) && switch_on(Switch::kDwStagedFilter) &&
      plan_dw_staged_filter(dg, f, n, c, elem, &staged) && dw_staged_filter_pays(dg, staged) && aligned_to(x, 16) &&
      aligned_to(dy, 16)) {
    e = dw_filter_staged(type, dy, x, partials, dg, staged, c, stream);
    slices = staged.f.count;
  } else if (channels_last && switch_on(Switch::kDwStream) && plan_dw_stream_filter(dg, f, n, c, elem, &s) &&
      dw_stream_filter_pays(dg, s, switch_on(Switch::kDwStreamFilterS1)) && aligned_to(x, 8) && aligned_to(dy, 8)) {
    e = dw_filter_stream(type, dy, x, partials, dg, s, c, stream);
    slices = s.f.count;
  } else if (switch_on(Switch::kDwTiles) &&
      plan_dw_filter_tile(dg, f, c, channels_last, elem, acc, switch_on(Switch::kDwRing),
                          switch_on(Switch::kDwNarrowRuns), &t)) {
    const int32_t v = dw_vector(elem, true);
    t.vector_io = channels_last && c % v == 0 && aligned_to(x, v * elem) && aligned_to(dy, v * elem) &&
                  aligned_to(partials, v * acc);
    e = channels_last ? dw_filter_tiles_cl(type, dy, x, partials, dg, t, f, c, stream)
                      : dw_filter_tiles_cf(type, dy, x, partials, dg, t, f, c, stream);
  } else {
    e = with_type(type, [&](auto tag) -> cudaError_t {
      using T = decltype(tag);
      using A = typename Acc<T>::type;
      dw_filter_gather_kernel<T><<<blocks_for(f.count * g.kernel_size * c), kThreads, 0, stream>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<A*>(partials), dg, f, c, channels_last);
      return cudaGetLastError();
    });
  }
  if (e != cudaSuccess) return e;
  return with_type(type, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    using A = typename Acc<T>::type;
    const int64_t elements = c * g.kernel_size;
    dw_filter_reduce_kernel<T, A><<<static_cast<unsigned>((elements + 31) / 32), dim3(32, kDwReduceLanes), 0, stream>>>(
        static_cast<const A*>(partials), static_cast<T*>(dw), c, g.kernel_size, slices);
    return cudaGetLastError();
  });
}

}  // namespace im2col::cuda
