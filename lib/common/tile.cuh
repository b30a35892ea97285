// Shared-memory tiles of the input under a band of output windows, used by
// the tiled unfold kernels (columns.cu) and the depthwise convolution
// (direct_conv.cu): the plan, the index math, and the fill.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/device_util.cuh"
#include "common/geometry.h"
#include "common/switches.h"

namespace im2col::cuda {

// A block stages in shared memory the input its windows read: for a band of
// output rows along the first spatial dimension, the padded (and, with lhs
// dilation, dilated) input rows under those windows, padding and holes
// stored as zeros. Every column entry is then one shared-memory read at
// (position offset + tap offset), with no bounds checks, and consecutive
// threads write consecutive column entries (coalesced stores, shared-memory
// reads free of bank conflicts at unit stride).

struct TilePlan {
  int32_t band = 0;        // output rows of spatial dimension 0 per block
  int32_t bands = 0;       // bands covering the chunk's positions
  int32_t first_row = 0;   // output row (dimension 0) where band 0 starts
  int32_t rest = 0;        // output positions per row: out_size / out[0]
  int32_t extent[kMaxSpatial] = {1, 1, 1};  // tile extents (dilated, padded coords)
  int32_t plane = 0;       // prod(extent): tile elements per channel
  int32_t channels = 0;    // channels per block (channels-first); C (last)
  int32_t channel_blocks = 1;
  int32_t channels_total = 0;  // C
  int32_t table = 0;       // int32 entries before the tile
  size_t smem = 0;         // bytes: table, then tile
  // Divisors of the per-element index math.
  FastDiv out[kMaxSpatial];     // g.out
  FastDiv extent_div[kMaxSpatial];
  FastDiv width;                // elements per tile line: extent[ND-1] (times C channels-last)
  FastDiv lines;                // tile lines per channel
  FastDiv channels_div;         // C (channels-last)
  FastDiv bands_div, channel_blocks_div;  // the block index's parts (tile_block)
  // Channels-first unfold: 1 where a block's tile holds its channels' whole
  // input and is filled from it flat (plan_whole_fill).
  int32_t whole = 0;
  int32_t pairs = 0;  // 1: 2-byte columns written a pair of positions at a time (unfold_write.cuh)
  // Tiles filled a vector of `vector` elements at a time (plan_tile's
  // line_vector, fill_tile_vectors; 0: not): the tile's lines start `lead`
  // elements before its first column, so that input element 0 of a line
  // falls on a vector boundary, and are a whole number of vectors long; the
  // kernels add lead to their tap offsets.
  int32_t vector = 0, lead = 0;
  FastDiv line_vectors;  // vectors a tile line
  FastDiv in_div[kMaxSpatial];  // g.in
  FastDiv in_size_div;          // g.in_size
};

constexpr size_t kTileSmemPreferred = 24 * 1024;
constexpr size_t kTileSmemMax = 48 * 1024;  // no opt-in attribute needed
constexpr int64_t kTileWork = 2048;         // (position, channel) pairs per block

__host__ __device__ inline size_t round16(size_t bytes) { return (bytes + 15) / 16 * 16; }

__host__ __device__ inline size_t table_bytes(int64_t entries) {
  return round16(static_cast<size_t>(entries) * sizeof(int32_t));
}

// Bytes of the table and the tile: where a kernel's own shared memory
// (plan_tile's block_extra and channel_extra) begins.
__host__ __device__ inline size_t tile_end(const TilePlan& t, size_t elem_bytes) {
  return table_bytes(t.table) + round16(static_cast<size_t>(t.channels) * t.plane * elem_bytes);
}

// Tile extents along dimensions 1.. (dilated, padded coordinates), the
// positions per output row and the chunk's first row; false where windows
// lie further apart than their extent (the tile would stage unread input).
inline bool tile_extents(const Geometry& g, const ColumnsLayout& lay, TilePlan* t) {
  for (int d = 0; d < g.nd; ++d) {
    const int64_t window = dilated_extent(g.kernel[d], g.rhs_dilation[d]);
    if (g.stride[d] > window) return false;
    t->extent[d] = static_cast<int32_t>((g.out[d] - 1) * g.stride[d] + window);
  }
  t->rest = static_cast<int32_t>(g.out_size / g.out[0]);
  t->first_row = static_cast<int32_t>(lay.l0 / t->rest);
  return true;
}

// Output rows of the chunk (tile_extents first).
inline int64_t tile_rows_total(const TilePlan& t, const ColumnsLayout& lay) {
  return (lay.l0 + lay.lc - 1) / t.rest - t.first_row + 1;
}

// Input rows (dimension 0) under a band of `band` output rows.
inline int64_t band_extent(const Geometry& g, int64_t band) {
  return (band - 1) * g.stride[0] + dilated_extent(g.kernel[0], g.rhs_dilation[0]);
}

// Tile elements per channel for a band of `band` output rows (tile_extents first).
// 1-D tiles filled a vector at a time (fill_tile_1d_vectors) give each
// channel a slot of whole vectors with room for its line's lead.
inline int64_t tile_plane(const Geometry& g, const TilePlan& t, int64_t band) {
  int64_t plane = band_extent(g, band);
  for (int d = 1; d < g.nd; ++d) plane *= t.extent[d];
  if (g.nd == 1 && t.vector > 0) plane = (plane + 2 * t.vector - 2) / t.vector * t.vector;
  return plane;
}

// Completes a plan (tile_extents first) for bands of `band` rows, `channels`
// channels per block out of C, a table of `table` entries and `smem` bytes.
inline void size_tile(const Geometry& g, const ColumnsLayout& lay, int64_t C, bool channels_last,
                      int64_t band, int64_t channels, int64_t table, size_t smem, TilePlan* t) {
  t->band = static_cast<int32_t>(band);
  t->bands = static_cast<int32_t>((tile_rows_total(*t, lay) + band - 1) / band);
  t->extent[0] = static_cast<int32_t>(band_extent(g, band));
  t->plane = static_cast<int32_t>(tile_plane(g, *t, band));
  t->channels = static_cast<int32_t>(channels);
  t->channel_blocks = static_cast<int32_t>(channels_last ? 1 : (C + channels - 1) / channels);
  t->table = static_cast<int32_t>(table);
  t->smem = smem;
  for (int d = 0; d < g.nd; ++d) {
    t->out[d] = FastDiv(g.out[d]);
    t->extent_div[d] = FastDiv(t->extent[d]);
  }
  t->width = FastDiv(t->extent[g.nd - 1] * (channels_last ? C : 1));
  t->lines = FastDiv(g.nd == 1 ? 1 : t->plane / t->extent[g.nd - 1]);
  if (g.nd == 1 && t->vector > 0) t->line_vectors = FastDiv(t->plane / t->vector);
  t->channels_total = static_cast<int32_t>(C);
  t->channels_div = FastDiv(C);
  t->bands_div = FastDiv(t->bands);
  t->channel_blocks_div = FastDiv(t->channel_blocks);
}

// JAX_IM2COL_NO_WHOLE_FILL=1: whole-input tiles filled line by line, as
// other tiles are (same-run comparison).
inline bool whole_fill_on() {
  static const bool on = switch_on(Switch::kWholeFill);
  return on;
}

// Sets t->whole where every block's tile holds the whole input of its
// channels: a single band from output row 0 and, along every dimension, the
// input inside the tile's extent (pad_lo >= 0, pad_lo + in <= extent), no
// lhs dilation; 2-D and 3-D (fill_tile_1d fills 1-D tiles flat already);
// and where over a quarter of the tile is padding, which the line fills
// spend instructions on (7 x 7 maps in 9 x 9 tiles: 40%, 9.8 -> 9.2 us;
// 14 x 14 in 16 x 16, 23%: the line fill was as fast or faster).
inline void plan_whole_fill(const Geometry& g, TilePlan* t) {
  t->whole = 0;
  if (g.nd < 2 || g.any_lhs_dilation || t->bands != 1 || t->first_row != 0 || t->vector > 0 || !whole_fill_on())
    return;
  if (4 * g.in_size >= 3 * static_cast<int64_t>(t->plane)) return;
  for (int d = 0; d < g.nd; ++d)
    if (g.pad_lo[d] < 0 || g.pad_lo[d] + g.in[d] > t->extent[d]) return;
  for (int d = 0; d < g.nd; ++d) t->in_div[d] = FastDiv(g.in[d]);
  t->in_size_div = FastDiv(g.in_size);
  t->whole = 1;
}

// Plans a tiled unfold; false when the tile does not pay or does not fit.
// Channels-first, a block covers `channels` channels of a band; its table
// holds the K tap offsets. Channels-last, a block covers all C channels of a
// band; its table holds, per element of a column row (C * K), the tap offset
// times C plus the channel, then the offset of every position of the band.
// A kernel that needs shared memory of its own after the tile (tile_end())
// asks for block_extra bytes per block and channel_extra per channel of the
// block (channels-first). Given the chunk's images nc (the unfold does;
// the depthwise kernels pass none), a channels-first plan takes fewer
// channels a block where the grid would be under kTileGridBlocks blocks
// (a channels-last one, shorter bands: below);
// where bands have under a block's width of positions, so that the warps
// split the channels, it takes as many channels a warp and aims at
// kSplitTileGridBlocks blocks (ncu had 416 blocks of 41 channels of 7 x 7
// leave the SMs a third occupied; 2048 of 8 paid each warp's setup for one
// channel: 1024 blocks of 16 took 9.2 us, 2048 of 8 10.5, 512 of 32 9.5;
// docs/optimization-log.md, step 68).
// Where one channel a block leaves the grid under kTileBandGridBlocks
// blocks, bands are halved until it is not (the RGB stem's 672 blocks of 18
// rows, under one wave of 792: bfloat16 48-49 us; 1248 blocks of 9 rows 41-43;
// 2208 of 5, whose halo and write slots cost more, 49-50; float32 76 us in
// all three; docs/optimization-log.md, step 72).
constexpr int64_t kTileGridBlocks = 2048;
constexpr int64_t kSplitTileGridBlocks = 1024;
constexpr int64_t kTileBandGridBlocks = 1024;

// A plan given line_vector (elements; 2-D and 3-D, no lhs dilation, input
// lines a whole number of vectors long) has its tile filled a vector at a
// time: each tile line starts lead = -pad_lo * (C channels-last, else 1)
// (mod line_vector) elements early and is a whole number of vectors long.
// In 1-D (channels-first, 16-byte vectors) each line has a lead of its own
// (fill_tile_1d_vectors).
inline bool plan_tile(const Geometry& g, const ColumnsLayout& lay, int64_t C,
                      bool channels_last, size_t elem_bytes, TilePlan* t,
                      size_t block_extra = 0, size_t channel_extra = 0, int64_t nc = 0,
                      int32_t line_vector = 0) {
  if (!tile_extents(g, lay, t)) return false;
  if (line_vector > 1 && g.nd > 1 && !g.any_lhs_dilation) {
    const int last = g.nd - 1;
    const int64_t column = channels_last ? C : 1;  // elements a tile column
    t->vector = line_vector;
    t->lead = static_cast<int32_t>(((-g.pad_lo[last] * column) % line_vector + line_vector) % line_vector);
    int64_t extent = t->extent[last] + (t->lead + column - 1) / column;
    while (extent * column % line_vector != 0) ++extent;
    t->extent[last] = static_cast<int32_t>(extent);
    t->line_vectors = FastDiv(extent * column / line_vector);
  } else if (line_vector > 1 && g.nd == 1 && !g.any_lhs_dilation && !channels_last &&
             line_vector * elem_bytes == 16) {
    t->vector = line_vector;  // fill_tile_1d_vectors: a lead a channel, no t->lead
  }
  const int64_t K = g.kernel_size, rows = tile_rows_total(*t, lay);
  int64_t band = std::max<int64_t>(1, std::min<int64_t>(rows, kTileWork / t->rest));
  int64_t channels = channels_last ? C : std::max<int64_t>(1, std::min<int64_t>(C, kTileWork / (band * t->rest)));
  auto entries = [&](int64_t band_) { return channels_last ? K * C + band_ * t->rest : K; };
  auto bytes = [&](int64_t band_, int64_t ch) {
    return table_bytes(entries(band_)) + round16(static_cast<size_t>(ch * tile_plane(g, *t, band_)) * elem_bytes) +
           block_extra + static_cast<size_t>(ch) * channel_extra;
  };
  while (bytes(band, channels) > kTileSmemPreferred && !channels_last && channels > 1)
    channels = (channels + 1) / 2;
  while (bytes(band, channels) > kTileSmemPreferred && band > 1) band = (band + 1) / 2;
  // Bands under a block's width of positions split the channels among the
  // block's warps (columns.cu): at least one channel a warp.
  auto grid = [&](int64_t ch) { return nc * ((C + ch - 1) / ch) * ((rows + band - 1) / band); };
  const int64_t warps = kThreads / 32;
  if (nc > 0 && !channels_last && band * t->rest < kThreads) {
    // Warps split the channels: as many a warp (11 channels over 8 warps
    // left the block waiting on the three that took two), as many as leave
    // the grid its blocks (a warp's setup is paid once for its channels).
    const int64_t per_warp = nc * C * ((rows + band - 1) / band) / (kSplitTileGridBlocks * warps);
    channels = C < warps ? C : std::min(std::max<int64_t>(per_warp, 1) * warps, C / warps * warps);
    while (bytes(band, channels) > kTileSmemPreferred && channels > 1)
      channels = channels > warps ? channels - warps : channels - 1;
  } else {
    while (nc > 0 && !channels_last && channels > 1 && grid(channels) < kTileGridBlocks)
      channels = (channels + 1) / 2;
    // Still under kTileBandGridBlocks at one channel a block (few channels):
    // fewer rows a band, while a band keeps a block's width of positions.
    while (nc > 0 && !channels_last && grid(channels) < kTileBandGridBlocks && band > 1 &&
           (band + 1) / 2 * t->rest >= kThreads)
      band = (band + 1) / 2;
  }
  // Channels-last, bands halved while the grid is under kTileGridBlocks
  // blocks (the bfloat16 RGB stem's 736 blocks of 5 rows, under one wave,
  // left its SMs 18% idle: 44.6 us; 3584 blocks of 1 row 40.6 us;
  // docs/optimization-log.md, step 89).
  while (nc > 0 && channels_last && band > 1 && grid(C) < kTileGridBlocks) band = (band + 1) / 2;
  if (bytes(band, channels) > kTileSmemMax) return false;
  size_tile(g, lay, C, channels_last, band, channels, entries(band), bytes(band, channels), t);
  if (nc > 0 && !channels_last) plan_whole_fill(g, t);
  return true;
}

inline int64_t tile_blocks(const TilePlan& t, int64_t nc) {
  return nc * t.channel_blocks * t.bands;
}

// Offset into the tile of kernel tap kk (flat), in the tile's extents.
template <int ND>
__device__ __forceinline__ int32_t tap_offset(const Geometry& g, const TilePlan& t, int32_t kk) {
  return tap_displacement<ND>(g, t.extent, kk);
}

// The input coordinate along dimension 0 (dilated, padded) of the first
// tile row of the band that starts at output row row0.
__device__ __forceinline__ int32_t band_first_coordinate(const Geometry& g, int32_t row0) {
  return row0 * static_cast<int32_t>(g.stride[0]) - static_cast<int32_t>(g.pad_lo[0]);
}

// Offset into the tile of output position l (flat) for the band starting at
// output row `row0`.
template <int ND>
__device__ __forceinline__ int32_t position_offset(const Geometry& g, const TilePlan& t,
                                                   int32_t l, int32_t row0) {
  int32_t o[kMaxSpatial];
#pragma unroll
  for (int d = ND - 1; d > 0; --d) {
    int32_t q;
    t.out[d].divmod(l, q, o[d]);
    l = q;
  }
  o[0] = l - row0;
  int32_t off = 0;
#pragma unroll
  for (int d = 0; d < ND; ++d)
    off = off * t.extent[d] + o[d] * static_cast<int32_t>(g.stride[d]);
  return off;
}

// Input coordinate along dimension d at dilated, padded coordinate p, or -1
// for padding and holes.
__device__ __forceinline__ int32_t input_coordinate(const Geometry& g, int d, int32_t p) {
  if (p < 0) return -1;
  if (g.any_lhs_dilation) {
    const int32_t ld = static_cast<int32_t>(g.lhs_dilation[d]);
    if (p % ld != 0) return -1;
    p /= ld;
  }
  return p < static_cast<int32_t>(g.in[d]) ? p : -1;
}

// The tile is made of lines along the last spatial dimension (consecutive
// input). line_source() is the input offset of a line's element 0 (all
// dimensions but the last; -1 when the line lies in padding or a hole);
// column_source() the last coordinate of its element w.
template <int ND>
__device__ __forceinline__ int32_t line_source(const Geometry& g, const TilePlan& t,
                                               int32_t line, int32_t row0) {
  int32_t flat = 0, scale = static_cast<int32_t>(g.in[ND - 1]);
#pragma unroll
  for (int d = ND - 2; d >= 0; --d) {
    int32_t p;
    if (d == 0) {
      p = line + band_first_coordinate(g, row0);
    } else {
      int32_t rest;
      t.extent_div[d].divmod(line, line, rest);
      p = rest - static_cast<int32_t>(g.pad_lo[d]);
    }
    const int32_t i = input_coordinate(g, d, p);
    if (i < 0) return -1;
    flat += i * scale;
    scale *= static_cast<int32_t>(g.in[d]);
  }
  return flat;
}

template <int ND>
__device__ __forceinline__ int32_t column_source(const Geometry& g, int32_t w, int32_t row0) {
  const int32_t shift = ND == 1 ? row0 * static_cast<int32_t>(g.stride[0]) : 0;
  return input_coordinate(g, ND - 1, w + shift - static_cast<int32_t>(g.pad_lo[ND - 1]));
}

// Fills tile[0, count) with the block's threads, element e from source(e)
// (nullptr: padding or a hole, stored as zero). Consecutive threads take
// consecutive elements, which along a tile line are consecutive input; each
// thread issues kFill loads before storing any, so that a block with a small
// tile (one wave of blocks, nothing else to hide the latency) waits for
// about count / (FILL * blockDim) load round trips instead of one per element.
// Kernels whose blocks do little after the fill (so that the fill's latency
// is most of their time) ask for more loads in flight.
constexpr int kFill = 4;
constexpr int kDepthwiseFill = 12;  // the depthwise kernels (direct_conv.cu, direct_filter.cu)

// fill_tile with element e stored at tile[target(e)].
template <int FILL = kFill, typename U, typename Source, typename Target>
__device__ __forceinline__ void fill_tile_to(U* tile, int32_t count, Source&& source, Target&& target) {
  const int32_t step = static_cast<int32_t>(blockDim.x);
  for (int32_t e0 = threadIdx.x; e0 < count; e0 += FILL * step) {
    U v[FILL];
#pragma unroll
    for (int u = 0; u < FILL; ++u) {
      const int32_t e = e0 + u * step;
      const U* src = e < count ? source(e) : nullptr;
      v[u] = src != nullptr ? __ldg(src) : U(0);
    }
#pragma unroll
    for (int u = 0; u < FILL; ++u)
      if (e0 + u * step < count) tile[target(e0 + u * step)] = v[u];
  }
}

template <int FILL = kFill, typename U, typename Source>
__device__ __forceinline__ void fill_tile(U* tile, int32_t count, Source&& source) {
  fill_tile_to<FILL>(tile, count, source, [](int32_t e) { return e; });
}

// The band, channel block and image of this block.
struct TileBlock {
  int64_t n;
  int32_t c0, channels, row0;
  int32_t p_begin, p_end;  // chunk positions [p_begin, p_end) of the band
};

// Sets b's first row and positions for band `band` of the chunk.
__device__ __forceinline__ void band_positions(const TilePlan& t, const ColumnsLayout& lay, int64_t band,
                                               TileBlock& b) {
  b.row0 = t.first_row + static_cast<int32_t>(band) * t.band;
  const int64_t begin = static_cast<int64_t>(b.row0) * t.rest;
  const int64_t end = begin + static_cast<int64_t>(t.band) * t.rest;
  b.p_begin = static_cast<int32_t>((begin > lay.l0 ? begin : lay.l0) - lay.l0);
  b.p_end = static_cast<int32_t>((end < lay.l0 + lay.lc ? end : lay.l0 + lay.lc) - lay.l0);
}

// 32-bit divisions (a grid's block index fits): with small blocks, 64-bit
// ones run by every thread are a visible part of a kernel's instructions.
__device__ __forceinline__ TileBlock tile_block(const TilePlan& t, int64_t C,
                                                const ColumnsLayout& lay) {
  int32_t b = static_cast<int32_t>(blockIdx.x), band, cb;
  t.bands_div.divmod(b, b, band);
  t.channel_blocks_div.divmod(b, b, cb);
  TileBlock tb;
  tb.n = b;
  tb.c0 = static_cast<int32_t>(cb) * t.channels;
  tb.channels = t.channels < C - tb.c0 ? t.channels : static_cast<int32_t>(C - tb.c0);
  band_positions(t, lay, band, tb);
  return tb;
}

// Fills the tile of block b with its channels [0, b.channels) of one image:
// channel c of x_chunk at c * channel_stride, spatial offset q at
// q * spatial_stride (channels-first: in_size and 1; channels-last: 1 and
// C), one plane of t.plane elements each.
template <int ND, int FILL = kFill, typename U>
__device__ __forceinline__ void fill_channels(U* tile, const U* x_chunk, int64_t channel_stride,
                                              int64_t spatial_stride, const Geometry& g, const TilePlan& t,
                                              const TileBlock& b) {
  fill_tile<FILL>(tile, b.channels * t.plane, [&](int32_t e) -> const U* {
    int32_t cl, w, ci, line;
    t.width.divmod(e, cl, w);
    t.lines.divmod(cl, ci, line);
    const int32_t base = line_source<ND>(g, t, line, b.row0);
    const int32_t q = base < 0 ? -1 : column_source<ND>(g, w, b.row0);
    return q >= 0 ? x_chunk + ci * channel_stride + static_cast<int64_t>(base + q) * spatial_stride : nullptr;
  });
}

// fill_channels for an image whose channels lie side by side (channels-last,
// spatial offset q at q * spatial_stride): consecutive threads read
// consecutive channels of one position (whole sectors per warp) and store
// them a plane apart. `channels` divides by t.channels; the slots of
// channels past b.channels get zeros.
template <int ND, int FILL = kFill, typename U>
__device__ __forceinline__ void fill_channels_interleaved(U* tile, const U* x_chunk, int64_t spatial_stride,
                                                          const FastDiv& channels, const Geometry& g,
                                                          const TilePlan& t, const TileBlock& b) {
  fill_tile_to<FILL>(
      tile, t.channels * t.plane,
      [&](int32_t e) -> const U* {
        int32_t p, ci, line, w;
        channels.divmod(e, p, ci);
        if (ci >= b.channels) return nullptr;
        t.width.divmod(p, line, w);
        const int32_t base = line_source<ND>(g, t, line, b.row0);
        const int32_t q = base < 0 ? -1 : column_source<ND>(g, w, b.row0);
        return q >= 0 ? x_chunk + ci + static_cast<int64_t>(base + q) * spatial_stride : nullptr;
      },
      [&](int32_t e) {
        int32_t p, ci;
        channels.divmod(e, p, ci);
        return ci * t.plane + p;
      });
}

// Where tile line l (of one channel) reads, for geometries without lhs
// dilation: the input offset of its element 0, or -1 where the line lies in
// the padding; its element e reads input column e - pad (2-D and 3-D: int32
// arithmetic set up once per thread; line_source() and column_source()
// handle holes too, at several times the instructions per element).
template <int ND>
struct PlainLines {
  static_assert(ND >= 2, "lines of 1-D tiles: fill_channels_first");
  int32_t first_row, pad, in_last, in_row, in_mid;
  FastDiv mid;  // 3-D: tile lines per depth row
  __device__ __forceinline__ PlainLines(const Geometry& g, const TilePlan& t, int32_t row0) {
    first_row = band_first_coordinate(g, row0);
    pad = static_cast<int32_t>(g.pad_lo[ND - 1]);
    in_last = static_cast<int32_t>(g.in[ND - 1]);
    in_row = static_cast<int32_t>(g.in[0]);
    in_mid = static_cast<int32_t>(g.in[ND == 3 ? 1 : 0]);
    mid = t.extent_div[ND == 3 ? 1 : 0];
  }
  __device__ __forceinline__ int32_t base(int32_t l, int32_t pad_mid) const {
    int32_t r = l, flat = 0;
    if (ND == 3) {
      int32_t m;
      mid.divmod(l, r, m);
      m -= pad_mid;
      if (static_cast<uint32_t>(m) >= static_cast<uint32_t>(in_mid)) return -1;
      flat = m * in_last;
    }
    r += first_row;
    if (static_cast<uint32_t>(r) >= static_cast<uint32_t>(in_row)) return -1;
    return r * (ND == 3 ? in_mid * in_last : in_last) + flat;
  }
  __device__ __forceinline__ int32_t column(int32_t e) const {
    const int32_t q = e - pad;
    return static_cast<uint32_t>(q) < static_cast<uint32_t>(in_last) ? q : -1;
  }
};

// Fills `channels` channel planes of a channels-first tile with the input
// under the band starting at output row `row0`, x_block pointing at the first
// channel's image. One warp per tile line (its source is the same for the
// warp), kFillLines lines at a time, their loads issued before any store:
// the block has nothing else to do until the tile is full. (ncu had the tiled
// unfold issue-bound with fill_tile's index math per element.)
constexpr int kFillLines = 4;

template <int ND, typename T>
__device__ __forceinline__ void fill_tile_by_lines(T* tile, const T* x_block, int32_t channels, int32_t row0,
                                                   const Geometry& g, const TilePlan& t) {
  const int32_t width = static_cast<int32_t>(t.width.d), lines = channels * static_cast<int32_t>(t.lines.d);
  const int32_t warps = static_cast<int32_t>(blockDim.x / 32), lane = threadIdx.x % 32;
  const bool plain = !g.any_lhs_dilation;
  const PlainLines<ND> map(g, t, row0);
  const int32_t pad_mid = ND == 3 ? static_cast<int32_t>(g.pad_lo[1]) : 0;
  for (int32_t line0 = threadIdx.x / 32 * kFillLines; line0 < lines; line0 += warps * kFillLines) {
    for (int32_t e0 = lane; e0 < width; e0 += 64) {
      T v[kFillLines][2];
#pragma unroll
      for (int u = 0; u < kFillLines; ++u) {
        const int32_t line = line0 + u;
        int32_t ci = 0, l = 0;
        if (line < lines) t.lines.divmod(line, ci, l);
        const int32_t base = line >= lines ? -1 : plain ? map.base(l, pad_mid) : line_source<ND>(g, t, l, row0);
        const T* src = x_block + static_cast<int64_t>(ci) * g.in_size + base;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int32_t e = e0 + 32 * j;
          const int32_t q = base < 0 || e >= width ? -1 : plain ? map.column(e) : column_source<ND>(g, e, row0);
          v[u][j] = q >= 0 ? __ldg(src + q) : T(0);
        }
      }
#pragma unroll
      for (int u = 0; u < kFillLines; ++u) {
        const int32_t line = line0 + u;
        if (line >= lines) break;
#pragma unroll
        for (int j = 0; j < 2; ++j)
          if (e0 + 32 * j < width) tile[line * width + e0 + 32 * j] = v[u][j];
      }
    }
  }
}

