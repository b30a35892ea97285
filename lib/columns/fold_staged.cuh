// The channels-first fold staged in shared memory (columns.cu chooses it
// where the planes fit, 32 KB of columns a block: 7 x 7 to 28 x 28 maps of a
// 3 x 3 window, wav2vec's lines of 3199): a block takes whole planes of
// consecutive channels of one image. Their column entries are one contiguous
// run of the columns (rows of K * lc entries, no gaps between rows), copied
// into shared memory with aligned 16-byte loads; then each thread gathers
// whole elements from there (the per-thread gather, fold_cf_kernel, reads
// the columns unaligned and scalar, one window's taps at a time).
//
// It sums each element's taps in increasing order (deterministic). The
// load and gather phases are device functions of their own, separated by a
// barrier, so that tests/host/fold_staged_on_host.cc runs them as host code.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/device_util.cuh"
#include "common/geometry.h"

namespace im2col::cuda {

constexpr size_t kStagedMaxBytes = 32 * 1024;        // per block
constexpr size_t kStagedMaxOutBytes = 48 * 1024;     // with staged outputs (no opt-in needed)
constexpr size_t kStagedPreferredBytes = 16 * 1024;  // more channels per block up to this
constexpr int64_t kStagedPlaneElements = 1024;       // and up to this many outputs a block
constexpr int kStagedRun = 4;                        // V: runs of S * V elements a thread

inline size_t staged_round16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// Copies items [0, count) with the block's threads, U items a thread at a
// time: the U loads are issued before their stores, so that a thread has U
// loads in flight (one at a time, the copies were latency-bound).
template <int U, typename T, typename Load, typename Store>
__device__ __forceinline__ void staged_copy(int32_t count, Load&& load, Store&& store) {
  for (int32_t i0 = threadIdx.x; i0 < count; i0 += U * blockDim.x) {
    T r[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int32_t i = i0 + u * static_cast<int32_t>(blockDim.x);
      if (i < count) r[u] = load(i);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int32_t i = i0 + u * static_cast<int32_t>(blockDim.x);
      if (i < count) store(i, r[u]);
    }
  }
}

// --- channels-first planes ------------------------------------------------

// How a thread's run of outputs (S * V consecutive elements of a line) is
// stored. Scalar stores of runs leave a warp's store 8 (bf16) to 16 sectors
// wide for 64-128 bytes: ncu had wav2vec's fold L2-bound (81%, 3.9 useful
// bytes a sector), step 64.
enum class RunStores : int32_t {
  kScalar,  // one element at a time (one element a thread, V == 1)
  kVector,  // lines of whole runs: a run is one aligned vector
  kStaged,  // 1-D lines of other lengths: runs as vectors into shared memory,
            // then the block's outputs (contiguous in x) copied out flat
};

struct FoldPlanesPlan {
  int32_t channels = 0;        // consecutive channels per block
  int32_t channel_blocks = 0;  // ceil(C / channels)
  int32_t plane_cols = 0;      // K * lc: one channel's column entries
  int32_t runs = 0;            // per line: ceil(in[ND - 1] / run), run = S * V or 1
  RunStores stores = RunStores::kScalar;
  int32_t out_pitch = 0;       // kStaged: elements per staged line (whole runs)
  size_t out_offset = 0;       // kStaged: bytes of shared memory before the staged outputs
  int64_t blocks = 0;
  size_t smem = 0;
  FastDiv plane;               // g.in_size
  FastDiv in[kMaxSpatial];     // g.in
  FastDiv runs_div, lines_div;  // runs per line, lines per plane
  FastDiv channel_blocks_div;
};

// elem_bytes: the columns' element size; out_bytes: x's. x_aligned: x lies
// on a boundary of run * out_bytes bytes.
inline bool plan_fold_planes(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc,
                             size_t elem_bytes, int64_t run, FoldPlanesPlan* p, size_t out_bytes,
                             bool x_aligned) {
  const int64_t V = 16 / static_cast<int64_t>(elem_bytes);
  const int64_t plane_cols = g.kernel_size * lay.lc, width = g.in[g.nd - 1];
  p->stores = run == 1 ? RunStores::kScalar
              : width % run == 0 && x_aligned ? RunStores::kVector
              : g.nd == 1 ? RunStores::kStaged
                                           : RunStores::kScalar;
  const int64_t pitch = (width + run - 1) / run * run;
  auto columns_bytes = [&](int64_t channels) {
    return staged_round16(static_cast<size_t>(channels * plane_cols + 2 * V) * elem_bytes);
  };
  // Staged outputs start on a 32-byte boundary: a run is stored as one
  // vector of up to 32 bytes (S * V elements).
  auto outputs_at = [&](int64_t channels) { return (columns_bytes(channels) + 31) / 32 * 32; };
  auto bytes = [&](int64_t channels) {
    if (p->stores != RunStores::kStaged) return columns_bytes(channels);
    return outputs_at(channels) + staged_round16(static_cast<size_t>(channels * pitch) * out_bytes);
  };
  if (lay.row_stride != lay.lc || columns_bytes(1) > kStagedMaxBytes || bytes(1) > kStagedMaxOutBytes) return false;
  int64_t cb = 1;
  while (cb * 2 <= C && bytes(cb * 2) <= kStagedPreferredBytes && cb * 2 * g.in_size <= kStagedPlaneElements)
    cb *= 2;
  p->channels = static_cast<int32_t>(cb);
  p->channel_blocks = static_cast<int32_t>((C + cb - 1) / cb);
  p->plane_cols = static_cast<int32_t>(plane_cols);
  p->runs = static_cast<int32_t>((width + run - 1) / run);
  p->runs_div = FastDiv(p->runs);
  p->lines_div = FastDiv(g.in_size / width);
  p->blocks = nc * p->channel_blocks;
  p->smem = bytes(cb);
  p->out_pitch = p->stores == RunStores::kStaged ? static_cast<int32_t>(pitch) : 0;
  p->out_offset = outputs_at(cb);
  p->plane = FastDiv(g.in_size);
  for (int d = 0; d < g.nd; ++d) p->in[d] = FastDiv(g.in[d]);
  p->channel_blocks_div = FastDiv(p->channel_blocks);
  return p->blocks < (int64_t{1} << 31);
}

// The block's image n and first channel c0, and how many channels it takes.
struct PlanesBlock {
  int32_t n, c0, channels;
};

__device__ __forceinline__ PlanesBlock planes_block(const FoldPlanesPlan& p, int64_t C) {
  int32_t n, cb;
  p.channel_blocks_div.divmod(static_cast<int32_t>(blockIdx.x), n, cb);
  const int32_t c0 = cb * p.channels;
  return {n, c0, static_cast<int32_t>(C - c0 < p.channels ? C - c0 : p.channels)};
}

// Copies the block's column entries into the tile: entry i of the run at
// tile[head + i], head = the run's offset from a 16-byte boundary (cols is
// 16-byte aligned). Returns head.
template <typename TC>
__device__ __forceinline__ int32_t fold_planes_load(TC* tile, const TC* __restrict__ cols, const ColumnsLayout& lay,
                                                    int64_t K, const FoldPlanesPlan& p, const PlanesBlock& b) {
  constexpr int V = 16 / sizeof(TC);
  // Moved as raw words: a Pack of 8 bfloat16 held 8 registers, so the 4
  // vectors in flight took 32 (45 a thread, 5 blocks a multiprocessor).
  using Vec = RawWords<TC, V>;
  const int64_t start = b.n * lay.image_stride + static_cast<int64_t>(b.c0) * K * lay.lc;
  const int64_t end = start + static_cast<int64_t>(b.channels) * p.plane_cols;
  const int64_t base = start - start % V;
  staged_copy<4, Vec>(
      static_cast<int32_t>((end - base + V - 1) / V),
      [&](int32_t i) {
        const int64_t e = base + static_cast<int64_t>(i) * V;
        if (e >= start && e + V <= end) return load_raw<TC, V>(cols + e);
        Pack<TC, V> v{};  // the run's first or last vector: only its entries of the run
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (e + j >= start && e + j < end) v.v[j] = cols[e + j];
        Vec r;
        memcpy(&r, &v, sizeof(r));
        return r;
      },
      [&](int32_t i, const Vec& v) { reinterpret_cast<Vec*>(tile)[i] = v; });
  return static_cast<int32_t>(start - base);
}

// Each thread sums whole elements of the block's planes from the tile
// (column entries from tile[0], the run's first). Two ways:
//  - V > 1 (stride S of 1 or 2 along lines, no lhs dilation there): a thread
//    takes S * V consecutive elements of a line; each tap of the last
//    dimension reads one phase of them (strided_position), V entries at
//    consecutive positions: the tap's index math is paid once for V elements.
//  - V == 1: a thread takes one element; along the last dimension each tap
//    reads it at one window position at most (position_reading), with the
//    stride S when S > 0 (a compile-time constant), else g.stride.
//    taps_reading's run-time divisions made wav2vec's fold 1.6x slower
//    (step 58).
template <int ND, int S, int V, RunStores ST, typename TC, typename TX>
__device__ __forceinline__ void fold_planes_gather(const TC* tile, TX* __restrict__ x, const Geometry& g, int64_t C,
                                                   int64_t n0, const ColumnsLayout& lay, const FoldPlanesPlan& p,
                                                   const PlanesBlock& b, bool accumulate, TX* out_tile) {
  using A = typename Acc<TX>::type;
  const int32_t kw = static_cast<int32_t>(g.kernel[ND - 1]), ow = static_cast<int32_t>(g.out[ND - 1]);
  const int32_t l0 = static_cast<int32_t>(lay.l0), lc = static_cast<int32_t>(lay.lc);
  TX* xb = x + ((n0 + b.n) * C + b.c0) * g.in_size;
  if constexpr (V > 1) {
    static_assert(S == 1 || S == 2, "runs of S * V elements need a compile-time stride");
    const int32_t width = static_cast<int32_t>(g.in[ND - 1]);
    const int32_t items = b.channels * static_cast<int32_t>(g.in_size / width) * p.runs;
    for (int32_t item = threadIdx.x; item < items; item += blockDim.x) {
      int32_t line, run, ci, inner, q[kMaxSpatial];
      p.runs_div.divmod(item, line, run);
      p.lines_div.divmod(line, ci, inner);
#pragma unroll
      for (int d = ND - 2; d > 0; --d) p.in[d].divmod(inner, inner, q[d]);
      if (ND > 1) q[0] = inner;
      const int32_t w0 = run * S * V;
      q[ND - 1] = w0;
      TX* xr = xb + static_cast<int64_t>(line) * width + w0;
      A acc[S][V];  // element w0 + S * v + h in acc[h][v]
#pragma unroll
      for (int h = 0; h < S; ++h)
#pragma unroll
        for (int v = 0; v < V; ++v)
          acc[h][v] = accumulate && w0 + S * v + h < width ? static_cast<A>(to_acc(xr[S * v + h])) : A(0);
      const TC* plane = tile + ci * p.plane_cols - l0;
      // Adds each tap's entries at positions first + v of its row where
      // valid(first, v) holds; the bounds are compared with first itself, so
      // a check costs no add.
      auto taps_of_line = [&](const TC* rows, auto valid) {
        for (int32_t j = 0; j < kw; ++j, rows += lc) {
          int32_t phase;
          const int32_t first = strided_position<int32_t>(g, ND - 1, w0, j, S, &phase);
#pragma unroll
          for (int v = 0; v < V; ++v) {
            if (valid(first, v)) {
              const A e = static_cast<A>(to_acc(rows[first + v]));
#pragma unroll
              for (int h = 0; h < S; ++h)
                if (h == phase) acc[h][v] += e;
            }
          }
        }
      };
      for_each_outer_tap<ND>(g, q, [&](int32_t k_outer, int32_t o_outer) {
        const int32_t line_start = o_outer * ow;
        const TC* rows = plane + k_outer * kw * lc + line_start;
        // A line of outputs wholly inside the chunk needs only the position
        // check (every line, where the columns are not split into chunks):
        // 2 instructions an element fewer, of ~8 (step 60).
        if (line_start >= l0 && line_start + ow <= l0 + lc) {
          taps_of_line(rows, [&](int32_t first, int v) { return first >= -v && first < ow - v; });
        } else {
          taps_of_line(rows, [&](int32_t first, int v) {
            return static_cast<uint32_t>(first + v) < static_cast<uint32_t>(ow) &&
                   static_cast<uint32_t>(line_start + first + v - l0) < static_cast<uint32_t>(lc);
          });
        }
      });
      if constexpr (ST == RunStores::kScalar) {
#pragma unroll
        for (int h = 0; h < S; ++h)
#pragma unroll
          for (int v = 0; v < V; ++v)
            if (w0 + S * v + h < width) xr[S * v + h] = store_value<TX>(acc[h][v]);
      } else {
        Pack<TX, S * V> out;
#pragma unroll
        for (int h = 0; h < S; ++h)
#pragma unroll
          for (int v = 0; v < V; ++v) out.v[S * v + h] = store_value<TX>(acc[h][v]);
        // Staged runs past the line's end land in its pitch's padding.
        TX* to = ST == RunStores::kVector ? xr : out_tile + static_cast<int64_t>(line) * p.out_pitch + w0;
        *reinterpret_cast<Pack<TX, S * V>*>(to) = out;
      }
    }
  } else {
    const int32_t s = S > 0 ? S : static_cast<int32_t>(g.stride[ND - 1]);
    const int32_t elements = b.channels * static_cast<int32_t>(g.in_size);
#pragma unroll 2
    for (int32_t e = threadIdx.x; e < elements; e += blockDim.x) {
      int32_t ci, qi, q[kMaxSpatial];
      p.plane.divmod(e, ci, qi);
#pragma unroll
      for (int d = ND - 1; d > 0; --d) p.in[d].divmod(qi, qi, q[d]);
      q[0] = qi;
      A acc = accumulate ? static_cast<A>(to_acc(xb[e])) : A(0);
      const TC* plane = tile + ci * p.plane_cols - l0;
      for_each_outer_tap<ND>(g, q, [&](int32_t k_outer, int32_t o_outer) {
        const TC* rows = plane + k_outer * kw * lc;
        for (int32_t k = 0; k < kw; ++k, rows += lc) {
          const int32_t o = position_reading<int32_t>(g, ND - 1, q[ND - 1], k, s);
          const int32_t l = o_outer * ow + o;
          if (o >= 0 && static_cast<uint32_t>(l - l0) < static_cast<uint32_t>(lc)) acc += static_cast<A>(to_acc(rows[l]));
        }
      });
      xb[e] = store_value<TX>(acc);
    }
  }
}

// RunStores::kStaged, after a barrier: the block's outputs, contiguous in x,
// stored flat from their staged lines (consecutive threads, consecutive
// elements).
template <int ND, typename TX>
__device__ __forceinline__ void fold_planes_store(const TX* out_tile, TX* __restrict__ x, const Geometry& g,
                                                  int64_t C, int64_t n0, const FoldPlanesPlan& p,
                                                  const PlanesBlock& b) {
  TX* xb = x + ((n0 + b.n) * C + b.c0) * g.in_size;
  const int32_t count = b.channels * static_cast<int32_t>(g.in_size);
  for (int32_t e = threadIdx.x; e < count; e += blockDim.x) {
    int32_t line, w;
    p.in[ND - 1].divmod(e, line, w);
    xb[e] = out_tile[line * p.out_pitch + w];
  }
}

// 8 blocks a multiprocessor where 32 registers hold the kernel without
// spills (1-D and 2-D, elements of up to 4 bytes; it took 39-40, so 6
// blocks); elsewhere (0) the compiler's choice.
template <int ND, typename TC>
constexpr int kStagedBlocksPerSM = ND < 3 && sizeof(TC) == 2 ? 8 : 0;

template <int ND, int S, int V, RunStores ST, typename TC, typename TX>
__global__ void __launch_bounds__(kThreads, kStagedBlocksPerSM<ND, TC>)
fold_planes_kernel(const TC* __restrict__ cols, TX* __restrict__ x, Geometry g, int64_t C, int64_t n0,
                   ColumnsLayout lay, FoldPlanesPlan p, bool accumulate) {
  extern __shared__ __align__(32) unsigned char planes_smem[];  // 32: the staged outputs' vectors
  TC* tile = reinterpret_cast<TC*>(planes_smem);
  const PlanesBlock b = planes_block(p, C);
  const int32_t head = fold_planes_load(tile, cols, lay, g.kernel_size, p, b);
  __syncthreads();
  TX* out_tile = reinterpret_cast<TX*>(planes_smem + p.out_offset);
  fold_planes_gather<ND, S, V, ST>(tile + head, x, g, C, n0, lay, p, b, accumulate, out_tile);
  if constexpr (ST == RunStores::kStaged) {
    __syncthreads();
    fold_planes_store<ND>(out_tile, x, g, C, n0, p, b);
  }
}

}  // namespace im2col::cuda
