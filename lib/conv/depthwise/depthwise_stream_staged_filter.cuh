// The channels-last 3x3 depthwise filter gradient at unit dilation with its
// input rows and its dy rows staged in shared memory by cp.async several row
// steps ahead, as the staged forward (depthwise_stream_staged.cuh) stages its
// input rows.
//
// Why: the streamed filter gradient (depthwise_stream_filter.cuh) loads each
// step's input row and dy vector into registers one step ahead, as the
// streamed forward did, and moved 1.3-1.4 TB/s at unit stride on MobileNetV2's
// bfloat16 112² and 56² layers (cuDNN's kernels took 0.87-0.89x its time).
// Staged, those took 0.82-0.83x its time, and MobileNetV2's nine filter
// gradients 0.65-0.86x the kernels they replaced (BENCHMARKS.md, 2026-11-29).
// Here a block takes a run of channels over `tw` output columns and `rows`
// output rows of one image, as the staged forward's blocks; each step its
// threads copy the input rows the window slides onto and one dy row `depth`
// steps ahead into two rings. A thread owns one channel vector at one output
// column: the 3x3 window and the 9 taps' sums in registers. At the end the
// block's threads sum their columns in shared memory (the rings' bytes) in a
// fixed order and write one partial sum per slice, tap and channel; a slice
// is one block's column tile and row tile of one image, and
// depthwise_conv.cu's second pass sums the slices in a fixed order.
// Deterministic: no atomics.
//
// No XLA headers: the host tests run the block body with an executor that
// runs the threads one after another between barriers.
#pragma once

#include <algorithm>
#include <cstdint>

#include "conv/depthwise/depthwise_stream_filter.cuh"
#include "conv/depthwise/depthwise_stream_staged.cuh"
#include "conv/direct/filter_slices.h"

