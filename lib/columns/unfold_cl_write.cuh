// The channels-last tiled unfold's write phase (columns.cu,
// unfold_cl_tiled_kernel): the block's columns are one contiguous run of rows
// (n, l), each C * K long; element r of a row reads the tile at
// position[p] + element[r] (byte offsets, from two tables).
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/device_util.cuh"
#include "common/geometry.h"
#include "common/switches.h"
#include "common/tile.cuh"

namespace im2col::cuda {

// Rows of at least 32 elements are written a chunk of 32 * CHUNK elements at
// a time: a lane keeps the chunk's element offsets in registers and a warp
// writes the chunk of one position after another, 3 instructions per element
// (ncu showed the kernel issue-bound). Shorter rows are written as one flat
// run, lane i taking element i of every 32, whose (position, element)
// advance by 32.
// With STREAM (the unfold primitive's columns) stores are evict-first
// (bfloat16 stem 72.5 -> 70.9 us; docs/optimization-log.md, step 74).
constexpr int32_t kChunk = 8;

template <int CHUNK, bool STREAM, typename U>
__device__ __forceinline__ void write_rows_chunked(const unsigned char* tile, const int32_t* element,
                                                   const int32_t* position, U* dst,
                                                   int32_t positions, int32_t row) {
  const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int32_t chunk = 0; chunk < row; chunk += 32 * CHUNK) {
    int32_t el[CHUNK];
#pragma unroll
    for (int i = 0; i < CHUNK; ++i) {
      const int32_t r = chunk + lane + 32 * i;
      el[i] = r < row ? element[r] : -1;
    }
    U* out = dst + static_cast<int64_t>(warp) * row + chunk + lane;
    for (int32_t p = warp; p < positions; p += warps, out += static_cast<int64_t>(warps) * row) {
      const unsigned char* src = tile + position[p];
      for_each_index<CHUNK>([&](auto I) {
        constexpr int i = decltype(I)::value;
        if (el[i] >= 0)
          store_maybe_streaming<STREAM, 32 * i * sizeof(U)>(out, *reinterpret_cast<const U*>(src + el[i]));
      });
    }
  }
}

template <bool STREAM, typename U>
__device__ __forceinline__ void write_rows_flat(const unsigned char* tile, const int32_t* element,
                                                const int32_t* position, U* dst,
                                                int32_t positions, int32_t row) {
  const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int32_t count = positions * row;
  for (int32_t seg = warp * 32 * kChunk; seg < count; seg += warps * 32 * kChunk) {
    int32_t p = (seg + lane) / row, r = (seg + lane) - p * row;
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      const int32_t e = seg + lane + 32 * j;
      if (e < count)
        store_maybe_streaming<STREAM>(dst + e, *reinterpret_cast<const U*>(tile + position[p] + element[r]));
      r += 32;
      while (r >= row) {
        r -= row;
        ++p;
      }
    }
  }
}

// Calls fn(std::integral_constant<int, CHUNK>{}) for a chunk of as many
// slots as a row of `row` elements needs, of 3, 5 or 8 (the RGB stem's rows
// of 147 filled 5 of 8; docs/optimization-log.md, step 74).
template <typename Fn>
void with_row_chunk(int64_t row, Fn&& fn) {
  if (row <= 32 * 3) {
    fn(std::integral_constant<int, 3>{});
  } else if (row <= 32 * 5) {
    fn(std::integral_constant<int, 5>{});
  } else {
    fn(std::integral_constant<int, kChunk>{});
  }
}

// Positions in pairs: two positions' rows are one run of `row` words of two
// elements (W), aligned where the block's first row is an even one, though a
// row alone is not a whole number of words when it is odd (the RGB stem's
// 147). Word w of a pair holds elements 2w and 2w + 1 of that run; a lane
// keeps the offsets of its chunk's words' two elements and writes each word
// with two shared reads and one store, half the stores of write_rows_chunked
// (the bfloat16 stem's write loop had ~6 instructions an element in its SASS,
// a 2-byte read and a 2-byte store each). The pair's second position lies on the
// same line of the last dimension as its first (cl_row_pairs_fit), so its tile
// offset is the first's plus `step`, which its elements' offsets include.
template <typename U>
using PairWord = std::conditional_t<sizeof(U) == 2, uint32_t, unsigned long long>;

