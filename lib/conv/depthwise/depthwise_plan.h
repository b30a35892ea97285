// Host-side plans of the depthwise kernels (depthwise_conv.h): which calls
// they take, the filter gradient's slices (mirrored by
// src/jax_im2col/conv/depthwise_plan.py), the canonical 3-D description of a
// call and its phases, and the tiles of each kernel. No XLA headers: the host
// tests (tests/host/conv/depthwise/) include this file and
// depthwise_kernels.cuh.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/device_util.cuh"
#include "common/geometry.h"
#include "conv/direct/filter_slices.h"

namespace im2col::cuda {

// --- applicability and the filter gradient's slices (mirrored in Python) -------

enum class DwOp : int { kForward = 0, kInputGradient = 1, kFilterGradient = 2 };
enum class DwType : int { kF16, kBF16, kF32, kF64, kOther };

// Whether the depthwise kernels take a call: one input and one output
// channel per group (groups == C == O), no lhs dilation (transposed
// convolutions are lowered elsewhere), rank 1 to 3, float16, bfloat16,
// float32 or float64. Any window, stride, dilation and padding (negative
// too), either layout: the kernels fall back to simpler tiles, and past
// those to a per-element kernel, rather than refuse a geometry.
// Keep in sync with depthwise_applies in src/jax_im2col/conv/depthwise_plan.py.
inline bool depthwise_applies(DwOp op, int nd, bool channels_last, DwType type, int64_t groups, int64_t c,
                              int64_t o, const int64_t* lhs_dilation) {
  (void)channels_last;
  if (op != DwOp::kForward && op != DwOp::kInputGradient && op != DwOp::kFilterGradient) return false;
  if (nd < 1 || nd > kMaxSpatial || type == DwType::kOther || c < 1 || groups != c || o != c) return false;
  for (int d = 0; d < nd; ++d)
    if (lhs_dilation[d] != 1) return false;
  return true;
}

// The filter gradient's slices (filter_slices.h: `rows` output rows of the
// first spatial dimension of one image each), the `chunk_positions`
// attribute of its call. Enough slices that about kDwFillBlocks blocks (with
// a block per kDwRunChannels channels: the kernels' runs are that wide or
// narrower) keep the GPU busy, few enough that the float32 (float64) partial
// sums stay under a kDwPartialsShare-th of the bytes of dy and x (at least
// kDwMinPartialBytes) and under the workspace limit; at least one slice per
// image. The same plan for both layouts.
// Keep in sync with depthwise_filter_plan in src/jax_im2col/conv/depthwise_plan.py.
constexpr int64_t kDwFillBlocks = 1024;
constexpr int64_t kDwRunChannels = 32;
constexpr int64_t kDwPartialsShare = 4;
constexpr int64_t kDwMinPartialBytes = int64_t{1} << 20;

struct DwFilterPlan {
  int64_t rows = 1;             // output rows of dimension 0 per slice
  int64_t slices = 0;           // n * ceil(out[0] / rows)
  int64_t workspace_bytes = 1;  // the partial sums (at least 1 byte)
};

inline DwFilterPlan depthwise_filter_plan(int64_t n, int nd, const int64_t* out_spatial, int64_t c,
                                          int64_t kernel_size, int64_t elem_bytes, bool f64,
                                          bool channels_last, int64_t workspace_limit) {
  (void)channels_last;
  DwFilterPlan p;
  const int64_t acc = f64 ? 8 : 4;
  int64_t out_size = 1;
  for (int d = 0; d < nd; ++d) out_size *= out_spatial[d];
  const int64_t out0 = out_spatial[0];
  if (n < 1 || out0 < 1 || out_size < 1 || c < 1) {
    p.rows = 1;
    p.slices = n > 0 && out0 > 0 ? n * out0 : 0;
    p.workspace_bytes = std::max<int64_t>(1, p.slices * c * kernel_size * acc);
    return p;
  }
  const int64_t runs = (c + kDwRunChannels - 1) / kDwRunChannels;
  const int64_t want = (kDwFillBlocks + n * runs - 1) / (n * runs);
  const int64_t data = 2 * n * out_size * c * elem_bytes;
  const int64_t cap = std::min(workspace_limit, std::max(kDwMinPartialBytes, data / kDwPartialsShare));
  const int64_t per_slice = c * kernel_size * acc;
  const int64_t cap_per_image = cap / per_slice / n;
  int64_t per_image = std::max<int64_t>(1, std::min(out0, std::min(want, cap_per_image)));
  p.rows = (out0 + per_image - 1) / per_image;
  per_image = (out0 + p.rows - 1) / p.rows;
  p.slices = n * per_image;
  p.workspace_bytes = std::max<int64_t>(1, p.slices * per_slice);
  return p;
}

// --- the canonical description ------------------------------------------------

constexpr int kDwR = 7;             // a forward thread's outputs along the last dimension
constexpr int kDwThreads = 256;     // most threads a block
constexpr int kDwMaxPhases = 8;     // input-gradient phases per launch
constexpr int64_t kDwSmemBudget = 96 * 1024;  // a block's shared memory: two blocks per SM

// A depthwise convolution without lhs dilation as the kernels see it: three
// spatial dimensions (lower ranks get leading dimensions of extent 1), 32-bit
// extents (make_geometry checks fits_32_bits), and two maps that let the
// input gradient's phases (gradient_phase) run as forwards:
//   its tap u along d is the filter's tap w_first[d] + w_step[d] * u (of wk[d]),
//   its output position j lands at o_first[d] + o_step[d] * j (of yk[d]).
struct DwGeom {
  int32_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1};
  int32_t stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, pad[3] = {0, 0, 0};
  int32_t w_first[3] = {0, 0, 0}, w_step[3] = {1, 1, 1}, wk[3] = {1, 1, 1};
  int32_t o_first[3] = {0, 0, 0}, o_step[3] = {1, 1, 1}, yk[3] = {1, 1, 1};
  int32_t zero = 0;  // no tap reaches these outputs (a phase of a stride past the window): written as zeros
  int32_t nd = 3;    // the call's rank: slices split dimension 3 - nd
  IM2COL_HD int64_t kernel_size() const { return int64_t{kernel[0]} * kernel[1] * kernel[2]; }
  IM2COL_HD int64_t in_size() const { return int64_t{in[0]} * in[1] * in[2]; }
  IM2COL_HD int64_t out_size() const { return int64_t{out[0]} * out[1] * out[2]; }
  IM2COL_HD int64_t y_size() const { return int64_t{yk[0]} * yk[1] * yk[2]; }
  IM2COL_HD int64_t w_size() const { return int64_t{wk[0]} * wk[1] * wk[2]; }
};

