// Grouped convolution, channels-first or channels-last, for groups of a few to
// kGroupedMaxChannels channels (ResNeXt's 4-16): each group's GEMM is too
// thin for the tensor cores, and im2col columns would cost K times the
// input's traffic. The kernels take up to 64 output channels per group (8
// rows of threads); direct_conv.h sets how many they are given.
//
// Forward: a block stages the input of one group under a band of output rows
// in shared memory (tile.cuh), a chunk of its channels at a time, with the
// chunk's weights as [channel][tap][output channel], and computes the band as
// a small register-tiled GEMM: each thread kRO output channels x kRP
// positions, a tap costing kRP tile reads and kRO / 4 vector weight reads for
// kRO * kRP multiply-adds. The input gradient is the same kernel on the
// transposed geometry (geometry.h), reading the kernel backwards.
//
// Filter gradient: a block takes one slice (FilterSlices), one group and one
// chunk of its input channels; it stages the tile and, beside it, the band's
// dy as [position][output channel]. Each thread sums kRO output channels x
// kRT (input channel, tap) pairs over interleaved positions; the threads that
// share outputs meet in shared memory in a fixed order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "common/device_util.cuh"
#include "common/tile.cuh"
#include "conv/direct/direct_conv.h"
#include "conv/direct/direct_util.cuh"

