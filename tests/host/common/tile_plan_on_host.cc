// The tiled unfold's plan (plan_tile in lib/cuda/tile.cuh) and its blocks'
// decode (tile_block), compiled as host code, over random geometries, both
// layouts, element sizes and image counts: the plan ends (its channel
// splitting once never did for one channel a block), fits its shared-memory
// limit, its channels-first blocks whose warps split the channels give each
// warp as many, grids of one channel a block under kTileBandGridBlocks
// blocks have bands halved as far as a block's width of positions allows,
// channels-last grids under kTileGridBlocks have bands of one row,
// and its blocks cover every (image, channel, output position) of the chunk
// exactly once. Run by tests/test_kernels_on_host.py; prints
// "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_cuda.h"
#include "common/tile.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

Geometry random_geometry(int nd) {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(nd, nd == 1 ? 3000 : nd == 2 ? 60 : 12, pad_hi);
  finish_geometry(g, pad_hi);
  return g;
}

bool one_case() {
  const int nd = draw(1, 3);
  const Geometry g = random_geometry(nd);
  if (g.out_size <= 0) return true;
  const bool channels_last = draw(0, 1) == 1;
  const int64_t C = draw(1, 40), nc = draw(0, 4);
  const size_t elem = size_t{2} << draw(0, 2);
  // The whole chunk, or a run of positions from the middle.
  ColumnsLayout lay;
  lay.l0 = draw(0, 1) == 0 ? 0 : draw(0, static_cast<int>(g.out_size) - 1);
  lay.lc = draw(1, static_cast<int>(g.out_size - lay.l0));
  TilePlan t;
  if (!plan_tile(g, lay, C, channels_last, elem, &t, 0, 0, nc)) return true;
  if (t.smem > kTileSmemMax || t.channels < 1 || t.channels > C || (channels_last && t.channels != C)) {
    std::printf("FAIL: nd %d, C %lld: smem %zu, channels %d\n", nd, static_cast<long long>(C), t.smem, t.channels);
    return false;
  }
  // Where the block's warps split the channels, as many a warp.
  const bool split = !channels_last && nc > 0 && static_cast<int64_t>(t.band) * t.rest < kThreads;
  if (split && t.channels > kThreads / 32 && t.channels % (kThreads / 32) != 0) {
    std::printf("FAIL: nd %d, C %lld: %d channels over %d warps\n", nd, static_cast<long long>(C), t.channels,
                kThreads / 32);
    return false;
  }
  // A grid under kTileBandGridBlocks at one channel a block: bands as short as they go.
  const int64_t blocks = tile_blocks(t, nc);
  if (!channels_last && !split && nc > 0 && t.channels == 1 && blocks < kTileBandGridBlocks && t.band > 1 &&
      (t.band + 1) / 2 * t.rest >= kThreads) {
    std::printf("FAIL: nd %d: %lld blocks of bands of %d rows of %d positions\n", nd, static_cast<long long>(blocks),
                t.band, t.rest);
    return false;
  }
  // Channels-last, a grid under kTileGridBlocks: bands of one row.
  if (channels_last && nc > 0 && blocks < kTileGridBlocks && t.band > 1) {
    std::printf("FAIL: nd %d, channels-last: %lld blocks of bands of %d rows\n", nd, static_cast<long long>(blocks),
                t.band);
    return false;
  }
  const int64_t images = nc > 0 ? nc : 1;
  std::vector<int> covered(images * C * lay.lc, 0);
  blockDim.x = kThreads;
  for (int64_t block = 0; block < tile_blocks(t, images); ++block) {
    blockIdx.x = static_cast<unsigned>(block);
    const TileBlock b = tile_block(t, C, lay);
    const int32_t channels = channels_last ? static_cast<int32_t>(C) : b.channels;
    for (int32_t c = 0; c < channels; ++c)
      for (int32_t p = b.p_begin; p < b.p_end; ++p) ++covered[(b.n * C + b.c0 + c) * lay.lc + p];
  }
  for (size_t i = 0; i < covered.size(); ++i) {
    if (covered[i] != 1) {
      std::printf("FAIL: nd %d, C %lld, nc %lld, l0 %lld, lc %lld: element %zu covered %d times\n", nd,
                  static_cast<long long>(C), static_cast<long long>(nc), static_cast<long long>(lay.l0),
                  static_cast<long long>(lay.lc), i, covered[i]);
      return false;
    }
  }
  return true;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 3000; ++i) run(one_case());
  return run.report();
}
