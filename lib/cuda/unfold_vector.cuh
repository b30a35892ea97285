// Channels-first unfold on vectors (columns.cu chooses it): a thread writes
// V consecutive output positions of one output line (16 bytes, else 8 or 4,
// else single elements) as one store, where the lines of positions and the columns' rows
// are whole vectors. The block's input is staged in shared memory as in the
// tiled kernel (tile.cuh), with each tile line split into the phases of the
// stride along the last dimension (column w at phase w % s, index w / s), so
// that the V positions of a vector read V consecutive elements of one phase
// for every tap: two aligned vector loads and a shift known per tap (the same
// for every thread) replace V scalar loads and stores. ncu had the scalar
// tiled kernel bound by its load/store instructions in half types.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../geometry.h"
#include "device_util.cuh"
#include "tile.cuh"

namespace im2col::cuda {

// Whether the kernel applies with vectors of V elements (the columns'
// pointer aligned to V elements, checked by the launcher).
inline bool unfold_cf_vector_applies(const Geometry& g, const ColumnsLayout& lay, int64_t V) {
  const int64_t out_last = g.out[g.nd - 1];
  return V >= 1 && !g.any_lhs_dilation && (g.nd == 1 || out_last % V == 0) && lay.l0 % V == 0 &&
         lay.lc % V == 0 && lay.row_stride % V == 0 && lay.image_stride % V == 0;
}

// Elements per phase of a split tile line under `positions` output positions
// along the last dimension: the positions, the widest tap's reach, and a
// vector of slack for the second load of a shifted read, in whole vectors.
inline int64_t split_phase(const Geometry& g, int64_t positions, int64_t V) {
  const int last = g.nd - 1;
  const int64_t reach = (g.kernel[last] - 1) * g.rhs_dilation[last] / g.stride[last];
  return (positions + reach + V - 1) / V * V + V;
}

constexpr int64_t kVectorGridBlocks = 2048;

// plan_tile for split lines (the table holds the K tap offsets). In 1-D the
// band runs along the last dimension, so bands are whole vectors.
inline bool plan_unfold_vector_tile(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc,
                                    size_t elem_bytes, int64_t V, TilePlan* t) {
  if (!tile_extents(g, lay, t)) return false;
  const int last = g.nd - 1;
  const int64_t s = g.stride[last], K = g.kernel_size, rows = tile_rows_total(*t, lay);
  auto positions = [&](int64_t band) { return g.nd == 1 ? band : g.out[last]; };
  auto line = [&](int64_t band) { return s * split_phase(g, positions(band), V); };
  if (g.nd > 1) t->extent[last] = static_cast<int32_t>(line(0));
  auto plane = [&](int64_t band) { return g.nd == 1 ? line(band) : tile_plane(g, *t, band); };
  auto whole = [&](int64_t band) { return g.nd == 1 && band < rows ? std::max(V, band / V * V) : band; };
  int64_t band = whole(std::max<int64_t>(1, std::min<int64_t>(rows, kTileWork / t->rest)));
  int64_t channels = std::max<int64_t>(1, std::min<int64_t>(C, kTileWork / (band * t->rest)));
  auto bytes = [&](int64_t band_, int64_t ch) {
    return table_bytes(K) + round16(static_cast<size_t>(ch * plane(band_)) * elem_bytes);
  };
  while (bytes(band, channels) > kTileSmemPreferred && channels > 1) channels = (channels + 1) / 2;
  // Small planes: fewer channels a block until the grid fills the GPU a few
  // times over (ncu: 416 blocks of 41 channels of 7 x 7 left the SMs a third
  // occupied, each warp a long serial run of taps).
  auto grid = [&](int64_t ch) { return nc * ((C + ch - 1) / ch) * ((rows + band - 1) / band); };
  while (channels > 1 && grid(channels) < kVectorGridBlocks) channels = (channels + 1) / 2;
  while (bytes(band, channels) > kTileSmemPreferred && band > 1 && whole((band + 1) / 2) < band)
    band = whole((band + 1) / 2);
  if (bytes(band, channels) > kTileSmemMax || plane(band) >= (int64_t{1} << 30)) return false;
  size_tile(g, lay, C, false, band, channels, K, bytes(band, channels), t);
  if (g.nd == 1) {  // size_tile sized the line unsplit
    t->extent[0] = t->plane = static_cast<int32_t>(line(band));
    t->extent_div[0] = t->width = FastDiv(t->extent[0]);
    t->lines = FastDiv(1);
  }
  t->phase = static_cast<int32_t>(split_phase(g, positions(band), V));
  t->phases = FastDiv(s);
  return true;
}

// Offset in a channel's split tile of output position l (flat) of the band
// starting at output row row0, and of kernel tap kk: a position's index
// within a phase is a multiple of V, and a tap's offset modulo V its shift.
template <int ND>
__device__ __forceinline__ int32_t split_position_offset(const Geometry& g, const TilePlan& t, int32_t l,
                                                         int32_t row0) {
  int32_t o[kMaxSpatial];
#pragma unroll
  for (int d = ND - 1; d > 0; --d) {
    int32_t q;
    t.out[d].divmod(l, q, o[d]);
    l = q;
  }
  o[0] = l - row0;
  int32_t line = 0;
#pragma unroll
  for (int d = 0; d < ND - 1; ++d) line = line * t.extent[d] + o[d] * static_cast<int32_t>(g.stride[d]);
  return line * t.extent[ND - 1] + o[ND - 1];
}

template <int ND>
__device__ __forceinline__ int32_t split_tap_offset(const Geometry& g, const TilePlan& t, int32_t kk) {
  int32_t k[kMaxSpatial];
  unravel<ND>(kk, g.kernel, k);
  int32_t line = 0;
#pragma unroll
  for (int d = 0; d < ND - 1; ++d) line = line * t.extent[d] + k[d] * static_cast<int32_t>(g.rhs_dilation[d]);
  const int32_t reach = k[ND - 1] * static_cast<int32_t>(g.rhs_dilation[ND - 1]);
  int32_t index, phase;
  t.phases.divmod(reach, index, phase);
  return line * t.extent[ND - 1] + phase * t.phase + index;
}

// Elements S .. S + V - 1 of the pair (a, b).
template <int S, typename U, int V>
__device__ __forceinline__ Pack<U, V> shifted(const Pack<U, V>& a, const Pack<U, V>& b) {
  Pack<U, V> p;
#pragma unroll
  for (int v = 0; v < V; ++v) p.v[v] = S + v < V ? a.v[S + v] : b.v[S + v - V];
  return p;
}

// fn(std::integral_constant<int, shift>), for 0 <= shift < V.
template <int V, int S = 0, typename Fn>
__device__ __forceinline__ void with_shift(int32_t shift, Fn&& fn) {
  if constexpr (S + 1 < V) {
    if (shift == S) {
      fn(std::integral_constant<int, S>{});
    } else {
      with_shift<V, S + 1>(shift, fn);
    }
  } else {
    fn(std::integral_constant<int, S>{});
  }
}

// Items (channel, vector of positions) a thread holds per pass over the taps.
constexpr int kVectorsPerThread = 4;

// The block's channels times its vectors of positions, flat, consecutive
// threads on consecutive vectors of one channel (coalesced stores); a thread
// writes each of its items for every tap. Blocks of one channel (large
// planes) and of many (small ones) keep every warp busy alike.
template <int ND, typename U, int V>
__device__ __forceinline__ void write_vectors(const U* tile, const int32_t* taps, U* image, const Geometry& g,
                                              const TilePlan& t, const ColumnsLayout& lay, const TileBlock& b) {
  using P = Pack<U, V>;
  const int32_t K = static_cast<int32_t>(g.kernel_size), vectors = (b.p_end - b.p_begin) / V;
  const int32_t items = b.channels * vectors;
  for (int32_t i0 = threadIdx.x; i0 < items; i0 += kThreads * kVectorsPerThread) {
    const U* src[kVectorsPerThread];
    U* dst[kVectorsPerThread];
    bool valid[kVectorsPerThread];
#pragma unroll
    for (int j = 0; j < kVectorsPerThread; ++j) {
      valid[j] = i0 + j * kThreads < items;
      const int32_t i = valid[j] ? i0 + j * kThreads : i0;
      const int32_t ci = i / vectors, u = i - ci * vectors;
      src[j] = tile + ci * t.plane +
               split_position_offset<ND>(g, t, static_cast<int32_t>(lay.l0) + b.p_begin + u * V, b.row0);
      dst[j] = image + ci * g.kernel_size * lay.row_stride + b.p_begin + u * V;
    }
    for (int32_t kk = 0; kk < K; ++kk) {
      const int32_t tap = taps[kk], shift = tap & (V - 1);
      const int64_t row = static_cast<int64_t>(kk) * lay.row_stride;
      with_shift<V>(shift, [&](auto s) {
        constexpr int S = decltype(s)::value;
#pragma unroll
        for (int j = 0; j < kVectorsPerThread; ++j) {
          if (!valid[j]) continue;
          const U* at = src[j] + (tap - shift);
          const P a = *reinterpret_cast<const P*>(at);
          const P next = S == 0 ? a : *reinterpret_cast<const P*>(at + V);
          *reinterpret_cast<P*>(dst[j] + row) = shifted<S>(a, next);
        }
      });
    }
  }
}

template <int ND, typename U, int V>
__global__ void __launch_bounds__(kThreads, 4)
unfold_cf_vector_kernel(const U* __restrict__ x, U* __restrict__ cols, Geometry g, int64_t C, int64_t n0,
                        ColumnsLayout lay, TilePlan t) {
  extern __shared__ __align__(16) unsigned char smem[];
  int32_t* taps = reinterpret_cast<int32_t*>(smem);
  U* tile = reinterpret_cast<U*>(smem + table_bytes(t.table));
  const TileBlock b = tile_block(t, C, lay);
  const int32_t K = static_cast<int32_t>(g.kernel_size), width = t.extent[ND - 1];
  for (int32_t kk = threadIdx.x; kk < K; kk += blockDim.x) taps[kk] = split_tap_offset<ND>(g, t, kk);
  fill_channels_to<ND>(tile, x + ((n0 + b.n) * C + b.c0) * g.in_size, g.in_size, 1, g, t, b, [&](int32_t e) {
    int32_t line, w, index, phase;
    t.width.divmod(e, line, w);
    t.phases.divmod(w, index, phase);
    return line * width + phase * t.phase + index;
  });
  __syncthreads();
  U* image = cols + b.n * lay.image_stride + b.c0 * g.kernel_size * lay.row_stride;
  write_vectors<ND, U, V>(tile, taps, image, g, t, lay, b);
}

}  // namespace im2col::cuda