// g with identity maps (the forward, and the filter gradient).
inline DwGeom dw_lift(const Geometry& g) {
  DwGeom d;
  d.nd = g.nd;
  const int lead = 3 - g.nd;
  for (int i = 0; i < g.nd; ++i) {
    const int j = lead + i;
    d.in[j] = static_cast<int32_t>(g.in[i]);
    d.out[j] = static_cast<int32_t>(g.out[i]);
    d.kernel[j] = static_cast<int32_t>(g.kernel[i]);
    d.stride[j] = static_cast<int32_t>(g.stride[i]);
    d.dil[j] = static_cast<int32_t>(g.rhs_dilation[i]);
    d.pad[j] = static_cast<int32_t>(g.pad_lo[i]);
    d.wk[j] = d.kernel[j];
    d.yk[j] = d.out[j];
  }
  return d;
}

// Phase `ph` of g's input gradient as a forward of dy (gradient_phase).
inline DwGeom dw_phase(const Geometry& g, const GradientPhase& ph) {
  DwGeom d = dw_lift(ph.g);
  const int lead = 3 - g.nd;
  for (int i = 0; i < g.nd; ++i) {
    const int j = lead + i;
    d.w_first[j] = static_cast<int32_t>(ph.tap_first[i]);
    d.w_step[j] = -static_cast<int32_t>(g.tap_step[i]);
    d.wk[j] = static_cast<int32_t>(g.kernel[i]);
    d.o_first[j] = static_cast<int32_t>(ph.first[i]);
    d.o_step[j] = static_cast<int32_t>(g.stride[i]);
    d.yk[j] = static_cast<int32_t>(g.in[i]);
  }
  d.zero = ph.has_taps ? 0 : 1;
  if (d.zero) {
    // gradient_phase leaves such a phase's extents unchecked: its positions.
    for (int i = 0; i < g.nd; ++i) {
      const int64_t r = ph.first[i], s = g.stride[i];
      d.out[lead + i] = static_cast<int32_t>(r < g.in[i] ? (g.in[i] - r + s - 1) / s : 0);
    }
  }
  return d;
}