namespace im2col::cuda {
namespace {

using DataType = xla::ffi::DataType;

constexpr int kRO = 8;  // output channels per thread
constexpr int kRP = 4;  // output positions per thread (forward)
constexpr int kRT = 4;  // (input channel, tap) pairs per thread (filter gradient)
// Blocks per SM the kernels are compiled for: 80 registers (float
// accumulators) leave the band's latency to other blocks; double sums keep 2.
template <typename A>
constexpr int kGroupedBlocksPerSM = sizeof(A) == 8 ? 2 : 3;
constexpr int32_t kStage = 256;            // dy positions staged at once (filter gradient)
constexpr size_t kReduceBytes = 32 * 1024;  // shared memory of the filter gradient's reduction

// The channels a block reads (the tile) and writes, the threads' layout, and
// where the weights lie: weight (output channel a, input channel b, tap kk)
// of group gi at gi * group_stride + a * out_stride + b * in_stride +
// kk * tap_stride.
struct GroupShape {
  bool cl;
  int64_t groups;
  int32_t cin, cout;  // per group
  int64_t cin_total, cout_total;
  int32_t cout_pad;   // cout rounded up to kRO
  int32_t rows;       // rows of threads, kRO output channels each
  int32_t cols;       // threads per row: kThreads / (rows rounded up to a power of 2)
  int64_t group_stride, out_stride, in_stride, tap_stride;
};

GroupShape group_shape(int64_t groups, int64_t cin_total, int64_t cout_total, int64_t K, bool transposed,
                       bool cl) {
  GroupShape s;
  s.cl = cl;
  s.groups = groups;
  s.cin = static_cast<int32_t>(cin_total / groups);
  s.cout = static_cast<int32_t>(cout_total / groups);
  s.cin_total = cin_total;
  s.cout_total = cout_total;
  s.cout_pad = (s.cout + kRO - 1) / kRO * kRO;
  s.rows = s.cout_pad / kRO;
  int32_t rows_pow2 = 1;
  while (rows_pow2 < s.rows) rows_pow2 *= 2;
  s.cols = kThreads / rows_pow2;
  // The filter is (O, Cg, K) channels-first, (O, K, Cg) channels-last, O =
  // groups * Og: the forward reads (a = output channel, b = input channel);
  // the input gradient the reverse.
  s.group_stride = static_cast<int64_t>(s.cin) * s.cout * K;
  const int64_t o_stride = cl ? K * (transposed ? s.cout : s.cin) : (transposed ? s.cout : s.cin) * K;
  const int64_t c_stride = cl ? 1 : K;
  s.out_stride = transposed ? c_stride : o_stride;
  s.in_stride = transposed ? o_stride : c_stride;
  s.tap_stride = cl ? (transposed ? s.cout : s.cin) : 1;
  return s;
}

// --- forward and input gradient ----------------------------------------------------

// Rows of kRO-channel vectors in shared memory (the staged weights and dy):
// padded by one 16-byte vector, so that stores of consecutive rows spread
// over the banks while every row stays 16-byte aligned.
__host__ __device__ __forceinline__ int32_t padded_row(const GroupShape& s, size_t acc_bytes) {
  return s.cout_pad + static_cast<int32_t>(16 / acc_bytes);
}

// Stages the weights of input channels [c0, c0 + cc) of the group as
// [channel][tap][output channel] (rows of padded_row), output channels
// padded with zeros to cout_pad. Consecutive threads read nearby weights:
// (a, b, tap) in that order where the filter's a axis is the outer one (the
// forward), (b, a, tap) where b is (the input gradient).
template <typename T, typename A>
__device__ __forceinline__ void stage_weights(A* weights, const T* w_group, const GroupShape& s, int32_t c0,
                                              int32_t cc, int32_t K) {
  const int32_t row = padded_row(s, sizeof(A));
  const bool a_outer = s.out_stride > s.in_stride;
  for (int32_t i = threadIdx.x; i < s.cout * cc * K; i += kThreads) {
    int32_t a, ci, kk, r;
    if (a_outer) {
      a = i / (cc * K), r = i - a * cc * K;
      ci = r / K, kk = r - ci * K;
    } else {
      ci = i / (s.cout * K), r = i - ci * s.cout * K;
      a = r / K, kk = r - a * K;
    }
    weights[(ci * K + kk) * row + a] =
        static_cast<A>(to_acc(__ldg(w_group + a * s.out_stride + (c0 + ci) * s.in_stride + kk * s.tap_stride)));
  }
  const int32_t pad = s.cout_pad - s.cout;
  for (int32_t i = threadIdx.x; i < cc * K * pad; i += kThreads) {
    const int32_t r = i / pad;
    weights[r * row + s.cout + (i - r * pad)] = A(0);
  }
}

// The strides of channels and spatial offsets of an image (image_index):
// channels-first (N, C, size), channels-last (N, size, C).
struct ImageStrides {
  int64_t channel, spatial;
};

__host__ __device__ __forceinline__ ImageStrides image_strides(bool cl, int64_t C, int64_t size) {
  return cl ? ImageStrides{1, C} : ImageStrides{size, 1};
}

// The tile of a chunk of a group's channels, from its first channel x_chunk;
// `chunk` divides by t.channels. Channels adjacent in memory (channels-last,
// or channels-first with one spatial position) take the interleaved fill.
template <int ND, typename T>
__device__ __forceinline__ void fill_group(T* tile, const T* x_chunk, ImageStrides st, const FastDiv& chunk,
                                           const Geometry& g, const TilePlan& t, const TileBlock& b) {
  if (st.channel == 1) fill_channels_interleaved<ND>(tile, x_chunk, st.spatial, chunk, g, t, b);
  else fill_channels<ND>(tile, x_chunk, st.channel, st.spatial, g, t, b);
}

// v[0, kRO) = src[0, kRO), in 16-byte reads (src aligned to 16 bytes).
template <typename A>
__device__ __forceinline__ void load_outputs(A (&v)[kRO], const A* src) {
  constexpr int W = 16 / sizeof(A);
#pragma unroll
  for (int i = 0; i < kRO; i += W) {
    const Pack<A, W> p = *reinterpret_cast<const Pack<A, W>*>(src + i);
#pragma unroll
    for (int u = 0; u < W; ++u) v[i + u] = p.v[u];
  }
}

template <int ND, typename T, typename TY>
__global__ void __launch_bounds__(kThreads, kGroupedBlocksPerSM<typename Acc<TY>::type>)
grouped_kernel(const T* __restrict__ x, const T* __restrict__ w, TY* __restrict__ y, Geometry g, TilePlan t,
               FastDiv chunk, GroupShape s, bool flip) {
  using A = typename Acc<TY>::type;
  extern __shared__ __align__(16) unsigned char smem[];
  int32_t* taps = reinterpret_cast<int32_t*>(smem);
  T* tile = reinterpret_cast<T*>(smem + table_bytes(t.table));
  A* weights = reinterpret_cast<A*>(smem + tile_end(t, sizeof(T)));
  ColumnsLayout lay;
  lay.lc = g.out_size;
  int64_t b = blockIdx.x, band, gi;
  divmod(b, static_cast<int64_t>(t.bands), b, band);
  divmod(b, s.groups, b, gi);
  TileBlock tb;
  tb.n = b;
  tb.c0 = 0;
  band_positions(t, lay, band, tb);
  const int32_t K = static_cast<int32_t>(g.kernel_size);
  for (int32_t kk = threadIdx.x; kk < K; kk += kThreads) taps[kk] = tap_offset<ND>(g, t, flip ? K - 1 - kk : kk);
  const int32_t row = threadIdx.x / s.cols, col = threadIdx.x % s.cols, oc0 = row * kRO;
  const bool active = row < s.rows;
  const T* x_group = x + image_index(s.cl, tb.n, gi * s.cin, 0, s.cin_total, g.in_size);
  const ImageStrides xst = image_strides(s.cl, s.cin_total, g.in_size);
  const T* w_group = w + gi * s.group_stride;
  TY* y_group = y + image_index(s.cl, tb.n, gi * s.cout, 0, s.cout_total, g.out_size);
  const ImageStrides ys = image_strides(s.cl, s.cout_total, g.out_size);
  const bool one_chunk = t.channels >= s.cin;
  const int32_t wrow = padded_row(s, sizeof(A));
  for (int32_t q0 = tb.p_begin; q0 < tb.p_end; q0 += s.cols * kRP) {
    int32_t pos[kRP];  // tile offsets; 0 (a valid read, never stored) past the band
#pragma unroll
    for (int j = 0; j < kRP; ++j) {
      const int32_t e = q0 + col + j * s.cols;
      pos[j] = e < tb.p_end ? position_offset<ND>(g, t, e, tb.row0) : 0;
    }
    A acc[kRO][kRP];
#pragma unroll
    for (int i = 0; i < kRO; ++i)
#pragma unroll
      for (int j = 0; j < kRP; ++j) acc[i][j] = A(0);
    for (int32_t c0 = 0; c0 < s.cin; c0 += t.channels) {
      const int32_t cc = t.channels < s.cin - c0 ? t.channels : s.cin - c0;
      if (!one_chunk || q0 == tb.p_begin) {
        __syncthreads();  // the previous chunk's reads are done
        tb.channels = cc;
        fill_group<ND>(tile, x_group + c0 * xst.channel, xst, chunk, g, t, tb);
        stage_weights(weights, w_group, s, c0, cc, K);
        __syncthreads();
      }
      if (!active) continue;
      // Taps outermost: a tap's tile addresses are set once, then step by a
      // plane per channel.
      for (int32_t kk = 0; kk < K; ++kk) {
        const T* xs = tile + taps[kk];
        const A* wc = weights + kk * wrow + oc0;
#pragma unroll 2
        for (int32_t ci = 0; ci < cc; ++ci, xs += t.plane, wc += K * wrow) {
          A xv[kRP], wv[kRO];
#pragma unroll
          for (int j = 0; j < kRP; ++j) xv[j] = static_cast<A>(to_acc(xs[pos[j]]));
          load_outputs(wv, wc);
#pragma unroll
          for (int i = 0; i < kRO; ++i)
#pragma unroll
            for (int j = 0; j < kRP; ++j) acc[i][j] += wv[i] * xv[j];
        }
      }
    }
    if (!active) continue;
#pragma unroll
    for (int i = 0; i < kRO; ++i) {
      if (oc0 + i >= s.cout) break;
      TY* out = y_group + (oc0 + i) * ys.channel;
#pragma unroll
      for (int j = 0; j < kRP; ++j) {
        const int32_t e = q0 + col + j * s.cols;
        if (e < tb.p_end) out[e * ys.spatial] = store_value<TY>(acc[i][j]);
      }
    }
  }
}

// The forward plan: bands of about one pass of the block's positions, all
// the group's channels in one chunk where shared memory allows.
bool plan_grouped(const Geometry& g, const GroupShape& s, size_t elem, size_t acc, TilePlan* t) {
  ColumnsLayout lay;
  lay.lc = g.out_size;
  if (!tile_extents(g, lay, t)) return false;
  const int64_t K = g.kernel_size, rows = tile_rows_total(*t, lay);
  int64_t band = std::max<int64_t>(1, std::min<int64_t>(rows, int64_t{s.cols} * kRP / t->rest));
  int64_t channels = s.cin;
  auto bytes = [&](int64_t band_, int64_t ch) {
    return table_bytes(K) + round16(static_cast<size_t>(ch * tile_plane(g, *t, band_)) * elem) +
           static_cast<size_t>(ch * K * padded_row(s, acc)) * acc;
  };
  while (bytes(band, channels) > kTileSmemMax && channels > 1) channels = (channels + 1) / 2;
  while (bytes(band, channels) > kTileSmemMax && band > 1) band = (band + 1) / 2;
  if (bytes(band, channels) > kTileSmemMax) return false;
  size_tile(g, lay, s.cin, false, band, channels, K, bytes(band, channels), t);
  return g.out_size < (int64_t{1} << 31) && g.in_size < (int64_t{1} << 31);
}

template <int ND, typename T, typename TY>
bool grouped_launch(const T* x, const T* w, TY* y, const Geometry& g, int64_t n, const GroupShape& s, bool flip,
                    cudaStream_t stream) {
  using A = typename Acc<TY>::type;
  TilePlan t;
  if (!plan_grouped(g, s, sizeof(T), sizeof(A), &t)) return false;
  const int64_t blocks = n * s.groups * t.bands;
  if (blocks >= (int64_t{1} << 31)) return false;
  grouped_kernel<ND, T, TY><<<static_cast<unsigned>(blocks), kThreads, t.smem, stream>>>(
      x, w, y, g, t, FastDiv(t.channels), s, flip);
  return true;
}

// --- filter gradient -----------------------------------------------------------

// (input channel, tap) pairs of a chunk, in kRT columns per thread.
__host__ __device__ __forceinline__ int32_t filter_units(const GroupShape& s, int32_t cc, int32_t K) {
  return s.rows * ((cc * K + kRT - 1) / kRT);
}

struct FilterPlan {
  TilePlan t;     // t.channels: input channels per chunk (a block dimension)
  FastDiv chunk;  // t.channels
  int32_t stage;  // dy positions staged at once
  int32_t chunks;
};

template <int ND, typename T>
__global__ void __launch_bounds__(kThreads, kGroupedBlocksPerSM<typename Acc<T>::type>)
grouped_filter_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                      typename Acc<T>::type* __restrict__ partials, Geometry g, FilterPlan p, GroupShape s,
                      FilterSlices f) {
  using A = typename Acc<T>::type;
  extern __shared__ __align__(16) unsigned char smem[];
  const TilePlan& t = p.t;
  int32_t* taps = reinterpret_cast<int32_t*>(smem);
  T* tile = reinterpret_cast<T*>(smem + table_bytes(t.table));
  A* dys = reinterpret_cast<A*>(smem + tile_end(t, sizeof(T)));
  const int32_t stride = padded_row(s, sizeof(A));
  int32_t* offsets = reinterpret_cast<int32_t*>(dys + round16(static_cast<size_t>(p.stage) * stride * sizeof(A)) / sizeof(A));
  int64_t b = blockIdx.x, chunk, gi, slice;
  divmod(b, static_cast<int64_t>(p.chunks), b, chunk);
  divmod(b, s.groups, slice, gi);
  const SliceRows r = slice_rows(f, g, slice);
  const int32_t K = static_cast<int32_t>(g.kernel_size);
  const int32_t c0 = static_cast<int32_t>(chunk) * t.channels;
  const int32_t cc = t.channels < s.cin - c0 ? t.channels : s.cin - c0;
  const int32_t columns = cc * K, tcols = (columns + kRT - 1) / kRT;
  const int32_t units = filter_units(s, cc, K), groups_of_units = kThreads / units;
  const int32_t u = threadIdx.x % units, q = threadIdx.x / units;
  const bool active = q < groups_of_units;
  const int32_t oc0 = u / tcols * kRO, jj0 = u % tcols * kRT;
  for (int32_t kk = threadIdx.x; kk < K; kk += kThreads) taps[kk] = tap_offset<ND>(g, t, kk);
  const ImageStrides xst = image_strides(s.cl, s.cin_total, g.in_size);
  const ImageStrides ds = image_strides(s.cl, s.cout_total, g.out_size);
  const T* x_group = x + image_index(s.cl, r.n, gi * s.cin + c0, 0, s.cin_total, g.in_size);
  const T* dy_group = dy + image_index(s.cl, r.n, gi * s.cout, 0, s.cout_total, g.out_size);
  A acc[kRO][kRT];
#pragma unroll
  for (int i = 0; i < kRO; ++i)
#pragma unroll
    for (int j = 0; j < kRT; ++j) acc[i][j] = A(0);
  int32_t column[kRT] = {};  // tile offset of each (input channel, tap) pair; 0 past the chunk
  TileBlock tb;
  tb.n = r.n;
  tb.c0 = 0;
  tb.channels = cc;
  for (int32_t row0 = r.row_begin; row0 < r.row_end; row0 += t.band) {
    tb.row0 = row0;
    tb.p_begin = row0 * t.rest;
    tb.p_end = (row0 + t.band < r.row_end ? row0 + t.band : r.row_end) * t.rest;
    __syncthreads();  // the previous band's reads are done
    fill_group<ND>(tile, x_group, xst, p.chunk, g, t, tb);
    if (row0 == r.row_begin) {  // the taps are visible after the barrier above
#pragma unroll
      for (int j = 0; j < kRT; ++j) {
        const int32_t jj = jj0 + j;
        column[j] = jj < columns ? jj / K * t.plane + taps[jj % K] : 0;
      }
    }
    for (int32_t s0 = tb.p_begin; s0 < tb.p_end; s0 += p.stage) {
      const int32_t count = p.stage < tb.p_end - s0 ? p.stage : tb.p_end - s0;
      if (s0 != tb.p_begin) __syncthreads();  // the previous stage's reads are done
      // 8 consecutive positions x 4 channels per warp: stores to distinct
      // banks, and channels-first 32-byte reads of dy (channels-last, where
      // channels are adjacent, a warp reads 8 runs of 4 channels).
      const int32_t span = 8 * s.cout_pad;
      for (int32_t i = threadIdx.x; i < (count + 7) / 8 * span; i += kThreads) {
        const int32_t pb = i / span, rem = i - pb * span;
        const int32_t a = rem / 8, pp = pb * 8 + rem % 8;
        if (pp < count)
          dys[pp * stride + a] =
              a < s.cout ? static_cast<A>(to_acc(__ldg(dy_group + a * ds.channel + (s0 + pp) * ds.spatial))) : A(0);
      }
      for (int32_t pp = threadIdx.x; pp < count; pp += kThreads)
        offsets[pp] = position_offset<ND>(g, t, s0 + pp, row0);
      __syncthreads();
      if (!active) continue;
#pragma unroll 2
      for (int32_t pp = q; pp < count; pp += groups_of_units) {
        const int32_t off = offsets[pp];
        A dv[kRO], xv[kRT];
        load_outputs(dv, dys + pp * stride + oc0);
#pragma unroll
        for (int j = 0; j < kRT; ++j) xv[j] = static_cast<A>(to_acc(tile[column[j] + off]));
#pragma unroll
        for (int i = 0; i < kRO; ++i)
#pragma unroll
          for (int j = 0; j < kRT; ++j) acc[i][j] += dv[i] * xv[j];
      }
    }
  }
  // The groups of threads sharing a unit meet in shared memory, summed by
  // one thread in group order; R sums per thread per round.
  constexpr int R = static_cast<int>(kReduceBytes / (kThreads * sizeof(A)));
  static_assert((kRO * kRT) % R == 0, "rounds of the reduction");
  A* sums = reinterpret_cast<A*>(smem);
  const int64_t taps_total = static_cast<int64_t>(s.cin) * K;
#pragma unroll
  for (int r0 = 0; r0 < kRO * kRT; r0 += R) {
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < R; ++rr) sums[rr * kThreads + threadIdx.x] = acc[(r0 + rr) / kRT][(r0 + rr) % kRT];
    __syncthreads();
    for (int32_t i = threadIdx.x; i < units * R; i += kThreads) {
      const int32_t uu = i % units, rr = i / units;
      A total = A(0);
      for (int32_t qq = 0; qq < groups_of_units; ++qq) total += sums[rr * kThreads + qq * units + uu];
      const int32_t a = uu / tcols * kRO + (r0 + rr) / kRT, jj = uu % tcols * kRT + (r0 + rr) % kRT;
      if (a < s.cout && jj < columns)
        partials[(slice * s.cout_total + gi * s.cout + a) * taps_total + c0 * K + jj] = total;
    }
  }
}

