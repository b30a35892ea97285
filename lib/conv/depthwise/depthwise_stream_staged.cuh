// The channels-last 3x3 depthwise forward at unit dilation (and the
// unit-stride input gradient) of depthwise_stream.cuh, its input rows staged
// in shared memory by cp.async several row steps ahead of the products.
//
// Why: the streamed kernel loads each step's input row into registers one
// step ahead, so a warp has one row of 8-byte loads in flight; at the
// occupancy its ~120 registers allow that is too few bytes to cover DRAM's
// latency, and it moved 1.6-2.5 TB/s on MobileNetV2's bfloat16 56² and 112²
// layers (an H200 copies at about 4). Staged, they ran at 1.8-3.1 TB/s, and
// MobileNetV2's forwards in 0.77-0.93x the streamed kernel's time but one
// (1.07x, 28² at stride 2; BENCHMARKS.md, 2026-11-29). Here a block takes a run of channels over `tw` output columns
// and walks `rows` output rows; its threads copy the rows `depth` steps ahead
// into a ring of shared-memory rows (16-byte cp.async, zeros for padding), so
// those copies are in flight while the products of the current row run and
// cost no registers. Each thread then owns one channel vector at one output
// column as in the streamed kernel: the 9 weights and the 3x3 window in
// registers, each step converting only the rows the window slides onto.
//
// A thread's copies of a row (at most kDwStagedCopies) are planned once: a
// row later, only the row's offset changes. A step waits for its own copies, then one barrier publishes every thread's
// copies of the step's rows and tells that the rows read a step before are
// free; the copies issued after it go to those rows' slots. No XLA headers:
// the host tests run the block body with an executor that runs the threads
// one after another between barriers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/device_util.cuh"
#include "conv/depthwise/depthwise_kernels.cuh"
#include "conv/depthwise/depthwise_plan.h"
#include "conv/depthwise/depthwise_stream.cuh"