// Phases of one input-gradient launch (passed as a __grid_constant__).
struct DwPhases {
  DwGeom g[kDwMaxPhases];
  int32_t count = 0;
};

// Per-dimension bound of a launch's phases: their largest extents and
// windows (the tiles are planned for it; stride and dilation agree).
inline DwGeom dw_bound(const DwPhases& p) {
  DwGeom b = p.g[0];
  for (int i = 1; i < p.count; ++i)
    for (int d = 0; d < 3; ++d) {
      b.out[d] = std::max(b.out[d], p.g[i].out[d]);
      b.kernel[d] = std::max(b.kernel[d], p.g[i].kernel[d]);
    }
  return b;
}

// Elements per thread vector: 16 bytes (8 for half types, so that a vector
// is 4 float accumulators); channels-first threads take one channel.
constexpr int32_t dw_vector(size_t elem_bytes, bool cl) {
  return !cl ? 1 : elem_bytes == 8 ? 2 : 4;
}

inline int32_t round_up_odd(int32_t v) { return v | 1; }
inline int32_t dw_log2(int32_t v) {
  int32_t s = 0;
  while ((1 << (s + 1)) <= v) ++s;
  return s;
}
inline int64_t dw_round16(int64_t v) { return (v + 15) / 16 * 16; }

// The most channel vectors (channels-first: channels) a block takes: small
// planes need wide runs to fill a block.
constexpr int32_t kDwMaxRun = 64;

// The largest power of two run of at most kDwMaxRun vectors (of `vectors`),
// and the narrowest one allowed: runs of 128 bytes (a wavefront of lanes)
// unless `narrow`.
inline void dw_runs(int64_t vectors, int32_t lanes, bool cl, bool narrow, int32_t* nv_max, int32_t* nv_min) {
  *nv_max = 1;
  while (*nv_max * 2 <= kDwMaxRun && *nv_max * 2 <= vectors) *nv_max *= 2;
  *nv_min = 1;
  if (cl && !narrow)
    while (*nv_min * 2 <= lanes && *nv_min * 2 <= *nv_max) *nv_min *= 2;
}

// The threads of blocks of `threads` and `smem` bytes that fit on an SM
// (228 KB of shared memory, 1 KB reserved a block; registers for two blocks
// of kDwThreads at 128 a thread: launch_bounds(kDwThreads, 2)).
inline double dw_resident_threads(int32_t threads, int64_t smem) {
  const int64_t by_smem = (228 * 1024) / (smem + 1024);
  const int64_t by_regs = 65536 / (int64_t{threads} * 128);
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(std::min(by_smem, by_regs), 32));
  return static_cast<double>(std::min<int64_t>(blocks * threads, 2048));
}

// A plan's cost: bytes staged per output (amplification, over the share of
// threads with outputs), times the shortfall of resident threads below 512
// (latency hiding), over the share of lanes of the block's warps in use and
// over the share of the last wave of blocks in use (kDwSMs multiprocessors,
// those resident on each).
// A channels-last run of channels under 32 bytes fetches whole 32-byte
// sectors from L2 for it: `sector_priced` charges the sectors (32 / run
// bytes), else a flat 1.25. The forward tiles are priced (kDwSectorCost;
// ncu, ConvNeXt's 56x56x96 bfloat16 forward on 8-byte runs: L2 at 61% of its
// throughput, L1 hits under 1%; priced, 32-byte runs and 11% less time); the
// filter tiles keep the flat factor (priced, RepLKNet's bfloat16 29x29 and
// 27x27 filter gradients took 1-2% longer; docs/optimization-log.md, step 114).
constexpr int64_t kDwSMs = 132;