// The filter-gradient plan: bands of at most kStage positions, chunks of
// input channels that fit the threads (filter_units) and shared memory.
bool plan_grouped_filter(const Geometry& g, const GroupShape& s, const FilterSlices& f, size_t elem, size_t acc,
                         FilterPlan* p) {
  ColumnsLayout lay;
  lay.lc = std::min(f.rows, g.out[0]) * (g.out_size / g.out[0]);
  TilePlan& t = p->t;
  if (!tile_extents(g, lay, &t)) return false;
  const int32_t K = static_cast<int32_t>(g.kernel_size);
  const int64_t rows = tile_rows_total(t, lay);
  int64_t band = std::max<int64_t>(1, std::min<int64_t>(rows, kStage / t.rest));
  int64_t channels = s.cin;
  while (filter_units(s, static_cast<int32_t>(channels), K) > kThreads && channels > 1) channels = (channels + 1) / 2;
  if (filter_units(s, static_cast<int32_t>(channels), K) > kThreads) return false;
  const size_t stride = padded_row(s, acc);
  auto stage = [&](int64_t band_) { return std::min<int64_t>(kStage, band_ * t.rest); };
  auto bytes = [&](int64_t band_, int64_t ch) {
    return table_bytes(K) + round16(static_cast<size_t>(ch * tile_plane(g, t, band_)) * elem) +
           round16(static_cast<size_t>(stage(band_)) * stride * acc) + round16(static_cast<size_t>(stage(band_)) * 4);
  };
  while (bytes(band, channels) > kTileSmemMax && band > 1) band = (band + 1) / 2;
  while (bytes(band, channels) > kTileSmemMax && channels > 1) channels = (channels + 1) / 2;
  if (bytes(band, channels) > kTileSmemMax) return false;
  size_tile(g, lay, s.cin, false, band, channels, K, std::max(bytes(band, channels), kReduceBytes), &t);
  p->chunk = FastDiv(channels);
  p->stage = static_cast<int32_t>(stage(band));
  p->chunks = static_cast<int32_t>((s.cin + channels - 1) / channels);
  return g.out_size < (int64_t{1} << 31) && g.in_size < (int64_t{1} << 31);
}

