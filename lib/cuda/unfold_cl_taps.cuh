// The channels-last vector unfold's copy of one thread's taps (columns.cu,
// unfold_cl_kernel) where the geometry has no lhs dilation: a thread's 16
// bytes of channels at every tap of its window, in the columns' tap order.
// The window is walked a line of taps along the last dimension at a time
// (window_taps.cuh: the other dimensions' bounds checked once a line, BATCH
// taps of LINES lines loaded before any of them stores). The general loop
// (source_offset_at a tap, lhs dilation included) ran ~70 instructions a
// tap, this one 18 (BATCH 1; BENCHMARKS.md, step 94).
#pragma once

#include <cstdint>

#include "../geometry.h"
#include "device_util.cuh"
#include "window_taps.cuh"

namespace im2col::cuda {

// 2-D and 3-D: 3 taps a batch (the suite's 2-D / 3-D rows up to 7% faster
// than one or two, but c512 f32, 0.6% slower than one); 1-D kernels are
// bound to 32 registers (8 blocks a multiprocessor, step 75), where batches
// spilled: one.
template <int ND>
inline constexpr int kClTapBatch = ND > 1 ? 3 : 1;

// 2-D and 3-D: 3 lines' batches (9 loads of a 3 x 3 window) before their
// stores, at 3 blocks a multiprocessor in 2-D (80 registers) and 2 in 3-D
// (114): ncu had the one-line kernel waiting on its loads (L1TEX scoreboard,
// 0.6 eligible warps a scheduler) at 4 blocks. The suite's 2-D channels-last
// rows 1-5% faster, c3d 2-5% (more blocks, or fewer lines, were slower there;
// BENCHMARKS.md, step 95).
template <int ND>
inline constexpr int kClTapLines = ND > 1 ? 3 : 1;
template <int ND>
inline constexpr int kClTapBlocks = ND == 3 ? 2 : 3;

// Copies xn (W units: the thread's vector of channels at input position 0
// of its image, positions c_vectors apart) at each tap of the window at
// `origin` to dst, taps cg_vectors apart; zeros where a tap falls on padding.
template <int ND, int BATCH, bool STREAM, typename W, int LINES = 1>
__device__ __forceinline__ void copy_cl_taps(const W* xn, W* dst, const Geometry& g, const int32_t* origin,
                                             int64_t c_vectors, int64_t cg_vectors) {
  const int32_t width = static_cast<int32_t>(g.in[ND - 1]);
  // A 32-bit dilation: a narrower multiply (a 64-bit one compiled to more address arithmetic).
  const int64_t src_step = static_cast<int32_t>(g.rhs_dilation[ND - 1]) * c_vectors;
  walk_window_taps<ND, BATCH, LINES>(
      g, origin, dst, cg_vectors,
      // A line's source: its first tap's.
      [&](int32_t pos) { return xn + (static_cast<int64_t>(pos) * width + origin[ND - 1]) * c_vectors; },
      [&](const W* src, bool inside, int32_t kw, int32_t at) {
        W v{};
        if (inside && static_cast<uint32_t>(at) < static_cast<uint32_t>(width)) v = __ldg(src + kw * src_step);
        return v;
      },
      [](W* p, const W& v) { store_maybe_streaming<STREAM>(p, v); });
}

}  // namespace im2col::cuda
