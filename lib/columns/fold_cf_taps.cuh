// Channels-first fold with all of a thread's loads in flight at once
// (columns.cu chooses it): one element of x a thread, as XLA's fusion of the
// VJP of pad + strided slices runs it. Neighbouring threads sum neighbouring
// positions of one line, so for each tap a warp reads consecutive column
// entries. The thread's T^ND candidate taps (fold_taps_plan.cuh) are
// unrolled at compile time, each load predicated on its tap existing, and
// every load is issued before the first add: the vector and staged folds
// held 4 loads in flight a thread, reaching 68% of the read bandwidth where
// the fused VJP reached 100% (BENCHMARKS.md, 2026-11-27). The element still
// sums its taps in increasing order.
#pragma once

#include <cstdint>
#include <cstring>

#include "columns/fold_taps_plan.cuh"
#include "common/device_util.cuh"
#include "common/geometry.h"

namespace im2col::cuda {

template <int ND, int T, typename TC, typename TX>
__global__ void __launch_bounds__(kThreads)
fold_cf_taps_kernel(const TC* __restrict__ cols, TX* __restrict__ x, Geometry g, int64_t C, int64_t n0,
                    ColumnsLayout lay, FoldTapsPlan p, bool accumulate) {
  using A = typename Acc<TX>::type;
  constexpr int kSlots = static_cast<int>(fold_taps_slots(T, ND));
  const int64_t K = g.kernel_size;
  const int32_t l0 = static_cast<int32_t>(lay.l0), lc = static_cast<int32_t>(lay.lc);
  const int32_t start = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  const int32_t step = static_cast<int32_t>(gridDim.x * blockDim.x);
  for (int32_t t = start; t < p.items; t += step) {
    int32_t plane, qi, n, c;
    p.by_positions.divmod(t, plane, qi);
    p.by_units.divmod(plane, n, c);
    int32_t q[kMaxSpatial];
    if constexpr (ND == 1) {
      q[0] = qi;
    } else if constexpr (ND == 2) {
      p.by_last.divmod(qi, q[0], q[1]);
    } else {
      int32_t rows;
      p.by_last.divmod(qi, rows, q[2]);
      p.by_middle.divmod(rows, q[0], q[1]);
    }
    // The first tap reading q along each dimension: its flat tap and output
    // position; slot (i_0, ...) is tap i_d of each dimension's run.
    int32_t count[ND], o = 0, k = 0;
#pragma unroll
    for (int d = 0; d < ND; ++d) {
      const TapRun<int32_t> run = taps_reading<int32_t>(g, d, q[d], p.divisors[d]);
      count[d] = run.count;
      o += run.o * p.position_stride[d];
      k += run.k * p.tap_stride[d];
    }
    const TC* first = cols + static_cast<int64_t>(n) * lay.image_stride +
                      (static_cast<int64_t>(c) * K + k) * lay.row_stride + (o - l0);
    keep_in_register(first);
    RawWords<TC, 1> loaded[kSlots];
    bool reads[kSlots];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      int32_t stride = kSlots;
      bool exists = true;
#pragma unroll
      for (int d = 0; d < ND; ++d) {
        stride /= T;
        exists = exists && (s / stride) % T < count[d];
      }
      const int32_t o_slot = o - l0 - p.slot_position[s];
      reads[s] = exists && static_cast<uint32_t>(o_slot) < static_cast<uint32_t>(lc);
      if (reads[s]) loaded[s] = load_raw<TC, 1, true>(first + p.slot_entry[s]);
    }
    TX* xq = x + ((n0 + n) * C + c) * g.in_size + qi;
    A acc = accumulate ? static_cast<A>(to_acc(*xq)) : A(0);
#pragma unroll
    for (int s = 0; s < kSlots; ++s)
      if (reads[s]) {
        TC e;
        memcpy(&e, &loaded[s], sizeof(e));
        acc += static_cast<A>(to_acc(e));
      }
    *xq = store_value<TX>(acc);
  }
}

}  // namespace im2col::cuda
