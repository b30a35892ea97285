// The channels-first tile fills of plain geometries (no lhs dilation,
// lib/cuda/tile.cuh) compiled as host code: fill_tile_by_narrow_lines for 2-D
// and 3-D lines narrower than a warp, fill_tile_1d for 1-D. Every thread of a
// block runs the fill, and the tile must equal the element-wise fill's
// (fill_channels_first, which the GPU tests check through the unfold) over
// random geometries planned by plan_tile (channels per block, bands, chunks
// of positions), each element size. Tiles start filled with a marker, so an
// element neither fill writes shows too.
// Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_cuda.h"
#include "host_reference.h"
#include "cuda/tile.cuh"

using namespace im2col;
using namespace im2col::cuda;

namespace {

int narrow_cases = 0;  // 2-D and 3-D cases whose tile lines were narrower than a warp
int cases_1d = 0;

template <typename U>
bool one_case() {
  const int nd = draw(1, 3);
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(nd, nd == 1 ? 300 : nd == 2 ? 40 : 12, pad_hi);
  if (nd > 1) g.in[nd - 1] = draw(1, 28);  // lines mostly narrower than a warp
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  const int64_t C = draw(1, 40), nc = draw(1, 3);
  ColumnsLayout lay;
  lay.l0 = draw(0, 1) == 0 ? 0 : draw(0, static_cast<int>(g.out_size) - 1);
  lay.lc = draw(1, static_cast<int>(g.out_size - lay.l0));
  TilePlan t;
  if (!plan_tile(g, lay, C, false, sizeof(U), &t, 0, 0, nc) || (nd > 1 && t.width.d >= 32)) return true;
  ++(nd == 1 ? cases_1d : narrow_cases);
  std::vector<U> x(nc * C * g.in_size);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<U>(i % 1000 + 1);
  const U marker = static_cast<U>(0x5a5a);  // no input value, nor padding's 0
  std::vector<U> want(static_cast<size_t>(t.channels) * t.plane), got(want.size());
  blockDim.x = kThreads;
  for (int64_t block = 0; block < tile_blocks(t, nc); ++block) {
    blockIdx.x = static_cast<unsigned>(block);
    const TileBlock b = tile_block(t, C, lay);
    const U* x_block = x.data() + (b.n * C + b.c0) * g.in_size;
    std::fill(want.begin(), want.end(), marker);
    std::fill(got.begin(), got.end(), marker);
    for (unsigned th = 0; th < kThreads; ++th) {
      threadIdx.x = th;
      if (nd == 1) fill_channels_first<1>(want.data(), x_block, g, t, b);
      else if (nd == 2) fill_channels_first<2>(want.data(), x_block, g, t, b);
      else fill_channels_first<3>(want.data(), x_block, g, t, b);
    }
    for (unsigned th = 0; th < kThreads; ++th) {
      threadIdx.x = th;
      if (nd == 1) fill_tile_1d(got.data(), x_block, b.channels, b.row0, g, t);
      else if (nd == 2) fill_tile_by_narrow_lines<2>(got.data(), x_block, b.channels, b.row0, g, t);
      else fill_tile_by_narrow_lines<3>(got.data(), x_block, b.channels, b.row0, g, t);
    }
    const size_t filled = static_cast<size_t>(b.channels) * t.plane;
    for (size_t i = 0; i < filled; ++i) {
      if (got[i] != want[i] || got[i] == marker) {
        std::printf("FAIL: nd %d, %zu-byte elements, C %lld, width %u, block %lld: element %zu of %zu: got %llu, "
                    "want %llu\n", nd, sizeof(U), static_cast<long long>(C), t.width.d, static_cast<long long>(block),
                    i, filled, static_cast<unsigned long long>(got[i]), static_cast<unsigned long long>(want[i]));
        return false;
      }
    }
  }
  return true;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 400; ++i) {
    run(one_case<uint16_t>());
    run(one_case<uint32_t>());
    run(one_case<uint64_t>());
  }
  // A fifth of the cases at least must reach each fill (the others have no
  // output or a tile the plan refuses).
  std::printf("of 1200 cases, %d had 2-D / 3-D lines narrower than a warp, %d were 1-D\n", narrow_cases, cases_1d);
  run(narrow_cases > 240);
  run(cases_1d > 240);
  return run.report();
}