// fill_tile_by_lines for tile lines narrower than a warp (7 x 7 to 28 x 28
// maps), plain geometries only: a warp takes 32 / width whole lines at a
// time, lane (sub, w) element w of its line sub, so that a thread's column
// and its padding check are fixed and each line's source is found once for
// its elements (the element-wise fill decoded every element: two FastDiv
// decompositions, the line's and the column's bounds, 64-bit addresses).
template <int ND, typename T>
__device__ __forceinline__ void fill_tile_by_narrow_lines(T* tile, const T* x_block, int32_t channels,
                                                          int32_t row0, const Geometry& g, const TilePlan& t) {
  const int32_t width = static_cast<int32_t>(t.width.d), lines = channels * static_cast<int32_t>(t.lines.d);
  const int32_t per_warp = t.width.div(32), lane = threadIdx.x % 32;
  int32_t sub, w;
  t.width.divmod(lane, sub, w);
  if (sub >= per_warp) return;  // lanes past the warp's whole lines
  const int32_t step = static_cast<int32_t>(blockDim.x / 32) * per_warp;
  const int32_t in_size = static_cast<int32_t>(g.in_size);
  const PlainLines<ND> map(g, t, row0);
  const int32_t pad_mid = ND == 3 ? static_cast<int32_t>(g.pad_lo[1]) : 0;
  const int32_t q = map.column(w);
  const T* column = x_block + q;  // the thread's column of the block's first channel (q >= 0)
  keep_in_register(column);
  for (int32_t line0 = threadIdx.x / 32 * per_warp + sub; line0 < lines; line0 += kFillLines * step) {
    T v[kFillLines];
#pragma unroll
    for (int u = 0; u < kFillLines; ++u) {
      const int32_t line = line0 + u * step;
      int32_t ci = 0, l = 0;
      if (line < lines) t.lines.divmod(line, ci, l);
      const int32_t base = line < lines && q >= 0 ? map.base(l, pad_mid) : -1;
      // Unsigned: one wide multiply-add (signed, nvcc sign-extended both).
      const uint64_t offset = static_cast<uint64_t>(static_cast<uint32_t>(ci)) * static_cast<uint32_t>(in_size) +
                              static_cast<uint32_t>(base);
      v[u] = base >= 0 ? __ldg(column + offset) : T(0);
    }
#pragma unroll
    for (int u = 0; u < kFillLines; ++u) {
      const int32_t line = line0 + u * step;
      if (line < lines) tile[line * width + w] = v[u];
    }
  }
}