template <int CHUNK, bool STREAM, typename U>
__device__ __forceinline__ void write_row_pairs(const unsigned char* tile, const int32_t* element,
                                                const int32_t* position, U* dst,
                                                int32_t positions, int32_t row, int32_t step) {
  static_assert(sizeof(U) == 2 || sizeof(U) == 4, "2- or 4-byte elements");
  using W = PairWord<U>;
  using Bits = std::conditional_t<sizeof(U) == 2, unsigned short, unsigned>;
  const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int32_t pairs = positions / 2;
  for (int32_t chunk = 0; chunk < row; chunk += 32 * CHUNK) {
    int32_t first[CHUNK], second[CHUNK];
#pragma unroll
    for (int i = 0; i < CHUNK; ++i) {
      // Element f of the pair's run: the first position's entry f, or the
      // second's entry f - row.
      auto offset = [&](int32_t f) { return f < row ? element[f] : element[f - row] + step; };
      const int32_t w = chunk + lane + 32 * i;
      first[i] = w < row ? offset(2 * w) : -1;
      second[i] = w < row ? offset(2 * w + 1) : -1;
    }
    W* out = reinterpret_cast<W*>(dst) + static_cast<int64_t>(warp) * row + chunk + lane;
    for (int32_t q = warp; q < pairs; q += warps, out += static_cast<int64_t>(warps) * row) {
      const unsigned char* src = tile + position[2 * q];
      for_each_index<CHUNK>([&](auto I) {
        constexpr int i = decltype(I)::value;
        if (first[i] >= 0) {
          const W lo = *reinterpret_cast<const Bits*>(src + first[i]);
          const W hi = *reinterpret_cast<const Bits*>(src + second[i]);
          store_maybe_streaming<STREAM, 32 * i * sizeof(W)>(out, static_cast<W>(lo | (hi << (8 * sizeof(U)))));
        }
      });
    }
  }
}

// Whether write_row_pairs can write the block's rows: 2- or 4-byte elements,
// rows of at least a warp's width, every block's positions an even number
// starting at an even row of the columns (an even chunk start and length; in
// 1-D, even bands), each pair on one line of the last dimension (even output
// lines), and columns aligned to a pair word.
inline bool cl_row_pairs_fit(const Geometry& g, const ColumnsLayout& lay, const TilePlan& t, int64_t row,
                             size_t elem_bytes, const void* cols) {
  if ((elem_bytes != 2 && elem_bytes != 4) || row < 32) return false;
  if (lay.l0 % 2 != 0 || lay.lc % 2 != 0) return false;
  if (g.nd == 1 ? t.band % 2 != 0 : g.out[g.nd - 1] % 2 != 0) return false;
  return aligned_to(cols, 2 * elem_bytes);
}

// JAX_IM2COL_NO_CL_PAIRS=1 writes every row a position at a time (the
// same-run comparison of docs/optimization-log.md, step 82).
inline bool cl_pairs_on() {
  static const bool on = switch_on(Switch::kClPairs);
  return on;
}

// Calls fn(chunk, pairs), std::integral_constants: the chunk slots a row of
// K * C elements needs (with_row_chunk), and whether the rows go in pairs of
// positions (write_row_pairs).
template <typename U, typename Fn>
void with_cl_writer(const Geometry& g, const ColumnsLayout& lay, const TilePlan& t, int64_t C, const void* cols,
                    Fn&& fn) {
  const int64_t row = g.kernel_size * C;
  with_row_chunk(row, [&](auto chunk) {
    if constexpr (sizeof(U) == 2 || sizeof(U) == 4) {
      if (cl_pairs_on() && cl_row_pairs_fit(g, lay, t, row, sizeof(U), cols)) {
        fn(chunk, std::true_type{});
        return;
      }
    }
    fn(chunk, std::false_type{});
  });
}