inline double dw_plan_cost(double amplification, int32_t threads, int64_t smem, int64_t run_bytes, bool cl,
                           int64_t blocks, bool sector_priced) {
  const double lanes = static_cast<double>(threads) / ((threads + 31) / 32 * 32);
  const double resident = dw_resident_threads(threads, smem);
  const int64_t slots = kDwSMs * std::max<int64_t>(1, static_cast<int64_t>(resident) / threads);
  const double waves = static_cast<double>(blocks) / (static_cast<double>((blocks + slots - 1) / slots) * slots);
  double cost = amplification * std::max(1.0, 512.0 / resident) / lanes / waves;
  if (cl && run_bytes < 32) cost *= sector_priced ? 32.0 / static_cast<double>(std::max<int64_t>(1, run_bytes)) : 1.25;
  return cost;
}

// --- forward tiles ---------------------------------------------------------------

// A block takes th x tw outputs (of one image, one plane of dimension 0) and
// a run of channels: channels-last nv vectors of v channels (cbp channels
// staged per pixel), channels-first nv channels. Thread (vector or channel,
// W-thread, row) owns kDwR outputs of one row, q apart (the ring's spacing),
// and loops over stages of khc x kwc taps (the whole window where it fits),
// each staging the input under its taps (ph x pw pixels, rows pwa apart) and
// their weights.
struct DwTile {
  int32_t v = 1, nv = 1, cbp = 1;
  int32_t q = 1;                    // a thread's outputs along W are q apart
  int32_t gw = 1, th = 1, tw = 1;   // W-threads, output rows, output columns of a tile
  int32_t threads = 1;
  int32_t khc = 1, kwc = 1;         // taps per stage along H, W
  int32_t stages_h = 1, stages_w = 1;
  int32_t ph = 1, pw = 1, pwa = 1;  // staged rows, columns, row pitch (pixels)
  int32_t plane = 1;                // channels-first: elements per staged channel
  int32_t runs = 1, tiles_h = 1, tiles_w = 1, planes = 1;
  int64_t blocks = 0;               // per phase and image
  int64_t tile_bytes = 0, weight_bytes = 0, out_bytes = 0, smem = 0;
  bool ring = false;                // kernel template S = 1 (else 0)
  bool vector_io = false;           // channels-last: whole vectors in global memory
  bool cl = true;
  int32_t nv_shift = 0, cbp_shift = 0;  // log2 of nv and cbp (powers of two)
  FastDiv by_pw, by_ph, by_kwc, by_taps, by_tw, by_th;
  // Block indices in 32 bits (dw_tile_launch): divisors of the block decode.
  bool decode32 = false;
  FastDiv by_launch_phase, by_runs, by_tiles_w, by_tiles_h, by_planes;
};

// Fills t's tile sizes for nv, gw, th and the stage's taps; returns the
// shared memory it needs.
inline int64_t dw_tile_bytes(const DwGeom& g, DwTile& t, size_t elem, size_t acc, size_t out_elem) {
  t.tw = t.gw * kDwR;
  t.ph = (t.th - 1) * g.stride[1] + (t.khc - 1) * g.dil[1] + 1;
  t.pw = (t.tw - 1) * g.stride[2] + (t.kwc - 1) * g.dil[2] + 1;
  if (t.cl) {
    // Rows an odd number of pixels apart: the lanes of one wavefront on
    // different rows then read different banks (depthwise_kernels.cuh).
    t.pwa = t.nv * t.v * static_cast<int32_t>(elem) >= 128 ? t.pw : round_up_odd(t.pw);
    t.plane = t.ph * t.pwa * t.cbp;
    t.tile_bytes = dw_round16(int64_t{t.plane} * static_cast<int64_t>(elem));
    t.weight_bytes = dw_round16(int64_t{t.khc} * t.kwc * t.cbp * static_cast<int64_t>(acc));
    t.out_bytes = 0;
  } else {
    t.pwa = round_up_odd(t.pw);
    t.plane = round_up_odd(t.ph * t.pwa);
    t.tile_bytes = dw_round16(int64_t{t.nv} * t.plane * static_cast<int64_t>(elem));
    t.weight_bytes = dw_round16(int64_t{t.nv} * t.khc * t.kwc * static_cast<int64_t>(acc));
    // The outputs pass through shared memory for coalesced stores.
    t.out_bytes = dw_round16(int64_t{t.nv} * t.th * t.tw * static_cast<int64_t>(out_elem));
  }
  return std::max(t.tile_bytes + t.weight_bytes, t.out_bytes);
}

