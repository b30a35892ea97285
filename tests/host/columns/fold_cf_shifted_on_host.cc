// The CUDA channels-first fold of 2-byte columns on shifted words
// (lib/columns/fold_cf_shifted.cuh) compiled as host code and run thread by
// thread, against a float64 scatter of the columns, over random geometries
// of 3 taps a dimension at unit stride that keep every extent but the
// first: 1-, 2- and 3-D, dilations, paddings (negative ones too), planes of
// any length (runs cut at a plane's end), gaps between rows and between
// images, accumulation into x, x misaligned at times (scalar stores), the
// columns at every 2-byte alignment, bfloat16 and float16. The columns
// buffer ends at the last row's last entry, so a word read past it shows
// under a sanitizer. Run by tests/test_kernels_on_host.py; prints "N
// passed, M failed".
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "host_cuda.h"
#include "columns/fold_cf_shifted.cuh"
#include "host_grid.h"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

Geometry random_geometry(int nd) {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(nd, nd == 3 ? 7 : nd == 2 ? 13 : 60, pad_hi);
  for (int d = 0; d < nd; ++d) {
    g.kernel[d] = kFoldWindowTaps;
    g.stride[d] = 1;
    if (d > 0) {  // the extent kept: pad_lo + pad_hi == 2 * dilation
      g.pad_lo[d] = draw(-1, static_cast<int>(2 * g.rhs_dilation[d]) + 1);
      pad_hi[d] = 2 * g.rhs_dilation[d] - g.pad_lo[d];
    }
  }
  finish_geometry(g, pad_hi);
  return g;
}

int vector_stores = 0, edge_free = 0;  // cases that took the vector stores; that had threads off the edge path

template <int ND, typename T>
bool one_case() {
  const Geometry g = random_geometry(ND);
  if (g.out_size <= 0) return true;
  const int64_t C = draw(1, 5), N = draw(1, 4), n0 = draw(0, static_cast<int>(N) - 1);
  const int64_t nc = draw(1, static_cast<int>(N - n0)), K = g.kernel_size;
  ColumnsLayout lay;
  lay.lc = g.out_size;
  lay.row_stride = lay.lc + draw(0, 1) * draw(1, 3);
  lay.image_stride = C * K * lay.row_stride + draw(0, 1) * draw(1, 9);
  const bool accumulate = draw(0, 1) == 1;
  FoldShiftedPlan plan;
  if (!plan_fold_shifted(g, lay, C, nc, &plan)) {
    std::printf("FAIL: no plan for nd %d\n", ND);
    return false;
  }
  // The columns from an 8-byte boundary plus 0-3 entries, ending at the last
  // row's last entry.
  const int64_t lead = draw(0, 3);
  std::vector<uint64_t> storage((lead + plan.columns_end + 3) / 4);
  T* cols = reinterpret_cast<T*>(storage.data()) + lead;
  std::vector<T> values(plan.columns_end);
  for (auto& v : values) v = small_value<T>();
  std::copy(values.begin(), values.end(), cols);
  std::vector<Pack<T, kShiftedRun>> x_storage(N * C * g.in_size / kShiftedRun + 2);
  const bool misaligned = draw(0, 3) == 0;
  T* x = reinterpret_cast<T*>(x_storage.data()) + (misaligned ? 1 : 0);
  std::vector<T> x0(N * C * g.in_size);
  for (auto& v : x0) v = small_value<T>();
  std::copy(x0.begin(), x0.end(), x);
  std::vector<T> padded(nc * lay.image_stride, T(0));  // the reference's view: whole images
  std::copy(values.begin(), values.end(), padded.begin());
  const std::vector<double> want = fold_cf_reference(g, lay, padded, x0, C, n0, nc, accumulate);
  const bool vector_store = !misaligned && g.in_size % kShiftedRun == 0;  // the launcher's rule
  vector_stores += vector_store;
  const int64_t block = K * lay.row_stride;
  for (int64_t b = 0; b < nc * C; ++b) {
    const int64_t start = (b / C) * lay.image_stride + (b % C) * block;
    if (start >= plan.margin && start + block <= plan.columns_end - plan.margin) {
      ++edge_free;
      break;
    }
  }
  run_grid(blocks_for(plan.items), [&] {
    fold_cf_shifted_kernel<ND, T, T>(cols, x, g, C, n0, lay, plan, accumulate, vector_store);
  });
  for (size_t i = 0; i < x0.size(); ++i) {
    if (to_double(x[i]) != want[i]) {
      std::printf("FAIL: nd %d, %s, element %zu: got %g, want %g\n", ND,
                  sizeof(T) == 2 && std::is_same_v<T, __half> ? "float16" : "bfloat16", i, to_double(x[i]), want[i]);
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
  FoldShiftedPlan p;
  ColumnsLayout lay;
  lay.lc = lay.row_stride = g.out_size;
  lay.image_stride = g.kernel_size * lay.row_stride * 4;
  bool ok = plan_fold_shifted(g, lay, 4, 2, &p);
  Geometry h = g;
  h.kernel[1] = 5;
  finish_geometry(h, pad_hi);
  ok = ok && !plan_fold_shifted(h, lay, 4, 2, &p);
  h = g;
  h.stride[1] = 2;
  finish_geometry(h, pad_hi);
  ok = ok && !plan_fold_shifted(h, lay, 4, 2, &p);
  h = g;
  int64_t narrow[kMaxSpatial] = {1, 0, 0};  // the last extent shrinks by one
  finish_geometry(h, narrow);
  ColumnsLayout hl = lay;
  hl.lc = hl.row_stride = h.out_size;
  ok = ok && !plan_fold_shifted(h, hl, 4, 2, &p);
  int64_t first_only[kMaxSpatial] = {0, 1, 0};  // only the first extent shrinks: applies
  finish_geometry(h, first_only);
  hl.lc = hl.row_stride = h.out_size;
  ok = ok && plan_fold_shifted(h, hl, 4, 2, &p);
  h = g;
  h.lhs_dilation[0] = 2;
  finish_geometry(h, pad_hi);
  ok = ok && !plan_fold_shifted(h, lay, 4, 2, &p);
  ok = ok && !plan_fold_shifted(g, lay, int64_t{1} << 20, int64_t{1} << 12, &p);  // past 2^31 threads
  ColumnsLayout wide = lay;
  wide.row_stride = int64_t{1} << 27;  // 9 rows past 2^30 entries
  ok = ok && !plan_fold_shifted(g, wide, 4, 2, &p);
  ColumnsLayout chunk = lay;
  chunk.l0 = 1;
  chunk.lc = g.out_size - 1;
  ok = ok && !plan_fold_shifted(g, chunk, 4, 2, &p);
  if (!ok) std::printf("FAIL: the plan's refusals\n");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 150;
  Tally run;
  run(refusals());
  for (int i = 0; i < rounds; ++i) {
    run(one_case<1, __nv_bfloat16>());
    run(one_case<1, __half>());
    run(one_case<2, __nv_bfloat16>());
    run(one_case<2, __half>());
    run(one_case<3, __nv_bfloat16>());
    run(one_case<3, __half>());
  }
  if (vector_stores == 0 || edge_free == 0) {
    std::printf("FAIL: no case took the vector stores (%d) or had threads off the edge path (%d)\n", vector_stores,
                edge_free);
    run(false);
  }
  return run.report();
}
