// The CUDA channels-first fold with the window fixed at compile time
// (lib/columns/fold_cf_window.cuh) compiled as host code and run thread by
// thread, against a float64 scatter of the columns, over random geometries
// of 3 taps a dimension: 1-, 2- and 3-D, strides 1 and 2, dilations and
// paddings (negative ones too), gaps between rows and between images,
// accumulation into x, x misaligned at times (scalar stores), each dtype
// family (2-byte ones at stride 2 too), float columns into bfloat16 x; at
// stride 2 the cell's taps at compile time wherever every dilation is odd
// and every low padding of one parity (the launcher's choice for 4- and
// 8-byte elements, and 2-byte ones in 2-D and 3-D). The
// kernels have no shared memory and no barrier, so their threads run one
// after another. Run by tests/test_kernels_on_host.py; prints "N passed, M
// failed".
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "host_cuda.h"
#include "columns/fold_cf_window.cuh"
#include "host_grid.h"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

Geometry random_geometry(int nd, int S) {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(nd, nd == 3 ? 6 : nd == 2 ? 11 : 40, pad_hi);
  for (int d = 0; d < nd; ++d) {
    g.kernel[d] = kFoldWindowTaps;
    g.stride[d] = S;
  }
  finish_geometry(g, pad_hi);
  return g;
}

int vector_stores = 0;  // cases that took the vector stores (E > 1)
int parities[3] = {0, 0, 0};  // stride-2 cases by window_cell_parity: -1, 0, 1

// S = 1: fold_cf_window_kernel (E elements a thread), S = 2:
// fold_cf_window_s2_kernel (cells of 2^ND).
template <int ND, typename TC, typename TX, int S = 1>
bool one_case() {
  constexpr int E = S == 1 ? fold_window_elements<TC>() : 2;
  const Geometry g = random_geometry(ND, S);
  if (g.out_size <= 0) return true;
  const int64_t C = draw(1, 5), N = draw(1, 3), n0 = draw(0, static_cast<int>(N) - 1);
  const int64_t nc = draw(1, static_cast<int>(N - n0)), K = g.kernel_size;
  ColumnsLayout lay;
  lay.lc = g.out_size;
  lay.row_stride = lay.lc + draw(0, 1) * draw(1, 3);  // rows apart by more than the chunk, at times
  lay.image_stride = C * K * lay.row_stride + draw(0, 1) * draw(1, 9);
  const bool accumulate = draw(0, 1) == 1;
  FoldWindowPlan plan;
  if (!plan_fold_window(g, lay, C, nc, S == 1 ? E : 1, &plan)) {
    std::printf("FAIL: no plan for nd %d\n", ND);
    return false;
  }
  // Small integers: every sum is exact in each type, so the check is equality.
  std::vector<TC> cols(nc * lay.image_stride);
  for (auto& v : cols) v = small_value<TC>();
  std::vector<Pack<TX, 2>> storage(N * C * g.in_size / 2 + 2);
  const bool misaligned = draw(0, 3) == 0;
  TX* x = reinterpret_cast<TX*>(storage.data()) + (misaligned ? 1 : 0);
  std::vector<TX> x0(N * C * g.in_size);
  for (auto& v : x0) v = small_value<TX>();
  std::copy(x0.begin(), x0.end(), x);
  const std::vector<double> want = fold_cf_reference(g, lay, cols, x0, C, n0, nc, accumulate);
  const bool vector_store = !misaligned && g.in[ND - 1] % E == 0;  // the launcher's rule
  vector_stores += vector_store && E > 1;
  run_grid(blocks_for(plan.items), [&] {
    if constexpr (S == 1) {
      fold_cf_window_kernel<ND, kFoldWindowTaps, TC, TX, E>(cols.data(), x, g, C, n0, lay, plan, accumulate,
                                                            vector_store);
    } else {  // the cell's taps at compile time where the parities allow
      const int parity = window_cell_parity(g);
      parities[parity + 1] += 1;
      if (parity == 0) {
        fold_cf_window_s2_kernel<ND, kFoldWindowTaps, TC, TX, 0>(cols.data(), x, g, C, n0, lay, plan, accumulate,
                                                                 vector_store);
      } else if (parity == 1) {
        fold_cf_window_s2_kernel<ND, kFoldWindowTaps, TC, TX, 1>(cols.data(), x, g, C, n0, lay, plan, accumulate,
                                                                 vector_store);
      } else {
        fold_cf_window_s2_kernel<ND, kFoldWindowTaps, TC, TX>(cols.data(), x, g, C, n0, lay, plan, accumulate,
                                                              vector_store);
      }
    }
  });
  for (size_t i = 0; i < x0.size(); ++i) {
    if (to_double(x[i]) != want[i]) {
      std::printf("FAIL: nd %d, stride %d, %zu-byte columns, E %d, element %zu: got %g, want %g\n", ND, S,
                  sizeof(TC), E, i, to_double(x[i]), want[i]);
      return false;
    }
  }
  return true;
}