template <int ND, typename T>
bool grouped_filter_launch(const T* dy, const T* x, typename Acc<T>::type* partials, const Geometry& g,
                           const GroupShape& s, const FilterSlices& f, cudaStream_t stream) {
  FilterPlan p;
  if (!plan_grouped_filter(g, s, f, sizeof(T), sizeof(typename Acc<T>::type), &p)) return false;
  const int64_t blocks = f.count * s.groups * p.chunks;
  if (blocks >= (int64_t{1} << 31)) return false;
  grouped_filter_kernel<ND, T><<<static_cast<unsigned>(blocks), kThreads, p.t.smem, stream>>>(
      dy, x, partials, g, p, s, f);
  return true;
}

bool grouped_applies(const DirectShapes& s) {
  const int64_t cg = s.c / s.groups, og = s.o / s.groups;
  return s.groups > 1 && !s.depthwise() && cg <= kGroupedMaxChannels &&
         og <= kGroupedMaxChannels;
}

}  // namespace

cudaError_t grouped_forward(const void* x, const void* w, void* y, DataType in, DataType out, const Geometry& g,
                            const DirectShapes& s, bool* done, cudaStream_t stream) {
  *done = false;
  if (!grouped_applies(s)) return cudaSuccess;
  const GroupShape gs = group_shape(s.groups, s.c, s.o, g.kernel_size, false, s.channels_last);
  return dispatch_rank(g.nd, [&](auto rank) {
    constexpr int ND = decltype(rank)::value;
    return with_types(in, out, [&](auto tag, auto out_tag) {
      using T = decltype(tag);
      using TY = decltype(out_tag);
      *done = grouped_launch<ND>(static_cast<const T*>(x), static_cast<const T*>(w), static_cast<TY*>(y), g, s.n,
                                 gs, false, stream);
      return cudaGetLastError();
    });
  });
}

