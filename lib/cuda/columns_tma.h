// Channels-first unfold and fold on Hopper, fed by the tensor-memory copy
// engine (columns_tma.cu): the launchers, which answer cudaErrorNotSupported
// where their kernels do not apply (columns_tma_plan.h); columns.cu then runs
// its own.
//
// With unit stride along the last spatial dimension, the columns of one
// (image, channel, tap) over a band of output rows read a box of the input
// plane displaced by the tap; the input over a band of rows gathers, tap by
// tap, boxes of the columns displaced the other way. The copy engine moves
// such boxes into shared memory with zeros wherever they leave the tensor,
// but only from 16-byte boundaries of the innermost dimension: a box starts
// at the boundary at or below the displaced start, and threads take each
// vector of 16 bytes from two aligned ones, shifted by the displacement's
// remainder (the plan's `lead`, a tap's shift: columns_tma.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../geometry.h"
#include "columns_tma_plan.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

cudaError_t unfold_cf_tma(const void* x, void* cols, size_t elem_bytes, const Geometry& g, int64_t C,
                          int64_t n0, int64_t nc, const ColumnsLayout& lay, cudaStream_t stream);
cudaError_t fold_cf_tma(const void* cols, xla::ffi::DataType cols_type, void* x,
                        xla::ffi::DataType x_type, const Geometry& g, int64_t C, int64_t n0, int64_t nc,
                        const ColumnsLayout& lay, bool accumulate, cudaStream_t stream);

}  // namespace im2col::cuda