// Geometries the plan must refuse.
bool refusals() {
  int64_t pad_hi[kMaxSpatial] = {1, 1, 0};
  Geometry g;
  g.nd = 2;
  g.in[0] = g.in[1] = 8;
  g.kernel[0] = g.kernel[1] = 3;
  g.pad_lo[0] = g.pad_lo[1] = 1;
  finish_geometry(g, pad_hi);
  FoldWindowPlan p;
  ColumnsLayout lay;
  lay.lc = lay.row_stride = g.out_size;
  bool ok = plan_fold_window(g, lay, 4, 2, 1, &p);
  Geometry h = g;
  h.kernel[1] = 5;
  finish_geometry(h, pad_hi);
  ok = ok && !plan_fold_window(h, lay, 4, 2, 1, &p);
  h = g;
  h.stride[0] = 3;
  h.stride[1] = 3;
  finish_geometry(h, pad_hi);
  ok = ok && !plan_fold_window(h, lay, 4, 2, 1, &p);
  h = g;
  h.stride[1] = 2;  // along one dimension
  finish_geometry(h, pad_hi);
  ok = ok && !plan_fold_window(h, lay, 4, 2, 1, &p);
  h = g;
  h.lhs_dilation[0] = 2;
  finish_geometry(h, pad_hi);
  ok = ok && !plan_fold_window(h, lay, 4, 2, 1, &p);
  ok = ok && !plan_fold_window(g, lay, int64_t{1} << 20, int64_t{1} << 12, 1, &p);  // past 2^31 threads
  ColumnsLayout wide = lay;
  wide.row_stride = int64_t{1} << 28;  // 9 rows past 2^31 entries
  ok = ok && !plan_fold_window(g, wide, 4, 2, 1, &p);
  h = g;
  h.pad_lo[0] = 8 - (int64_t{1} << 31);  // q + pad - j * dilation below -2^31 (no output)
  finish_geometry(h, pad_hi);
  ColumnsLayout none;
  none.lc = none.row_stride = h.out_size;
  ok = ok && !plan_fold_window(h, none, 4, 2, 1, &p);
  ColumnsLayout chunk = lay;
  chunk.l0 = 1;  // a chunk of positions
  chunk.lc = g.out_size - 1;
  ok = ok && !plan_fold_window(g, chunk, 4, 2, 1, &p);
  if (!ok) std::printf("FAIL: the plan's refusals\n");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 120;
  Tally run;
  run(refusals());
  for (int i = 0; i < rounds; ++i) {
    run(one_case<1, float, float>());
    run(one_case<1, __nv_bfloat16, __nv_bfloat16>());
    run(one_case<1, __half, __half>());
    run(one_case<2, float, float>());
    run(one_case<2, __nv_bfloat16, __nv_bfloat16>());
    run(one_case<2, __half, __half>());
    run(one_case<2, double, double>());
    run(one_case<2, float, __nv_bfloat16>());
    run(one_case<3, float, float>());
    run(one_case<3, __nv_bfloat16, __nv_bfloat16>());
    run(one_case<3, __half, __half>());
    run(one_case<1, float, float, 2>());
    run(one_case<1, __nv_bfloat16, __nv_bfloat16, 2>());
    run(one_case<2, float, float, 2>());
    run(one_case<2, __nv_bfloat16, __nv_bfloat16, 2>());
    run(one_case<2, double, double, 2>());
    run(one_case<2, float, __nv_bfloat16, 2>());
    run(one_case<3, float, float, 2>());
    run(one_case<3, __half, __half, 2>());
  }
  if (vector_stores == 0 || parities[0] == 0 || parities[1] == 0 || parities[2] == 0) {
    std::printf("FAIL: no case took the vector stores (%d) or a stride-2 parity (%d, %d, %d)\n", vector_stores,
                parities[0], parities[1], parities[2]);
    run(false);
  }
  return run.report();
}