namespace im2col::cuda {

// Row steps staged ahead. Two rings must fit the 48 KB that the staged
// forward's one does: at stride 2 three steps (six input rows) leave room for
// runs of 12-32 vectors over 7-19 columns on MobileNetV2's layers.
template <int SY>
constexpr int dw_staged_filter_depth() {
  return SY == 1 ? 8 : 3;
}

// Accumulators a thread's sums take in shared memory: an odd pitch, so that
// threads writing the same slot fall on different banks.
constexpr int dw_staged_filter_pitch_of(size_t elem) { return kDwStreamK * kDwStreamK * dw_vector(elem, true) + 1; }
template <typename T>
constexpr int dw_staged_filter_pitch() {
  return dw_staged_filter_pitch_of(sizeof(T));
}

struct DwStagedFilterPlan {
  DwStagedPlan s;            // columns, rows and blocks as the staged forward's
  int32_t dy_base = 0;       // the dy ring's byte offset: s.ring * s.row_bytes
  int32_t dy_row_bytes = 16; // a staged dy row: s.tw * s.granules * 16
  int32_t smem = 0;          // the rings' bytes, at least the sums'
  FilterSlices f;            // per_image = s.col_tiles * s.row_tiles
};

// Whether the staged filter gradient takes g over n images with C channels
// of elem bytes (channels-last; the caller checks 16-byte alignment), whose
// call planned slices `call`, and its plan: plan_dw_staged_priced's, its
// rings the input's and depth + 1 dy rows, never more slices an image than
// the call's. max_run and max_tw narrow the blocks (the host tests).
inline bool plan_dw_staged_filter(const DwGeom& g, const FilterSlices& call, int64_t n, int64_t C, size_t elem,
                                  DwStagedFilterPlan* out, int32_t max_run = kDwStagedMaxRun,
                                  int32_t max_tw = kDwStagedThreads) {
  if (call.per_image < 1) return false;
  const int depth = g.stride[1] == 1 ? dw_staged_filter_depth<1>() : dw_staged_filter_depth<2>();
  DwStagedPlan best;
  if (!plan_dw_staged_priced(g, n, C, elem, depth, depth + 1, max_run, max_tw,
                             [&](const DwStagedPlan& s) { return call.per_image / s.col_tiles; }, &best))
    return false;
  DwStagedFilterPlan f;
  f.s = best;
  f.dy_base = best.ring * best.row_bytes;
  f.dy_row_bytes = best.tw * best.granules * 16;
  const int64_t sums = int64_t{kDwStagedThreads} * dw_staged_filter_pitch_of(elem) * (elem == 8 ? 8 : 4);
  f.smem = static_cast<int32_t>(std::max<int64_t>(best.smem, sums));
  f.f.rows = best.rows;
  f.f.per_image = int64_t{best.col_tiles} * best.row_tiles;
  f.f.count = n * f.f.per_image;
  *out = f;
  return true;
}

// Whether the plan's rows repay the window's warm-up (as dw_staged_pays).
inline bool dw_staged_filter_pays(const DwGeom& g, const DwStagedFilterPlan& f) {
  return dw_stream_rows_pay(g, f.s.rows);
}

template <typename A, int V>
struct DwStagedFilterState {
  A acc[kDwStreamK][kDwStreamK][V];
  A win[kDwStreamK][kDwStreamK][V];
  DwStagedCopies x, dy;  // the input rows' copies, the dy rows'
  int32_t read = 0;      // byte offset in an input ring row of the thread's window (column, vector)
  int32_t dy_read = 0;   // in a dy ring row, of its output
  int32_t col = 0, vec = 0;
  bool active = false;
};

// The block body: block `block` (run fastest, then column tile, row tile,
// image; its slice block / runs) with the rings at `ring` (f.smem bytes,
// 16-byte aligned). What every thread computes alike is computed outside
// each(), so that the host executor advances it once.
template <int SY, typename T, typename Exec>
__device__ __forceinline__ void dw_staged_filter_block(Exec& e, unsigned char* __restrict__ ring,
                                                       const T* __restrict__ dy, const T* __restrict__ x,
                                                       typename Acc<T>::type* __restrict__ partials, const DwGeom& g,
                                                       const DwStagedFilterPlan& f, int64_t C, int64_t block) {
  using A = typename Acc<T>::type;
  constexpr int K = kDwStreamK, V = dw_vector(sizeof(T), true), D = dw_staged_filter_depth<SY>();
  constexpr int KEEP = K > SY ? K - SY : 0, P = dw_staged_filter_pitch<T>();
  using State = DwStagedFilterState<A, V>;
  const DwStagedPlan& s = f.s;

  int32_t b = static_cast<int32_t>(block), run_i, ct, rt;
  s.by_runs.divmod(b, b, run_i);
  const int64_t slice = b;
  s.by_col_tiles.divmod(b, b, ct);
  s.by_row_tiles.divmod(b, b, rt);
  const int64_t image = b;
  const int32_t OH = g.out[1], OW = g.out[2], IH = g.in[1], IW = g.in[2];
  const int32_t ox0 = ct * s.tw, oy0 = rt * s.rows, steps = min(OH, oy0 + s.rows) - oy0;
  const int32_t ix0 = ox0 * g.stride[2] - g.pad[2], iy0 = oy0 * SY - g.pad[1];
  const int32_t rows_in = (steps - 1) * SY + K;
  const int64_t c0 = int64_t{run_i} * s.run * V, row_elems = int64_t{IW} * C, dy_row_elems = int64_t{OW} * C;
  const T* const x_image = x + image * IH * row_elems;
  const T* const dy_rows = dy + (image * OH + oy0) * dy_row_elems;
  const int32_t pixel_bytes = s.granules * 16;

  e.each([&](State& st) {
    const int32_t tid = static_cast<int32_t>(threadIdx.x);
    dw_staged_plan_copies<T>(st.x, tid, s.by_granules, s.row_granules, ix0, IW, C, c0);
    dw_staged_plan_copies<T>(st.dy, tid, s.by_granules, s.tw * s.granules, ox0, OW, C, c0);
    s.by_run.divmod(tid, st.col, st.vec);
    const int32_t vec_bytes = st.vec * static_cast<int32_t>(V * sizeof(T));
    st.read = st.col * g.stride[2] * pixel_bytes + vec_bytes;
    st.dy_read = st.col * pixel_bytes + vec_bytes;
    st.active = st.col < s.tw && ox0 + st.col < OW && c0 + int64_t{st.vec} * V < C;
#pragma unroll
    for (int ky = 0; ky < K; ++ky)
#pragma unroll
      for (int kx = 0; kx < K; ++kx)
#pragma unroll
        for (int v = 0; v < V; ++v) st.acc[ky][kx][v] = A(0);
  });

  const uint32_t ring_s = dw_staged_shared(ring);
  // Stages the block's next `count` input rows and its next dy row (those
  // past its last rows none), then closes their group of copies.
  int32_t next_row = 0, write_slot = 0, next_dy = 0, dy_write = 0;
  const auto stage_step = [&](int count) {
    for (int r = 0; r < count; ++r, ++next_row, write_slot = write_slot + 1 == s.ring ? 0 : write_slot + 1) {
      if (next_row >= rows_in) continue;
      const int32_t iy = iy0 + next_row;
      const bool row_ok = static_cast<uint32_t>(iy) < static_cast<uint32_t>(IH);
      dw_staged_issue<T, State>(e, ring, ring_s, write_slot * s.row_bytes, x_image + (row_ok ? iy : 0) * row_elems,
                                row_ok, x, [](State& st) -> const DwStagedCopies& { return st.x; });
    }
    if (next_dy < steps)
      dw_staged_issue<T, State>(e, ring, ring_s, f.dy_base + dy_write * f.dy_row_bytes,
                                dy_rows + next_dy * dy_row_elems, true, dy,
                                [](State& st) -> const DwStagedCopies& { return st.dy; });
    ++next_dy;
    dy_write = dy_write == D ? 0 : dy_write + 1;
    e.each([&](State&) { dw_staged_commit(); });
  };
  stage_step(KEEP + SY);
#pragma unroll
  for (int j = 1; j < D; ++j) stage_step(SY);

  const auto take = [&](State& st, int i, int32_t slot) {
    const unsigned char* p = ring + slot * s.row_bytes + st.read;
#pragma unroll
    for (int kx = 0; kx < K; ++kx) dw_load<V>(st.win[i][kx], reinterpret_cast<const T*>(p + kx * pixel_bytes));
  };
  const auto after = [&](int32_t slot, int32_t by) { return slot + by >= s.ring ? slot + by - s.ring : slot + by; };

  int32_t read_slot = 0, dy_read = 0;
#pragma unroll(dw_stream_unroll<SY>())
  for (int32_t j = 0; j < steps; ++j) {
    e.each([&](State&) { dw_staged_wait<D - 1>(); });
    e.sync();
    stage_step(SY);
    e.each([&](State& st) {
      if (!st.active) return;
      if (j == 0) {
#pragma unroll
        for (int i = 0; i < K; ++i) take(st, i, after(read_slot, i));
      } else {
#pragma unroll
        for (int i = 0; i < KEEP; ++i)
#pragma unroll
          for (int kx = 0; kx < K; ++kx)
#pragma unroll
            for (int v = 0; v < V; ++v) st.win[i][kx][v] = st.win[i + SY][kx][v];
#pragma unroll
        for (int i = 0; i < SY; ++i) take(st, KEEP + i, after(read_slot, i));
      }
      A d[V];
      dw_load<V>(d, reinterpret_cast<const T*>(ring + f.dy_base + dy_read * f.dy_row_bytes + st.dy_read));
#pragma unroll
      for (int ky = 0; ky < K; ++ky)
#pragma unroll
        for (int kx = 0; kx < K; ++kx)
#pragma unroll
          for (int v = 0; v < V; ++v) st.acc[ky][kx][v] += d[v] * st.win[ky][kx][v];
    });
    read_slot = after(read_slot, j == 0 ? K : SY);
    dy_read = dy_read == D ? 0 : dy_read + 1;
  }

  // The rings' bytes become the sums: every copy landed and every thread
  // read its last rows before any thread writes.
  e.each([&](State&) { dw_staged_wait<0>(); });
  e.sync();
  A* const sums = reinterpret_cast<A*>(ring);
  e.each([&](State& st) {
    A* const mine = sums + static_cast<int32_t>(threadIdx.x) * P;
#pragma unroll
    for (int ky = 0; ky < K; ++ky)
#pragma unroll
      for (int kx = 0; kx < K; ++kx)
#pragma unroll
        for (int v = 0; v < V; ++v) mine[(ky * K + kx) * V + v] = st.acc[ky][kx][v];
  });
  e.sync();
  e.each([&](State&) {
    dw_filter_lane_sums<A, V, P>(sums, partials, slice, c0, s.run, s.vectors - run_i * s.run, s.tw,
                                 kDwStagedThreads, C, static_cast<int32_t>(threadIdx.x));
  });
}

template <int SY, typename T>
__global__ void __launch_bounds__(kDwStagedThreads, 2)
dw_staged_filter_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                        typename Acc<T>::type* __restrict__ partials, const DwGeom g, const DwStagedFilterPlan f,
                        int64_t C) {
  extern __shared__ __align__(16) unsigned char dw_staged_filter_smem[];
  DwDeviceExec<DwStagedFilterState<typename Acc<T>::type, dw_vector(sizeof(T), true)>> e;
  dw_staged_filter_block<SY, T>(e, dw_staged_filter_smem, dy, x, partials, g, f, C, blockIdx.x);
}

}  // namespace im2col::cuda
