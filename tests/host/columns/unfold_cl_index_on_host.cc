// The channels-last vector unfold's thread decomposition
// (lib/cuda/unfold_cl_index.cuh) compiled as host code: over random 1-D to
// 3-D geometries, channels, groups, vector widths, images and chunks of the
// positions, for threads across the whole grid (its last one included), the
// multiply-shift decomposition (FAST) and the run-time divisions must both
// give the plain arithmetic's row, vector, image, position, group, channel
// and output coordinates. Run by tests/test_kernels_on_host.py; prints
// "N passed, M failed".
#include <cstdint>
#include <cstdio>

#include "host_cuda.h"
#include "columns/unfold_cl_index.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

template <int ND, int V, bool FAST>
bool check(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t t) {
  const int64_t units = C / V, Cg = C / lay.groups;
  const ClUnfoldDivisors dv = cl_unfold_divisors(g, lay, C, V);
  int32_t o[kMaxSpatial] = {-1, -1, -1};
  const ClUnfoldUnit u = cl_unfold_unit<ND, V, FAST>(t, g, lay, units, Cg, dv, o);
  const int64_t row = t / units, unit = t % units, l = row % lay.lc;
  bool ok = u.row == row && u.unit == unit && u.n == row / lay.lc && u.l == l && u.gi == unit * V / Cg &&
            u.j0 == unit * V % Cg;
  int64_t rest = lay.l0 + l;
  for (int d = ND - 1; d >= 0; --d) {
    ok = ok && o[d] == (d > 0 ? rest % g.out[d] : rest);
    rest /= g.out[d];
  }
  if (!ok)
    std::printf("FAIL: nd %d, V %d, fast %d, C %lld, groups %lld, lc %lld, t %lld\n", ND, V, FAST ? 1 : 0,
                static_cast<long long>(C), static_cast<long long>(lay.groups), static_cast<long long>(lay.lc),
                static_cast<long long>(t));
  return ok;
}

template <int ND, int V>
bool one_case() {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(ND, ND == 1 ? 5000 : ND == 2 ? 300 : 40, pad_hi);
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  const int64_t groups = draw(1, 4), Cg = V * draw(1, 24), C = groups * Cg, nc = draw(1, 40);
  ColumnsLayout lay;
  lay.groups = groups;
  lay.l0 = draw(0, 1) == 0 ? 0 : draw(0, static_cast<int>(g.out_size) - 1);
  lay.lc = draw(1, static_cast<int>(g.out_size - lay.l0));
  const int64_t total = nc * lay.lc * (C / V);
  bool ok = true;
  for (int i = 0; i < 40; ++i) {
    const int64_t t = i == 0 ? total - 1 : i == 1 ? 0 : draw(0, static_cast<int>(std::min<int64_t>(total - 1, 2000000000)));
    ok = check<ND, V, true>(g, lay, C, t) && check<ND, V, false>(g, lay, C, t) && ok;
  }
  return ok;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 300; ++i) {
    run(one_case<1, 8>());
    run(one_case<2, 4>());
    run(one_case<2, 8>());
    run(one_case<3, 2>());
    run(one_case<3, 4>());
  }
  return run.report();
}
