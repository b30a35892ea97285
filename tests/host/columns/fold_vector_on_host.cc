// The CUDA channels-first fold on vectors (lib/cuda/fold_vector.cuh) compiled
// as host code and run thread by thread, against a float64 scatter of the
// columns, over random geometries: every vector width the launcher uses
// (16- and 8-byte), both strides along the last dimension (1 and 2), each
// dtype family, accumulation into x and chunks of whole lines. The kernel uses no shared memory and no barrier, so running
// its threads one after another computes what the GPU computes. Run by
// tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "host_cuda.h"
#include "columns/fold_vector.cuh"
#include "host_grid.h"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

// A geometry the kernel takes with vectors of V and stride S along the last
// dimension: lines of output positions a multiple of V, of the input a
// multiple of S * V.
Geometry random_geometry(int nd, int V, int S) {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(nd, 7, pad_hi);
  const int last = nd - 1;
  g.stride[last] = S;
  g.in[last] = S * V * draw(1, 3);
  const int64_t window = (g.kernel[last] - 1) * g.rhs_dilation[last] + 1;
  // (in + pad_lo + pad_hi - window) / S + 1 output positions: V * m of them.
  pad_hi[last] = S * (V * draw(1, 3) - 1) + draw(0, S - 1) - (g.in[last] + g.pad_lo[last] - window);
  finish_geometry(g, pad_hi);
  return g;
}

// One random case; returns whether the kernel matched the reference.
template <int ND, typename T, int V, int S = 1>
bool one_case() {
  const Geometry g = random_geometry(ND, V, S);
  if (g.out_size <= 0) return true;
  const int64_t C = draw(1, 4), N = draw(1, 3), n0 = draw(0, static_cast<int>(N) - 1);
  const int64_t nc = draw(1, static_cast<int>(N - n0)), K = g.kernel_size;
  // All lines, or a chunk of whole lines.
  const int64_t lines = g.out_size / g.out[ND - 1];
  const int64_t first = draw(0, static_cast<int>(lines) - 1), count = draw(1, static_cast<int>(lines - first));
  const bool whole = draw(0, 1) == 0;
  ColumnsLayout lay;
  lay.l0 = whole ? 0 : first * g.out[ND - 1];
  lay.lc = whole ? g.out_size : count * g.out[ND - 1];
  lay.row_stride = lay.lc;
  lay.image_stride = C * K * lay.lc;
  const bool accumulate = draw(0, 1) == 1;
  if (!fold_cf_vector_applies(g, lay, V)) {
    std::printf("FAIL: the geometry drawn for V=%d, S=%d does not apply\n", V, S);
    return false;
  }
  // Small integers: every sum is exact in each type, so the check is equality.
  std::vector<T> cols(nc * C * K * lay.lc), x(N * C * g.in_size);
  for (auto& v : cols) v = from_float<T>(static_cast<float>(draw(-4, 4)));
  for (auto& v : x) v = from_float<T>(static_cast<float>(draw(-4, 4)));
  const std::vector<double> want = fold_cf_reference(g, lay, cols, x, C, n0, nc, accumulate);
  const int64_t x_lines = nc * C * (g.in_size / g.in[ND - 1]);
  run_grid(blocks_for(x_lines * (g.in[ND - 1] / (S * V))), [&] {
    fold_cf_vector_kernel<ND, T, T, V, S>(cols.data(), x.data(), g, C, n0, lay, x_lines, accumulate);
  });
  for (size_t i = 0; i < x.size(); ++i) {
    if (to_double(x[i]) != want[i]) {
      std::printf("FAIL: nd %d, %zu-byte elements, V %d, S %d, element %zu: got %g, want %g\n", ND, sizeof(T), V,
                  S, i, to_double(x[i]), want[i]);
      return false;
    }
  }
  return true;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 150; ++i) {
    run(one_case<1, __nv_bfloat16, 8>());
    run(one_case<2, __nv_bfloat16, 8>());
    run(one_case<3, __nv_bfloat16, 8>());
    run(one_case<2, __nv_bfloat16, 4>());
    run(one_case<3, __half, 4>());
    run(one_case<1, float, 4>());
    run(one_case<2, float, 4>());
    run(one_case<3, float, 2>());
    run(one_case<2, double, 2>());
    run(one_case<1, __nv_bfloat16, 8, 2>());
    run(one_case<2, __nv_bfloat16, 4, 2>());
    run(one_case<3, __half, 8, 2>());
    run(one_case<2, float, 4, 2>());
    run(one_case<3, float, 2, 2>());
    run(one_case<2, double, 2, 2>());
  }
  return run.report();
}
