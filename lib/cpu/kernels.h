// CPU unfold (im2col) and fold (col2im as a gather) over one chunk of columns.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/fold_elements.h"
#include "common/geometry.h"
#include "cpu/half.h"

namespace im2col::cpu {

// x: (N, C, *in) channels-first or (N, *in, C) channels-last, for images
// [n0, n0 + nc); cols: the chunk described by `layout`.
template <int ND, typename T>
void unfold_chunk_nd(const T* x, T* cols, const Geometry& g, int64_t channels,
                     int64_t n0, int64_t nc, const ColumnsLayout& lay,
                     bool channels_last) {
  const int64_t K = g.kernel_size, C = channels;
  int64_t o[kMaxSpatial], k[kMaxSpatial];
  if (!channels_last) {
    constexpr int LAST = ND - 1;
    const int64_t width = g.out[LAST], stride = g.stride[LAST], end = lay.l0 + lay.lc;
    for (int64_t n = 0; n < nc; ++n) {
      for (int64_t c = 0; c < C; ++c) {
        const T* xc = x + ((n0 + n) * C + c) * g.in_size;
        for (int64_t kk = 0; kk < K; ++kk) {
          unravel<ND>(kk, g.kernel, k);
          T* row = cols + n * lay.image_stride + (c * K + kk) * lay.row_stride;
          if (g.any_lhs_dilation) {  // an element at a time
            unravel<ND>(lay.l0, g.out, o);
            for (int64_t l = 0; l < lay.lc; ++l, increment<ND>(o, g.out)) {
              const int64_t s = source_offset<ND>(g, o, k);
              if (s >= 0) row[l] = xc[s]; else std::memset(&row[l], 0, sizeof(T));
            }
            continue;
          }
          // Along each output line: zeros, the run of positions whose tap
          // reads inside the input (copied, strided by the stride), zeros.
          int64_t lo, hi;
          const int64_t reach = tap_inside_range(g, LAST, k[LAST], &lo, &hi);
          for (int64_t l = lay.l0; l < end;) {
            const int64_t line = l / width, w0 = l - line * width;
            const int64_t w1 = width < w0 + end - l ? width : w0 + end - l;
            int64_t outer = 0;  // the line's input line, -1 on padding
            if constexpr (ND > 1) {
              int64_t oo[kMaxSpatial], origin[kMaxSpatial];
              unravel<ND - 1>(line, g.out, oo);
              window_origin<ND - 1>(g, oo, origin);
              outer = source_offset_at<ND - 1>(g, origin, k);
            }
            const int64_t a = outer < 0 ? w1 : std::min(std::max(lo, w0), w1);
            const int64_t b = outer < 0 ? w1 : std::min(std::max(hi, a), w1);
            T* seg = row + (l - lay.l0);  // position w0 of the line
            const int64_t base = outer * g.in[LAST] + reach;  // + w * stride
            std::memset(seg, 0, (a - w0) * sizeof(T));
            if (b > a && stride == 1) {
              std::memcpy(seg + (a - w0), xc + base + a, (b - a) * sizeof(T));
            } else {
              for (int64_t w = a; w < b; ++w) seg[w - w0] = xc[base + w * stride];
            }
            std::memset(seg + (b - w0), 0, (w1 - b) * sizeof(T));
            l += w1 - w0;
          }
        }
      }
    }
    return;
  }
  const int64_t G = lay.groups, Cg = C / G;
  for (int64_t n = 0; n < nc; ++n) {
    const T* xn = x + (n0 + n) * g.in_size * C;
    unravel<ND>(lay.l0, g.out, o);
    for (int64_t l = 0; l < lay.lc; ++l, increment<ND>(o, g.out)) {
      T* row = cols + (n * lay.lc + l) * C * K;
      for (int d = 0; d < ND; ++d) k[d] = 0;
      for (int64_t kk = 0; kk < K; ++kk, increment<ND>(k, g.kernel)) {
        const int64_t s = source_offset<ND>(g, o, k);
        for (int64_t gi = 0; gi < G; ++gi) {
          T* dst = row + (gi * K + kk) * Cg;
          if (s >= 0) std::memcpy(dst, xn + s * C + gi * Cg, Cg * sizeof(T));
          else std::memset(dst, 0, Cg * sizeof(T));
        }
      }
    }
  }
}

// float16 / bfloat16 / float32 / float64: summed in float (double for
// double) and rounded once; the other element types sum as
// common/fold_elements.h says (integers modulo 2^bits, bool by logical or,
// float8 in float, complex in their own precision).
template <typename T>
struct FloatSum {
  using Storage = T;
  using Acc = typename Accumulator<T>::type;
  static Acc zero() { return Acc(0); }
  static Acc from(T v) { return static_cast<Acc>(to_float(v)); }
  static void add(Acc& a, T v) { a += static_cast<Acc>(to_float(v)); }
  static T store(Acc a) { return from_float<T>(a); }
};

// The adjoint of unfold_chunk: every element of x gathers the columns that
// read it, in a fixed order, accumulating as the sum type S says. With
// `accumulate` the chunk's sum is added to what x holds.
template <int ND, typename S>
void fold_chunk_nd(const typename S::Storage* cols, typename S::Storage* x, const Geometry& g,
                   int64_t channels, int64_t n0, int64_t nc, const ColumnsLayout& lay,
                   bool channels_last, bool accumulate) {
  using T = typename S::Storage;
  using Acc = typename S::Acc;
  const int64_t K = g.kernel_size, C = channels;
  const int64_t l_end = lay.l0 + lay.lc;
  int64_t q[kMaxSpatial];
  if (!channels_last) {
    for (int64_t n = 0; n < nc; ++n) {
      for (int64_t c = 0; c < C; ++c) {
        T* xc = x + ((n0 + n) * C + c) * g.in_size;
        const T* base = cols + n * lay.image_stride + c * K * lay.row_stride;
        for (int d = 0; d < ND; ++d) q[d] = 0;
        for (int64_t i = 0; i < g.in_size; ++i, increment<ND>(q, g.in)) {
          Acc acc = accumulate ? S::from(xc[i]) : S::zero();
          for_each_tap_reading<ND>(g, q, [&](int64_t kk, int64_t t) {
            if (t >= lay.l0 && t < l_end) S::add(acc, base[kk * lay.row_stride + t - lay.l0]);
          });
          xc[i] = S::store(acc);
        }
      }
    }
    return;
  }
  const int64_t G = lay.groups, Cg = C / G;
  std::vector<Acc> acc(static_cast<size_t>(C));
  for (int64_t n = 0; n < nc; ++n) {
    for (int d = 0; d < ND; ++d) q[d] = 0;
    for (int64_t i = 0; i < g.in_size; ++i, increment<ND>(q, g.in)) {
      T* xq = x + ((n0 + n) * g.in_size + i) * C;
      for (int64_t c = 0; c < C; ++c) acc[c] = accumulate ? S::from(xq[c]) : S::zero();
      for_each_tap_reading<ND>(g, q, [&](int64_t kk, int64_t t) {
        if (t < lay.l0 || t >= l_end) return;
        const T* row = cols + (n * lay.lc + t - lay.l0) * C * K;
        for (int64_t gi = 0; gi < G; ++gi)
          for (int64_t j = 0; j < Cg; ++j) S::add(acc[gi * Cg + j], row[(gi * K + kk) * Cg + j]);
      });
      for (int64_t c = 0; c < C; ++c) xq[c] = S::store(acc[c]);
    }
  }
}

template <typename T>
void unfold_chunk(const T* x, T* cols, const Geometry& g, int64_t channels, int64_t n0,
                  int64_t nc, const ColumnsLayout& lay, bool channels_last) {
  dispatch_rank(g.nd, [&](auto rank) {
    unfold_chunk_nd<decltype(rank)::value>(x, cols, g, channels, n0, nc, lay, channels_last);
  });
}

template <typename S>
void fold_chunk(const typename S::Storage* cols, typename S::Storage* x, const Geometry& g,
                int64_t channels, int64_t n0, int64_t nc, const ColumnsLayout& lay,
                bool channels_last, bool accumulate) {
  dispatch_rank(g.nd, [&](auto rank) {
    fold_chunk_nd<decltype(rank)::value, S>(cols, x, g, channels, n0, nc, lay, channels_last,
                                            accumulate);
  });
}

}  // namespace im2col::cpu