// Tiles of plans with a line vector (plan_tile), where input lines are a
// whole number of vectors V and input element 0 of a line falls on a vector
// boundary of the tile line: a thread moves a vector at a time, kFill loads
// before its stores, each vector either all input or all padding. (ncu: the
// line fills ran 20-37 instructions an element, up to 63% of the strided
// unfolds'.) Channels-first, `channels` planes, each of its channel's
// input; channels-last, one plane whose columns are `interleave` = C
// channels wide.
template <int ND, typename V, typename T>
__device__ __forceinline__ void fill_tile_vectors(T* tile, const T* x_block, int32_t channels, int32_t row0,
                                                  const Geometry& g, const TilePlan& t, int32_t interleave) {
  constexpr int32_t kElements = sizeof(V) / sizeof(T);
  const int32_t count = channels * static_cast<int32_t>(t.lines.d) * static_cast<int32_t>(t.line_vectors.d);
  // The tile line's element holding the input line's element 0.
  const int32_t first_column = t.lead + static_cast<int32_t>(g.pad_lo[ND - 1]) * interleave;
  const uint32_t in_last = static_cast<uint32_t>(g.in[ND - 1] * interleave), in_size = static_cast<uint32_t>(g.in_size);
  const PlainLines<ND> map(g, t, row0);
  const int32_t pad_mid = ND == 3 ? static_cast<int32_t>(g.pad_lo[1]) : 0;
  const int32_t step = static_cast<int32_t>(blockDim.x);
  V* out = reinterpret_cast<V*>(tile);
  keep_in_register(x_block);
  for (int32_t e0 = threadIdx.x; e0 < count; e0 += kFill * step) {
    V v[kFill];
#pragma unroll
    for (int u = 0; u < kFill; ++u) {
      const int32_t e = e0 + u * step;
      int32_t cl, vi, ci, l;
      t.line_vectors.divmod(e, cl, vi);
      t.lines.divmod(cl, ci, l);
      const int32_t column = vi * kElements - first_column;
      const int32_t base = e < count && static_cast<uint32_t>(column) < in_last ? map.base(l, pad_mid) : -1;
      v[u] = V{};
      if (base >= 0)
        v[u] = __ldg(reinterpret_cast<const V*>(x_block + (static_cast<uint64_t>(static_cast<uint32_t>(ci)) * in_size +
                                                           static_cast<uint32_t>(base * interleave + column))));
    }
#pragma unroll
    for (int u = 0; u < kFill; ++u)
      if (e0 + u * step < count) out[e0 + u * step] = v[u];
  }
}

