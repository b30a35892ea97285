// Channels-first fold on vectors (columns.cu chooses it): stride S (1 or 2)
// along the last spatial dimension, lines of output positions that are whole
// vectors of V elements (16 bytes, or 8 where 16 do not divide the lines) and
// input lines of whole runs of S vectors. A thread sums S * V consecutive
// elements of one input line: along the last dimension each kernel tap reads
// one phase of them (every S-th element, strided_position), and the V column
// entries that phase reads are V consecutive elements of one line of the
// columns, shifted by the same amount (mod V) for every thread, so they come
// from two aligned vector loads and a shift known per tap. Each element
// still sums its taps in increasing order (deterministic, no atomics).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/device_util.cuh"
#include "common/geometry.h"

namespace im2col::cuda {

constexpr int64_t kFoldVectorMaxStride = 2;
// Taps along the line whose loads a thread issues before their adds: 4 for
// 2-byte types (one at a time, two loads in flight a thread, the bfloat16
// rows were latency-bound); 1 for the others, in the loop as it was before
// step 59 (batched, their occupancy fell to the batch's registers, 42 -> 64
// a thread, float32 rows 4-16 points slower; the batched loop run with a
// batch of 1 also lost: the stem 59 -> 47%, step 59).
template <typename TC>
constexpr int fold_vector_batch() {
  return sizeof(TC) == 2 ? 4 : 1;
}

// Whether the kernel applies with vectors of V elements.
inline bool fold_cf_vector_applies(const Geometry& g, const ColumnsLayout& lay, int64_t V) {
  const int nd = g.nd;
  const int64_t out_last = g.out[nd - 1], in_last = g.in[nd - 1], s = g.stride[nd - 1];
  return !g.any_lhs_dilation && s <= kFoldVectorMaxStride && out_last % V == 0 && in_last % (s * V) == 0 &&
         lay.l0 % out_last == 0 && lay.lc % out_last == 0 && lay.row_stride % V == 0 &&
         lay.image_stride % V == 0;
}

// acc[v] += the column entry of element v: entry S + v of the pair (a, b),
// where it lies on the line (0 <= first + v < out_last).
template <int S, typename TC, typename A, int V>
__device__ __forceinline__ void add_shifted(A* acc, const Pack<TC, V>& a, const Pack<TC, V>& b,
                                            int32_t first, int32_t out_last) {
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const TC e = S + v < V ? a.v[S + v] : b.v[S + v - V];
    if (static_cast<uint32_t>(first + v) < static_cast<uint32_t>(out_last)) acc[v] += static_cast<A>(to_acc(e));
  }
}

template <int S, typename TC, typename A, int V>
__device__ __forceinline__ void add_shifted_by(int32_t shift, A* acc, const Pack<TC, V>& a, const Pack<TC, V>& b,
                                               int32_t first, int32_t out_last) {
  if constexpr (S < V) {
    if (shift == S) {
      add_shifted<S>(acc, a, b, first, out_last);
    } else {
      add_shifted_by<S + 1>(shift, acc, a, b, first, out_last);
    }
  }
}

// Blocks a multiprocessor for 2-byte columns in 1-D and 2-D (step 67, kernel
// times of one build, bfloat16): the compiler's 94 registers at stride 2
// allowed 2 (the stem 70.2 us; bound to 3: 59.8 with 64 bytes of spills; to
// 4: 75.8, 216 bytes); its 76 at stride 1 allowed 3 (c64 / mbv2 / deeplab
// 49.2 / 108.0 / 64.0 us; bound to 4: 46.5 / 99.8 / 60.0, 64 bytes of
// spills).
template <int ND, typename TC, int S>
constexpr int kVectorFoldBlocksPerSM = sizeof(TC) == 2 && ND < 3 ? (S == 2 ? 3 : 4) : 0;

