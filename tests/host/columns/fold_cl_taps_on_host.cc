// The CUDA channels-last fold with all of a thread's taps unrolled
// (lib/cuda/fold_cl_taps.cuh) compiled as host code, one thread walking the
// whole grid-stride loop, against a float64 scatter of the columns over
// random geometries (lhs dilation too), groups, chunks of positions,
// accumulation into x, whole vectors of channels, single elements and runs
// of 3 scalars, each dtype family, float columns into bfloat16 x included.
// Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_cuda.h"
#include "columns/fold_cl_taps.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

int taken = 0;  // cases the plan took

// Channels-last columns: (n, l, group, tap, channel) at
// n * lc * C * K + (l - l0) * C * K + (group * K + tap) * Cg + channel.
template <typename TC, typename TX>
std::vector<double> fold_cl_reference(const Geometry& g, const ColumnsLayout& lay, const std::vector<TC>& cols,
                                      const std::vector<TX>& x, int64_t C, int64_t n0, int64_t nc,
                                      bool accumulate) {
  const int64_t K = g.kernel_size, Cg = C / lay.groups;
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = to_double(x[i]);
  for (int64_t n = 0; n < nc; ++n) {
    double* image = want.data() + (n0 + n) * g.in_size * C;
    if (!accumulate)
      for (int64_t i = 0; i < g.in_size * C; ++i) image[i] = 0;
    for (int64_t l = lay.l0; l < lay.l0 + lay.lc; ++l)
      for (int64_t gi = 0; gi < lay.groups; ++gi)
        for (int64_t k = 0; k < K; ++k) {
          const int64_t s = source(g, l, k);
          if (s < 0) continue;
          for (int64_t j = 0; j < Cg; ++j)
            image[s * C + gi * Cg + j] +=
                to_double(cols[((n * lay.lc + l - lay.l0) * lay.groups + gi) * K * Cg + k * Cg + j]);
        }
  }
  return want;
}

template <int ND, int T, typename TC, typename TX, int V, int P>
void run_kernel(const std::vector<TC>& cols, std::vector<TX>& x, const Geometry& g, int64_t C, int64_t n0,
                const ColumnsLayout& lay, const FoldTapsPlan& p, bool accumulate) {
  if constexpr (fold_taps_slots(T, ND) <= kFoldTapsSlots) {
    gridDim.x = blockDim.x = 1;
    blockIdx.x = threadIdx.x = 0;
    fold_cl_taps_kernel<ND, T, TC, TX, V, P>(cols.data(), x.data(), g, C, n0, lay, p, accumulate);
  }
}

// V > 1: whole vectors of V channels a thread (channels per group a
// multiple of V); V == 1: P elements a thread (channels per group a
// multiple of P).
template <int ND, typename TC, typename TX, int V, int P = 1>
bool taps_case() {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(ND, ND == 3 ? 6 : ND == 2 ? 14 : 40, pad_hi);
  if (draw(0, 3) == 0) g.lhs_dilation[draw(0, ND - 1)] = 2;
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  const int64_t groups = draw(1, 3), Cg = V * P * draw(1, V * P == 1 ? 5 : 2), C = groups * Cg;
  const int64_t N = draw(1, 3), n0 = draw(0, static_cast<int>(N) - 1), nc = draw(1, static_cast<int>(N - n0));
  ColumnsLayout lay;
  lay.groups = groups;
  draw_chunk(g, &lay);
  FoldTapsPlan p;
  if (!plan_fold_taps(g, C, groups, nc, V * P, &p)) return true;
  ++taken;
  const bool accumulate = draw(0, 1) == 1;
  std::vector<TC> cols(nc * lay.lc * C * g.kernel_size);
  std::vector<TX> x(N * g.in_size * C);
  for (auto& v : cols) v = small_value<TC>();
  for (auto& v : x) v = small_value<TX>();
  const std::vector<double> want = fold_cl_reference(g, lay, cols, x, C, n0, nc, accumulate);
  switch (p.taps) {
    case 2: run_kernel<ND, 2, TC, TX, V, P>(cols, x, g, C, n0, lay, p, accumulate); break;
    case 3: run_kernel<ND, 3, TC, TX, V, P>(cols, x, g, C, n0, lay, p, accumulate); break;
    default: run_kernel<ND, 4, TC, TX, V, P>(cols, x, g, C, n0, lay, p, accumulate); break;
  }
  const int64_t bad = first_mismatch(x, want);
  if (bad >= 0) {
    std::printf("FAIL: nd %d, taps %lld, V %d, P %d, %zu-byte elements, C %lld, groups %lld, element %lld of %zu: "
                "got %g, want %g\n", ND, static_cast<long long>(p.taps), V, P, sizeof(TX), static_cast<long long>(C),
                static_cast<long long>(groups), static_cast<long long>(bad), x.size(), to_double(x[bad]),
                stored<TX>(want[bad]));
    return false;
  }
  return true;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 40; ++i) {
    run(taps_case<1, float, float, 4>());
    run(taps_case<1, __nv_bfloat16, __nv_bfloat16, 1>());
    run(taps_case<1, float, __nv_bfloat16, 4>());
    run(taps_case<2, float, float, 4>());
    run(taps_case<2, float, float, 1>());
    run(taps_case<2, __nv_bfloat16, __nv_bfloat16, 8>());
    run(taps_case<2, __half, __half, 1>());
    run(taps_case<2, double, double, 2>());
    run(taps_case<3, float, float, 4>());
    run(taps_case<3, __half, __half, 8>());
    run(taps_case<2, __nv_bfloat16, __nv_bfloat16, 1, 3>());
    run(taps_case<2, float, float, 1, 3>());
    run(taps_case<1, float, __nv_bfloat16, 1, 3>());
    run(taps_case<3, __half, __half, 1, 3>());
  }
  // Most cases must reach the kernel (the plan refuses more than 16 taps).
  std::printf("the plan took %d cases of 560\n", taken);
  run(taken > 280);
  return run.report();
}