// fill_tile_vectors with the plan's vector of t.vector elements of T.
template <int ND, typename T>
__device__ __forceinline__ void fill_tile_by_vectors(T* tile, const T* x_block, int32_t channels, int32_t row0,
                                                     const Geometry& g, const TilePlan& t, int32_t interleave = 1) {
  const int32_t bytes = t.vector * static_cast<int32_t>(sizeof(T));
  if (bytes == 16) {
    fill_tile_vectors<ND, uint4>(tile, x_block, channels, row0, g, t, interleave);
  } else if (bytes == 8) {
    fill_tile_vectors<ND, uint2>(tile, x_block, channels, row0, g, t, interleave);
  } else {
    fill_tile_vectors<ND, uint32_t>(tile, x_block, channels, row0, g, t, interleave);
  }
}

// 1-D tiles without lhs dilation: a channel's tile is one run of its input
// line starting at coordinate row0 * stride - pad_lo, zeros where the run
// leaves the line; kFill loads a thread before its stores. Runs of a block's
// width or more are filled a channel after another, consecutive threads
// taking consecutive elements (no index math but the bounds: ncu had the
// element-wise fill, two FastDivs and a source pointer an element, at ~35
// instructions an element, 63% of wav2vec's unfold); shorter runs element by
// element of the block's tiles, channel e / plane.
template <typename T>
__device__ __forceinline__ void fill_tile_1d(T* tile, const T* x_block, int32_t channels, int32_t row0,
                                             const Geometry& g, const TilePlan& t) {
  const int32_t in = static_cast<int32_t>(g.in[0]), plane = static_cast<int32_t>(t.width.d);
  const int32_t first = band_first_coordinate(g, row0);
  const int32_t step = static_cast<int32_t>(blockDim.x);
  keep_in_register(x_block);
  if (plane < step) {
    fill_tile(tile, channels * plane, [&](int32_t e) -> const T* {
      int32_t ci, i;
      t.width.divmod(e, ci, i);
      const int32_t q = first + i;
      if (static_cast<uint32_t>(q) >= static_cast<uint32_t>(in)) return nullptr;
      return x_block + (static_cast<uint64_t>(static_cast<uint32_t>(ci)) * static_cast<uint32_t>(in) +
                        static_cast<uint32_t>(q));
    });
    return;
  }
  for (int32_t ci = 0; ci < channels; ++ci) {
    const T* row = x_block + static_cast<int64_t>(ci) * in;
    keep_in_register(row);
    T* out = tile + ci * plane;
    // Whole groups of kFill first, with unconditional stores (predicated
    // ones had nvcc re-derive the tile's address for each), then the rest.
    int32_t i0 = threadIdx.x;
    for (; i0 + (kFill - 1) * step < plane; i0 += kFill * step) {
      T v[kFill];
#pragma unroll
      for (int u = 0; u < kFill; ++u) {
        const int32_t q = first + i0 + u * step;
        v[u] = static_cast<uint32_t>(q) < static_cast<uint32_t>(in) ? __ldg(row + q) : T(0);
      }
#pragma unroll
      for (int u = 0; u < kFill; ++u) out[i0 + u * step] = v[u];
    }
    for (; i0 < plane; i0 += step) {
      const int32_t q = first + i0;
      out[i0] = static_cast<uint32_t>(q) < static_cast<uint32_t>(in) ? __ldg(row + q) : T(0);
    }
  }
}

