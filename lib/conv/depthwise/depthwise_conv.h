// Depthwise convolutions (groups == C == O): forward, input gradient and
// filter gradient, channels-last and channels-first, 1-D to 3-D, any window,
// stride, dilation and padding, float16 / bfloat16 / float32 (float32
// accumulators) and float64. The `algorithm` kAlgorithmDepthwise
// (conv/conv_call.h).
//
// Design. Every op is one kernel body on a canonical 3-D geometry (lower
// ranks get leading dimensions of extent 1; depthwise_plan.h).
// - Forward: a block takes a tile of outputs (th rows x tw columns of one
//   plane of one image) and a run of channels, and stages in shared memory the
//   input under the tile (its halo; padding as zeros, by cp.async) and the
//   run's weights, as accumulators. Channels-last, a thread owns one 16-byte
//   vector of channels (4 float32, 2 float64; 4 half channels in 8 bytes, so
//   that its accumulators stay 4 floats) and kDwR = 7 outputs along the row:
//   for each tap row it slides along the row with the inputs in a register
//   ring, so each input vector loaded from shared memory feeds up to 7 vector
//   FMAs, one load of input and one of weights per 7 (loads per FMA: 2/7 of
//   a vector op). The weights are vectors too (each thread's channels
//   differ: no broadcast needed). Seven, odd, puts the lanes of a wavefront
//   on different banks, and divides the rows of the networks we serve (112,
//   56, 28, 14, 7). Where the stride does not divide the dilation along the
//   row, the ring cannot slide, and each product loads its input. Channels-
//   first, a thread owns one channel and 7 outputs along the row; the
//   weights are shared-memory broadcasts, the outputs pass through shared
//   memory so that their stores coalesce. Windows too large for shared memory
//   run in stages of taps; channel runs narrower than 128 bytes are taken
//   where their smaller halo costs less (plan_dw_tile's cost). Geometries
//   whose tiles fit nowhere (strides of thousands) run one thread per output.
// - Forward, channels-last 3x3 at unit dilation (depthwise_stream.cuh): no
//   tile; a thread owns one channel vector at one output column, with its 9
//   weights and the 3x3 window in registers, and walks a run of output rows,
//   loading only the rows the window slides onto (the rows four steps ahead
//   asked of L2). Taken where its warm-up rows are at most a quarter of the
//   rows a thread walks (dw_stream_pays); also the unit-stride input gradient.
//   Where the channels fill 16-byte copies, the same threads read their rows
//   from a shared-memory ring that the block fills by cp.async several row
//   steps ahead (depthwise_stream_staged.cuh): more bytes in flight at no
//   register cost.
// - Input gradient: the forward of dy on the phases of the stride
//   (gradient_phase in common/geometry.h): phase r is a stride-1 convolution
//   of dy with the filter's taps that reach it, read backwards, writing dx's
//   positions r, r + stride, ... (output and filter maps in DwGeom), so no
//   lhs-dilated zero is multiplied; all phases (up to 8) in one launch. At
//   stride 1 that is the one phase of the flipped filter.
// - Filter gradient (deterministic): pass 1, a block takes one slice of
//   output rows of one image (FilterSlices: the `chunk_positions` attribute,
//   planned by depthwise_filter_plan), one plane of taps along dimension 0, a
//   group of tap rows and a run of channels; it stages x under its tile and
//   the tile's dy, and a thread owns one vector of channels times KC (3, 5, 7
//   or 8) consecutive taps of one row, sliding along the outputs with the
//   inputs under its taps in a register ring: one x and one dy load per KC
//   vector FMAs. Threads that split a tile's positions meet in shared memory
//   in a fixed order, and each block writes its partial sums (float32;
//   float64 for float64) to the workspace. Pass 2 sums the slices in a fixed
//   order. No atomics: the same inputs give the same bits.
// - Filter gradient, channels-last 3x3 at unit dilation, stride 2 along H or
//   stride 1 on maps of 56 rows or more (depthwise_stream_filter.cuh):
//   pass 1 streams as the forward, a thread
//   walking columns of a slice with the window and the 9 taps' sums in
//   registers; the block's threads sum in shared memory in a fixed order.
//   Its slices are fewer than the call's (the same workspace); pass 2 as above.
// - Forward and unit-stride input gradient, channels-last 16-bit with
//   windows of 7 taps or more along W at unit stride (depthwise_mma.cuh):
//   for each channel, GEMMs of the output rows against Toeplitz bands of the
//   taps on the tensor cores (mma.sync); m-tiles that meet an inf or NaN
//   are recomputed window by window.
// - Filter gradient, channels-last 16-bit with windows of 7 taps or more
//   along W at unit stride along W (depthwise_mma_filter.cuh): for each
//   channel and dy row, a GEMM of the input rows under the tap rows (A)
//   against the dy row shifted by each tap column (B) whose accumulators are
//   the taps, kept across a block's bands; bands that meet an inf or NaN are
//   summed again output by output. One slice a block; pass 2 as above.
//
// Tuning switches (common/switches.h): JAX_IM2COL_NO_DW_RING=1 loads every
// product's input from shared memory; JAX_IM2COL_NO_DW_NARROW_RUNS=1 keeps
// channel runs 128 bytes wide; JAX_IM2COL_NO_DW_SECTOR_COST=1 prices a forward
// tile's run under 32 bytes by a flat 1.25 rather than by the L2 sectors it
// fetches (dw_plan_cost); JAX_IM2COL_NO_DW_STREAM=1 puts 3x3 windows on
// the tiles (every op); JAX_IM2COL_NO_DW_STAGED=1 loads the streamed
// forward's rows into registers instead of the ring; JAX_IM2COL_NO_DW_STREAM_FILTER_S1=1 keeps unit-stride
// filter gradients on the tiles; JAX_IM2COL_NO_DW_TILES=1 runs the
// one-thread-per-element kernels everywhere (a reference on the GPU);
// JAX_IM2COL_NO_DW_MMA=1 keeps 16-bit forwards off the tensor cores;
// JAX_IM2COL_NO_DW_MMA_FILTER=1 keeps 16-bit filter gradients off them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/geometry.h"
#include "conv/depthwise/depthwise_plan.h"
#include "conv/direct/filter_slices.h"
#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

