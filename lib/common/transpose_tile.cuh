// The tile of the channels-first to channels-last copy (relayout.cu): 64
// positions x 128 bytes of channels, staged in shared memory as rows of
// positions. Positions are counted across images (position P is position
// P % size of image P / size), so that images smaller than a tile (a
// filter's taps, a 7 x 7 feature map) still fill it. Loads read 16-byte runs of positions of one channel and
// stores write 16-byte runs of channels of one position, so both sides of the
// copy move whole vectors. Each row's eight 16-byte chunks are XOR-swizzled
// by the position's vector index: the load's scalar writes (8 runs of
// positions x 4 channels per warp) and the store's 16-byte reads (8 chunks of
// one position per quarter warp) then fall in distinct banks (2-byte and
// 4-byte elements; 8-byte ones take two ways).
//
// The two phases are functions of one thread so that the host test
// (tests/host/transpose_on_host.cc) can run them thread by thread.
#pragma once

#include <cstdint>

#include "common/device_util.cuh"

namespace im2col::cuda::transpose {

constexpr int kPositions = 64;  // per tile
constexpr int kChunks = 8;      // 16-byte chunks of channels per position

template <typename T>
struct Tile {
  static constexpr int V = 16 / sizeof(T);        // elements per chunk
  static constexpr int kChannels = kChunks * V;   // per tile
  static constexpr int kElements = kPositions * kChannels;
  static constexpr int kRuns = kPositions / V;    // 16-byte runs of positions per channel
};

// Element (position s, channel ch) of the tile: chunk ch / V of row s,
// swizzled by s's vector index.
template <typename T>
__device__ __forceinline__ int tile_index(int s, int ch) {
  constexpr int V = Tile<T>::V;
  return s * Tile<T>::kChannels + (((ch / V) ^ ((s / V) % kChunks)) * V) + ch % V;
}

// The load's slot f (thread + k * kThreads): which run of positions and which
// channel of the tile it copies. Lanes: 8 runs (the swizzle's 8 values) x 4
// channels per warp.
template <typename T>
__device__ __forceinline__ void load_slot(int f, int& run, int& ch) {
  run = f % kChunks + kChunks * (f / (kChunks * Tile<T>::kChannels));
  ch = (f / kChunks) % Tile<T>::kChannels;
}

// Element (position gs across images, channel gc) of channels-first images,
// and its position within its image (`at`).
template <typename T>
__device__ __forceinline__ const T* element(const T* src, int32_t c, const FastDiv& size,
                                            int32_t gs, int32_t gc, int32_t& at) {
  int32_t image;
  size.divmod(gs, image, at);
  return src + (static_cast<int64_t>(image) * c + gc) * static_cast<int32_t>(size.d) + at;
}

// Load phase: thread `thread` of kThreads copies its runs of positions
// [s0, s0 + kPositions) (of `total`, across images) of channels
// [c0, c0 + kChannels) of the channels-first images `src` (n x c x size)
// into the tile. kVector: 16-byte loads (size a multiple of V, src 16-byte
// aligned: a run never crosses an image).
template <typename T, bool kVector>
__device__ __forceinline__ void load_tile(const T* src, int32_t c, const FastDiv& size,
                                          int32_t total, int32_t s0, int32_t c0, T* tile,
                                          int thread) {
  using S = Tile<T>;
  constexpr int V = S::V;
  // Every load of a thread is issued before its first write to the tile.
  constexpr int kPerThread = S::kChannels * S::kRuns / kThreads;
  static_assert(kPerThread * kThreads == S::kChannels * S::kRuns);
  Pack<T, V> v[kPerThread]{};
  int run[kPerThread], ch[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    load_slot<T>(thread + k * kThreads, run[k], ch[k]);
    const int32_t gc = c0 + ch[k], gs = s0 + run[k] * V;
    if (gc >= c || gs >= total) continue;
    int32_t at;
    const T* p = element(src, c, size, gs, gc, at);
    if constexpr (kVector) {
      v[k] = *reinterpret_cast<const Pack<T, V>*>(p);
    } else {  // the run may cross into the next image
      const int32_t extent = static_cast<int32_t>(size.d);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        if (gs + i < total) v[k].v[i] = *p;
        ++p;
        if (++at == extent) {
          at = 0;
          p += static_cast<int64_t>(c - 1) * extent;
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k)
#pragma unroll
    for (int i = 0; i < V; ++i) tile[tile_index<T>(run[k] * V + i, ch[k])] = v[k].v[i];
}

// Position s of the source lands at row reversed_in_runs(s) of dst: the
// positions reversed within each run of `run` (a filter's taps read
// backwards; run 1 keeps them in order).
__device__ __forceinline__ int32_t reversed_in_runs(int32_t s, const FastDiv& run) {
  int32_t q, r;
  run.divmod(s, q, r);
  return s - r + (static_cast<int32_t>(run.d) - 1 - r);
}

// Store phase: the tile's positions as rows of channels of the channels-last
// images `dst` (total x c), position s at row reversed_in_runs(s, run).
// kVector: 16-byte stores (c a multiple of V, dst 16-byte aligned).
template <typename T, bool kVector>
__device__ __forceinline__ void store_tile(const T* tile, int32_t c, int32_t total, int32_t s0,
                                           int32_t c0, const FastDiv& run, T* dst, int thread) {
  using S = Tile<T>;
  constexpr int V = S::V;
  constexpr int kPerThread = kPositions * kChunks / kThreads;
  static_assert(kPerThread * kThreads == kPositions * kChunks);
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int f = thread + k * kThreads;
    const int s = f / kChunks, chunk = f % kChunks;
    const int32_t gs = s0 + s, gc = c0 + chunk * V;
    if (gs >= total || gc >= c) continue;
    const T* t = tile + tile_index<T>(s, chunk * V);
    T* q = dst + static_cast<int64_t>(reversed_in_runs(gs, run)) * c + gc;
    if constexpr (kVector) {
      *reinterpret_cast<Pack<T, V>*>(q) = *reinterpret_cast<const Pack<T, V>*>(t);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (gc + i < c) q[i] = t[i];
    }
  }
}

}  // namespace im2col::cuda::transpose