namespace im2col::cuda {

constexpr int kDwStagedThreads = 256;
constexpr int32_t kDwStagedMaxRun = 32;           // channel vectors a block's run, at most
constexpr int32_t kDwStagedSmem = 48 * 1024;      // the ring's bytes, at most (no opt-in needed)
constexpr int kDwStagedCopies = 2;                 // 16-byte copies a thread makes for a staged row, at most

// Row steps staged ahead: at stride 1 one row a step, at stride 2 two.
template <int SY>
constexpr int dw_staged_depth() {
  return SY == 1 ? 10 : 4;
}
// Rows the ring holds: the rows of `depth` steps in flight, the rows a step
// reads, and the window's rows kept from the step before.
constexpr int32_t dw_staged_ring(int sy, int depth) {
  return sy * (depth + 1) + (kDwStreamK > sy ? kDwStreamK - sy : 0);
}

struct DwStagedPlan {
  int32_t vectors = 1;      // C / V
  int32_t run = 1;          // channel vectors of a block's run (the last run may be short)
  int32_t runs = 1;
  int32_t tw = 1;           // output columns of a block
  int32_t col_tiles = 1;
  int32_t seg = 1;          // input columns a block stages: (tw - 1) * SX + K
  int32_t granules = 1;     // 16-byte copies a staged pixel
  int32_t row_granules = 1; // seg * granules
  int32_t row_bytes = 16;   // a staged row's bytes: row_granules * 16
  int32_t ring = 1;         // staged rows
  int32_t rows = 1, row_tiles = 1;
  int32_t smem = 0;         // the ring's bytes
  int64_t blocks = 0;       // runs x col_tiles x row_tiles x images
  FastDiv by_run, by_runs, by_col_tiles, by_row_tiles, by_granules, by_row_granules;
};

// The column layout of a staged plan for g with C channels of elem bytes:
// runs of at most max_run vectors (whole 16-byte copies), as many output
// columns as the block's threads hold (at most max_tw) while the ring of
// dw_staged_ring(stride, depth) input rows, plus `dy_slots` staged rows of the
// block's own columns (the filter gradient's dy), fits kDwStagedSmem and a
// thread makes at most kDwStagedCopies copies a row. Fills every field but
// the rows, row_tiles and blocks; false where no column fits.
inline bool plan_dw_staged_columns(const DwGeom& g, int64_t C, size_t elem, int depth, int dy_slots,
                                   int32_t max_run, int32_t max_tw, DwStagedPlan* out) {
  const int32_t V = dw_vector(elem, true);
  if (!dw_stream_domain(g, C, elem, V) || (C * static_cast<int64_t>(elem)) % 16 != 0) return false;
  const int32_t per_granule = static_cast<int32_t>(16 / (V * elem));  // vectors a 16-byte copy holds
  const int64_t vectors = C / V;
  if (vectors >= (int64_t{1} << 30)) return false;
  DwStagedPlan s;
  s.vectors = static_cast<int32_t>(vectors);
  s.runs = static_cast<int32_t>((vectors + max_run - 1) / max_run);
  s.run = static_cast<int32_t>((vectors + s.runs - 1) / s.runs);
  s.run = (s.run + per_granule - 1) / per_granule * per_granule;
  s.runs = static_cast<int32_t>((vectors + s.run - 1) / s.run);
  s.granules = s.run / per_granule;
  const int sy = g.stride[1], sx = g.stride[2];
  s.ring = dw_staged_ring(sy, depth);
  if (s.run > kDwStagedThreads) return false;
  s.tw = std::min<int32_t>(std::min<int32_t>(kDwStagedThreads / s.run, max_tw), g.out[2]);
  const auto ring_bytes = [&](int32_t tw) {
    return (int64_t{s.ring} * ((tw - 1) * int64_t{sx} + kDwStreamK) + int64_t{dy_slots} * tw) * s.granules * 16;
  };
  const auto fits = [&](int32_t tw) {
    return ring_bytes(tw) <= kDwStagedSmem &&
           ((tw - 1) * int64_t{sx} + kDwStreamK) * s.granules <= int64_t{kDwStagedCopies} * kDwStagedThreads;
  };
  while (s.tw > 1 && !fits(s.tw)) --s.tw;
  if (!fits(s.tw)) return false;
  s.col_tiles = (g.out[2] + s.tw - 1) / s.tw;
  s.tw = (g.out[2] + s.col_tiles - 1) / s.col_tiles;  // even tiles
  s.seg = static_cast<int32_t>((s.tw - 1) * int64_t{sx} + kDwStreamK);
  s.row_granules = s.seg * s.granules;
  s.row_bytes = s.row_granules * 16;
  s.smem = static_cast<int32_t>(ring_bytes(s.tw));
  s.by_run = FastDiv(s.run);
  s.by_runs = FastDiv(s.runs);
  s.by_col_tiles = FastDiv(s.col_tiles);
  s.by_granules = FastDiv(s.granules);
  s.by_row_granules = FastDiv(s.row_granules);
  *out = s;
  return true;
}

// Blocks resident at once (two an SM on an H100's or H200's 132 SMs), and the
// row steps a block's start and end cost beside its rows (its first rows'
// latency, the window's warm-up; the filter gradient's sums): the plans'
// estimate of time. A staged block is long (every row step waits at a
// barrier), so a grid pays for its last wave whole: the estimate counts waves
// of resident blocks, ceil(blocks / kDwStagedResident) x (rows +
// kDwStagedBlockSteps). (MobileNetV2's 56x56x144 filter gradient, bfloat16,
// batch 64: 576 blocks of 56 rows, 2.2 waves, took 1.05x the streamed
// kernel's time.)
constexpr int64_t kDwStagedResident = 264;
constexpr int64_t kDwStagedBlockSteps = 8;

// Of the column layouts of plan_dw_staged_columns for runs of max_run vectors
// and narrower (each run width once) and of the row tilings of at most
// max_tiles(columns) tiles whose rows repay the window's warm-up, the one of
// least estimated time; the widest run and fewest blocks among equals. Fills
// rows, row_tiles and blocks too; false where none fits.
template <typename MaxTiles>
inline bool plan_dw_staged_priced(const DwGeom& g, int64_t n, int64_t C, size_t elem, int depth, int dy_slots,
                                  int32_t max_run, int32_t max_tw, MaxTiles max_tiles, DwStagedPlan* out) {
  if (n < 1 || elem == 0 || elem > 8) return false;
  const int32_t per_granule = static_cast<int32_t>(16 / (dw_vector(elem, true) * elem));
  const int32_t OH = g.out[1];
  DwStagedPlan best;
  int64_t best_cost = -1;
  int32_t last_run = 0;
  for (int32_t run = max_run; run >= per_granule; run -= per_granule) {
    DwStagedPlan s;
    if (!plan_dw_staged_columns(g, C, elem, depth, dy_slots, run, max_tw, &s) || s.run == last_run) continue;
    last_run = s.run;
    const int64_t per_row_tile = int64_t{s.runs} * s.col_tiles * n;
    const int64_t tile_bound = std::min<int64_t>(OH, max_tiles(s));
    // Each distinct row count once, with the fewest tiles that give it.
    for (int64_t tiles = 1, next = 1; tiles <= tile_bound; tiles = next) {
      const int32_t rows = static_cast<int32_t>((OH + tiles - 1) / tiles);
      next = rows > 1 ? (OH + rows - 2) / (rows - 1) : tile_bound + 1;
      if (!dw_stream_rows_pay(g, rows)) break;
      const int64_t blocks = per_row_tile * tiles;
      const int64_t cost = (blocks + kDwStagedResident - 1) / kDwStagedResident * (rows + kDwStagedBlockSteps);
      if (best_cost >= 0 && cost >= best_cost) continue;
      best = s;
      best.rows = rows;
      best.row_tiles = static_cast<int32_t>(tiles);
      best.blocks = blocks;
      best_cost = cost;
    }
  }
  if (best_cost < 0 || best.blocks >= (int64_t{1} << 31)) return false;
  best.by_row_tiles = FastDiv(best.row_tiles);
  *out = best;
  return true;
}

// Whether the staged kernel takes phases p of n images with C channels of
// elem bytes (channels-last; the caller checks 16-byte alignment), and its
// plan (plan_dw_staged_priced). max_run and max_tw narrow the blocks (the
// host tests, for several runs and column tiles on small cases).
inline bool plan_dw_staged(const DwPhases& p, int64_t n, int64_t C, size_t elem, DwStagedPlan* out,
                           int32_t max_run = kDwStagedMaxRun, int32_t max_tw = kDwStagedThreads) {
  if (p.count != 1) return false;
  const DwGeom& g = p.g[0];
  const int depth = g.stride[1] == 1 ? dw_staged_depth<1>() : dw_staged_depth<2>();
  return plan_dw_staged_priced(g, n, C, elem, depth, 0, max_run, max_tw,
                               [&](const DwStagedPlan&) { return int64_t{g.out[1]}; }, out);
}

// Whether the staged plan's rows repay the window's warm-up (as
// dw_stream_pays).
inline bool dw_staged_pays(const DwGeom& g, const DwStagedPlan& s) { return dw_stream_rows_pay(g, s.rows); }

// cp.async's group fences, nothing on the host (its copies are synchronous).
__device__ __forceinline__ void dw_staged_commit() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int Pending>
__device__ __forceinline__ void dw_staged_wait() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
#endif
}