inline DwType dw_type(xla::ffi::DataType t) {
  using xla::ffi::DataType;
  switch (t) {
    case DataType::F16: return DwType::kF16;
    case DataType::BF16: return DwType::kBF16;
    case DataType::F32: return DwType::kF32;
    case DataType::F64: return DwType::kF64;
    default: return DwType::kOther;
  }
}

// Whether the depthwise kernels take a call (depthwise_applies in
// depthwise_plan.h, mirrored in src/jax_im2col/conv/depthwise_plan.py).
inline bool depthwise_applies(DwOp op, const Geometry& g, bool channels_last, xla::ffi::DataType type,
                              int64_t groups, int64_t c, int64_t o) {
  return depthwise_applies(op, g.nd, channels_last, dw_type(type), groups, c, o, g.lhs_dilation);
}

// y = conv(x, w): x (n, c, *in) or channels-last (n, *in, c), w (c, 1, *K) or
// (c, *K, 1), y likewise; y float32 for half x and w, or their type.
cudaError_t depthwise_forward(const void* x, const void* w, void* y, xla::ffi::DataType in, xla::ffi::DataType out,
                              const Geometry& g, int64_t n, int64_t c, bool channels_last, cudaStream_t stream);

// dx = the input gradient of conv(x, w) at dy.
cudaError_t depthwise_backward_data(const void* dy, const void* w, void* dx, xla::ffi::DataType type,
                                    const Geometry& g, int64_t n, int64_t c, bool channels_last,
                                    cudaStream_t stream);

// dw = the filter gradient of conv(x, w) at dy, over slices f;
// `partials` holds filter_partials_bytes(f, c * K, type == F64) bytes.
cudaError_t depthwise_backward_filter(const void* dy, const void* x, void* dw, void* partials,
                                      const FilterSlices& f, xla::ffi::DataType type, const Geometry& g, int64_t n,
                                      int64_t c, bool channels_last, cudaStream_t stream);

}  // namespace im2col::cuda
