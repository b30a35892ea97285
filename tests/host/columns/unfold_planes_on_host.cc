// The channels-first unfold of small maps (lib/cuda/unfold_planes.cuh)
// compiled as host code: over random 1-D to 3-D geometries of small maps
// (lhs dilation in some), 2-, 4- and 8-byte elements and random channels and
// images, planned by plan_unfold_planes as the unfold plans it, each block
// stages its runs of input (by 16-byte loads where aligned, else element by
// element), skewed or flat, and writes its columns, each phase by every
// thread of the block.
// The columns must be the reference unfold's (the input at source(g, l, k),
// 0 for padding), every entry written once. Columns with gaps (a chunk of
// the positions, padded rows, images apart) must be refused. On ResNet's
// 14 x 14 and 7 x 7 maps the skew must cut the bank conflicts of the reads.
// Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "host_cuda.h"
#include "columns/unfold_planes.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

int planned = 0, element_loads = 0, skewed = 0, several_periods = 0, several_runs = 0;

template <int ND, typename U>
bool one_case() {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(ND, ND == 1 ? 40 : ND == 2 ? 9 : 4, pad_hi);
  if (draw(0, 4) == 0) g.lhs_dilation[ND - 1] = draw(2, 3);
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  const int64_t C = draw(0, 1) ? 8 * draw(1, 5) : draw(1, 40), nc = draw(1, 3), K = g.kernel_size, L = g.out_size;
  ColumnsLayout lay;
  lay.lc = L;
  lay.row_stride = L;
  lay.image_stride = C * K * L;
  // Shifted by 0 or one element: element loads where the input is not 16-byte aligned.
  const size_t shift = draw(0, 1);
  std::vector<Pack<U, 16 / sizeof(U)>> x_store((nc * C * g.in_size + shift) * sizeof(U) / 16 + 2);
  U* x = reinterpret_cast<U*>(x_store.data()) + shift;
  for (int64_t i = 0; i < nc * C * g.in_size; ++i) x[i] = static_cast<U>(i % 4000 + 1);
  const U marker = static_cast<U>(0xfdfd);
  std::vector<Pack<U, 16 / sizeof(U)>> cols_store(nc * lay.image_stride * sizeof(U) / 16 + 1);
  U* cols = reinterpret_cast<U*>(cols_store.data());
  std::fill(cols, cols + nc * lay.image_stride, marker);
  // Few multiprocessors: blocks of several runs.
  const int multiprocessors = draw(0, 1) ? 132 : 1;
  PlanesPlan p;
  const bool skew = draw(0, 3) != 0;
  if (!plan_unfold_planes(g, lay, C, nc, sizeof(U), x, cols, &p, skew)) return true;
  if (!plan_planes_grid(multiprocessors * (2048 / planes_block_threads(p)), sizeof(U), &p)) {
    std::printf("FAIL: no grid\n");
    return false;
  }
  ++planned;
  if (!p.vector_loads) ++element_loads;
  if (p.skew) ++skewed;
  if (p.runs > 1) ++several_runs;
  if (p.run_planes * K * L > 2 * std::lcm<int64_t>(K * L, 16 / sizeof(U))) ++several_periods;
  bool ok = p.blocks * static_cast<int64_t>(p.runs) >= p.run_count &&
            (p.blocks - 1) * static_cast<int64_t>(p.runs) < p.run_count &&
            p.smem == static_cast<size_t>(p.runs) * p.staged_run * sizeof(U) &&
            p.staged_run == (skew ? p.run_stride / planes_skew_every(sizeof(U)) *
                                        (planes_skew_every(sizeof(U)) + planes_skew_pad(sizeof(U)))
                                  : p.run_stride) &&
            p.run_stride % (skew ? planes_skew_every(sizeof(U)) : 16 / static_cast<int64_t>(sizeof(U))) == 0 && p.smem <= kPlanesSmem &&
            p.threads <= kPlanesMaxThreads &&
            p.runs * static_cast<int64_t>(p.run_loads.d) <= kPlanesLoads * planes_block_threads(p) && p.threads * (16 / static_cast<int64_t>(sizeof(U))) ==
                                                  p.run_planes * K * L;
  if (!ok) {
    std::printf("FAIL: plan: blocks %u, runs %d of %lld, smem %zu, threads %d, run planes %d\n", p.blocks, p.runs,
                static_cast<long long>(p.run_count), p.smem, p.threads, p.run_planes);
    return false;
  }
  std::vector<Pack<U, 16 / sizeof(U)>> smem_store(p.smem / 16 + 1);
  U* staged = reinterpret_cast<U*>(smem_store.data());
  blockDim.x = planes_block_threads(p);
  for (unsigned block = 0; block < p.blocks; ++block) {
    blockIdx.x = block;
    const int64_t run0 = static_cast<int64_t>(block) * p.runs;
    const int32_t runs = static_cast<int32_t>(std::min<int64_t>(p.runs, p.run_count - run0));
    std::fill(staged, staged + p.smem / sizeof(U), marker);
    std::vector<PlaneOffsets<U>> offsets(blockDim.x);  // each thread's, across the barrier
    for (unsigned th = 0; th < blockDim.x; ++th) {
      threadIdx.x = th;
      const U* x_block = x + run0 * p.run_elements;
      offsets[th] = plane_offsets<ND, U>(g, p);
      if (p.vector_loads) stage_planes<true>(staged, load_planes<true>(x_block, p, runs), p, runs);
      else stage_planes<false>(staged, load_planes<false>(x_block, p, runs), p, runs);
    }
    for (unsigned th = 0; th < blockDim.x; ++th) {
      threadIdx.x = th;
      write_planes(staged, cols + run0 * p.run_planes * K * L, offsets[th], p, runs);
    }
  }
  for (int64_t plane = 0; plane < nc * C; ++plane)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t l = 0; l < L; ++l) {
        const int64_t s = source(g, l, k);
        const U want = s < 0 ? U(0) : x[plane * g.in_size + s], got = cols[(plane * K + k) * L + l];
        if (got != want) {
          std::printf("FAIL: nd %d, C %lld, nc %lld, K %lld, L %lld: plane %lld tap %lld position %lld: got %llu, "
                      "want %llu (%zu-byte elements, %s loads)\n", ND, static_cast<long long>(C),
                      static_cast<long long>(nc), static_cast<long long>(K), static_cast<long long>(L),
                      static_cast<long long>(plane), static_cast<long long>(k), static_cast<long long>(l),
                      static_cast<unsigned long long>(got), static_cast<unsigned long long>(want), sizeof(U),
                      p.vector_loads ? "vector" : "element");
          return false;
        }
      }
  // Columns with gaps are the tiled unfold's.
  ColumnsLayout gaps[3] = {lay, lay, lay};
  gaps[0].lc = L - 1;
  gaps[1].row_stride = L + 1;
  gaps[2].image_stride = C * K * L + 8;
  for (int i = 0; i < 3; ++i) {
    PlanesPlan q;
    if ((i < 2 || nc > 1) && L > 1 && plan_unfold_planes(g, gaps[i], C, nc, sizeof(U), x, cols, &q)) {
      std::printf("FAIL: planned columns with gaps (case %d)\n", i);
      return false;
    }
  }
  return true;
}