// The ring's shared-memory address (on the host, nothing), and a 16-byte copy
// into it at byte `offset`, or 16 zeros where !valid.
__device__ __forceinline__ uint32_t dw_staged_shared(const unsigned char* ring) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__cvta_generic_to_shared(ring));
#else
  (void)ring;
  return 0;
#endif
}
__device__ __forceinline__ void dw_staged_copy(unsigned char* ring, uint32_t ring_s, int32_t offset, const void* src,
                                               bool valid) {
#if defined(__CUDA_ARCH__)
  (void)ring;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(ring_s + offset), "l"(src), "r"(valid ? 16 : 0));
#else
  (void)ring_s;
  if (valid) std::memcpy(ring + offset, src, 16);
  else std::memset(ring + offset, 0, 16);
#endif
}

// A thread's copies of a staged row, planned once.
struct DwStagedCopies {
  int64_t src[kDwStagedCopies];  // a copy's element offset from its row's start (column, channel)
  int32_t dst[kDwStagedCopies];  // its byte offset in a ring row
  uint32_t bits = 0;             // bit c: copy c exists; bit 8 + c: its column is inside the image
};

// Thread tid's copies of a staged row of `row_granules` 16-byte copies,
// `by_granules` a pixel, from column col0 of a row `width` pixels wide whose
// pixels hold C channels of T, the run's channels from c0.
template <typename T>
__device__ __forceinline__ void dw_staged_plan_copies(DwStagedCopies& cp, int32_t tid, const FastDiv& by_granules,
                                                      int32_t row_granules, int32_t col0, int32_t width, int64_t C,
                                                      int64_t c0) {
  constexpr int32_t GV = static_cast<int32_t>(16 / sizeof(T));  // channels a copy holds
  cp.bits = 0;
#pragma unroll
  for (int c = 0; c < kDwStagedCopies; ++c) {
    const int32_t i = tid + c * kDwStagedThreads;
    int32_t col, gi;
    by_granules.divmod(i, col, gi);
    const int64_t ch = c0 + int64_t{gi} * GV;
    cp.src[c] = int64_t{col0 + col} * C + ch;
    cp.dst[c] = i * 16;
    if (i < row_granules && ch < C) cp.bits |= 1u << c;
    if (static_cast<uint32_t>(col0 + col) < static_cast<uint32_t>(width)) cp.bits |= 1u << (8 + c);
  }
}

