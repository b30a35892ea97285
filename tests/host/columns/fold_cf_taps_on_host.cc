// The CUDA channels-first fold with a thread's taps unrolled
// (lib/columns/fold_cf_taps.cuh) compiled as host code, one thread walking
// the whole grid-stride loop, against a float64 scatter of the columns over
// random geometries (strides, dilations, lhs dilation, padding), chunks of
// positions, row strides wider than the chunk, accumulation into x, 1-D to
// 3-D, each dtype family, float columns into bfloat16 x included.
// Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_cuda.h"
#include "columns/fold_cf_taps.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

int taken = 0;  // cases the plan took

template <int ND, int T, typename TC, typename TX>
void run_kernel(const std::vector<TC>& cols, std::vector<TX>& x, const Geometry& g, int64_t C, int64_t n0,
                const ColumnsLayout& lay, const FoldTapsPlan& p, bool accumulate) {
  if constexpr (fold_taps_slots(T, ND) <= kFoldTapsSlots) {
    gridDim.x = blockDim.x = 1;
    blockIdx.x = threadIdx.x = 0;
    fold_cf_taps_kernel<ND, T, TC, TX>(cols.data(), x.data(), g, C, n0, lay, p, accumulate);
  }
}

template <int ND, typename TC, typename TX>
bool taps_case() {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(ND, ND == 3 ? 6 : ND == 2 ? 14 : 40, pad_hi);
  if (draw(0, 3) == 0) g.lhs_dilation[draw(0, ND - 1)] = 2;
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  const int64_t C = draw(1, 5), K = g.kernel_size;
  const int64_t N = draw(1, 3), n0 = draw(0, static_cast<int>(N) - 1), nc = draw(1, static_cast<int>(N - n0));
  ColumnsLayout lay;
  draw_chunk(g, &lay);
  lay.row_stride = lay.lc + draw(0, 1) * draw(1, 5);  // rows of a wider buffer, at times
  lay.image_stride = C * K * lay.row_stride + draw(0, 3);
  FoldTapsPlan p;
  if (!plan_fold_taps(g, C, 1, nc, 1, &p, false, lay)) return true;
  ++taken;
  const bool accumulate = draw(0, 1) == 1;
  std::vector<TC> cols(nc * lay.image_stride);
  std::vector<TX> x(N * C * g.in_size);
  for (auto& v : cols) v = small_value<TC>();
  for (auto& v : x) v = small_value<TX>();
  const std::vector<double> want = fold_cf_reference(g, lay, cols, x, C, n0, nc, accumulate);
  switch (p.taps) {
    case 2: run_kernel<ND, 2, TC, TX>(cols, x, g, C, n0, lay, p, accumulate); break;
    case 3: run_kernel<ND, 3, TC, TX>(cols, x, g, C, n0, lay, p, accumulate); break;
    default: run_kernel<ND, 4, TC, TX>(cols, x, g, C, n0, lay, p, accumulate); break;
  }
  const int64_t bad = first_mismatch(x, want);
  if (bad >= 0) {
    std::printf("FAIL: nd %d, taps %lld, %zu-byte elements, C %lld, element %lld of %zu: got %g, want %g\n", ND,
                static_cast<long long>(p.taps), sizeof(TX), static_cast<long long>(C), static_cast<long long>(bad),
                x.size(), to_double(x[bad]), stored<TX>(want[bad]));
    return false;
  }
  return true;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 60; ++i) {
    run(taps_case<1, float, float>());
    run(taps_case<1, __nv_bfloat16, __nv_bfloat16>());
    run(taps_case<1, float, __nv_bfloat16>());
    run(taps_case<2, float, float>());
    run(taps_case<2, __nv_bfloat16, __nv_bfloat16>());
    run(taps_case<2, __half, __half>());
    run(taps_case<2, double, double>());
    run(taps_case<2, float, __nv_bfloat16>());
    run(taps_case<3, float, float>());
    run(taps_case<3, __half, __half>());
  }
  // Most cases must reach the kernel (the plan refuses more than 4 taps a
  // dimension or 27 a thread).
  std::printf("the plan took %d cases of 600\n", taken);
  run(taken > 300);
  return run.report();
}
