// The channels-first tiled unfold's write phase (columns.cu,
// unfold_cf_tiled_kernel): a block's columns from its shared-memory tile, an
// element or a pair of positions at a time.
//
// Pairs: where the stride along the last dimension is 1 and output rows,
// tile lines and column rows all have even lengths, positions 2q and 2q + 1
// of a band read neighbouring tile entries for every tap, and their 2-byte
// column entries are one aligned 4-byte word: a thread moves them with one
// 4-byte shared read and one 4-byte store (ncu had the bfloat16 rows
// issue-bound on 2-byte reads and stores, two instructions an element). A
// pair starts at an even tile offset for taps at even offsets and at an odd
// one for the others; those read a second copy of the tile shifted by one
// element (shifted[i] = tile[i + 1]), which their entries of the taps table
// point at.
#pragma once

#include <cstdint>

#include "common/device_util.cuh"
#include "common/geometry.h"
#include "common/tile.cuh"

namespace im2col::cuda {

// Consecutive threads take consecutive words of the band (LANES of them: the
// whole block, or a warp when the band has fewer words than the block has
// threads, the warps then splitting the channels); a word is W, PER =
// sizeof(W) / sizeof(U) consecutive positions (1, or 2 for pairs). A thread
// holds the tile offsets of up to POSITIONS words and writes them for every
// tap of each of its channels, so a tap offset is read once per POSITIONS
// words. LANES is a compile-time constant so that the POSITIONS stores of a
// tap share one address (immediate offsets): ncu showed the kernel
// issue-bound at 8 instructions per element. STREAM: streaming stores
// (store_streaming: columns nothing reads back soon). taps[] holds byte offsets
// (pair_tap_offset()s for pairs); image points at the block's first
// channel's first column row.
constexpr int kPositions = 8;

template <int LANES, int ND, typename U, int POSITIONS = kPositions, typename W = U, bool STREAM = false>
__device__ __forceinline__ void write_band(const U* tile, const int32_t* taps, U* image,
                                           const Geometry& g, const TilePlan& t,
                                           const ColumnsLayout& lay, const TileBlock& b,
                                           uint32_t origin = 0) {
  constexpr int32_t groups = kThreads / LANES, PER = sizeof(W) / sizeof(U);
  const int32_t group = threadIdx.x / LANES, first = threadIdx.x % LANES;
  const int32_t K = static_cast<int32_t>(g.kernel_size);
  const int64_t row_words = lay.row_stride / PER;
  const int32_t q_end = b.p_end / PER;
  for (int32_t q0 = b.p_begin / PER + first; q0 < q_end; q0 += LANES * POSITIONS) {
    int32_t pos[POSITIONS];  // byte offsets into a channel's tile; -1: none
#pragma unroll
    for (int j = 0; j < POSITIONS; ++j) {
      const int32_t q = q0 + j * LANES;
      pos[j] = q < q_end ? position_offset<ND>(g, t, static_cast<int32_t>(lay.l0) + PER * q, b.row0) *
                               static_cast<int32_t>(sizeof(U))
                         : -1;
    }
    for (int32_t ci = group; ci < b.channels; ci += groups) {
      const U* line = tile + ci * t.plane;
      if constexpr (ND == 1) {
        if (t.vector > 0) line += line_lead<U>(origin, ci, g);  // fill_tile_1d_vectors
      }
      const unsigned char* src = reinterpret_cast<const unsigned char*>(line);
      W* dst = reinterpret_cast<W*>(image + ci * g.kernel_size * lay.row_stride) + q0;
      for (int32_t kk = 0; kk < K; ++kk, dst += row_words) {
        const unsigned char* tap = src + taps[kk];
        if constexpr (STREAM) {
          for_each_index<POSITIONS>([&](auto J) {
            constexpr int j = decltype(J)::value;
            if (pos[j] >= 0) store_streaming<j * LANES * sizeof(W)>(dst, *reinterpret_cast<const W*>(tap + pos[j]));
          });
        } else {  // a plain loop: in the lambda's form the 2-D 2-byte kernel spilled
#pragma unroll
          for (int j = 0; j < POSITIONS; ++j)
            if (pos[j] >= 0) dst[j * LANES] = *reinterpret_cast<const W*>(tap + pos[j]);
        }
      }
    }
  }
}

// write_band an element at a time, with as few positions a thread as cover
// the band (slots past it still issue, predicated off: resnext's 784
// positions filled 3 of 8); bands of up to two warps' width (7 x 7 maps)
// take 2 positions a lane.
template <int ND, typename U, bool STREAM = false>
__device__ __forceinline__ void write_elements(const U* tile, const int32_t* taps, U* image, const Geometry& g,
                                               const TilePlan& t, const ColumnsLayout& lay, const TileBlock& b,
                                               uint32_t origin) {
  const int32_t positions = b.p_end - b.p_begin;
  if (positions > 4 * kThreads) {
    write_band<kThreads, ND, U, kPositions, U, STREAM>(tile, taps, image, g, t, lay, b, origin);
  } else if (positions >= kThreads) {
    write_band<kThreads, ND, U, 4, U, STREAM>(tile, taps, image, g, t, lay, b, origin);
  } else if (positions > 64) {
    write_band<32, ND, U, kPositions, U, STREAM>(tile, taps, image, g, t, lay, b, origin);
  } else {
    write_band<32, ND, U, 2, U, STREAM>(tile, taps, image, g, t, lay, b, origin);
  }
}

// write_band over pairs, with as many pairs a thread as cover the band.
template <int ND>
__device__ __forceinline__ void write_pairs(const uint16_t* tile, const int32_t* taps, uint16_t* image,
                                            const Geometry& g, const TilePlan& t, const ColumnsLayout& lay,
                                            const TileBlock& b) {
  const int32_t pairs = (b.p_end - b.p_begin) / 2;
  if (pairs > 4 * kThreads) {
    write_band<kThreads, ND, uint16_t, 8, uint32_t>(tile, taps, image, g, t, lay, b);
  } else if (pairs > 2 * kThreads) {
    write_band<kThreads, ND, uint16_t, 4, uint32_t>(tile, taps, image, g, t, lay, b);
  } else if (pairs >= kThreads) {
    write_band<kThreads, ND, uint16_t, 2, uint32_t>(tile, taps, image, g, t, lay, b);
  } else if (pairs > 128) {
    write_band<32, ND, uint16_t, 8, uint32_t>(tile, taps, image, g, t, lay, b);
  } else if (pairs > 64) {
    write_band<32, ND, uint16_t, 4, uint32_t>(tile, taps, image, g, t, lay, b);
  } else {
    write_band<32, ND, uint16_t, 2, uint32_t>(tile, taps, image, g, t, lay, b);
  }
}

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

}  // namespace im2col::cuda