// The forward tile for g (a phase bound for the input gradient) with C
// channels of elem_bytes, accumulators of acc_bytes and outputs of
// out_bytes, for n_blocks images times phases; `ring` allows the register ring where g's stride divides its
// dilation along W, `narrow` allows runs narrower than 128 bytes. False
// where no tile fits `budget` bytes (kDwSmemBudget; the host tests pass
// less, to run many stages and tiles); the per-element kernel then runs.
inline bool plan_dw_tile(const DwGeom& g, int64_t C, bool cl, size_t elem, size_t acc, size_t out_elem,
                         bool ring, bool narrow, int64_t n_blocks, DwTile* out, int64_t budget = kDwSmemBudget,
                         bool sector_priced = true) {
  if (g.out_size() <= 0 || C <= 0) return false;
  const int32_t v = dw_vector(elem, cl);
  const int64_t vectors = (C + v - 1) / v;
  const int32_t lanes = cl ? static_cast<int32_t>(128 / (v * elem)) : 32;
  const int32_t OH = g.out[1], OW = g.out[2], KH = g.kernel[1], KW = g.kernel[2];
  const bool use_ring = ring && g.dil[2] % g.stride[2] == 0;
  const int32_t q = use_ring ? g.dil[2] / g.stride[2] : 1;
  if (q > kDwThreads) return false;
  int32_t nv_max, nv_min;
  dw_runs(vectors, lanes, cl, narrow, &nv_max, &nv_min);
  bool found = false;
  double best_cost = 0;
  DwTile best;
  for (int32_t nv = nv_max; nv >= nv_min; nv /= 2) {
    DwTile t;
    t.cl = cl;
    t.v = v;
    t.nv = nv;
    t.cbp = cl ? nv * v : 1;
    t.q = q;
    t.ring = use_ring;
    if (nv * q > kDwThreads) continue;
    // W-threads: whole rows where they fit, q-thread groups of kDwR * q outputs.
    const int32_t groups = std::max(1, std::min((OW + kDwR * q - 1) / (kDwR * q), kDwThreads / (nv * q)));
    const int32_t tiles_w = ((OW + kDwR * q - 1) / (kDwR * q) + groups - 1) / groups;
    const int32_t groups_even = ((OW + kDwR * q - 1) / (kDwR * q) + tiles_w - 1) / tiles_w;
    t.gw = groups_even * q;
    int32_t th = std::max(1, std::min(OH, kDwThreads / (nv * t.gw)));
    th = (OH + (OH + th - 1) / th - 1) / ((OH + th - 1) / th);  // even tiles
    t.th = th;
    t.khc = KH;
    t.kwc = KW;
    bool fits = false;
    for (int guard = 0; guard < 200; ++guard) {
      if (dw_tile_bytes(g, t, elem, acc, out_elem) <= budget) {
        fits = true;
        break;
      }
      // Shrink what costs the least: taps along H re-stage the halo rows,
      // so rows go first while they are many, then stages of taps.
      if (t.th > 8) t.th = (t.th + 1) / 2;
      else if (t.khc > 1) t.khc = (t.khc + 1) / 2;
      else if (t.th > 1) t.th = (t.th + 1) / 2;
      else if (t.kwc > 1) t.kwc = (t.kwc + 1) / 2;
      else if (t.gw > q) t.gw = std::max(q, (t.gw / q + 1) / 2 * q);
      else break;
    }
    if (!fits) continue;
    t.threads = t.nv * t.gw * t.th;
    t.stages_h = (KH + t.khc - 1) / t.khc;
    t.stages_w = (KW + t.kwc - 1) / t.kwc;
    t.tiles_h = (OH + t.th - 1) / t.th;
    t.tiles_w = (OW + t.tw - 1) / t.tw;
    t.runs = static_cast<int32_t>(cl ? (C + t.cbp - 1) / t.cbp : (C + t.nv - 1) / t.nv);
    const double staged = static_cast<double>(t.stages_h) * t.stages_w * t.ph * t.pw;
    const double useful = static_cast<double>(std::min(t.th, OH)) * std::min(t.tw, OW);
    const double util = static_cast<double>(OH) * OW /
                        (static_cast<double>(t.tiles_h) * t.th * t.tiles_w * t.tw);
    const double cost = dw_plan_cost(staged / useful / util, t.threads, dw_tile_bytes(g, t, elem, acc, out_elem),
                                     int64_t{t.cbp} * static_cast<int64_t>(elem), cl,
                                     int64_t{t.runs} * t.tiles_w * t.tiles_h * g.out[0] * n_blocks, sector_priced);
    if (!found || cost < best_cost * 0.97) {
      found = true;
      best_cost = cost;
      best = t;
    }
  }
  if (!found) return false;
  best.smem = dw_tile_bytes(g, best, elem, acc, out_elem);
  best.nv_shift = dw_log2(best.nv);
  best.cbp_shift = dw_log2(best.cbp);
  best.by_pw = FastDiv(best.pw);
  best.by_ph = FastDiv(best.ph);
  best.by_kwc = FastDiv(best.kwc);
  best.by_taps = FastDiv(int64_t{best.khc} * best.kwc);
  best.by_tw = FastDiv(best.tw);
  best.by_th = FastDiv(best.th);
  best.planes = g.out[0];
  best.blocks = int64_t{best.runs} * best.tiles_w * best.tiles_h * best.planes;
  *out = best;
  return true;
}

