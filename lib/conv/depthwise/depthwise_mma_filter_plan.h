// The plan of the tensor-core depthwise filter gradient
// (depthwise_mma_filter.cuh), and the index maps its warps and the host tests
// share. No XLA headers.
//
// For one channel, one dy row h and the staged input columns j of a W tile
// (unit stride along W), the products the filter gradient sums are
//   dw[kh][kw] += x[h sH + kh dH][j] * dy[h][j - kw dW],
// a GEMM C[kh][kw] += A[kh][j] B[j][kw] whose k runs over the columns of
// every dy row: A's rows are staged input rows (ldmatrix reads them where
// they lie, one row address a tap row), B is the dy row shifted by each tap
// column (read element by element: those shifts are not 16-byte aligned).
// The accumulators are the filter gradient itself, 16 tap rows x 8 tap
// columns an mma tile, summed over the block's bands and W tiles; blocks
// write them as the slices' partial sums, which the second pass sums in a
// fixed order.
//
// Zeros: dy is staged zero outside the tile's outputs and the map, x zero in
// the padding. An inf or NaN input times such a zero would make NaN of a
// tap that lax computes finite (lax multiplies no position outside the
// outputs), so a band whose accumulators turn non-finite is summed again
// position by position over its outputs (dw_mma_filter_direct).
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/device_util.cuh"
#include "conv/depthwise/depthwise_plan.h"
#include "conv/direct/filter_slices.h"