cudaError_t grouped_backward_data(const void* dy, const void* w, void* dx, DataType type, const Geometry& g,
                                  const DirectShapes& s, bool* done, cudaStream_t stream) {
  *done = false;
  Geometry t;
  if (!grouped_applies(s) || !transposed_geometry(g, &t)) return cudaSuccess;
  const GroupShape gs = group_shape(s.groups, s.o, s.c, g.kernel_size, true, s.channels_last);
  return dispatch_rank(g.nd, [&](auto rank) {
    constexpr int ND = decltype(rank)::value;
    return with_type(type, [&](auto tag) {
      using T = decltype(tag);
      *done = grouped_launch<ND>(static_cast<const T*>(dy), static_cast<const T*>(w), static_cast<T*>(dx), t, s.n,
                                 gs, true, stream);
      return cudaGetLastError();
    });
  });
}

cudaError_t grouped_filter_partials(const void* dy, const void* x, void* partials, const FilterSlices& f,
                                    DataType type, const Geometry& g, const DirectShapes& s, bool* done,
                                    cudaStream_t stream) {
  *done = false;
  if (!grouped_applies(s)) return cudaSuccess;
  const GroupShape gs = group_shape(s.groups, s.c, s.o, g.kernel_size, false, s.channels_last);
  return dispatch_rank(g.nd, [&](auto rank) {
    constexpr int ND = decltype(rank)::value;
    return with_type(type, [&](auto tag) {
      using T = decltype(tag);
      *done = grouped_filter_launch<ND>(static_cast<const T*>(dy), static_cast<const T*>(x),
                                        static_cast<typename Acc<T>::type*>(partials), g, gs, f, stream);
      return cudaGetLastError();
    });
  });
}

}  // namespace im2col::cuda