// The block's shared memory: the row's element offsets (K * C), its
// positions' offsets, then the tile.
template <typename U>
struct ClBlockMemory {
  int32_t* element;
  int32_t* position;
  U* tile;
};

template <typename U>
__device__ __forceinline__ ClBlockMemory<U> cl_block_memory(unsigned char* smem, const Geometry& g, int64_t C,
                                                             const TilePlan& t) {
  int32_t* element = reinterpret_cast<int32_t*>(smem);
  return {element, element + g.kernel_size * C, reinterpret_cast<U*>(smem + table_bytes(t.table))};
}

// The first phase: the two tables and the tile (a vector at a time where
// the plan has a line vector, 2-D and 3-D; else an element at a time).
template <int ND, typename U>
__device__ __forceinline__ void stage_cl_block(unsigned char* smem, const U* x, const Geometry& g, int64_t C,
                                               int64_t n0, const ColumnsLayout& lay, const TilePlan& t,
                                               const TileBlock& b) {
  const ClBlockMemory<U> m = cl_block_memory<U>(smem, g, C, t);
  const int32_t K = static_cast<int32_t>(g.kernel_size), C32 = static_cast<int32_t>(C);
  const int32_t Cg = C32 / static_cast<int32_t>(lay.groups), row = K * C32;
  const int32_t positions = b.p_end - b.p_begin;
  constexpr int32_t bytes = sizeof(U);
  for (int32_t r = threadIdx.x; r < row; r += blockDim.x) {
    const int32_t gi = r / (K * Cg), kk = r / Cg - gi * K, j = r % Cg;
    m.element[r] = (t.lead + tap_offset<ND>(g, t, kk) * C32 + gi * Cg + j) * bytes;
  }
  for (int32_t p = threadIdx.x; p < positions; p += blockDim.x)
    m.position[p] = position_offset<ND>(g, t, static_cast<int32_t>(lay.l0) + b.p_begin + p, b.row0) * C32 * bytes;
  const U* xb = x + (n0 + b.n) * g.in_size * C;
  if constexpr (ND > 1) {
    if (t.vector > 0) {
      fill_tile_by_vectors<ND>(m.tile, xb, 1, b.row0, g, t, C32);
      return;
    }
  }
  fill_tile(m.tile, t.plane * C32, [&](int32_t e) -> const U* {
    int32_t line, w;
    t.width.divmod(e, line, w);
    const int32_t base = line_source<ND>(g, t, line, b.row0);
    const int32_t wc = t.channels_div.div(w);
    const int32_t q = base < 0 ? -1 : column_source<ND>(g, wc, b.row0);
    return q >= 0 ? xb + (static_cast<int64_t>(base) + q) * C + (w - wc * C32) : nullptr;
  });
}

// The second phase: the block's rows, in pairs of positions where PAIRS
// (cl_row_pairs_fit), else chunked, or flat for rows under 32 elements.
template <int ND, int CHUNK, bool STREAM, bool PAIRS, typename U>
__device__ __forceinline__ void write_cl_block(unsigned char* smem, U* cols, const Geometry& g, int64_t C,
                                               const ColumnsLayout& lay, const TilePlan& t, const TileBlock& b) {
  const ClBlockMemory<U> m = cl_block_memory<U>(smem, g, C, t);
  const int32_t row = static_cast<int32_t>(g.kernel_size * C), positions = b.p_end - b.p_begin;
  U* dst = cols + (b.n * lay.lc + b.p_begin) * row;
  const unsigned char* tile = reinterpret_cast<const unsigned char*>(m.tile);
  if constexpr (PAIRS) {
    const int32_t step = static_cast<int32_t>(g.stride[ND - 1] * C) * static_cast<int32_t>(sizeof(U));
    write_row_pairs<CHUNK, STREAM>(tile, m.element, m.position, dst, positions, row, step);
  } else if (row >= 32) {
    write_rows_chunked<CHUNK, STREAM>(tile, m.element, m.position, dst, positions, row);
  } else {
    write_rows_flat<STREAM>(tile, m.element, m.position, dst, positions, row);
  }
}

}  // namespace im2col::cuda