// 1-D tiles of plans with a vector (plan_tile; channels-first, no lhs
// dilation): channel ci's line of coordinates first, first + 1, ... starts
// lead(ci) elements into its slot of t.plane elements, lead(ci) being the
// line's first element's place in its 16-byte vector of x, so that the
// slot's vectors are x's aligned vectors (lines of odd lengths, wav2vec's
// 3199, start anywhere in one). Vectors inside the line are one 16-byte
// load, kFill1d a thread before their stores (4 spilled at the kernel's 32
// registers); those over its ends (two a line) are read an element at a
// time, zeros outside it. (ncu: the element-wise 1-D fill ran ~13
// instructions an element, a third of wav2vec's unfold; with it wav2vec
// 1.13x in float32, 1.27x in bfloat16; docs/optimization-log.md, step 79.)
constexpr int kFill1d = 2;

// The element index (from address 0, in elements of T) of the block's first
// line's coordinate row0 * stride - pad_lo (x_block: its first channel's
// line), and channel ci's lead from it.
template <typename T>
__device__ __forceinline__ uint32_t line_origin(const T* x_block, int32_t row0, const Geometry& g) {
  const int32_t first = band_first_coordinate(g, row0);
  return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(x_block) / sizeof(T)) + static_cast<uint32_t>(first);
}

