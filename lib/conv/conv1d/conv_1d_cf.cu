// Channels-first 1-D convolutions on tensor cores (conv_1d_cf.h).
//
// Both kernels stage 128-position tiles of a group's rows in shared memory by
// cp.async (16-byte vectors, zeros outside the rows), two buffers deep (three
// for the filter gradient where they fit), and multiply with m16n8k8 TF32
// mma.sync (operands truncated). Four warps a block.
//
// Convolution: the block's filter A (co x taps * ci) sits in shared memory
// for the whole block; each warp computes co x 32 output positions of a tile,
// its B fragments read from the image tile at the tap's displacement (rows:
// channels, columns: positions, so any displacement is a plain offset).
// Filter gradient: each warp sums its 32 positions of every tile into the
// block's columns of dw (A: dy rows, B: x rows at the tap's displacement);
// the four warps' sums are added in a fixed order at the end.
//
// Row strides (in floats) keep the fragment loads free of bank conflicts: a
// B fragment of the convolution reads rows t and columns g (t < 4, g < 8), so
// its stride is 8 mod 16; A fragments and the filter gradient's fragments
// read rows g and columns t, so theirs are 4 mod 8.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/device_info.h"
#include "common/device_util.cuh"
#include "common/mma_sync.cuh"
#include "conv/conv1d/conv_1d_cf.h"

namespace im2col::cuda {
namespace {

using implicit::Mma;

constexpr int kThreads1d = 128;
constexpr int kWarps = kThreads1d / 32;
constexpr int kTile = static_cast<int>(kConv1dCfPositions);
constexpr int kWarpPositions = kTile / kWarps;  // 32

// Floats of a tile row: 128 positions, the window's reach and up to 3 of
// alignment (a tile starts at the 16-byte boundary at or below its first
// position), in whole vectors.
int64_t tile_span(int64_t taps, int64_t dilation) {
  return (kTile + (taps - 1) * dilation + 3 + 3) / 4 * 4;
}
int64_t conv_row_stride(int64_t taps, int64_t dilation) {
  const int64_t span = tile_span(taps, dilation);
  return span + (8 - span % 16 + 16) % 16;
}
int64_t filter_x_stride(int64_t taps, int64_t dilation) {
  const int64_t span = tile_span(taps, dilation);
  return span % 8 == 0 ? span + 4 : span;
}
constexpr int kDyStride = kTile + 4;

// Bytes of the 16-byte vector at row position pos that lie in [0, limit).
__device__ __forceinline__ int vector_bytes(int64_t pos, int64_t limit) {
  if (pos < 0 || pos >= limit) return 0;
  const int64_t left = limit - pos;
  return left >= 4 ? 16 : static_cast<int>(left) * 4;
}

__device__ __forceinline__ int64_t floor4(int64_t v) { return v >= 0 ? v / 4 * 4 : -((-v + 3) / 4 * 4); }

// float32 bits as the TF32 operand: the tensor core reads the top 19 bits,
// truncating toward zero (as this project's wgmma kernels and cuBLAS's and
// cuDNN's Hopper kernels do). Rounding each fragment to nearest first
// (cvt.rna) put a dependent instruction before every mma: ncu had the
// kernels latency-bound (docs/optimization-log.md, step 49).
__device__ __forceinline__ uint32_t tf32_bits(float v) { return __float_as_uint(v); }

// Stages `rows` rows of `span` floats (stride `stride`) from row positions
// [first, first + span) of src (row pitch `pitch`), zeros outside [0, limit).
// Warp w copies rows w, w + 4, ...; lane l vectors l, l + 32, ... of each. A
// vector's bounds depend on its position alone, so they are worked out once
// a tile, not once a row: worked out per vector, they made staging about 40
// instructions a vector, three times the filter gradient's mma loop in the
// SASS (docs/optimization-log.md, step 50).
__device__ __forceinline__ void stage_rows(float* dst, int stride, const float* src, int64_t pitch,
                                           int rows, int span, int64_t first, int64_t limit) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t row_bytes = static_cast<uint32_t>(kWarps * stride) * 4;
  for (int v = lane; v < span / 4; v += 32) {
    const int64_t pos = first + 4 * v;
    const int bytes = vector_bytes(pos, limit);
    const float* from = src + warp * pitch + (bytes ? pos : 0);
    uint32_t to = shared_address(dst + warp * stride + 4 * v);
#pragma unroll 4
    for (int r = warp; r < rows; r += kWarps) {
      copy_async_bytes(to, from, bytes);
      from += kWarps * pitch;
      to += row_bytes;
    }
  }
}

// Tiles [tile0, tile1) through STAGES buffers: stage(tile, buffer) issues a
// tile's copies, body(tile, buffer) reads it once every thread's copies have
// landed; STAGES - 1 tiles are in flight while one is read. One copy group
// per tile slot (empty past the end), so the wait counts stay fixed.
// before() runs once the first tiles' copies are out (its shared-memory
// writes are seen by the first body).
template <int STAGES, typename Stage, typename Body, typename Before>
__device__ __forceinline__ void pipeline(int tile0, int tile1, Stage stage, Body body,
                                         Before before) {
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (tile0 + s < tile1) stage(tile0 + s, s);
    commit_copies();
  }
  before();
  for (int tile = tile0; tile < tile1; ++tile) {
    const int i = tile - tile0;
    wait_copies<STAGES - 2>();
    __syncthreads();  // the tile is in, and every thread is done with the buffer refilled next
    if (tile + STAGES - 1 < tile1) stage(tile + STAGES - 1, (i + STAGES - 1) % STAGES);
    commit_copies();
    body(tile, i % STAGES);
  }
}