// Sets t's block decode for a launch over n_images images and `phases`
// phases: 32-bit divisions where every block index fits (a 64-bit division
// costs about 70 instructions a block; 6% of a ConvNeXt 7x7 forward's).
inline void dw_tile_launch(DwTile& t, int64_t n_images, int32_t phases) {
  const int64_t per_phase = t.blocks * n_images;
  t.decode32 = per_phase * phases < (int64_t{1} << 31);
  if (!t.decode32) return;
  t.by_launch_phase = FastDiv(per_phase);
  t.by_runs = FastDiv(t.runs);
  t.by_tiles_w = FastDiv(t.tiles_w);
  t.by_tiles_h = FastDiv(t.tiles_h);
  t.by_planes = FastDiv(t.planes);
}

// --- filter-gradient tiles ---------------------------------------------------------

// The taps per chunk of a kernel row that a filter-gradient thread sums
// (the kernel's KC), one of 3, 5, 7, 8: the fewest issue slots over the
// row's chunks, a step of a chunk costing its v * kc FMAs and about 4 more
// (two loads, their addresses), the larger on a tie.
inline int32_t dw_filter_chunk(int32_t KW, int32_t v) {
  int32_t best = 8;
  int64_t best_cost = int64_t{(KW + 7) / 8} * (v * 8 + 4);
  for (int32_t kc : {7, 5, 3}) {
    const int64_t cost = int64_t{(KW + kc - 1) / kc} * (v * kc + 4);
    if (cost < best_cost) {
      best = kc;
      best_cost = cost;
    }
  }
  return best;
}

// A block takes one slice (its output rows of one image), one plane of taps
// along dimension 0 (kd), a group of khb tap rows and chb chunks of kc taps
// along W, and a run of channels (as the forward: nv vectors of v, or nv
// channels). Thread (vector or channel, tap row, chunk, p) sums its taps
// over the positions of items p, p + P, ... of each tile (tr x tw outputs;
// an item is a row's segment of segw columns), sliding along them with the
// input under its chunk in registers; the P threads of a (vector, row,
// chunk) then meet in shared memory, in order.
struct DwFilterTile {
  int32_t v = 1, nv = 1, cbp = 1;
  int32_t kc = 8, chunks = 1;       // taps per chunk, chunks per kernel row
  int32_t khb = 1, chb = 1;         // tap rows, chunks per block
  int32_t kh_groups = 1, ch_groups = 1;
  int32_t p = 1;                    // threads splitting a tile's positions
  int32_t tr = 1, tw = 1;           // output tile
  int32_t segw = 1, segs = 1;       // a tile row's segments
  double balance = 1;               // the share of the p threads' rounds with an item
  int32_t ph = 1, pw = 1, pwa = 1;  // x tile: rows, columns, row pitch (pixels)
  int32_t plane = 1;                // elements per staged channel (channels-first) or of the whole tile
  int32_t dplane = 1;               // dy tile, likewise
  int32_t q = 1;
  int32_t threads = 1, runs = 1;
  int64_t x_bytes = 0, dy_bytes = 0, red_bytes = 0, smem = 0, blocks = 0;
  bool ring = false, vector_io = false, cl = true;
  int32_t nv_shift = 0, cbp_shift = 0;  // log2 of nv and cbp (powers of two)
  FastDiv by_pw, by_ph, by_tw, by_tr, by_segs;
};

