// The channels-first tile fills of plain geometries (no lhs dilation,
// lib/cuda/tile.cuh) compiled as host code: fill_tile_by_narrow_lines for 2-D
// and 3-D lines narrower than a warp, fill_tile_1d for 1-D, fill_tile_whole
// (after zero_tile) where the tile holds its channels' whole input. Every thread of a
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

int whole_cases = 0;  // 2-D and 3-D cases whose tiles held the whole input (fill_tile_whole)

template <typename U>
bool same_tile(const std::vector<U>& got, const std::vector<U>& want, size_t filled, U marker, const char* fill,
               const TilePlan& t, int64_t block) {
  for (size_t i = 0; i < filled; ++i) {
    if (got[i] != want[i] || got[i] == marker) {
      std::printf("FAIL: %s fill, %zu-byte elements, width %u, block %lld: element %zu of %zu: got %llu, want %llu\n",
                  fill, sizeof(U), t.width.d, static_cast<long long>(block), i, filled,
                  static_cast<unsigned long long>(got[i]), static_cast<unsigned long long>(want[i]));
      return false;
    }
  }
  return true;
}

// small_maps: 2-D and 3-D maps of all their positions, padding >= 0 (the
// whole-input tiles of 7 x 7 maps).
template <typename U>
bool one_case(bool small_maps) {
  const int nd = small_maps ? draw(2, 3) : draw(1, 3);
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(nd, nd == 1 ? 300 : nd == 2 ? 40 : 12, pad_hi);
  if (nd > 1) g.in[nd - 1] = draw(1, 28);  // lines mostly narrower than a warp
  if (small_maps) {
    for (int d = 0; d < nd; ++d) {
      g.pad_lo[d] = std::max<int64_t>(g.pad_lo[d], 0);
      g.in[d] = std::min<int64_t>(g.in[d], 10);
    }
  }
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  const int64_t C = draw(1, 40), nc = draw(1, 3);
  ColumnsLayout lay;
  lay.l0 = small_maps || draw(0, 1) == 0 ? 0 : draw(0, static_cast<int>(g.out_size) - 1);
  lay.lc = small_maps ? g.out_size : draw(1, static_cast<int>(g.out_size - lay.l0));
  TilePlan t;
  if (!plan_tile(g, lay, C, false, sizeof(U), &t, 0, 0, nc)) return true;
  const bool narrow = nd > 1 && t.width.d < 32;
  if (nd > 1 && !narrow && !t.whole) return true;
  if (nd == 1) ++cases_1d;
  if (narrow) ++narrow_cases;
  if (t.whole) ++whole_cases;
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
    const size_t filled = static_cast<size_t>(b.channels) * t.plane;
    if (nd == 1 || narrow) {
      for (unsigned th = 0; th < kThreads; ++th) {
        threadIdx.x = th;
        if (nd == 1) fill_tile_1d(got.data(), x_block, b.channels, b.row0, g, t);
        else if (nd == 2) fill_tile_by_narrow_lines<2>(got.data(), x_block, b.channels, b.row0, g, t);
        else fill_tile_by_narrow_lines<3>(got.data(), x_block, b.channels, b.row0, g, t);
      }
      if (!same_tile(got, want, filled, marker, nd == 1 ? "1-D" : "narrow lines", t, block)) return false;
    }
    if (t.whole) {
      // The kernel's two phases, each run by every thread: zeros, then input.
      std::vector<U> whole(round16(want.size() * sizeof(U)) / sizeof(U), marker);
      for (unsigned th = 0; th < kThreads; ++th) {
        threadIdx.x = th;
        zero_tile(whole.data(), filled * sizeof(U));
      }
      for (unsigned th = 0; th < kThreads; ++th) {
        threadIdx.x = th;
        if (nd == 2) fill_tile_whole<2>(whole.data(), x_block, b.channels, g, t);
        else fill_tile_whole<3>(whole.data(), x_block, b.channels, g, t);
      }
      if (!same_tile(whole, want, filled, marker, "whole input", t, block)) return false;
    }
  }
  return true;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 400; ++i) {
    const bool small_maps = i % 2 == 1;
    run(one_case<uint16_t>(small_maps));
    run(one_case<uint32_t>(small_maps));
    run(one_case<uint64_t>(small_maps));
  }
  // A fifth of the cases at least must reach the narrow-line and 1-D fills,
  // a tenth the whole-input fill (the others have no output or a tile the
  // plan refuses).
  std::printf("of 1200 cases, %d had 2-D / 3-D lines narrower than a warp, %d were 1-D, %d had whole-input tiles\n",
              narrow_cases, cases_1d, whole_cases);
  run(narrow_cases > 240);
  run(cases_1d > 120);
  run(whole_cases > 100);
  return run.report();
}
