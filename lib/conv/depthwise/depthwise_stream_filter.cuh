// The channels-last depthwise filter gradient of 3 x 3 windows at unit
// dilation, streamed down the rows as the forward (depthwise_stream.cuh): a
// thread owns one vector of channels and walks output columns of one slice
// of rows, holding the 3 x 3 input vectors under its current output and the
// 9 taps' sums in registers; each step it loads one dy vector and the input
// rows the window slides onto. The threads of a block then sum their columns
// in shared memory in a fixed order and write one partial sum per slice,
// tap and channel; depthwise_conv.cu's second pass sums the slices in a
// fixed order. Deterministic: no atomics.
//
// The slices are the stream's own: `rows` output rows of one image each,
// at most as many an image as the call's FilterSlices has, so that the
// partial sums fit the workspace planned for those. No XLA headers:
// the host tests run dw_stream_filter_thread and dw_stream_filter_write
// thread by thread (tests/host/conv/depthwise/depthwise_conv_on_host.cc).
#pragma once

#include <cstdint>
#include <cstring>

#include "conv/depthwise/depthwise_stream.cuh"
#include "conv/direct/filter_slices.h"

namespace im2col::cuda {

// The fewest channel vectors a block takes where C has them (a pixel's run
// of at least 32 bytes), and the rows a slice is split down to before
// channel runs are split.
constexpr int32_t kDwStreamFilterMinRun = 8;
constexpr int64_t kDwStreamFilterRows = 16;

// Elements a thread's vector: 8 bytes (4 half, 2 float32, 1 float64
// channels), so that the 9 taps' sums, the window and the next row's loads
// fit the 128 registers of two blocks an SM: 96-128, 4 bytes spilled by the
// half types at stride 2 (16-byte float32 vectors spilled 16-120 bytes).
constexpr int32_t dw_stream_filter_vector(size_t elem_bytes) { return static_cast<int32_t>(8 / elem_bytes); }

struct DwStreamFilterPlan {
  int32_t vectors = 1;  // C / V
  int32_t nvb = 1;      // channel vectors a block (its run)
  int32_t runs = 1;     // channel runs
  int32_t lanes = 1;    // column lanes a block: lane l walks columns l, l + lanes, ...
  int32_t threads = 1;  // nvb x lanes
  FilterSlices f;       // the stream's slices
  int64_t blocks = 0;   // runs x f.count
  FastDiv by_nvb, by_runs, by_per_image;
};

// The stream's plan for the filter gradient of g over n images with C
// channels of elem bytes, whose call planned slices `call`: whole columns a
// slice, split (rows, then channel runs, then rows down to where the stream
// pays) until the grid fills the GPU, never into more slices an image than
// the call's. False outside the stream's domain.
inline bool plan_dw_stream_filter(const DwGeom& g, const FilterSlices& call, int64_t n, int64_t C, size_t elem,
                                  DwStreamFilterPlan* out) {
  if (n < 1 || call.per_image < 1 || !dw_stream_domain(g, C, elem, dw_stream_filter_vector(elem))) return false;
  const int64_t vectors = C / dw_stream_filter_vector(elem);
  if (vectors >= (int64_t{1} << 30)) return false;
  const int64_t OH = g.out[1], OW = g.out[2];
  const auto per_image_of = [&](int64_t rows) { return (OH + rows - 1) / rows; };
  const auto run_of = [&](int64_t runs) { return (vectors + runs - 1) / runs; };
  int64_t rows = OH, runs = (vectors + kDwStreamThreads - 1) / kDwStreamThreads;
  const auto blocks = [&] { return runs * n * per_image_of(rows); };
  const auto rows_ok = [&](int64_t r, int64_t floor) { return r >= floor && per_image_of(r) <= call.per_image; };
  int64_t pay_floor = 1;
  while (!dw_stream_rows_pay(g, pay_floor) && pay_floor < OH) ++pay_floor;
  while (blocks() < kDwStreamFillBlocks) {
    const int64_t half = (rows + 1) / 2;
    if (half < rows && rows_ok(half, kDwStreamFilterRows)) rows = half;
    else if (run_of(runs * 2) >= kDwStreamFilterMinRun) runs *= 2;
    else if (half < rows && rows_ok(half, pay_floor)) rows = half;
    else break;
  }
  DwStreamFilterPlan s;
  s.vectors = static_cast<int32_t>(vectors);
  s.nvb = static_cast<int32_t>(run_of(runs));
  s.runs = static_cast<int32_t>((vectors + s.nvb - 1) / s.nvb);
  const int64_t strips = (OW + kDwStreamThreads / s.nvb - 1) / (kDwStreamThreads / s.nvb);
  s.lanes = static_cast<int32_t>((OW + strips - 1) / strips);
  s.threads = s.nvb * s.lanes;
  s.f = filter_slices(n, OH, (OH + per_image_of(rows) - 1) / per_image_of(rows));  // even slices
  s.blocks = s.runs * s.f.count;
  if (s.blocks >= (int64_t{1} << 31) || s.f.per_image > call.per_image) return false;
  s.by_nvb = FastDiv(s.nvb);
  s.by_runs = FastDiv(s.runs);
  s.by_per_image = FastDiv(static_cast<int32_t>(s.f.per_image));
  *out = s;
  return true;
}

// Output rows from which a unit-stride filter gradient streams: the map sizes
// measured (56 and 112); smaller maps keep the tiles.
constexpr int32_t kDwStreamFilterUnitStrideRows = 56;

// Whether streaming pays for g's filter gradient under plan s, where the
// slices walk enough rows (dw_stream_rows_pay): at stride 2 along H, and at
// stride 1 on maps of kDwStreamFilterUnitStrideRows rows or more where
// `unit_stride` (switch kDwStreamFilterS1). Measured (H200, bfloat16,
// MobileNetV2's layers at batch 64, against the tiles in the same build):
// stride 2, 105 us against 164 (112x112x96); stride 1, with each window
// element converted once as it enters, 107 against 118 (112x112x32) and 110
// against 115 (56x56x144).
inline bool dw_stream_filter_pays(const DwGeom& g, const DwStreamFilterPlan& s, bool unit_stride) {
  const bool stride_pays =
      g.stride[1] == 2 || (g.stride[1] == 1 && unit_stride && g.out[1] >= kDwStreamFilterUnitStrideRows);
  return stride_pays && dw_stream_rows_pay(g, s.f.rows);
}

// Shared memory a thread's sums take (an odd pitch of accumulators: threads
// writing the same slot fall on different banks).
template <typename T>
constexpr int dw_stream_filter_pitch() {
  return kDwStreamK * kDwStreamK * dw_stream_filter_vector(sizeof(T)) + 1;
}

// Adds the products of output column ox's rows [oy0, oy_end) to acc: acc[ky][kx][e] += dy * x under tap
// (ky, kx), channel ch + e.
template <int SY, typename T, typename A, int V>
__device__ __forceinline__ void dw_stream_filter_column(A (&acc)[kDwStreamK][kDwStreamK][V],
                                                        const T* __restrict__ dy, const T* __restrict__ x,
                                                        const DwGeom& g, int64_t C, int64_t image, int64_t ch,
                                                        int32_t ox, int32_t oy0, int32_t oy_end) {
  constexpr int K = kDwStreamK;
  using Raw = RawWords<T, V>;
  constexpr int KEEP = K > SY ? K - SY : 0, NEW = K - KEEP;
  const int32_t OH = g.out[1], OW = g.out[2];
  const DwStreamColumn<T, V, K> column(x, g, image, C, ch, ox * g.stride[2] - g.pad[2]);
  const T* dyp = dy + ((image * OH + oy0) * OW + ox) * C + ch;
  const int64_t dy_row = int64_t{OW} * C;

  const auto prefetch_step = [&](int32_t step) {
#pragma unroll
    for (int i = 0; i < NEW; ++i) column.prefetch(step * SY - g.pad[1] + KEEP + i);
#if defined(__CUDA_ARCH__)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(dyp + (step - oy0) * dy_row));
#endif
  };
  for (int32_t j = 1; j <= kDwStreamPrefetch && oy0 + j < oy_end; ++j) prefetch_step(oy0 + j);

  A win[K][K][V];
  Raw next[NEW][K];
  const int32_t iy0 = oy0 * SY - g.pad[1];
#pragma unroll
  for (int i = 0; i < KEEP; ++i) {
    Raw r[K];
    column.load(r, iy0 + i);
    dw_stream_convert<T, A, V, K>(win[i], r);
  }
#pragma unroll
  for (int i = 0; i < NEW; ++i) column.load(next[i], iy0 + KEEP + i);
  Raw d_next = load_raw<T, V>(dyp);

#pragma unroll(dw_stream_unroll<SY>())
  for (int32_t oy = oy0; oy < oy_end; ++oy) {
#pragma unroll
    for (int i = 0; i < NEW; ++i) dw_stream_convert<T, A, V, K>(win[KEEP + i], next[i]);
    Pack<T, V> d;
    std::memcpy(&d, &d_next, sizeof(d));
    if (oy + 1 < oy_end) {
      const int32_t iy = (oy + 1) * SY - g.pad[1] + KEEP;
#pragma unroll
      for (int i = 0; i < NEW; ++i) column.load(next[i], iy + i);
      d_next = load_raw<T, V>(dyp + (oy + 1 - oy0) * dy_row);
      if (oy + 1 + kDwStreamPrefetch < oy_end) prefetch_step(oy + 1 + kDwStreamPrefetch);
    }
    A dv[V];
#pragma unroll
    for (int e = 0; e < V; ++e) dv[e] = static_cast<A>(to_acc(d.v[e]));
#pragma unroll
    for (int ky = 0; ky < K; ++ky)
#pragma unroll
      for (int kx = 0; kx < K; ++kx)
#pragma unroll
        for (int e = 0; e < V; ++e) acc[ky][kx][e] += dv[e] * win[ky][kx][e];
#pragma unroll
    for (int i = 0; i < KEEP; ++i)
#pragma unroll
      for (int kx = 0; kx < K; ++kx)
#pragma unroll
        for (int e = 0; e < V; ++e) win[i][kx][e] = win[i + SY][kx][e];
  }
}

// Thread `tid` of block `block` (blocks: channel run fastest, then slice;
// threads: channel vector fastest, then column lane) sums its columns of
// its slice and writes the 9 taps' sums of its V channels to `sums`
// (dw_stream_filter_pitch<T>() accumulators: tap-major, channel fastest).
template <int SY, typename T>
__device__ __forceinline__ void dw_stream_filter_thread(const T* __restrict__ dy, const T* __restrict__ x,
                                                        const DwGeom& g, const DwStreamFilterPlan& s, int64_t C,
                                                        int64_t block, int32_t tid,
                                                        typename Acc<T>::type* __restrict__ sums) {
  using A = typename Acc<T>::type;
  constexpr int K = kDwStreamK, V = dw_stream_filter_vector(sizeof(T));
  int32_t b = static_cast<int32_t>(block), run, part, lane, vec;
  s.by_runs.divmod(b, b, run);
  s.by_per_image.divmod(b, b, part);
  s.by_nvb.divmod(tid, lane, vec);
  const int64_t image = b;
  const int32_t vg = run * s.nvb + vec;
  A acc[K][K][V];
#pragma unroll
  for (int ky = 0; ky < K; ++ky)
#pragma unroll
    for (int kx = 0; kx < K; ++kx)
#pragma unroll
      for (int e = 0; e < V; ++e) acc[ky][kx][e] = A(0);
  if (vg < s.vectors) {
    const int32_t rows = static_cast<int32_t>(s.f.rows);
    const int32_t oy0 = part * rows, oy_end = min(g.out[1], oy0 + rows);
    for (int32_t ox = lane; ox < g.out[2]; ox += s.lanes)
      dw_stream_filter_column<SY, T, A, V>(acc, dy, x, g, C, image, int64_t{vg} * V, ox, oy0, oy_end);
  }
#pragma unroll
  for (int ky = 0; ky < K; ++ky)
#pragma unroll
    for (int kx = 0; kx < K; ++kx)
#pragma unroll
      for (int e = 0; e < V; ++e) sums[(ky * K + kx) * V + e] = acc[ky][kx][e];
}

// After every thread of a block wrote its sums (thread (lane, vec) at
// (lane * nvb + vec) * P: the 9 taps' sums of its V channels, tap-major),
// thread tid of `threads` writes its share of the block's partial sums, each
// the sum over `lanes` lanes in order, to partials[(slice * 9 + tap) * C + c]
// for the block's channels from c0 (its first valid_vectors vectors).
template <typename A, int V, int P>
__host__ __device__ __forceinline__ void dw_filter_lane_sums(const A* __restrict__ sums, A* __restrict__ partials,
                                                             int64_t slice, int64_t c0, int32_t nvb,
                                                             int32_t valid_vectors, int32_t lanes, int32_t threads,
                                                             int64_t C, int32_t tid) {
  constexpr int TAPS = kDwStreamK * kDwStreamK;
  const int32_t width = nvb * V;
  for (int32_t o = tid; o < TAPS * width; o += threads) {
    const int32_t tap = o / width, cv = o - tap * width, vec = cv / V, e = cv - vec * V;
    if (vec >= valid_vectors) continue;
    A sum = A(0);
    for (int32_t lane = 0; lane < lanes; ++lane) sum += sums[(lane * nvb + vec) * P + tap * V + e];
    partials[(slice * TAPS + tap) * C + c0 + cv] = sum;
  }
}

// After every thread of the block wrote `sums` (thread t's at t * pitch):
// thread tid writes its share of the block's partial sums (dw_filter_lane_sums).
template <typename T>
__host__ __device__ __forceinline__ void dw_stream_filter_write(const typename Acc<T>::type* __restrict__ sums,
                                                                typename Acc<T>::type* __restrict__ partials,
                                                                const DwStreamFilterPlan& s, int64_t C,
                                                                int64_t block, int32_t tid) {
  using A = typename Acc<T>::type;
  constexpr int V = dw_stream_filter_vector(sizeof(T));
  const int64_t slice = block / s.runs;
  const int32_t run = static_cast<int32_t>(block - slice * s.runs);
  dw_filter_lane_sums<A, V, dw_stream_filter_pitch<T>()>(sums, partials, slice, int64_t{run} * s.nvb * V, s.nvb,
                                                         s.vectors - run * s.nvb, s.lanes, s.threads, C, tid);
}

template <int SY, typename T>
__global__ void __launch_bounds__(kDwStreamThreads, 2)
dw_stream_filter_kernel(const T* __restrict__ dy, const T* __restrict__ x, typename Acc<T>::type* __restrict__ partials,
                        const DwGeom g, const DwStreamFilterPlan s, int64_t C) {
  using A = typename Acc<T>::type;
  constexpr int P = dw_stream_filter_pitch<T>();
  __shared__ A sums[kDwStreamThreads * P];
  const int32_t tid = static_cast<int32_t>(threadIdx.x);
  dw_stream_filter_thread<SY, T>(dy, x, g, s, C, blockIdx.x, tid, sums + tid * P);
  __syncthreads();
  dw_stream_filter_write<T>(sums, partials, s, C, blockIdx.x, tid);
}

}  // namespace im2col::cuda