// The split of a tile's positions among p threads per (vector, tap row,
// chunk), `group` of those a block: items are rows, or segments of rows
// where rows are fewer than the threads want; p divides the items into
// rounds as evenly as it can (balance: the share of thread-rounds with an
// item), and a segment's ring warms up over kc - 1 loads (its share of the
// sweep counts against it).
inline void dw_filter_split(DwFilterTile& t, int32_t group, int32_t kc) {
  const int32_t want = std::max(1, kDwThreads / group);
  double best = -1;
  const int32_t max_segs = std::max(1, std::min(want, t.tw / (2 * kc)));
  for (int32_t segs = 1; segs <= max_segs; ++segs) {
    const int32_t segw = (t.tw + segs - 1) / segs, real = (t.tw + segw - 1) / segw;
    const int32_t items = t.tr * real;
    const int32_t rounds = (items + want - 1) / want, p = (items + rounds - 1) / rounds;
    const double score = static_cast<double>(items) / (static_cast<double>(rounds) * want) *
                         (static_cast<double>(segw) / (segw + kc - 1));
    if (score > best * 1.02) {
      best = score;
      t.segs = real;
      t.segw = segw;
      t.p = p;
      t.balance = static_cast<double>(items) / (static_cast<double>(rounds) * p);
    }
  }
  t.threads = group * t.p;
}

// The extents of a slice's region along H and W (rows, columns of its
// tiles); `rows` is FilterSlices::rows along dimension 3 - nd.
inline void dw_slice_extent(const DwGeom& g, int64_t rows, int32_t* h, int32_t* w) {
  *h = g.out[1];
  *w = g.out[2];
  if (g.nd == 2) *h = static_cast<int32_t>(std::min<int64_t>(rows, g.out[1]));
  if (g.nd == 1) *w = static_cast<int32_t>(std::min<int64_t>(rows, g.out[2]));
}

inline int64_t dw_filter_tile_bytes(const DwGeom& g, DwFilterTile& t, size_t elem, size_t acc) {
  t.ph = (t.tr - 1) * g.stride[1] + (t.khb - 1) * g.dil[1] + 1;
  t.pw = (t.tw - 1) * g.stride[2] + (t.chb * t.kc - 1) * g.dil[2] + 1;
  if (t.cl) {
    t.pwa = t.nv * t.v * static_cast<int32_t>(elem) >= 128 ? t.pw : round_up_odd(t.pw);
    t.plane = t.ph * t.pwa * t.cbp;
    t.dplane = t.tr * t.tw * t.cbp;
    t.x_bytes = dw_round16(int64_t{t.plane} * static_cast<int64_t>(elem));
    t.dy_bytes = dw_round16(int64_t{t.dplane} * static_cast<int64_t>(elem));
  } else {
    t.pwa = round_up_odd(t.pw);
    t.plane = round_up_odd(t.ph * t.pwa);
    t.dplane = round_up_odd(t.tr * t.tw);
    t.x_bytes = dw_round16(int64_t{t.nv} * t.plane * static_cast<int64_t>(elem));
    t.dy_bytes = dw_round16(int64_t{t.nv} * t.dplane * static_cast<int64_t>(elem));
  }
  t.red_bytes = dw_round16(int64_t{t.threads} * t.v * static_cast<int64_t>(acc));
  return std::max(t.x_bytes + t.dy_bytes, t.p > 1 ? t.red_bytes : 0);
}