// What both kernels read of a call's rows and window.
struct RowWindow {
  int64_t n, groups, in_w, out_w;
  int32_t taps, dilation, pad_lo, span;  // span: floats of a tile row
};

// *w from a call's sizes (Conv1dCf or Conv1dCfFilterGradient), or false
// where positions would pass 32 bits.
template <typename Call>
bool row_window(const Call& p, RowWindow* w) {
  constexpr int64_t kLimit = int64_t{1} << 30;
  if (p.in_w > kLimit || p.out_w > kLimit || p.pad_lo > kLimit || p.pad_lo < -kLimit) return false;
  *w = RowWindow{p.n, p.groups, p.in_w, p.out_w, static_cast<int32_t>(p.taps),
                 static_cast<int32_t>(p.dilation), static_cast<int32_t>(p.pad_lo),
                 static_cast<int32_t>(tile_span(p.taps, p.dilation))};
  return true;
}

struct ConvParams : RowWindow {
  const float* image;
  const float* w;
  float* out;
  int32_t ci, co;
  int32_t a_stride, x_stride;  // floats
  int32_t tiles, tiles_per_run, runs;
  bool input_gradient;
};

// A block: image n, group g, tiles [run * tiles_per_run, ...) of its row.
template <int MT, int STAGES>
__global__ void __launch_bounds__(kThreads1d) conv_kernel(ConvParams p) {
  extern __shared__ float4 shared4[];
  float* as = reinterpret_cast<float*>(shared4);
  float* xs = as + p.co * p.a_stride;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, t = lane % 4;
  const int64_t row = blockIdx.x / p.runs;
  const int run = static_cast<int>(blockIdx.x - row * p.runs);
  const int64_t n = row / p.groups, g = row - n * p.groups;
  const int tile0 = run * p.tiles_per_run, tile1 = min(p.tiles, tile0 + p.tiles_per_run);
  const float* image = p.image + (n * p.groups + g) * p.ci * p.in_w;
  const int reduction = p.taps * p.ci;

  // The filter loads in batches so that their latencies overlap.
  auto stage_filter = [&] {
    constexpr int kBatch = 8;
    const int total = p.co * reduction;
    for (int base = threadIdx.x; base < total; base += kThreads1d * kBatch) {
      float v[kBatch];
      int at[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int e = base + u * kThreads1d;
        const int m = e / reduction, rest = e - m * reduction, k = rest / p.ci, r = rest - k * p.ci;
        at[u] = m * p.a_stride + rest;
        const int64_t from = p.input_gradient
            ? ((g * p.ci + r) * p.co + m) * p.taps + (p.taps - 1 - k)
            : ((g * p.co + m) * p.ci + r) * p.taps + k;
        v[u] = e < total ? p.w[from] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (base + u * kThreads1d < total) as[at[u]] = v[u];
    }
  };
  auto first_of = [&](int tile) { return floor4(int64_t{tile} * kTile - p.pad_lo); };
  auto stage = [&](int tile, int buffer) {
    stage_rows(xs + buffer * p.ci * p.x_stride, p.x_stride, image, p.in_w, p.ci, p.span,
               first_of(tile), p.in_w);
  };
  auto body = [&](int tile, int buffer) {
    const int shift = static_cast<int>(int64_t{tile} * kTile - p.pad_lo - first_of(tile));
    const float* xb = xs + buffer * p.ci * p.x_stride;
    float acc[MT][4][4];
    implicit::zero(acc);
    for (int k = 0; k < p.taps; ++k) {
      const float* bk = xb + t * p.x_stride + warp * kWarpPositions + gq + k * p.dilation + shift;
      const float* ak = as + gq * p.a_stride + k * p.ci + t;
#pragma unroll 2
      for (int c0 = 0; c0 < p.ci; c0 += 8) {  // ci: a multiple of 16
        uint32_t af[MT][4], bf[4][2];
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          const float* a = ak + i * 16 * p.a_stride + c0;
          af[i][0] = __float_as_uint(a[0]);
          af[i][1] = __float_as_uint(a[8 * p.a_stride]);
          af[i][2] = __float_as_uint(a[4]);
          af[i][3] = __float_as_uint(a[8 * p.a_stride + 4]);
        }
        const float* b = bk + c0 * p.x_stride;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          bf[j][0] = tf32_bits(b[8 * j]);
          bf[j][1] = tf32_bits(b[4 * p.x_stride + 8 * j]);
        }
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) Mma<float>::run(acc[i][j], af[i], bf[j]);
      }
    }
    const int64_t q0 = int64_t{tile} * kTile + warp * kWarpPositions + 2 * t;
    const bool whole = p.out_w % 2 == 0 && q0 - 2 * t + kWarpPositions <= p.out_w;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = i * 16 + gq + 8 * h;
        float* out = p.out + ((n * p.groups + g) * p.co + m) * p.out_w;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t q = q0 + 8 * j;
          const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
          if (whole || (q + 1 < p.out_w && p.out_w % 2 == 0)) {
            *reinterpret_cast<float2*>(out + q) = make_float2(v0, v1);
          } else {
            if (q < p.out_w) out[q] = v0;
            if (q + 1 < p.out_w) out[q + 1] = v1;
          }
        }
      }
  };
  pipeline<STAGES>(tile0, tile1, stage, body, stage_filter);
}

