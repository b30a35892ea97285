// The plan of the fold kernels that unroll a thread's taps
// (fold_cl_taps.cuh, fold_cf_taps.cuh): along dimension d at most
// ceil(kernel / tap_step) taps read a position; where that is at most T (2-4)
// in every dimension, a thread's T^ND candidate taps ("slots") are unrolled at
// compile time, and a slot's column entry and output position are the first
// tap's plus offsets fixed here.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/device_util.cuh"
#include "common/geometry.h"

namespace im2col::cuda {

constexpr int64_t kFoldTapsMax = 4;  // taps per dimension
// Taps a thread, over all dimensions: a channels-last thread holds a 16-byte
// vector a tap, so at most 16; a channels-first one a scalar, so 27 (3x3x3).
constexpr int64_t kFoldTapsSlotsCl = 16;
constexpr int64_t kFoldTapsSlots = 27;

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
  int32_t items = 0;  // threads' work items: images x positions x units (x channels, channels-first)
  // by_units: channels-last, units (V * P channels) a position; channels-first, channels.
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

// Whether a taps kernel applies to images [n0, n0 + nc): channels-last,
// V channels a thread (V * P of fold_cl_taps_kernel); channels-first
// (fold_cf_taps_kernel), one element a thread (V = 1), columns at lay's
// row and image strides.
inline bool plan_fold_taps(const Geometry& g, int64_t C, int64_t groups, int64_t nc, int64_t V,
                           FoldTapsPlan* p, bool channels_last = true, const ColumnsLayout& lay = {}) {
  const int64_t Cg = C / groups;
  if (Cg % V != 0 || (!channels_last && V != 1)) return false;
  int64_t T = 2;
  for (int d = 0; d < g.nd; ++d)
    T = std::max(T, (g.kernel[d] + g.tap_step[d] - 1) / g.tap_step[d]);
  const int64_t max_slots = channels_last ? kFoldTapsSlotsCl : kFoldTapsSlots;
  if (T > kFoldTapsMax || fold_taps_slots(T, g.nd) > max_slots) return false;
  const int64_t units = channels_last ? C / V : C;
  const int64_t items = nc * g.in_size * units;
  constexpr int64_t kMax32 = (int64_t{1} << 31) - 1;
  // Items in 32 bits with room for the grid-stride loop's last step.
  if (items > (int64_t{1} << 30) || g.out_size > kMax32 || g.kernel_size * C > kMax32) return false;
  p->taps = T;
  p->items = static_cast<int32_t>(items);
  p->by_units = FastDiv(units);
  p->by_positions = FastDiv(g.in_size);
  p->by_group_units = FastDiv(channels_last ? Cg / V : 1);
  p->by_last = FastDiv(g.in[g.nd - 1]);
  p->by_middle = FastDiv(g.nd == 3 ? g.in[1] : 1);
  // A column entry's distance per tap and per output position.
  const int64_t tap_entries = channels_last ? Cg : lay.row_stride;
  const int64_t position_entries = channels_last ? C * g.kernel_size : 1;
  int64_t positions = 1, taps = 1, entry_step[kMaxSpatial], position_step[kMaxSpatial];
  for (int d = g.nd - 1; d >= 0; --d) {
    if (T * g.out_step[d] * positions > kMax32) return false;  // a slot's position in 32 bits
    p->position_stride[d] = static_cast<int32_t>(positions);
    p->tap_stride[d] = static_cast<int32_t>(taps);
    position_step[d] = g.out_step[d] * positions;
    entry_step[d] = g.tap_step[d] * taps * tap_entries - g.out_step[d] * positions * position_entries;
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

}  // namespace im2col::cuda
