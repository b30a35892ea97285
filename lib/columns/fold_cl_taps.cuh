// Channels-last fold with all of a thread's loads in flight at once
// (columns.cu chooses it). A thread sums V * P channels of one input
// position: one 16-byte vector (V elements, P = 1), or where channels do not
// make whole vectors P scalars (V = 1): 3 where the group's channels divide
// by 3 (an RGB stem's pixel: the taps' index math and addresses paid once
// for its channels, step 65), else 1. Along dimension d at most
// ceil(kernel / tap_step) taps read a
// position; where that is at most T (2-4) in every dimension and T^ND is at
// most kFoldTapsSlots, the T^ND candidate taps are unrolled at compile time,
// each load predicated on its tap existing, and every load is issued before
// the first add (fold_cl_kernel's per-run loop had one load in flight a
// thread where runs are shorter than its unroll: 1-2 taps at stride 2, 3 at
// stride 1). A candidate's column entry and output position are the first
// tap's plus offsets per slot fixed at launch (FoldTapsPlan): an add each
// (flattening each candidate's tap and position made the stem's fold
// issue-bound, step 59), from a first-entry pointer held in a register (nvcc
// re-derived it from the kernel's arguments for every slot, ~20 instructions
// each: step 63). Each element still sums its taps in increasing order.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/device_util.cuh"
#include "common/geometry.h"

