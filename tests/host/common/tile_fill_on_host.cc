// The channels-first tile fills of plain geometries (no lhs dilation,
// lib/cuda/tile.cuh) compiled as host code: fill_tile_by_narrow_lines for 2-D
// and 3-D lines narrower than a warp, fill_tile_1d for 1-D, fill_tile_whole
// (after zero_tile) where the tile holds its channels' whole input, and
// fill_tile_by_vectors for plans with a line vector. Every thread of a
// block runs the fill, and the tile must equal the element-wise fill's
// (fill_channels_first, which the GPU tests check through the unfold) over
// random geometries planned by plan_tile (channels per block, bands, chunks
// of positions), each element size. Tiles start filled with a marker, so an
// element neither fill writes shows too. fill_tile_1d_vectors (1-D plans
// with a vector) likewise, each line from its lead.
// Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <algorithm>
#include <numeric>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_cuda.h"
#include "common/tile.cuh"
#include "host_reference.h"

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

// Every block of plan t over nc images of C channels of counting values
// (never 0, the padding, nor the marker) in x: fn(block, b, x_block, want,
// got), want and got (t.channels planes) refilled with the marker first.
template <typename U, typename Fn>
bool for_each_block(const Geometry& g, const TilePlan& t, int64_t C, int64_t nc, const ColumnsLayout& lay,
                    std::vector<U>& x, U marker, Fn&& fn) {
  x.resize(nc * C * g.in_size);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<U>(i % 1000 + 1);
  std::vector<U> want(static_cast<size_t>(t.channels) * t.plane), got(want.size());
  blockDim.x = kThreads;
  for (int64_t block = 0; block < tile_blocks(t, nc); ++block) {
    blockIdx.x = static_cast<unsigned>(block);
    const TileBlock b = tile_block(t, C, lay);
    std::fill(want.begin(), want.end(), marker);
    std::fill(got.begin(), got.end(), marker);
    if (!fn(block, b, x.data() + (b.n * C + b.c0) * g.in_size, want, got)) return false;
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
  std::vector<U> x;
  const U marker = static_cast<U>(0x5a5a);  // no input value, nor padding's 0
  return for_each_block(g, t, C, nc, lay, x, marker, [&](int64_t block, const TileBlock& b, const U* x_block,
                                                          std::vector<U>& want, std::vector<U>& got) {
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
    return true;
  });
}

// fill_tile_by_vectors (2-D and 3-D plans with a line vector of E elements,
// input lines a whole number of vectors): physical column w of a tile line
// must hold what the element-wise fill puts at column w - t.lead (channels-
// first; channels-last, the tile by definition), for every column from
// t.lead to the line's end (the columns the write phase reads and the
// rounding's); the columns before t.lead are never read.
int vector_cases = 0;

template <typename U>
bool vector_case(bool channels_last) {
  const int nd = draw(2, 3);
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(nd, nd == 2 ? 40 : 12, pad_hi);
  const int bytes = 4 << draw(sizeof(U) == 2 ? 0 : sizeof(U) == 4 ? 1 : 2, 2);  // vectors of 2 elements or more
  const int32_t E = bytes / static_cast<int>(sizeof(U));
  const int64_t C = channels_last ? draw(1, 7) : draw(1, 40), nc = draw(1, 3);
  // Input lines of whole vectors: in_last * C channels-last (C of 3, 5, 7: lines of 8, 16, 24, ... positions).
  const int64_t column = channels_last ? C : 1;
  g.in[nd - 1] = E / std::gcd<int64_t>(E, column) * draw(1, 12);
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  ColumnsLayout lay;
  lay.l0 = draw(0, 1) == 0 ? 0 : draw(0, static_cast<int>(g.out_size) - 1);
  lay.lc = draw(1, static_cast<int>(g.out_size - lay.l0));
  TilePlan t;
  if (!plan_tile(g, lay, C, channels_last, sizeof(U), &t, 0, 0, channels_last ? 0 : nc, E)) return true;
  if (t.vector != E || t.width.d % E != 0 || (t.lead + g.pad_lo[nd - 1] * column) % E != 0 || t.whole) {
    std::printf("FAIL: vector plan: vector %d (asked %d), width %u, lead %d, pad %lld, whole %d\n", t.vector, E,
                t.width.d, t.lead, static_cast<long long>(g.pad_lo[nd - 1]), t.whole);
    return false;
  }
  ++vector_cases;
  std::vector<U> x;
  const U marker = static_cast<U>(0x5a5a);
  // Channels-last plans have one channel block: x_block is the image.
  return for_each_block(g, t, C, nc, lay, x, marker, [&](int64_t block, const TileBlock& b, const U* x_block,
                                                          std::vector<U>& want, std::vector<U>& got) {
    for (unsigned th = 0; th < kThreads; ++th) {
      threadIdx.x = th;
      if (channels_last) {
        if (nd == 2) fill_tile_by_vectors<2>(got.data(), x_block, 1, b.row0, g, t, static_cast<int32_t>(C));
        else fill_tile_by_vectors<3>(got.data(), x_block, 1, b.row0, g, t, static_cast<int32_t>(C));
      } else if (nd == 2) {
        fill_channels_first<2>(want.data(), x_block, g, t, b);
        fill_tile_by_vectors<2>(got.data(), x_block, b.channels, b.row0, g, t);
      } else {
        fill_channels_first<3>(want.data(), x_block, g, t, b);
        fill_tile_by_vectors<3>(got.data(), x_block, b.channels, b.row0, g, t);
      }
    }
    const int32_t width = static_cast<int32_t>(t.width.d);
    if (channels_last) {
      // The channels-last tile by definition: column w' = w - lead of line l
      // holds channel w' % C of position w' / C of the line, 0 in padding.
      for (int32_t line = 0; line < static_cast<int32_t>(t.lines.d); ++line)
        for (int32_t w = 0; w < width - t.lead; ++w) {
          const int32_t base = nd == 2 ? line_source<2>(g, t, line, b.row0) : line_source<3>(g, t, line, b.row0);
          const int32_t q = base < 0 ? -1 : nd == 2 ? column_source<2>(g, w / C, b.row0)
                                                     : column_source<3>(g, w / C, b.row0);
          want[static_cast<size_t>(line) * width + w] = q < 0 ? U(0) : x[(b.n * g.in_size + base + q) * C + w % C];
        }
    }
    for (int64_t line = 0; line < static_cast<int64_t>(channels_last ? 1 : b.channels) * t.lines.d; ++line) {
      for (int32_t w = t.lead; w < width; ++w) {
        const U have = got[line * width + w], should = want[line * width + w - t.lead];
        if (have != should || have == marker) {
          std::printf("FAIL: vector fill, %zu-byte elements, vector %d, width %d, lead %d, block %lld, line %lld, "
                      "column %d: got %llu, want %llu\n",
                      sizeof(U), E, width, t.lead, static_cast<long long>(block), static_cast<long long>(line), w,
                      static_cast<unsigned long long>(have), static_cast<unsigned long long>(should));
          return false;
        }
      }
    }
    return true;
  });
}

// fill_tile_1d_vectors (1-D channels-first plans with a 16-byte vector):
// from its lead (line_lead: where the line's first element falls in its
// 16-byte vector of x) on, channel ci's slot must hold the input line from
// coordinate row0 * stride - pad_lo on, zeros outside it, over the tile's
// whole extent (the write phase reads no more). x starts at a random element of its buffer, so that
// the leads vary, and lines have any length.
int vector_1d_cases = 0;

template <typename U>
bool vector_1d_case() {
  constexpr int32_t V = 16 / sizeof(U);
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(1, 400, pad_hi);
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  const int64_t C = draw(1, 40), nc = draw(1, 3);
  ColumnsLayout lay;
  lay.l0 = draw(0, 1) == 0 ? 0 : draw(0, static_cast<int>(g.out_size) - 1);
  lay.lc = draw(1, static_cast<int>(g.out_size - lay.l0));
  TilePlan t;
  if (!plan_tile(g, lay, C, false, sizeof(U), &t, 0, 0, nc, V)) return true;
  if (t.vector != (g.any_lhs_dilation ? 0 : V) || (t.vector > 0 && t.plane % V != 0)) {
    std::printf("FAIL: 1-D vector plan: vector %d (asked %d, lhs dilation %d), plane %d\n", t.vector, V,
                static_cast<int>(g.any_lhs_dilation), t.plane);
    return false;
  }
  if (t.vector == 0) return true;
  ++vector_1d_cases;
  std::vector<U> buffer(static_cast<size_t>(nc * C * g.in_size + V));
  U* x = buffer.data() + draw(0, V - 1);
  for (int64_t i = 0; i < nc * C * g.in_size; ++i) x[i] = static_cast<U>(i % 1000 + 1);
  const U marker = static_cast<U>(0x5a5a);
  std::vector<U> want(static_cast<size_t>(t.channels) * t.plane), got(want.size());
  blockDim.x = kThreads;
  for (int64_t block = 0; block < tile_blocks(t, nc); ++block) {
    blockIdx.x = static_cast<unsigned>(block);
    const TileBlock b = tile_block(t, C, lay);
    const U* x_block = x + (b.n * C + b.c0) * g.in_size;
    std::fill(got.begin(), got.end(), marker);
    const uint32_t origin = line_origin(x_block, b.row0, g);
    for (unsigned th = 0; th < kThreads; ++th) {
      threadIdx.x = th;
      fill_tile_1d_vectors(got.data(), x_block, b.channels, b.row0, g, t, origin);
    }
    const int64_t first = b.row0 * g.stride[0] - g.pad_lo[0];
    for (int32_t ci = 0; ci < b.channels; ++ci) {
      for (int32_t j = 0; j < t.extent[0]; ++j) {
        const int64_t c = first + j;
        want[static_cast<size_t>(ci) * t.plane + j] = c >= 0 && c < g.in[0] ? x_block[ci * g.in[0] + c] : U(0);
      }
      const int32_t lead = line_lead<U>(origin, ci, g);
      const uintptr_t address = reinterpret_cast<uintptr_t>(x_block + ci * g.in[0] + first);
      if (lead < 0 || lead >= V || (address - lead * sizeof(U)) % 16 != 0) {
        std::printf("FAIL: 1-D vector fill, %zu-byte elements, block %lld, channel %d: lead %d\n", sizeof(U),
                    static_cast<long long>(block), ci, lead);
        return false;
      }
      for (int32_t j = 0; j < t.extent[0]; ++j) {
        const U have = got[static_cast<size_t>(ci) * t.plane + lead + j], should = want[static_cast<size_t>(ci) * t.plane + j];
        if (have != should || have == marker) {
          std::printf("FAIL: 1-D vector fill, %zu-byte elements, extent %d, plane %d, block %lld, channel %d, lead %d, "
                      "element %d: got %llu, want %llu\n",
                      sizeof(U), t.extent[0], t.plane, static_cast<long long>(block), ci, lead, j,
                      static_cast<unsigned long long>(have), static_cast<unsigned long long>(should));
          return false;
        }
      }
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
  for (int i = 0; i < 300; ++i) {
    run(vector_case<uint16_t>(i % 2 == 1));
    run(vector_case<uint32_t>(i % 2 == 1));
    run(vector_case<uint64_t>(i % 2 == 1));
  }
  std::printf("of 900 vector-fill cases (half channels-last), %d had a plan\n", vector_cases);
  run(vector_cases > 300);  // the others have no output or a tile the plan refuses
  for (int i = 0; i < 300; ++i) {
    run(vector_1d_case<uint16_t>());
    run(vector_1d_case<uint32_t>());
    run(vector_1d_case<uint64_t>());
  }
  std::printf("of 900 1-D vector-fill cases, %d had a plan with a vector\n", vector_1d_cases);
  run(vector_1d_cases > 300);
  return run.report();
}