struct FilterParams : RowWindow {
  const float* x;
  const float* dy;
  float* partials;
  int64_t x_limit;
  int32_t cg, og;
  int32_t x_stride;
  int32_t tiles_per_image, total_tiles, tiles_per_slice;
  int32_t n_tiles;  // 8-column tiles of dw per group: taps * cg / 8
};

// A block: slice blockIdx.x of group blockIdx.z's (image, tile) pairs, dw
// columns [8 NT blockIdx.y, 8 NT (blockIdx.y + 1)).
template <int MT, int NT, int STAGES>
__global__ void __launch_bounds__(kThreads1d) filter_kernel(FilterParams p) {
  extern __shared__ float4 shared4[];
  float* dys = reinterpret_cast<float*>(shared4);
  float* xs = dys + STAGES * p.og * kDyStride;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, t = lane % 4;
  const int slice = blockIdx.x, chunk = blockIdx.y;
  const int64_t g = blockIdx.z;
  const int64_t start = int64_t{slice} * p.tiles_per_slice;
  const int tile0 = start < p.total_tiles ? static_cast<int>(start) : p.total_tiles;
  const int64_t end = int64_t{tile0} + p.tiles_per_slice;
  const int tile1 = end < p.total_tiles ? static_cast<int>(end) : p.total_tiles;

  auto first_of = [&](int tile) {
    const int64_t q = int64_t{tile % p.tiles_per_image} * kTile;
    return floor4(q - p.pad_lo);
  };
  auto stage = [&](int tile, int buffer) {
    const int64_t image = tile / p.tiles_per_image, q = int64_t{tile % p.tiles_per_image} * kTile;
    stage_rows(dys + buffer * p.og * kDyStride, kDyStride,
               p.dy + (image * p.groups + g) * p.og * p.out_w, p.out_w, p.og, kTile, q, p.out_w);
    stage_rows(xs + buffer * p.cg * p.x_stride, p.x_stride,
               p.x + (image * p.groups + g) * p.cg * p.in_w, p.in_w, p.cg, p.span, first_of(tile),
               p.x_limit);
  };

  // Each n-tile's offset in the x tile: channel block and tap displacement.
  int b_offset[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int col = min(chunk * NT + j, p.n_tiles - 1), blocks = p.cg / 8;
    const int k = col / blocks, c0 = (col - k * blocks) * 8;
    b_offset[j] = (c0 + gq) * p.x_stride + k * p.dilation + t;
  }
  float acc[MT][NT][4];
  implicit::zero(acc);
  auto body = [&](int tile, int buffer) {
    const int shift = static_cast<int>(int64_t{tile % p.tiles_per_image} * kTile - p.pad_lo - first_of(tile));
    const float* db = dys + buffer * p.og * kDyStride + gq * kDyStride + t;
    const float* xb = xs + buffer * p.cg * p.x_stride + shift;
#pragma unroll
    for (int s = 0; s < kWarpPositions / 8; ++s) {
      const int k0 = warp * kWarpPositions + 8 * s;
      uint32_t af[MT][4], bf[NT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const float* a = db + i * 16 * kDyStride + k0;
        af[i][0] = tf32_bits(a[0]);
        af[i][1] = tf32_bits(a[8 * kDyStride]);
        af[i][2] = tf32_bits(a[4]);
        af[i][3] = tf32_bits(a[8 * kDyStride + 4]);
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const float* b = xb + b_offset[j] + k0;
        bf[j][0] = tf32_bits(b[0]);
        bf[j][1] = tf32_bits(b[4]);
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) Mma<float>::run(acc[i][j], af[i], bf[j]);
    }
  };
  pipeline<STAGES>(tile0, tile1, stage, body, [] {});
  __syncthreads();

  // The warps' sums in warp order; the tiles' buffers are free now.
  constexpr int kValues = MT * NT * 4;
  float* sums = dys;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) sums[((warp * MT + i) * NT + j) * 4 * 32 + v * 32 + lane] = acc[i][j][v];
  __syncthreads();
  const int64_t row_length = int64_t{p.taps} * p.cg;
  float* part = p.partials + (slice * p.groups * p.og + g * p.og) * row_length;
  for (int e = threadIdx.x; e < kValues * 32; e += kThreads1d) {
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += sums[w * kValues * 32 + e];
    const int l = e % 32, v = (e / 32) % 4, j = (e / 128) % NT, i = e / (128 * NT);
    const int col = chunk * NT + j;
    if (col >= p.n_tiles) continue;
    const int m = i * 16 + l / 4 + 8 * (v / 2);
    part[m * row_length + col * 8 + 2 * (l % 4) + v % 2] = sum;
  }
}