// The filter gradient's tile for g (identity maps) over slices f; false
// where none fits kDwSmemBudget (the per-element kernel then runs).
inline bool plan_dw_filter_tile(const DwGeom& g, const FilterSlices& f, int64_t C, bool cl, size_t elem,
                                size_t acc, bool ring, bool narrow, DwFilterTile* out,
                                int64_t budget = kDwSmemBudget) {
  if (g.out_size() <= 0 || C <= 0 || f.count <= 0) return false;
  const int32_t v = dw_vector(elem, cl);
  const int64_t vectors = (C + v - 1) / v;
  const int32_t lanes = cl ? static_cast<int32_t>(128 / (v * elem)) : 32;
  const int32_t KH = g.kernel[1], KW = g.kernel[2];
  const bool use_ring = ring && g.dil[2] % g.stride[2] == 0;
  const int32_t q = use_ring ? g.dil[2] / g.stride[2] : 1;
  int32_t region_h, region_w;
  dw_slice_extent(g, f.rows, &region_h, &region_w);
  int32_t nv_max, nv_min;
  dw_runs(vectors, lanes, cl, narrow, &nv_max, &nv_min);
  const int32_t kc = dw_filter_chunk(KW, v);
  const int32_t chunks = (KW + kc - 1) / kc;
  bool found = false;
  double best_cost = 0;
  DwFilterTile best;
  for (int32_t nv = nv_max; nv >= nv_min; nv /= 2) {
    DwFilterTile t;
    t.cl = cl;
    t.v = v;
    t.nv = nv;
    t.cbp = cl ? nv * v : 1;
    t.kc = kc;
    t.chunks = chunks;
    t.q = q;
    t.ring = use_ring;
    t.chb = chunks;
    t.khb = KH;
    while (nv * t.khb * t.chb > kDwThreads) {
      if (t.chb > 1) t.chb = (t.chb + 1) / 2;
      else t.khb = (t.khb + 1) / 2;
    }
    if (nv * t.khb * t.chb > kDwThreads) continue;
    t.tr = std::max(1, std::min(region_h, 16));
    t.tr = (region_h + (region_h + t.tr - 1) / t.tr - 1) / ((region_h + t.tr - 1) / t.tr);
    t.tw = std::max(1, std::min(region_w, 512));
    t.tw = (region_w + (region_w + t.tw - 1) / t.tw - 1) / ((region_w + t.tw - 1) / t.tw);
    bool fits = false;
    for (int guard = 0; guard < 200; ++guard) {
      dw_filter_split(t, nv * t.khb * t.chb, kc);
      if (dw_filter_tile_bytes(g, t, elem, acc) <= budget) {
        fits = true;
        break;
      }
      if (t.tr > 2) t.tr = (t.tr + 1) / 2;
      else if (t.tw > 64) t.tw = (t.tw + 1) / 2;
      else if (t.khb > 1) t.khb = (t.khb + 1) / 2;
      else if (t.tr > 1) t.tr = 1;
      else if (t.chb > 1) t.chb = (t.chb + 1) / 2;
      else if (t.tw > 1) t.tw = (t.tw + 1) / 2;
      else break;
    }
    if (!fits) continue;
    t.kh_groups = (KH + t.khb - 1) / t.khb;
    t.ch_groups = (chunks + t.chb - 1) / t.chb;
    t.runs = static_cast<int32_t>(cl ? (C + t.cbp - 1) / t.cbp : (C + t.nv - 1) / t.nv);
    const int32_t tiles_h = (region_h + t.tr - 1) / t.tr, tiles_w = (region_w + t.tw - 1) / t.tw;
    const double staged = (static_cast<double>(t.ph) * t.pw + static_cast<double>(t.tr) * t.tw) * t.kh_groups *
                          t.ch_groups;
    const double useful = static_cast<double>(t.tr) * t.tw;
    const double util = static_cast<double>(region_h) * region_w /
                        (static_cast<double>(tiles_h) * t.tr * tiles_w * t.tw) * t.balance;
    const double cost = dw_plan_cost(staged / useful / util, t.threads, dw_filter_tile_bytes(g, t, elem, acc),
                                     int64_t{t.cbp} * static_cast<int64_t>(elem), cl,
                                     f.count * g.kernel[0] * t.kh_groups * t.ch_groups * t.runs,
                                     /*sector_priced=*/false);
    if (!found || cost < best_cost * 0.97) {
      found = true;
      best_cost = cost;
      best = t;
    }
  }
  if (!found) return false;
  best.smem = dw_filter_tile_bytes(g, best, elem, acc);
  best.nv_shift = dw_log2(best.nv);
  best.cbp_shift = dw_log2(best.cbp);
  best.by_pw = FastDiv(best.pw);
  best.by_ph = FastDiv(best.ph);
  best.by_tw = FastDiv(best.tw);
  best.by_tr = FastDiv(best.tr);
  best.by_segs = FastDiv(best.segs);
  best.blocks = f.count * g.kernel[0] * best.kh_groups * best.ch_groups * best.runs;
  *out = best;
  return true;
}

}  // namespace im2col::cuda