// Every thread's copies (cp(state)) of `row` (row_ok: inside the image) into
// the ring row at byte `slot`; zeros where the row or a copy's column is
// outside the image (`fallback`: any valid address).
template <typename T, typename State, typename Exec, typename Copies>
__device__ __forceinline__ void dw_staged_issue(Exec& e, unsigned char* ring, uint32_t ring_s, int32_t slot,
                                                const T* row, bool row_ok, const T* fallback, Copies&& cp_of) {
  e.each([&](State& st) {
    const DwStagedCopies& cp = cp_of(st);
#pragma unroll
    for (int c = 0; c < kDwStagedCopies; ++c) {
      if (!(cp.bits >> c & 1u)) continue;
      const bool valid = row_ok && (cp.bits >> (8 + c) & 1u);
      dw_staged_copy(ring, ring_s, slot + cp.dst[c], valid ? row + cp.src[c] : fallback, valid);
    }
  });
}

template <typename A, int V>
struct DwStagedState {
  A wt[kDwStreamK][kDwStreamK][V];
  A win[kDwStreamK][kDwStreamK][V];
  DwStagedCopies x;              // the input rows' copies
  int32_t read = 0;              // byte offset in a ring row of the thread's window (column, vector)
  int32_t col = 0, vec = 0;
  bool active = false;
};