template <int ND, typename TC, typename TX, int V, int S = 1>
__global__ void __launch_bounds__(kThreads, kVectorFoldBlocksPerSM<ND, TC, S>)
fold_cf_vector_kernel(const TC* __restrict__ cols, TX* __restrict__ x, Geometry g, int64_t C, int64_t n0,
                      ColumnsLayout lay, int64_t lines, bool accumulate) {
  using A = typename Acc<TX>::type;
  using Out = Pack<TX, V>;
  const int32_t width = static_cast<int32_t>(g.in[ND - 1]);
  const int32_t runs = width / (S * V);
  const int32_t out_last = static_cast<int32_t>(g.out[ND - 1]), kw = static_cast<int32_t>(g.kernel[ND - 1]);
  const int32_t l0 = static_cast<int32_t>(lay.l0), lc = static_cast<int32_t>(lay.lc);
  const int64_t K = g.kernel_size, lines_per_plane = g.in_size / width;
  using Raw = RawWords<TC, V>;  // the batch's loads (device_util.cuh)
  constexpr int B = fold_vector_batch<TC>();
  for (int64_t t = grid_start(); t < lines * runs; t += grid_step()) {
    int64_t line, run, plane, inner, n, c;
    divmod(t, static_cast<int64_t>(runs), line, run);
    divmod(line, lines_per_plane, plane, inner);
    divmod(plane, C, n, c);
    const int32_t w0 = static_cast<int32_t>(run) * S * V;
    int32_t q[kMaxSpatial];
    unravel<ND - 1>(inner, g.in, q);
    q[ND - 1] = w0;
    TX* xr = x + ((n0 + n) * C + c) * g.in_size + inner * width + w0;
    A acc[S][V];  // element w0 + S * v + p in acc[p][v]
#pragma unroll
    for (int h = 0; h < S; ++h) {
      const Out old = accumulate ? reinterpret_cast<const Out*>(xr)[h] : Out{};
#pragma unroll
      for (int v = 0; v < V; ++v) acc[(h * V + v) % S][(h * V + v) / S] = static_cast<A>(to_acc(old.v[v]));
    }
    const TC* image = cols + n * lay.image_stride + c * K * lay.row_stride - l0;
    for_each_outer_tap<ND>(g, q, [&](int32_t k_outer, int32_t o_outer) {
      const int32_t line_start = o_outer * out_last;
      if (line_start < l0 || line_start >= l0 + lc) return;  // lines are whole in the chunk
      const TC* row = image + static_cast<int64_t>(k_outer) * kw * lay.row_stride + line_start;
      if constexpr (B == 1) {
        for (int32_t j = 0; j < kw; ++j, row += lay.row_stride) {
          int32_t phase;
          const int32_t first = strided_position<int32_t>(g, ND - 1, w0, j, S, &phase);  // of the phase's element 0
          if (first + V <= 0 || first >= out_last) continue;
          const int32_t shift = first & (V - 1), base = first - shift;
          const Pack<TC, V> a = base >= 0 ? *reinterpret_cast<const Pack<TC, V>*>(row + base) : Pack<TC, V>{};
          const Pack<TC, V> b = shift != 0 && base + V < out_last
                                    ? *reinterpret_cast<const Pack<TC, V>*>(row + base + V)
                                    : Pack<TC, V>{};
#pragma unroll
          for (int p = 0; p < S; ++p)
            if (p == phase) add_shifted_by<0>(shift, acc[p], a, b, first, out_last);
        }
      } else {
        for (int32_t j0 = 0; j0 < kw; j0 += B, row += B * lay.row_stride) {
          Raw a[B], b[B];
          int32_t first[B], phase[B];  // first: of the phase's element 0
#pragma unroll
          for (int i = 0; i < B; ++i) {
            a[i] = b[i] = Raw{};
            first[i] = out_last;  // no entry of the line
            phase[i] = 0;
            if (j0 + i >= kw) continue;
            const int32_t f = strided_position<int32_t>(g, ND - 1, w0, j0 + i, S, &phase[i]);
            if (f + V <= 0 || f >= out_last) continue;
            first[i] = f;
            const int32_t shift = f & (V - 1), base = f - shift;
            const TC* r = row + i * lay.row_stride;
            if (base >= 0) a[i] = load_raw<TC, V>(r + base);
            if (shift != 0 && base + V < out_last) b[i] = load_raw<TC, V>(r + base + V);
          }
#pragma unroll
          for (int i = 0; i < B; ++i) {
            if (first[i] >= out_last) continue;
            Pack<TC, V> pa, pb;
            memcpy(&pa, &a[i], sizeof(pa));
            memcpy(&pb, &b[i], sizeof(pb));
#pragma unroll
            for (int p = 0; p < S; ++p)
              if (p == phase[i]) add_shifted_by<0>(first[i] & (V - 1), acc[p], pa, pb, first[i], out_last);
          }
        }
      }
    });
#pragma unroll
    for (int h = 0; h < S; ++h) {
      Out out;
#pragma unroll
      for (int v = 0; v < V; ++v) out.v[v] = store_value<TX>(acc[(h * V + v) % S][(h * V + v) / S]);
      reinterpret_cast<Out*>(xr)[h] = out;
    }
  }
}

}  // namespace im2col::cuda