template <typename T>
__device__ __forceinline__ int32_t line_lead(uint32_t origin, int32_t ci, const Geometry& g) {
  return static_cast<int32_t>((origin + static_cast<uint32_t>(ci) * static_cast<uint32_t>(g.in[0])) &
                              (16 / sizeof(T) - 1));
}

template <typename T>
__device__ __forceinline__ void fill_tile_1d_vectors(T* tile, const T* x_block, int32_t channels, int32_t row0,
                                                     const Geometry& g, const TilePlan& t, uint32_t origin) {
  constexpr int32_t V = 16 / sizeof(T);
  const int32_t in = static_cast<int32_t>(g.in[0]);
  const int32_t first = band_first_coordinate(g, row0);
  const int32_t count = channels * static_cast<int32_t>(t.line_vectors.d);
  const int32_t step = static_cast<int32_t>(blockDim.x);
  uint4* out = reinterpret_cast<uint4*>(tile);
  keep_in_register(x_block);
  for (int32_t e0 = threadIdx.x; e0 < count; e0 += kFill1d * step) {
    uint4 v[kFill1d];
    int32_t edge = 0;  // bit u: vector u is over a line's end
#pragma unroll
    for (int u = 0; u < kFill1d; ++u) {
      const int32_t e = e0 + u * step;
      int32_t ci, vi;
      t.line_vectors.divmod(e, ci, vi);
      const int32_t c0 = first + vi * V - line_lead<T>(origin, ci, g);  // input coordinate of the vector's first element
      v[u] = make_uint4(0, 0, 0, 0);
      if (e < count && c0 >= 0 && c0 + V <= in) {
        v[u] = __ldg(reinterpret_cast<const uint4*>(x_block + (static_cast<int64_t>(ci) * in + c0)));
      } else if (e < count && c0 < in && c0 + V > 0) {
        edge |= 1 << u;
      }
    }
#pragma unroll
    for (int u = 0; u < kFill1d; ++u) {
      const int32_t e = e0 + u * step;
      if (e < count) out[e] = v[u];
      if (edge & (1 << u)) {
        int32_t ci, vi;
        t.line_vectors.divmod(e, ci, vi);
        const int32_t c0 = first + vi * V - line_lead<T>(origin, ci, g);
        for (int32_t j = 0; j < V; ++j) {
          const int32_t c = c0 + j;
          if (static_cast<uint32_t>(c) < static_cast<uint32_t>(in))
            tile[e * V + j] = __ldg(x_block + (static_cast<int64_t>(ci) * in + c));
        }
      }
    }
  }
}