// The block body: block `block` (run fastest, then column tile, row tile,
// image) with the ring at `ring` (s.smem bytes, 16-byte aligned). What every
// thread of the block computes alike (rows, ring slots) is computed outside
// each(), so that the host executor advances it once.
template <int SY, typename T, typename TY, typename Exec>
__device__ __forceinline__ void dw_staged_block(Exec& e, unsigned char* __restrict__ ring, const T* __restrict__ x,
                                                const T* __restrict__ w, TY* __restrict__ y, const DwGeom& g,
                                                const DwStagedPlan& s, int64_t C, int64_t block) {
  using A = typename Acc<T>::type;
  using State = DwStagedState<A, dw_vector(sizeof(T), true)>;
  constexpr int K = kDwStreamK, V = dw_vector(sizeof(T), true), D = dw_staged_depth<SY>();
  constexpr int KEEP = K > SY ? K - SY : 0;

  int32_t b = static_cast<int32_t>(block), run_i, ct, rt;
  s.by_runs.divmod(b, b, run_i);
  s.by_col_tiles.divmod(b, b, ct);
  s.by_row_tiles.divmod(b, b, rt);
  const int64_t image = b;
  const int32_t OH = g.out[1], OW = g.out[2], IH = g.in[1], IW = g.in[2];
  const int32_t ox0 = ct * s.tw, oy0 = rt * s.rows, steps = min(OH, oy0 + s.rows) - oy0;
  const int32_t ix0 = ox0 * g.stride[2] - g.pad[2], iy0 = oy0 * SY - g.pad[1];
  const int32_t rows_in = (steps - 1) * SY + K;
  const int64_t c0 = int64_t{run_i} * s.run * V, row_elems = int64_t{IW} * C;
  const T* const x_image = x + image * IH * row_elems;
  const int32_t pixel_bytes = s.granules * 16;

  e.each([&](State& st) {
    const int32_t tid = static_cast<int32_t>(threadIdx.x);
    dw_staged_plan_copies<T>(st.x, tid, s.by_granules, s.row_granules, ix0, IW, C, c0);
    s.by_run.divmod(tid, st.col, st.vec);
    st.read = st.col * g.stride[2] * pixel_bytes + st.vec * static_cast<int32_t>(V * sizeof(T));
    const int64_t ch = c0 + int64_t{st.vec} * V;
    st.active = st.col < s.tw && ox0 + st.col < OW && ch < C;
    if (st.active) dw_stream_weights<T, A, V, K>(st.wt, w, g, ch);
  });

  const uint32_t ring_s = dw_staged_shared(ring);
  // Stages the block's next `count` input rows (those past its last row
  // none), then closes their group of copies.
  int32_t next_row = 0, write_slot = 0;
  const auto stage_rows = [&](int count) {
    for (int r = 0; r < count; ++r, ++next_row, write_slot = write_slot + 1 == s.ring ? 0 : write_slot + 1) {
      if (next_row >= rows_in) continue;
      const int32_t iy = iy0 + next_row;
      const bool row_ok = static_cast<uint32_t>(iy) < static_cast<uint32_t>(IH);
      const T* const row = x_image + (row_ok ? iy : 0) * row_elems;
      dw_staged_issue<T, State>(e, ring, ring_s, write_slot * s.row_bytes, row, row_ok, x,
                                [](State& st) -> const DwStagedCopies& { return st.x; });
    }
    e.each([&](State&) { dw_staged_commit(); });
  };
  stage_rows(KEEP + SY);
#pragma unroll
  for (int j = 1; j < D; ++j) stage_rows(SY);

  // Window row `i` of every thread from the ring's row at `slot`.
  const auto take = [&](State& st, int i, int32_t slot) {
    const unsigned char* p = ring + slot * s.row_bytes + st.read;
#pragma unroll
    for (int kx = 0; kx < K; ++kx) dw_load<V>(st.win[i][kx], reinterpret_cast<const T*>(p + kx * pixel_bytes));
  };
  const auto after = [&](int32_t slot, int32_t by) { return slot + by >= s.ring ? slot + by - s.ring : slot + by; };

  int32_t read_slot = 0;  // the ring row of the next input row to read
  TY* const y0 = y + ((image * OH + oy0) * OW + ox0) * C + c0;
#pragma unroll(dw_stream_unroll<SY>())
  for (int32_t j = 0; j < steps; ++j) {
    e.each([&](State&) { dw_staged_wait<D - 1>(); });
    e.sync();
    stage_rows(SY);
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
      A acc[V];
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] = A(0);
#pragma unroll
      for (int ky = 0; ky < K; ++ky)
#pragma unroll
        for (int kx = 0; kx < K; ++kx)
#pragma unroll
          for (int v = 0; v < V; ++v) acc[v] += st.wt[ky][kx][v] * st.win[ky][kx][v];
      Pack<TY, V> o;
#pragma unroll
      for (int v = 0; v < V; ++v) o.v[v] = store_value<TY>(acc[v]);
      dw_store_vector<TY, V>(y0 + (int64_t{j} * OW + st.col) * C + int64_t{st.vec} * V, o);
    });
    read_slot = after(read_slot, j == 0 ? K : SY);
  }
}

template <int SY, typename T, typename TY>
__global__ void __launch_bounds__(kDwStagedThreads, 2)
dw_staged_kernel(const T* __restrict__ x, const T* __restrict__ w, TY* __restrict__ y, const DwGeom g,
                 const DwStagedPlan s, int64_t C) {
  extern __shared__ __align__(16) unsigned char dw_staged_ring_smem[];
  DwDeviceExec<DwStagedState<typename Acc<T>::type, dw_vector(sizeof(T), true)>> e;
  dw_staged_block<SY, T, TY>(e, dw_staged_ring_smem, x, w, y, g, s, C, blockIdx.x);
}

}  // namespace im2col::cuda
