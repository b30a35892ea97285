// The channels-last vector unfold's thread decomposition (columns.cu,
// unfold_cl_kernel): thread t of `units` vectors a column row takes vector
// `unit` of row `row` (image n, chunk position l), group gi and channel j0
// in the group, and its output position's coordinates o.
#pragma once

#include <cstdint>

#include "common/device_util.cuh"
#include "common/geometry.h"

namespace im2col::cuda {

struct ClUnfoldUnit {
  int64_t row, unit, n, l, gi, j0;
};

// Multiply-shift divisors for threads that fit 31 bits (the launch checks;
// positions always do: the FFI's fits_32_bits): run-time divisions took ~25 instructions each, four or
// five a thread, about a quarter of the kernel's time at 9 taps
// (docs/optimization-log.md, steps 91-92).
struct ClUnfoldDivisors {
  FastDiv units, positions, group_channels, out[kMaxSpatial];
};

inline ClUnfoldDivisors cl_unfold_divisors(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t V) {
  ClUnfoldDivisors dv;
  dv.units = FastDiv(C / V);
  dv.positions = FastDiv(lay.lc);
  dv.group_channels = FastDiv(C / lay.groups);
  for (int d = 0; d < g.nd; ++d) dv.out[d] = FastDiv(g.out[d]);
  return dv;
}

// FAST: by dv (t under 2^31); else by run-time 64-bit divisions.
template <int ND, int V, bool FAST>
__device__ __forceinline__ ClUnfoldUnit cl_unfold_unit(int64_t t, const Geometry& g, const ColumnsLayout& lay,
                                                       int64_t units_per_row, int64_t Cg,
                                                       const ClUnfoldDivisors& dv, int32_t* o) {
  ClUnfoldUnit u;
  if constexpr (FAST) {
    int32_t row, unit, n, l, gi, j0;
    dv.units.divmod(static_cast<int32_t>(t), row, unit);
    dv.positions.divmod(row, n, l);
    dv.group_channels.divmod(unit * V, gi, j0);
    u.row = row, u.unit = unit, u.n = n, u.l = l, u.gi = gi, u.j0 = j0;
    unravel_fast<ND>(static_cast<int32_t>(lay.l0) + l, dv.out, o);
  } else {
    divmod(t, units_per_row, u.row, u.unit);
    divmod(u.row, lay.lc, u.n, u.l);
    divmod(u.unit * V, Cg, u.gi, u.j0);
    unravel<ND>(lay.l0 + u.l, g.out, o);
  }
  return u;
}

}  // namespace im2col::cuda
