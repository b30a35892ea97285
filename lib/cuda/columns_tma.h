// Channels-first unfold and fold on Hopper by the tensor-memory copy engine
// (columns_tma.cu): the plans (host code, also answered to Python for the
// tests' routing checks) and the launchers, which answer
// cudaErrorNotSupported where their kernels do not apply; columns.cu then
// runs its own.
//
// With unit stride along the last spatial dimension, the columns of one
// (image, channel, tap) over a band of output rows are a box of the input
// plane displaced by the tap (zeros where it leaves the plane), and the
// input over a band of rows gathers, tap by tap, boxes of the columns
// displaced the other way (zeros outside the chunk's positions). The copy
// engine moves those boxes; no thread computes an index per element.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "../geometry.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

// Boxes cover `band` rows of spatial dimension 0 and every position of the
// others. A job is one box (unfold: plane, band, tap) or one output box
// (fold: plane, band, its taps in increasing order).
struct ColumnsTmaPlan {
  int32_t nd = 0;
  int32_t rank = 0;             // of the tensor map: nd + 1 (unfold), nd + 2 (fold)
  int32_t band = 0, bands = 0;  // rows of dimension 0 per box; boxes per plane
  int32_t first_row = 0;        // the chunk's first output row (dimension 0)
  int32_t rows = 0;             // rows of dimension 0 the bands cover
  int64_t rest = 0;             // positions per row: output (unfold), input (fold)
  int32_t kernel_size = 1;
  int32_t kernel[kMaxSpatial] = {1, 1, 1}, dilation[kMaxSpatial] = {1, 1, 1};
  int32_t stride[kMaxSpatial] = {1, 1, 1}, pad[kMaxSpatial] = {0, 0, 0};
  int64_t channels = 0, in_size = 0;
  int64_t jobs = 0, jobs_per_block = 0;
  uint32_t box_bytes = 0, slot_bytes = 0;
  int32_t slots = 0;
  uint32_t smem = 0;
  uint32_t blocks = 0;
  ColumnsLayout layout;
  // The tensor map (innermost dimension first).
  cuuint64_t dims[5] = {}, strides[4] = {};
  cuuint32_t box[5] = {}, element_strides[5] = {};
};

// Plans for nc images of C channels; false where the kernels do not apply.
// Pointer alignment (16 bytes) is the launchers' check.
bool plan_unfold_tma(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc,
                     size_t elem_bytes, int multiprocessors, ColumnsTmaPlan* p);
bool plan_fold_tma(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc,
                   size_t cols_bytes, int multiprocessors, ColumnsTmaPlan* p);

cudaError_t unfold_cf_tma(const void* x, void* cols, size_t elem_bytes, const Geometry& g, int64_t C,
                          int64_t n0, int64_t nc, const ColumnsLayout& lay, cudaStream_t stream);
cudaError_t fold_cf_tma(const void* cols, xla::ffi::DataType cols_type, void* x,
                        xla::ffi::DataType x_type, const Geometry& g, int64_t C, int64_t n0, int64_t nc,
                        const ColumnsLayout& lay, bool accumulate, cudaStream_t stream);

}  // namespace im2col::cuda