template <int MT, int STAGES>
cudaError_t launch_conv(ConvParams p, int bytes, cudaStream_t stream) {
  auto kernel = conv_kernel<MT, STAGES>;
  const void* key = reinterpret_cast<const void*>(kernel);
  int resident = 0;
  if (auto e = resident_blocks(key, kThreads1d, bytes, &resident); e != cudaSuccess) return e;
  DeviceInfo info;
  if (auto e = current_device_info(&info); e != cudaSuccess) return e;
  const int64_t rows = p.n * p.groups, wanted = std::max(1, resident) * int64_t{info.multiprocessors};
  const int64_t per_run = std::max<int64_t>(1, (rows * p.tiles + wanted - 1) / wanted);
  p.tiles_per_run = static_cast<int32_t>(std::min<int64_t>(per_run, p.tiles));
  p.runs = (p.tiles + p.tiles_per_run - 1) / p.tiles_per_run;
  const int64_t blocks = rows * p.runs;
  if (blocks == 0) return cudaSuccess;
  if (blocks >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  kernel<<<static_cast<unsigned>(blocks), kThreads1d, bytes, stream>>>(p);
  return cudaGetLastError();
}

// Slices: as many of the most (p.tiles_per_slice holds them) as let the
// grid run in one wave, so that no wave runs a few blocks alone; at least one.
template <int MT, int NT, int STAGES>
cudaError_t launch_filter(FilterParams p, int64_t most, int bytes, int64_t* slices,
                          cudaStream_t stream) {
  auto kernel = filter_kernel<MT, NT, STAGES>;
  const void* key = reinterpret_cast<const void*>(kernel);
  int resident = 0;
  if (auto e = resident_blocks(key, kThreads1d, bytes, &resident); e != cudaSuccess) return e;
  DeviceInfo info;
  if (auto e = current_device_info(&info); e != cudaSuccess) return e;
  const int64_t chunks = (p.n_tiles + NT - 1) / NT;
  const int64_t wave = int64_t{std::max(1, resident)} * info.multiprocessors;
  *slices = std::max<int64_t>(1, std::min(most, wave / (chunks * p.groups)));
  p.tiles_per_slice = static_cast<int32_t>(std::max<int64_t>(1, (p.total_tiles + *slices - 1) / *slices));
  const dim3 grid(static_cast<unsigned>(*slices), static_cast<unsigned>(chunks),
                  static_cast<unsigned>(p.groups));
  kernel<<<grid, kThreads1d, bytes, stream>>>(p);
  return cudaGetLastError();
}

// dw columns per block (8-column tiles): as many as one chunk needs, at most
// 24 m16n8 accumulator tiles per warp.
template <int MT, int STAGES>
cudaError_t launch_filter_for(const FilterParams& p, int64_t most, int64_t tile_bytes,
                              int64_t* slices, cudaStream_t stream) {
  auto run = [&](auto nt) {
    constexpr int NT = decltype(nt)::value;
    const int64_t sums = int64_t{kWarps} * MT * NT * 4 * 32 * 4;
    return launch_filter<MT, NT, STAGES>(p, most, static_cast<int>(std::max(tile_bytes, sums)),
                                         slices, stream);
  };
  if (p.n_tiles <= 4) return run(std::integral_constant<int, 4>{});
  if constexpr (MT * 8 <= 24)
    if (p.n_tiles <= 8) return run(std::integral_constant<int, 8>{});
  if constexpr (MT * 12 <= 24) return run(std::integral_constant<int, 12>{});
  if constexpr (MT * 8 <= 24) return run(std::integral_constant<int, 8>{});
  return run(std::integral_constant<int, 4>{});
}

}  // namespace

