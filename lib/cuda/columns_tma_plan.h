// The plans of the copy-engine unfold and fold (columns_tma.h): host code
// (columns_tma_plan.cc), also answered to Python for the tests' routing
// checks and run by tests/host.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "../geometry.h"

namespace im2col::cuda {

// Boxes cover `band` rows of spatial dimension 0 and every position of the
// others. A job is one (plane, band): unfold loads its input box once and
// writes its columns for every tap; fold loads one box of the columns per
// tap, in increasing tap order, and sums them.
struct ColumnsTmaPlan {
  int32_t nd = 0;
  int32_t rank = 0;             // of the tensor map: nd + 1 (unfold), nd + 2 (fold)
  int32_t vector = 1;           // elements per 16 bytes
  int32_t band = 0, bands = 0;  // rows of dimension 0 per box; boxes per plane
  int32_t first_row = 0;        // the chunk's first output row (dimension 0)
  int32_t rows = 0;             // rows of dimension 0 the bands cover
  int32_t lead = 0;             // unfold: box elements before the first window's origin
  int64_t rest = 0;             // positions per row: output (unfold), input (fold)
  int32_t kernel_size = 1;
  int32_t kernel[kMaxSpatial] = {1, 1, 1}, dilation[kMaxSpatial] = {1, 1, 1};
  int32_t stride[kMaxSpatial] = {1, 1, 1}, pad[kMaxSpatial] = {0, 0, 0};
  int32_t extent[kMaxSpatial] = {1, 1, 1};  // output (unfold) or input (fold) extents
  int32_t box_extent[kMaxSpatial] = {1, 1, 1};  // in spatial order
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

// Threads of both kernels: one warp issues the copies, four use them.
constexpr int kTmaConsumers = 128;
constexpr int kTmaThreads = 32 + kTmaConsumers;

}  // namespace im2col::cuda