// Zeros the block's tile (bytes rounded up to 16: plan_tile's sizes), before
// fill_tile_whole writes the input into it.
__device__ __forceinline__ void zero_tile(void* tile, size_t bytes) {
  uint4* v = static_cast<uint4*>(tile);
  const int32_t count = static_cast<int32_t>(round16(bytes) / 16);
  for (int32_t i = threadIdx.x; i < count; i += blockDim.x) v[i] = make_uint4(0, 0, 0, 0);
}

// Tiles of t.whole plans (zeroed first, zero_tile): the block's channels are
// one run of channels * in_size input elements from x_block; consecutive
// threads read consecutive elements and store each at its padded place.
// Reads only input (the 7 x 7 maps' narrow-line fill spent most of its
// instructions on padding lines and on each line's decode).
template <int ND, typename T>
__device__ __forceinline__ void fill_tile_whole(T* tile, const T* x_block, int32_t channels,
                                                const Geometry& g, const TilePlan& t) {
  keep_in_register(x_block);
  fill_tile_to<kFill>(
      tile, channels * static_cast<int32_t>(g.in_size), [&](int32_t e) { return x_block + e; },
      [&](int32_t e) {
        int32_t ci, rest, q, at = 0, scale = 1;
        t.in_size_div.divmod(e, ci, rest);
#pragma unroll
        for (int d = ND - 1; d > 0; --d) {
          t.in_div[d].divmod(rest, rest, q);
          at += (q + static_cast<int32_t>(g.pad_lo[d])) * scale;
          scale *= t.extent[d];
        }
        return ci * t.plane + at + (rest + static_cast<int32_t>(g.pad_lo[0])) * scale;
      });
}

// The channels-first tile of block b: its channels of image x_image (the
// block's first channel at x_image).
template <int ND, int FILL = kFill, typename U>
__device__ __forceinline__ void fill_channels_first(U* tile, const U* x_image, const Geometry& g,
                                                    const TilePlan& t, const TileBlock& b) {
  fill_channels<ND, FILL>(tile, x_image, g.in_size, 1, g, t, b);
}

}  // namespace im2col::cuda