namespace im2col::cuda {

constexpr int32_t kDwMmaFilterWarps = 8;  // a warp a channel
constexpr int32_t kDwMmaFilterThreads = 32 * kDwMmaFilterWarps;
constexpr int32_t kDwMmaFilterChannels = kDwMmaFilterWarps;  // one 16-byte vector of 16-bit channels
constexpr int32_t kDwMmaFilterMaxTaps = 32;                  // along H (two m-tiles) and W (four n-tiles)
constexpr int32_t kDwMmaFilterMaxTw = 64;                    // outputs of a W tile
constexpr int32_t kDwMmaFilterMaxCols = 192;                 // input columns a W tile reads
constexpr int64_t kDwMmaFilterSmem = 44 * 1024;              // four or five blocks an SM
constexpr int64_t kDwMmaFilterBlocks = 4 * kDwSMs;           // one wave of four blocks an SM
constexpr int kDwMmaFilterAhead = 4;                         // staged vectors a thread loads ahead

struct DwMmaFilter {
  int32_t th = 1, bands = 1;          // dy rows a band, bands an image
  int32_t tw = 1, tiles_w = 1;        // outputs a W tile, W tiles
  int32_t xcols = 1, ksteps = 1;      // input columns a W tile reads, k-steps of 16 over them
  int32_t ph = 1, rp = 24;            // staged input rows a band, their pitch (elements)
  int32_t lead = 0, dp = 16;          // a staged dy row: the column of the tile's first output, the pitch
  int32_t x_plane = 1, dy_plane = 1;  // staged elements a channel
  int32_t runs = 1;                   // C / 8
  int32_t units = 1;                  // n x bands x tiles_w: a band of one W tile, W tile fastest
  int32_t groups = 1, per_group = 1;  // unit groups (the slices), consecutive units a group
  int64_t dy_off = 0;                 // elements before the dy planes
  int64_t smem = 0, blocks = 0;
  FastDiv by_runs, by_tiles_w, by_bands, by_xcols, by_tw;
};

inline int64_t dw_mma_filter_bytes(DwMmaFilter& m, const DwGeom& g, int32_t th) {
  m.th = th;
  m.ph = (th - 1) * g.stride[1] + (g.kernel[1] - 1) * g.dil[1] + 1;
  m.x_plane = m.ph * m.rp;
  m.dy_plane = th * m.dp;
  m.dy_off = int64_t{kDwMmaFilterChannels} * m.x_plane;
  return 2 * (m.dy_off + int64_t{kDwMmaFilterChannels} * m.dy_plane);
}

// The tensor-core filter gradient's plan for geometry g (identity maps) over
// n images of C channels of a 16-bit type, within the call's slices `call`
// (its workspace): false where it does not apply (rank 3, channels not a
// multiple of 8, stride along W, windows past 32 taps a side, nothing that
// fits `budget`). Bands of dy rows as tall as the budget allows; a block
// sums a group of consecutive bands (of each W tile) into one slice, the
// groups about `target_blocks` blocks and at most the call's slices.
inline bool plan_dw_mma_filter(const DwGeom& g, const FilterSlices& call, int64_t n, int64_t C, DwMmaFilter* out,
                               int64_t budget = kDwMmaFilterSmem, int64_t target_blocks = kDwMmaFilterBlocks) {
  if (g.zero || g.kernel[0] != 1 || g.out[0] != 1 || g.in[0] != 1) return false;
  if (n < 1 || C < 8 || C % 8 != 0 || g.out_size() < 1 || g.stride[2] != 1) return false;
  const int32_t KH = g.kernel[1], KW = g.kernel[2], OH = g.out[1], OW = g.out[2];
  if (KH > kDwMmaFilterMaxTaps || KW > kDwMmaFilterMaxTaps) return false;
  DwMmaFilter m;
  m.lead = (KW - 1) * g.dil[2];
  m.tiles_w = (OW + kDwMmaFilterMaxTw - 1) / kDwMmaFilterMaxTw;
  m.tw = (OW + m.tiles_w - 1) / m.tiles_w;
  m.xcols = m.tw + m.lead;
  if (m.xcols > kDwMmaFilterMaxCols) return false;
  m.ksteps = (m.xcols + 15) / 16;
  // ldmatrix's 8 rows (consecutive tap rows at dH = 1) fall on distinct banks only at an odd pitch
  // in 16-byte units (docs/optimization-log.md, step 133).
  m.rp = 16 * m.ksteps + 8;
  m.dp = m.lead + 16 * m.ksteps;
  const int64_t fixed = dw_mma_filter_bytes(m, g, 1) - 2 * kDwMmaFilterChannels * (g.stride[1] * m.rp + m.dp);
  const int64_t per_row = 2 * kDwMmaFilterChannels * (int64_t{g.stride[1]} * m.rp + m.dp);
  const int64_t fit = (budget - fixed) / per_row;
  if (fit < 1) return false;
  m.bands = static_cast<int32_t>((OH + std::min<int64_t>(fit, OH) - 1) / std::min<int64_t>(fit, OH));
  const int64_t total = n * m.bands * m.tiles_w;
  if (total >= (int64_t{1} << 31) || call.count < 1) return false;
  m.units = static_cast<int32_t>(total);
  m.runs = static_cast<int32_t>(C / kDwMmaFilterChannels);
  const int64_t want =
      std::min<int64_t>({total, call.count, std::max<int64_t>(1, (target_blocks + m.runs - 1) / m.runs)});
  m.per_group = static_cast<int32_t>((total + want - 1) / want);
  m.groups = static_cast<int32_t>((total + m.per_group - 1) / m.per_group);
  m.smem = dw_mma_filter_bytes(m, g, (OH + m.bands - 1) / m.bands);
  m.blocks = int64_t{m.runs} * m.groups;
  if (m.blocks >= (int64_t{1} << 31) || m.smem > budget) return false;
  m.by_runs = FastDiv(m.runs);
  m.by_tiles_w = FastDiv(m.tiles_w);
  m.by_bands = FastDiv(m.bands);
  m.by_xcols = FastDiv(m.xcols);
  m.by_tw = FastDiv(m.tw);
  *out = m;
  return true;
}

// Where the tensor-core filter gradient is taken over the tiles: windows of
// 7 taps or more along W (measured on an H200, bfloat16; docs/optimization-log.md,
// step 132). ConvNeXt-T's 7x7 layers took 0.58, 0.88, 1.06 and 0.92x the
// tiles' time on its 56², 28², 14² and 7² maps, RepLKNet's 27x27 and 13x13
// 0.87 and 0.99x; EfficientNet-B0's 5x5 layers 1.07x (28²) and 1.70x (14²).
inline bool dw_mma_filter_pays(const DwGeom& g) { return g.kernel[2] >= 7; }

// --- the warps' index maps (lane l of a warp; mma.sync m16n8k16 layouts) ---------

// The element of the channel's staged input plane whose address lane l
// gives ldmatrix for A (tap rows x k) of m-tile mt at dy row 0, k-step 0:
// with x4, row l % 8 of matrix l / 8 (matrices: tap rows 0-7 / 8-15 times
// k 0-7 / 8-15); with x2 (windows of at most 8 tap rows), lanes 0-15 give
// matrices k 0-7 and 8-15 of tap rows 0-7. Tap rows past the window repeat
// its last (their products fill accumulators nobody writes).
IM2COL_HD int32_t dw_mma_filter_a_offset(const DwMmaFilter& m, const DwGeom& g, int32_t mt, int32_t lane, bool x2) {
  const int32_t mat = (lane / 8) % (x2 ? 2 : 4);
  const int32_t row = x2 ? lane % 8 : (mat & 1) * 8 + lane % 8;
  const int32_t k0 = x2 ? mat * 8 : (mat >> 1) * 8;
  const int32_t kh = std::min(16 * mt + row, g.kernel[1] - 1);
  return kh * g.dil[1] * m.rp + k0;
}

// The element of the channel's staged dy plane that B register `reg` (0, 1)
// of lane l takes first (the second follows it) for n-tile nt at dy row 0,
// k-step 0: B[k][n] with k = 2 (l % 4) + 8 reg, tap column kw = 8 nt + l / 4
// (past the window, its last), at dy column lead + k - kw dW.
IM2COL_HD int32_t dw_mma_filter_b_offset(const DwMmaFilter& m, const DwGeom& g, int32_t nt, int32_t lane,
                                         int32_t reg) {
  const int32_t kw = std::min(8 * nt + lane / 4, g.kernel[2] - 1);
  return m.lead + 2 * (lane % 4) + 8 * reg - kw * g.dil[2];
}

// The tap of accumulator v (0-3) of lane l in m-tile mt, n-tile nt: row
// l / 4 (+ 8 for v >= 2), column 2 (l % 4) (+ 1 for odd v).
IM2COL_HD int32_t dw_mma_filter_c_kh(int32_t mt, int32_t lane, int32_t v) { return 16 * mt + lane / 4 + 8 * (v / 2); }
IM2COL_HD int32_t dw_mma_filter_c_kw(int32_t nt, int32_t lane, int32_t v) { return 8 * nt + 2 * (lane % 4) + v % 2; }

}  // namespace im2col::cuda