// The mean over a block's warps and a vector's entries of the wavefronts a
// warp's shared-memory read of one entry takes: the most distinct 4-byte
// words one of the 32 banks serves. ResNet's 3 x 3 convs of 14 x 14 and
// 7 x 7 maps (pad 1), 2- and 4-byte types.
template <typename U>
double read_wavefronts(int64_t map, bool skew) {
  constexpr int V = 16 / sizeof(U);
  Geometry g;
  g.nd = 2;
  for (int d = 0; d < 2; ++d) {
    g.in[d] = map;
    g.kernel[d] = 3;
    g.pad_lo[d] = 1;
  }
  const int64_t pad_hi[kMaxSpatial] = {1, 1, 1};
  finish_geometry(g, pad_hi);
  const int64_t C = 256, L = g.out_size;
  ColumnsLayout lay;
  lay.lc = L;
  lay.row_stride = L;
  lay.image_stride = C * g.kernel_size * L;
  std::vector<Pack<U, V>> store(C * g.in_size / V + 1);
  PlanesPlan p;
  if (!plan_unfold_planes(g, lay, C, 1, sizeof(U), store.data(), store.data(), &p, skew)) return -1;
  int64_t wavefronts = 0, reads = 0;
  for (int32_t w = 0; w * 32 < p.threads; ++w) {
    std::vector<PlaneOffsets<U>> off;
    for (int32_t t = w * 32; t < std::min(p.threads, w * 32 + 32); ++t) {
      threadIdx.x = t;
      off.push_back(plane_offsets<2, U>(g, p));
    }
    for (int v = 0; v < V; ++v) {
      std::vector<std::vector<int64_t>> banks(32);
      for (const auto& o : off) {
        const int64_t word = o.v[v] * static_cast<int64_t>(sizeof(U)) / 4;
        auto& b = banks[word % 32];
        if (std::find(b.begin(), b.end(), word) == b.end()) b.push_back(word);
      }
      size_t most = 0;
      for (const auto& b : banks) most = std::max(most, b.size());
      wavefronts += static_cast<int64_t>(most);
      ++reads;
    }
  }
  return static_cast<double>(wavefronts) / static_cast<double>(reads);
}

// The skew must cut a read's wavefronts by 30% on 14 x 14 maps (a warp's
// vectors lie in one tap, 25 vectors long, or two) and by 10% on 7 x 7
// ones (every warp spans several taps, whose offsets collide at random).
bool skew_spreads_banks() {
  bool ok = true;
  for (const int64_t map : {14, 7}) {
    const double b2 = read_wavefronts<uint16_t>(map, true), u2 = read_wavefronts<uint16_t>(map, false);
    const double b4 = read_wavefronts<uint32_t>(map, true), u4 = read_wavefronts<uint32_t>(map, false);
    std::printf("%lld x %lld maps: wavefronts a read, skewed / not: 2-byte %.2f / %.2f, 4-byte %.2f / %.2f\n",
                static_cast<long long>(map), static_cast<long long>(map), b2, u2, b4, u4);
    const double most = map == 14 ? 0.7 : 0.9;
    ok = ok && b2 > 0 && b4 > 0 && b2 < most * u2 && b4 < most * u4;
  }
  return ok;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 3000; ++i) {
    run(one_case<1, uint16_t>());
    run(one_case<2, uint16_t>());
    run(one_case<3, uint16_t>());
    run(one_case<2, uint32_t>());
    run(one_case<1, uint32_t>());
    run(one_case<3, uint64_t>());
  }
  std::printf("%d cases planned: %d with element loads, %d with runs of several periods, %d with several runs "
              "a block, %d skewed\n", planned, element_loads, several_periods, several_runs, skewed);
  run(planned > 1500);
  run(element_loads > 50 && several_periods > 50 && several_runs > 50 && skewed > 1000 && planned - skewed > 300);
  run(skew_spreads_banks());
  return run.report();
}
