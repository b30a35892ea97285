// The channels-last vector unfold's copy of one thread's taps (columns.cu,
// unfold_cl_kernel) where the geometry has no lhs dilation: a thread's 16
// bytes of channels at every tap of its window, in the columns' tap order.
// The last dimension's taps are an inner loop carrying their input
// coordinate and source, the other dimensions' bounds are checked once a
// line of taps; BATCH taps of LINES lines at a time load before any of
// them stores. The general loop (source_offset_at a tap, lhs dilation
// included) ran ~70 instructions a tap, this one 18 (BATCH 1; docs/optimization-log.md,
// step 94).
#pragma once

#include <cstdint>

#include "common/device_util.cuh"
#include "common/geometry.h"

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
// docs/optimization-log.md, step 95).
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
  const int32_t KW = static_cast<int32_t>(g.kernel[ND - 1]), dW = static_cast<int32_t>(g.rhs_dilation[ND - 1]);
  const int32_t width = static_cast<int32_t>(g.in[ND - 1]);
  const int32_t lines = static_cast<int32_t>(g.kernel_size) / KW;
  const int64_t src_step = dW * c_vectors;
  int32_t k[kMaxSpatial] = {};  // the line's taps along the other dimensions
  int32_t line = 0;
  if constexpr (LINES > 1) {
    // LINES lines at a time: LINES * BATCH loads before their stores.
#pragma unroll 1
    for (; line + LINES <= lines; line += LINES, dst += LINES * KW * cg_vectors) {
      bool inside[LINES];
      const W* src[LINES];
#pragma unroll
      for (int j = 0; j < LINES; ++j) {
        inside[j] = true;
        int32_t pos = 0;
#pragma unroll
        for (int d = 0; d < ND - 1; ++d) {
          const int32_t c = origin[d] + k[d] * static_cast<int32_t>(g.rhs_dilation[d]);
          inside[j] = inside[j] && static_cast<uint32_t>(c) < static_cast<uint32_t>(g.in[d]);
          pos = pos * static_cast<int32_t>(g.in[d]) + c;
        }
        src[j] = xn + (static_cast<int64_t>(pos) * width + origin[ND - 1]) * c_vectors;
        increment<ND - 1>(k, g.kernel);
      }
      int32_t kw = 0, c = origin[ND - 1];
      W* out = dst;
#pragma unroll 1
      for (; kw + BATCH <= KW; kw += BATCH, c += BATCH * dW, out += BATCH * cg_vectors) {
        W v[LINES][BATCH];
#pragma unroll
        for (int j = 0; j < LINES; ++j)
#pragma unroll
          for (int b = 0; b < BATCH; ++b) {
            v[j][b] = W{};
            if (inside[j] && static_cast<uint32_t>(c + b * dW) < static_cast<uint32_t>(width))
              v[j][b] = __ldg(src[j] + (kw + b) * src_step);
          }
#pragma unroll
        for (int j = 0; j < LINES; ++j)
#pragma unroll
          for (int b = 0; b < BATCH; ++b) store_maybe_streaming<STREAM>(out + (j * KW + b) * cg_vectors, v[j][b]);
      }
#pragma unroll 1
      for (; kw < KW; ++kw, c += dW, out += cg_vectors) {
        W v[LINES];
#pragma unroll
        for (int j = 0; j < LINES; ++j) {
          v[j] = W{};
          if (inside[j] && static_cast<uint32_t>(c) < static_cast<uint32_t>(width)) v[j] = __ldg(src[j] + kw * src_step);
        }
#pragma unroll
        for (int j = 0; j < LINES; ++j) store_maybe_streaming<STREAM>(out + j * KW * cg_vectors, v[j]);
      }
    }
  }
  for (; line < lines; ++line, increment<ND - 1>(k, g.kernel)) {
    bool inside = true;
    int32_t pos = 0;
#pragma unroll
    for (int d = 0; d < ND - 1; ++d) {
      const int32_t c = origin[d] + k[d] * static_cast<int32_t>(g.rhs_dilation[d]);
      inside = inside && static_cast<uint32_t>(c) < static_cast<uint32_t>(g.in[d]);
      pos = pos * static_cast<int32_t>(g.in[d]) + c;
    }
    int32_t c = origin[ND - 1];
    // Formed for every line, read only where inside.
    const W* src = xn + (static_cast<int64_t>(pos) * width + c) * c_vectors;
    int32_t kw = 0;
    if constexpr (BATCH > 1) {
#pragma unroll 1
      for (; kw + BATCH <= KW; kw += BATCH, c += BATCH * dW, src += BATCH * src_step, dst += BATCH * cg_vectors) {
        W v[BATCH];
#pragma unroll
        for (int b = 0; b < BATCH; ++b) {
          v[b] = W{};
          if (inside && static_cast<uint32_t>(c + b * dW) < static_cast<uint32_t>(width)) v[b] = __ldg(src + b * src_step);
        }
#pragma unroll
        for (int b = 0; b < BATCH; ++b) store_maybe_streaming<STREAM>(dst + b * cg_vectors, v[b]);
      }
    }
#pragma unroll 1
    for (; kw < KW; ++kw, c += dW, src += src_step, dst += cg_vectors) {
      W v{};
      if (inside && static_cast<uint32_t>(c) < static_cast<uint32_t>(width)) v = __ldg(src);
      store_maybe_streaming<STREAM>(dst, v);
    }
  }
}

}  // namespace im2col::cuda
