// The depthwise kernels' launchers by layout (depthwise_forward_{cl,cf}.cu,
// depthwise_filter_{cl,cf}.cu, depthwise_stream{,_filter}.cu (also the cells), depthwise_mma{,_filter}.cu: one compilation each, so
// that the build runs them side by side), called by depthwise_conv.cu with their plans.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "conv/depthwise/depthwise_plan.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

// y = the forward of x with w over phases p (tile t), for input type `in`
// and output type `out` (out == in, or float32 for half inputs).
cudaError_t dw_forward_tiles_cl(xla::ffi::DataType in, xla::ffi::DataType out, const void* x, const void* w, void* y,
                                const DwPhases& p, const DwTile& t, int64_t n, int64_t c, cudaStream_t stream);
cudaError_t dw_forward_tiles_cf(xla::ffi::DataType in, xla::ffi::DataType out, const void* x, const void* w, void* y,
                                const DwPhases& p, const DwTile& t, int64_t n, int64_t c, cudaStream_t stream);

// The forward of x with w on one phase g on the tensor cores
// (depthwise_mma.cuh; plan_dw_mma took it), for a 16-bit `type` in and out.
struct DwMma;
cudaError_t dw_forward_mma(xla::ffi::DataType type, const void* x, const void* w, void* y, const DwGeom& g,
                           const DwMma& m, int64_t n, int64_t c, cudaStream_t stream);

// The forward of x with w on one phase g, streamed down the rows
// (depthwise_stream.cuh; plan_dw_stream took it).
struct DwStreamPlan;
cudaError_t dw_forward_stream(xla::ffi::DataType in, xla::ffi::DataType out, const void* x, const void* w, void* y,
                              const DwGeom& g, const DwStreamPlan& s, int64_t c, cudaStream_t stream);

// The same with its input rows staged in shared memory ahead of the products
// (depthwise_stream_staged.cuh; plan_dw_staged took it).
struct DwStagedPlan;
cudaError_t dw_forward_staged(xla::ffi::DataType in, xla::ffi::DataType out, const void* x, const void* w, void* y,
                              const DwGeom& g, const DwStagedPlan& s, int64_t c, cudaStream_t stream);

// The input gradient dx of dy with w for forward geometry g (identity maps)
// by 2 x 2 cells (depthwise_cells.cuh; plan_dw_cells took it).
struct DwCellsPlan;
cudaError_t dw_input_gradient_cells(xla::ffi::DataType type, const void* dy, const void* w, void* dx,
                                    const DwGeom& g, const DwCellsPlan& s, int64_t c, cudaStream_t stream);

// The filter gradient's partial sums over the plan's slices m.groups on the
// tensor cores (depthwise_mma_filter.cuh; plan_dw_mma_filter took it), for a
// 16-bit `type`.
struct DwMmaFilter;
cudaError_t dw_filter_mma(xla::ffi::DataType type, const void* dy, const void* x, void* partials, const DwGeom& g,
                          const DwMmaFilter& m, int64_t c, cudaStream_t stream);

// The filter gradient's partial sums over the stream's slices s.f, streamed
// down the rows (depthwise_stream_filter.cuh; plan_dw_stream_filter took it).
struct DwStreamFilterPlan;
cudaError_t dw_filter_stream(xla::ffi::DataType type, const void* dy, const void* x, void* partials,
                             const DwGeom& g, const DwStreamFilterPlan& s, int64_t c, cudaStream_t stream);

// The same with its input and dy rows staged in shared memory ahead of the
// products, over the plan's slices f.f (depthwise_stream_staged_filter.cuh;
// plan_dw_staged_filter took it).
struct DwStagedFilterPlan;
cudaError_t dw_filter_staged(xla::ffi::DataType type, const void* dy, const void* x, void* partials,
                             const DwGeom& g, const DwStagedFilterPlan& f, int64_t c, cudaStream_t stream);

// The filter gradient's partial sums over slices f (tile t).
cudaError_t dw_filter_tiles_cl(xla::ffi::DataType type, const void* dy, const void* x, void* partials,
                               const DwGeom& g, const DwFilterTile& t, const FilterSlices& f, int64_t c,
                               cudaStream_t stream);
cudaError_t dw_filter_tiles_cf(xla::ffi::DataType type, const void* dy, const void* x, void* partials,
                               const DwGeom& g, const DwFilterTile& t, const FilterSlices& f, int64_t c,
                               cudaStream_t stream);

}  // namespace im2col::cuda