int64_t conv_1d_cf_shared_bytes(int64_t ci, int64_t co, int64_t taps, int64_t dilation,
                                int64_t stages) {
  return (co * (taps * ci + 4) + stages * ci * conv_row_stride(taps, dilation)) * 4;
}

int64_t conv_1d_cf_filter_shared_bytes(int64_t cg, int64_t og, int64_t taps, int64_t dilation,
                                       int64_t stages) {
  return stages * (og * kDyStride + cg * filter_x_stride(taps, dilation)) * 4;
}

namespace {

// The filter gradient's tile buffers: three where the device lets a block
// have them (Hopper and A100), two otherwise (what conv_1d_cf_applies checks).
cudaError_t stages_for(int64_t three_stage_bytes, int* stages) {
  DeviceInfo info;
  if (auto e = current_device_info(&info); e != cudaSuccess) return e;
  *stages = three_stage_bytes <= info.shared_optin ? 3 : 2;
  return cudaSuccess;
}

}  // namespace

bool conv_1d_cf_applies(xla::ffi::DataType in, bool tf32, const Geometry& g, int64_t ci,
                        int64_t co, int64_t image_w) {
  if (in != xla::ffi::DataType::F32 || !tf32 || g.nd != 1 || g.stride[0] != 1 ||
      g.lhs_dilation[0] != 1 || image_w % 4 != 0)
    return false;
  auto channels_ok = [](int64_t c) { return c > 0 && c % 16 == 0 && c <= kConv1dCfMaxChannels; };
  if (!channels_ok(ci) || !channels_ok(co)) return false;
  const int64_t reach = (g.kernel[0] - 1) * g.rhs_dilation[0];
  if (reach > kConv1dCfSharedBytes) return false;  // keeps the sizes below in range
  return std::max(conv_1d_cf_shared_bytes(ci, co, g.kernel[0], g.rhs_dilation[0], 2),
                  conv_1d_cf_filter_shared_bytes(ci, co, g.kernel[0], g.rhs_dilation[0], 2)) <=
         kConv1dCfSharedBytes;
}