namespace im2col::cuda {

constexpr int64_t kFoldTapsMax = 4;    // taps per dimension
constexpr int64_t kFoldTapsSlots = 16;  // taps a thread, over all dimensions

// taps_reading's divisions by multiply and shift (its dividends are never
// negative).
struct TapDivisors {
  FastDiv s, k_step, o_step;
  __device__ __forceinline__ int32_t by_stride(int32_t n) const { return s.div(n); }
  __device__ __forceinline__ int32_t by_k_step(int32_t n) const { return k_step.div(n); }
  __device__ __forceinline__ int32_t by_o_step(int32_t n) const { return o_step.div(n); }
};

struct FoldTapsPlan {
  int64_t taps = 0;   // T: the bound on the taps reading a position along a dimension
  int32_t items = 0;  // threads' work items: images x positions x units
  FastDiv by_units, by_positions, by_group_units, by_last, by_middle;
  TapDivisors divisors[kMaxSpatial];
  // Slot (i_0, ..., i_{ND-1}) is tap i_d of each dimension's run (tap +
  // i_d tap_step, output position - i_d out_step): its column entry lies
  // slot_entry[s] past the first tap's and its flat output position
  // slot_position[s] before it; position_stride[d] and tap_stride[d] flatten
  // positions and taps.
  int64_t slot_entry[kFoldTapsSlots] = {};
  int32_t slot_position[kFoldTapsSlots] = {};
  int32_t position_stride[kMaxSpatial] = {0, 0, 0};
  int32_t tap_stride[kMaxSpatial] = {0, 0, 0};
};

constexpr int64_t fold_taps_slots(int64_t taps, int nd) {
  return nd == 1 ? taps : taps * fold_taps_slots(taps, nd - 1);
}

// Whether the kernel applies, V channels a thread (V * P of the kernel), to
// images [n0, n0 + nc).
inline bool plan_fold_taps(const Geometry& g, int64_t C, int64_t groups, int64_t nc, int64_t V,
                           FoldTapsPlan* p) {
  const int64_t Cg = C / groups;
  if (Cg % V != 0) return false;
  int64_t T = 2;
  for (int d = 0; d < g.nd; ++d)
    T = std::max(T, (g.kernel[d] + g.tap_step[d] - 1) / g.tap_step[d]);
  if (T > kFoldTapsMax || fold_taps_slots(T, g.nd) > kFoldTapsSlots) return false;
  const int64_t units = C / V;
  const int64_t items = nc * g.in_size * units;
  constexpr int64_t kMax32 = (int64_t{1} << 31) - 1;
  // Items in 32 bits with room for the grid-stride loop's last step.
  if (items > (int64_t{1} << 30) || g.out_size > kMax32 || g.kernel_size * C > kMax32) return false;
  p->taps = T;
  p->items = static_cast<int32_t>(items);
  p->by_units = FastDiv(units);
  p->by_positions = FastDiv(g.in_size);
  p->by_group_units = FastDiv(Cg / V);
  p->by_last = FastDiv(g.in[g.nd - 1]);
  p->by_middle = FastDiv(g.nd == 3 ? g.in[1] : 1);
  int64_t positions = 1, taps = 1, entry_step[kMaxSpatial], position_step[kMaxSpatial];
  for (int d = g.nd - 1; d >= 0; --d) {
    if (T * g.out_step[d] * positions > kMax32) return false;  // a slot's position in 32 bits
    p->position_stride[d] = static_cast<int32_t>(positions);
    p->tap_stride[d] = static_cast<int32_t>(taps);
    position_step[d] = g.out_step[d] * positions;
    entry_step[d] = g.tap_step[d] * taps * Cg - g.out_step[d] * positions * C * g.kernel_size;
    p->divisors[d] = TapDivisors{FastDiv(g.stride[d]), FastDiv(g.tap_step[d]), FastDiv(g.out_step[d])};
    positions *= g.out[d];
    taps *= g.kernel[d];
  }
  const int64_t slots = fold_taps_slots(T, g.nd);
  for (int64_t slot = 0; slot < slots; ++slot) {
    int64_t entry = 0, position = 0, rest = slot;
    for (int d = g.nd - 1; d >= 0; --d, rest /= T) {
      entry += rest % T * entry_step[d];
      position += rest % T * position_step[d];
    }
    if (position > kMax32) return false;
    p->slot_entry[slot] = entry;
    p->slot_position[slot] = static_cast<int32_t>(position);
  }
  return true;
}

template <int ND, int T, typename TC, typename TX, int V, int P = 1>
__global__ void __launch_bounds__(kThreads)
fold_cl_taps_kernel(const TC* __restrict__ cols, TX* __restrict__ x, Geometry g, int64_t C, int64_t n0,
                    ColumnsLayout lay, FoldTapsPlan p, bool accumulate) {
  using A = typename Acc<TX>::type;
  static_assert(P == 1 || V == 1, "P scalars or one vector a thread");
  constexpr int kSlots = static_cast<int>(fold_taps_slots(T, ND)), E = V * P;
  const int64_t CK = C * g.kernel_size;
  const int32_t Cg = static_cast<int32_t>(C / lay.groups), K = static_cast<int32_t>(g.kernel_size);
  const int32_t l0 = static_cast<int32_t>(lay.l0), lc = static_cast<int32_t>(lay.lc);
  const int32_t start = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  const int32_t step = static_cast<int32_t>(gridDim.x * blockDim.x);
  for (int32_t t = start; t < p.items; t += step) {
    int32_t position, unit, n, qi, gi, u;
    p.by_units.divmod(t, position, unit);
    p.by_positions.divmod(position, n, qi);
    p.by_group_units.divmod(unit, gi, u);
    int32_t q[kMaxSpatial];
    if constexpr (ND == 1) {
      q[0] = qi;
    } else if constexpr (ND == 2) {
      p.by_last.divmod(qi, q[0], q[1]);
    } else {
      int32_t plane;
      p.by_last.divmod(qi, plane, q[2]);
      p.by_middle.divmod(plane, q[0], q[1]);
    }
    // The first tap reading q along each dimension (its entry and output
    // position); slot (i_0, ...) is tap i_d of each dimension's run, whose
    // entry and position are linear in the i_d.
    int32_t count[ND], o = 0, k = 0;
#pragma unroll
    for (int d = 0; d < ND; ++d) {
      const TapRun<int32_t> run = taps_reading<int32_t>(g, d, q[d], p.divisors[d]);
      count[d] = run.count;
      o += run.o * p.position_stride[d];
      k += run.k * p.tap_stride[d];
    }
    const TC* first = cols + static_cast<int64_t>(n) * lc * CK + static_cast<int64_t>(gi) * K * Cg + u * E +
                      static_cast<int64_t>(o - l0) * CK + static_cast<int64_t>(k) * Cg;
    keep_in_register(first);
    RawWords<TC, V> loaded[kSlots][P];
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
      if (reads[s]) {
#pragma unroll
        for (int j = 0; j < P; ++j) loaded[s][j] = load_raw<TC, V, true>(first + p.slot_entry[s] + j);
      }
    }
    TX* xq = x + ((n0 + n) * g.in_size + qi) * C + unit * E;
    A acc[E];
#pragma unroll
    for (int v = 0; v < E; ++v) acc[v] = accumulate ? static_cast<A>(to_acc(xq[v])) : A(0);
#pragma unroll
    for (int s = 0; s < kSlots; ++s)
      if (reads[s]) {
#pragma unroll
        for (int j = 0; j < P; ++j) {
          Pack<TC, V> e;
          memcpy(&e, &loaded[s][j], sizeof(e));
#pragma unroll
          for (int v = 0; v < V; ++v) acc[j * V + v] += static_cast<A>(to_acc(e.v[v]));
        }
      }
    if constexpr (P == 1) {
      Pack<TX, V> out;
#pragma unroll
      for (int v = 0; v < V; ++v) out.v[v] = store_value<TX>(acc[v]);
      *reinterpret_cast<Pack<TX, V>*>(xq) = out;
    } else {
#pragma unroll
      for (int v = 0; v < E; ++v) xq[v] = store_value<TX>(acc[v]);
    }
  }
}

}  // namespace im2col::cuda
