// The CUDA channels-first fold staged in shared memory
// (lib/cuda/fold_staged.cuh) compiled as host code: each block's load phase
// runs for all of its threads, then its gather phase (the kernel's barrier
// between them), against a float64 scatter of the columns over random
// geometries (lhs dilation too), chunks of positions, gaps between images,
// accumulation into x, both gathers (runs of S * V elements a thread, one
// element) with each stride variant of the launcher (1, 2, read at run
// time), each dtype family, float columns into bfloat16 x included. Run by
// tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <vector>

#include "host_cuda.h"
#include "columns/fold_staged.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

int planes_ran = 0;  // cases the plan took
int stores_ran[3] = {0, 0, 0};  // of them, by RunStores

// The stride along the last dimension is S, or drawn from 3-4 (S = 0: the
// launcher's run-time variant); the last extent up to last_max; lhs
// dilation along some dimension at times (not the last one unless
// lhs_dilated_lines: the gather on runs does not take it).
Geometry random_geometry(int nd, int in_max, int last_max, int S, bool lhs_dilated_lines) {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(nd, in_max, pad_hi);
  g.in[nd - 1] = draw(1, last_max);
  g.stride[nd - 1] = S > 0 ? S : draw(3, 4);
  const int dilatable = lhs_dilated_lines ? nd : nd - 1;
  if (dilatable > 0 && draw(0, 3) == 0) g.lhs_dilation[draw(0, dilatable - 1)] = 2;
  finish_geometry(g, pad_hi);
  return g;
}

// Channels-first: (n, c, k, l) at n * image_stride + (c * K + k) * lc + l - l0.
// V > 1: the gather on runs of S * V elements a thread; V == 1 one element.
template <int ND, int S, int V, typename TC, typename TX>
bool planes_case() {
  const Geometry g = random_geometry(ND, ND == 3 ? 5 : 12, ND == 1 ? 700 : 40, S, V == 1);
  if (g.out_size <= 0) return true;
  const int64_t C = draw(1, 12), N = draw(1, 3), n0 = draw(0, static_cast<int>(N) - 1);
  const int64_t nc = draw(1, static_cast<int>(N - n0)), K = g.kernel_size;
  ColumnsLayout lay;
  draw_chunk(g, &lay);
  lay.row_stride = lay.lc;
  lay.image_stride = C * K * lay.lc + draw(0, 1) * draw(1, 9);  // a gap between images, at times
  const bool accumulate = draw(0, 1) == 1;
  std::vector<TC> cols(nc * lay.image_stride);
  // x one element past a 32-byte boundary at times: no vector stores then.
  std::vector<Pack<TX, 32 / sizeof(TX) < 1 ? 1 : 32 / sizeof(TX)>> x_storage(N * C * g.in_size * sizeof(TX) / 32 + 2);
  const bool misaligned = draw(0, 3) == 0;
  TX* x_data = reinterpret_cast<TX*>(x_storage.data()) + (misaligned ? 1 : 0);
  const int64_t run = V > 1 ? S * V : 1;
  FoldPlanesPlan p;
  if (!plan_fold_planes(g, lay, C, nc, sizeof(TC), run, &p, sizeof(TX),
                        reinterpret_cast<uintptr_t>(x_data) % (run * sizeof(TX)) == 0))
    return true;
  ++planes_ran;
  ++stores_ran[static_cast<int>(p.stores)];
  std::vector<TX> x(N * C * g.in_size);
  for (auto& v : cols) v = small_value<TC>();
  for (auto& v : x) v = small_value<TX>();
  const std::vector<double> want = fold_cf_reference(g, lay, cols, x, C, n0, nc, accumulate);
  std::copy(x.begin(), x.end(), x_data);
  std::vector<Pack<float, 8>> smem(p.smem / 32 + 1);  // 32-byte aligned, as the kernel's
  TC* tile = reinterpret_cast<TC*>(smem.data());
  TX* out_tile = reinterpret_cast<TX*>(reinterpret_cast<unsigned char*>(smem.data()) + p.out_offset);
  gridDim.x = static_cast<unsigned>(p.blocks);
  blockDim.x = kThreads;
  for (int64_t blk = 0; blk < p.blocks; ++blk) {
    blockIdx.x = static_cast<unsigned>(blk);
    const PlanesBlock b = planes_block(p, C);
    int32_t head = 0;
    for (unsigned t = 0; t < kThreads; ++t) {
      threadIdx.x = t;
      head = fold_planes_load(tile, cols.data(), lay, K, p, b);
    }
    for (unsigned t = 0; t < kThreads; ++t) {
      threadIdx.x = t;
      if (p.stores == RunStores::kVector) {
        fold_planes_gather<ND, S, V, RunStores::kVector>(tile + head, x_data, g, C, n0, lay, p, b, accumulate,
                                                         out_tile);
      } else if (p.stores == RunStores::kStaged) {
        fold_planes_gather<ND, S, V, RunStores::kStaged>(tile + head, x_data, g, C, n0, lay, p, b, accumulate,
                                                         out_tile);
      } else {
        fold_planes_gather<ND, S, V, RunStores::kScalar>(tile + head, x_data, g, C, n0, lay, p, b, accumulate,
                                                         out_tile);
      }
    }
    if (p.stores == RunStores::kStaged) {
      for (unsigned t = 0; t < kThreads; ++t) {
        threadIdx.x = t;
        fold_planes_store<ND>(out_tile, x_data, g, C, n0, p, b);
      }
    }
  }
  std::copy(x_data, x_data + x.size(), x.begin());
  const int64_t bad = first_mismatch(x, want);
  if (bad >= 0) {
    std::printf("FAIL: nd %d, S %d, V %d, %zu-byte elements, C %lld, element %lld of %zu: got %g, want %g\n", ND, S,
                V, sizeof(TX), static_cast<long long>(C), static_cast<long long>(bad), x.size(), to_double(x[bad]),
                stored<TX>(want[bad]));
    return false;
  }
  return true;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 40; ++i) {
    run(planes_case<1, 2, 1, float, float>());
    run(planes_case<1, 1, 1, __nv_bfloat16, __nv_bfloat16>());
    run(planes_case<1, 0, 1, float, __nv_bfloat16>());
    run(planes_case<2, 1, 1, float, float>());
    run(planes_case<2, 2, 1, __nv_bfloat16, __nv_bfloat16>());
    run(planes_case<2, 0, 1, __half, __half>());
    run(planes_case<3, 1, 1, double, double>());
    run(planes_case<3, 2, 1, float, float>());
    run(planes_case<1, 2, 4, float, float>());
    run(planes_case<1, 1, 4, __nv_bfloat16, __nv_bfloat16>());
    run(planes_case<1, 2, 4, float, __nv_bfloat16>());
    run(planes_case<2, 1, 4, float, float>());
    run(planes_case<2, 2, 4, __nv_bfloat16, __nv_bfloat16>());
    run(planes_case<2, 2, 4, __half, __half>());
    run(planes_case<3, 1, 4, double, double>());
    run(planes_case<3, 2, 4, float, float>());
  }
  // Most cases must reach the kernel (the plan refuses what is too big).
  std::printf("the plan took %d cases of 640 (stores: %d scalar, %d vector, %d staged)\n", planes_ran,
              stores_ran[0], stores_ran[1], stores_ran[2]);
  run(planes_ran > 320);
  run(stores_ran[1] > 20 && stores_ran[2] > 20);
  return run.report();
}
