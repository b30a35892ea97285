// The walk of the vector unfolds (unfold_cl_taps.cuh, unfold_cf_vectors.cuh)
// over one window's taps, in the columns' tap order: a line of taps along the
// last dimension at a time, LINES lines together. For each line, its bounds
// along the other dimensions are checked once (inside) and line_at(pos)
// returns what its loads need, pos being the line's flat index among the
// input's lines (formed for every line, read only where inside); then BATCH
// taps of each of the LINES lines load, load(line, inside, kw, at) for tap
// kw at input coordinate at along the last dimension, before any of them
// stores, store(dst + tap * step, value). More loads in flight a thread is
// what made both kernels faster (BENCHMARKS.md, steps 94-96).
#pragma once

#include <cstdint>

#include "../geometry.h"

namespace im2col::cuda {

template <int ND, int BATCH, int LINES, typename Out, typename LineAt, typename Load, typename Store>
__device__ __forceinline__ void walk_window_taps(const Geometry& g, const int32_t* origin, Out* dst, int64_t step,
                                                 LineAt&& line_at, Load&& load, Store&& store) {
  const int32_t KW = static_cast<int32_t>(g.kernel[ND - 1]), dW = static_cast<int32_t>(g.rhs_dilation[ND - 1]);
  const int32_t lines = static_cast<int32_t>(g.kernel_size) / KW;
  using Line = decltype(line_at(int32_t{0}));
  int32_t k[kMaxSpatial] = {};  // the line's taps along the other dimensions
  auto line_of = [&](bool& inside) {
    inside = true;
    int32_t pos = 0;
#pragma unroll
    for (int d = 0; d < ND - 1; ++d) {
      const int32_t c = origin[d] + k[d] * static_cast<int32_t>(g.rhs_dilation[d]);
      inside = inside && static_cast<uint32_t>(c) < static_cast<uint32_t>(g.in[d]);
      pos = pos * static_cast<int32_t>(g.in[d]) + c;
    }
    return line_at(pos);
  };
  int32_t line = 0;
  if constexpr (LINES > 1) {
#pragma unroll 1
    for (; line + LINES <= lines; line += LINES, dst += LINES * KW * step) {
      bool inside[LINES];
      Line src[LINES];
#pragma unroll
      for (int j = 0; j < LINES; ++j) {
        src[j] = line_of(inside[j]);
        increment<ND - 1>(k, g.kernel);
      }
      int32_t kw = 0, at = origin[ND - 1];
      Out* out = dst;
#pragma unroll 1
      for (; kw + BATCH <= KW; kw += BATCH, at += BATCH * dW, out += BATCH * step) {
        decltype(load(src[0], true, 0, 0)) v[LINES][BATCH];
#pragma unroll
        for (int j = 0; j < LINES; ++j)
#pragma unroll
          for (int b = 0; b < BATCH; ++b) v[j][b] = load(src[j], inside[j], kw + b, at + b * dW);
#pragma unroll
        for (int j = 0; j < LINES; ++j)
#pragma unroll
          for (int b = 0; b < BATCH; ++b) store(out + (j * KW + b) * step, v[j][b]);
      }
#pragma unroll 1
      for (; kw < KW; ++kw, at += dW, out += step) {
        decltype(load(src[0], true, 0, 0)) v[LINES];
#pragma unroll
        for (int j = 0; j < LINES; ++j) v[j] = load(src[j], inside[j], kw, at);
#pragma unroll
        for (int j = 0; j < LINES; ++j) store(out + j * KW * step, v[j]);
      }
    }
  }
  for (; line < lines; ++line, increment<ND - 1>(k, g.kernel)) {
    bool inside;
    const Line src = line_of(inside);
    int32_t kw = 0, at = origin[ND - 1];
    if constexpr (BATCH > 1) {
#pragma unroll 1
      for (; kw + BATCH <= KW; kw += BATCH, at += BATCH * dW, dst += BATCH * step) {
        decltype(load(src, true, 0, 0)) v[BATCH];
#pragma unroll
        for (int b = 0; b < BATCH; ++b) v[b] = load(src, inside, kw + b, at + b * dW);
#pragma unroll
        for (int b = 0; b < BATCH; ++b) store(dst + b * step, v[b]);
      }
    }
#pragma unroll 1
    for (; kw < KW; ++kw, at += dW, dst += step) store(dst, load(src, inside, kw, at));
  }
}

}  // namespace im2col::cuda