cudaError_t conv_1d_cf(const Conv1dCf& p, cudaStream_t stream) {
  ConvParams c{};
  if (!row_window(p, &c)) return cudaErrorInvalidValue;
  c.image = p.image;
  c.w = p.w;
  c.out = p.out;
  c.ci = static_cast<int32_t>(p.ci);
  c.co = static_cast<int32_t>(p.co);
  c.a_stride = static_cast<int32_t>(p.taps * p.ci + 4);
  c.x_stride = static_cast<int32_t>(conv_row_stride(p.taps, p.dilation));
  c.input_gradient = p.input_gradient;
  c.tiles = static_cast<int32_t>((p.out_w + kTile - 1) / kTile);
  // Two tile buffers: a third (three blocks per multiprocessor where two
  // buffers fit four) measured 2-4% slower (docs/optimization-log.md, step 49).
  const int bytes = static_cast<int>(conv_1d_cf_shared_bytes(p.ci, p.co, p.taps, p.dilation, 2));
  switch (p.co / 16) {
    case 1: return launch_conv<1, 2>(c, bytes, stream);
    case 2: return launch_conv<2, 2>(c, bytes, stream);
    case 3: return launch_conv<3, 2>(c, bytes, stream);
    case 4: return launch_conv<4, 2>(c, bytes, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t conv_1d_cf_filter_gradient(const Conv1dCfFilterGradient& p, int64_t* slices,
                                       cudaStream_t stream) {
  FilterParams f{};
  if (!row_window(p, &f)) return cudaErrorInvalidValue;
  f.x = p.x;
  f.dy = p.dy;
  f.partials = p.partials;
  // x past the last position a window reads stays zero: those positions only
  // meet dy's zeros beyond out_w, and must not bring their NaNs.
  f.x_limit = std::min<int64_t>(p.in_w, p.out_w - 1 + (p.taps - 1) * p.dilation - p.pad_lo + 1);
  f.cg = static_cast<int32_t>(p.cg);
  f.og = static_cast<int32_t>(p.og);
  f.x_stride = static_cast<int32_t>(filter_x_stride(p.taps, p.dilation));
  f.n_tiles = static_cast<int32_t>(p.taps * p.cg / 8);
  const int64_t per_image = (p.out_w + kTile - 1) / kTile, total = p.n * per_image;
  if (total >= (int64_t{1} << 31) || p.slices < 1 || p.slices >= (int64_t{1} << 31) ||
      p.groups > 65535)
    return cudaErrorInvalidValue;
  f.tiles_per_image = static_cast<int32_t>(std::max<int64_t>(per_image, 1));
  f.total_tiles = static_cast<int32_t>(total);
  int stages = 2;
  if (auto e = stages_for(conv_1d_cf_filter_shared_bytes(p.cg, p.og, p.taps, p.dilation, 3), &stages);
      e != cudaSuccess)
    return e;
  const int64_t tiles = conv_1d_cf_filter_shared_bytes(p.cg, p.og, p.taps, p.dilation, stages);
  auto launch = [&](auto stage_count) {
    constexpr int S = decltype(stage_count)::value;
    switch (p.og / 16) {
      case 1: return launch_filter_for<1, S>(f, p.slices, tiles, slices, stream);
      case 2: return launch_filter_for<2, S>(f, p.slices, tiles, slices, stream);
      case 3: return launch_filter_for<3, S>(f, p.slices, tiles, slices, stream);
      case 4: return launch_filter_for<4, S>(f, p.slices, tiles, slices, stream);
      default: return cudaErrorInvalidValue;
    }
  };
  return stages == 3 ? launch(std::integral_constant<int, 3>{})
                     : launch(std::integral_constant<int, 2>{});
}

}  // namespace im2col::cuda
