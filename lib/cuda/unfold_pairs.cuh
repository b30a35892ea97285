// The channels-first tiled unfold's write phase for 2-byte columns, a pair of
// neighbouring positions at a time (columns.cu, unfold_cf_tiled_kernel).
//
// Where the stride along the last dimension is 1 and output rows, tile lines
// and column rows all have even lengths, positions 2q and 2q + 1 of a band
// read neighbouring tile entries for every tap, and their column entries are
// one aligned 4-byte word: a thread moves them with one 4-byte shared read
// and one 4-byte store (ncu had the bfloat16 rows issue-bound on 2-byte
// reads and stores, two instructions an element). A pair starts at an even
// tile offset for taps at even offsets and at an odd one for the others;
// those read a second copy of the tile shifted by one element
// (shifted[i] = tile[i + 1]), which their entries of the taps table point at.
#pragma once

#include <cstdint>

#include "../geometry.h"
#include "device_util.cuh"
#include "tile.cuh"

namespace im2col::cuda {

// Whether a channels-first unfold of 2-byte elements into cols can move
// pairs (the conditions above; the tile's last extent is out + (k - 1) * d).
inline bool unfold_pairs_fit(const Geometry& g, const ColumnsLayout& lay, const void* cols) {
  const int last = g.nd - 1;
  return g.nd > 1 && g.stride[last] == 1 && g.out[last] % 2 == 0 &&
         (g.kernel[last] - 1) * g.rhs_dilation[last] % 2 == 0 && lay.l0 % 2 == 0 && lay.lc % 2 == 0 &&
         lay.row_stride % 2 == 0 && lay.image_stride % 2 == 0 && aligned_to(cols, 4);
}

// Byte offset, from the tile's start, of the word that tap offset `tap`
// (elements) reads for a pair at an even offset: in the tile where tap is
// even, else in the shifted copy (after the tile's `elements`).
__host__ __device__ inline int32_t pair_tap_offset(int32_t tap, int32_t elements) {
  return 2 * (tap % 2 == 0 ? tap : elements + tap - 1);
}

// Writes the shifted copy of tile[0, elements) (even) at tile + at (the
// plan's whole tile, as pair_tap_offset has it), as words: word i holds
// tile[2i + 1] and tile[2i + 2] (0 past the end).
__device__ __forceinline__ void shift_tile_copy(uint16_t* tile, int32_t elements, int32_t at) {
  const uint32_t* words = reinterpret_cast<const uint32_t*>(tile);
  uint32_t* shifted = reinterpret_cast<uint32_t*>(tile + at);
  const int32_t count = elements / 2;
  for (int32_t i = threadIdx.x; i < count; i += blockDim.x) {
    const uint32_t lo = words[i], hi = i + 1 < count ? words[i + 1] : 0u;
    shifted[i] = (lo >> 16) | (hi << 16);
  }
}

// write_band (columns.cu) over pairs: consecutive threads take consecutive
// pairs of the band (LANES of them), a thread holds the tile offsets of up to
// POSITIONS pairs and writes them for every tap of each of its channels.
// taps[] holds pair_tap_offset()s; image points at the block's first
// channel's first column row (4-byte aligned, as row_stride keeps each row).
template <int LANES, int ND, int POSITIONS>
__device__ __forceinline__ void write_band_pairs(const uint16_t* tile, const int32_t* taps, uint16_t* image,
                                                 const Geometry& g, const TilePlan& t,
                                                 const ColumnsLayout& lay, const TileBlock& b) {
  constexpr int32_t groups = kThreads / LANES;
  const int32_t group = threadIdx.x / LANES, first = threadIdx.x % LANES;
  const int32_t K = static_cast<int32_t>(g.kernel_size);
  const int64_t row_words = lay.row_stride / 2;
  const int32_t q_end = b.p_end / 2;
  for (int32_t q0 = b.p_begin / 2 + first; q0 < q_end; q0 += LANES * POSITIONS) {
    int32_t pos[POSITIONS];  // byte offsets into a channel's tile; -1: none
#pragma unroll
    for (int j = 0; j < POSITIONS; ++j) {
      const int32_t q = q0 + j * LANES;
      pos[j] = q < q_end ? 2 * position_offset<ND>(g, t, static_cast<int32_t>(lay.l0) + 2 * q, b.row0) : -1;
    }
    for (int32_t ci = group; ci < b.channels; ci += groups) {
      const unsigned char* src = reinterpret_cast<const unsigned char*>(tile + ci * t.plane);
      uint32_t* dst = reinterpret_cast<uint32_t*>(image + ci * g.kernel_size * lay.row_stride) + q0;
      for (int32_t kk = 0; kk < K; ++kk, dst += row_words) {
        const unsigned char* tap = src + taps[kk];
#pragma unroll
        for (int j = 0; j < POSITIONS; ++j)
          if (pos[j] >= 0) dst[j * LANES] = *reinterpret_cast<const uint32_t*>(tap + pos[j]);
      }
    }
  }
}

// write_band_pairs with as many pairs a thread as cover the band: the whole
// block on a band's pairs, or a warp where the band has under a block's
// width of pairs (the warps then splitting the channels).
template <int ND>
__device__ __forceinline__ void write_pairs(const uint16_t* tile, const int32_t* taps, uint16_t* image,
                                            const Geometry& g, const TilePlan& t, const ColumnsLayout& lay,
                                            const TileBlock& b) {
  const int32_t pairs = (b.p_end - b.p_begin) / 2;
  if (pairs > 4 * kThreads) {
    write_band_pairs<kThreads, ND, 8>(tile, taps, image, g, t, lay, b);
  } else if (pairs > 2 * kThreads) {
    write_band_pairs<kThreads, ND, 4>(tile, taps, image, g, t, lay, b);
  } else if (pairs >= kThreads) {
    write_band_pairs<kThreads, ND, 2>(tile, taps, image, g, t, lay, b);
  } else if (pairs > 128) {
    write_band_pairs<32, ND, 8>(tile, taps, image, g, t, lay, b);
  } else if (pairs > 64) {
    write_band_pairs<32, ND, 4>(tile, taps, image, g, t, lay, b);
  } else {
    write_band_pairs<32, ND, 2>(tile, taps, image, g, t, lay, b);
  }
}

}  // namespace im2col::cuda
