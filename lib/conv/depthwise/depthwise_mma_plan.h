// The plan of the tensor-core depthwise forward (depthwise_mma.cuh), and the
// index maps its warps and the host tests share. No XLA headers.
//
// Each channel's convolution is a GEMM per tap row kh: its output rows
// (image, oh) times a Toeplitz band of the channel's taps. For output
// columns 8j .. 8j + 7 (an n-tile), the staged input row of (oh, kh) from
// column 8j * sW on is A (16 rows of outputs x 16 k a k-step), and
// B[k][n] = w[kh][kw] where k = n * sW + kw * dW, else 0: the same B for every
// n-tile, so a warp holds its channel's KH x ksteps B fragments in registers
// and runs mma.sync m16n8k16 (float32 accumulators) over the n-tiles. The
// input is staged channel-major (a plane of rows a channel), the outputs
// pass back through shared memory channel-major and leave as
// 16-byte vectors of 8 channels.
//
// Non-finite inputs: B's zeros multiply inputs outside an output's window
// but inside its n-tile's band, so an inf or NaN would make NaN of outputs
// that lax computes finite (0 x inf). An m-tile whose accumulators are not
// all finite is therefore recomputed from each output's own window
// (dw_mma_direct), which gives lax's values.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/device_util.cuh"
#include "conv/depthwise/depthwise_plan.h"

namespace im2col::cuda {

constexpr int32_t kDwMmaWarps = 8;
constexpr int32_t kDwMmaThreads = 32 * kDwMmaWarps;
constexpr int32_t kDwMmaMaxNt = 8;        // n-tiles of 8 outputs a W tile
constexpr int32_t kDwMmaMaxB = 16;        // B fragments (tap rows x k-steps) a channel
constexpr int32_t kDwMmaMaxRows = 32;     // output rows a block stages (images x rows)
constexpr int64_t kDwMmaSmem = 72 * 1024;  // three blocks an SM
constexpr int64_t kDwMmaMinBlocks = 4 * kDwSMs;

struct DwMma {
  int32_t cb = 16;                      // channels a block: 16, or 8 where C is not a multiple of 16
  int32_t nb = 1, th = 1;               // images a block, output rows of each
  int32_t bands = 1, groups = 1;        // row bands an image, groups of nb images
  int32_t nt = 1, tw = 8, tiles_w = 1;  // n-tiles a W tile, its outputs (8 nt), W tiles
  int32_t ksteps = 1, frags = 1;        // k-steps of 16 an n-tile; KH x ksteps
  int32_t ph = 1, rp = 8;               // staged input rows an image, their pitch (elements)
  int32_t rows = 1, mtiles = 1;         // nb x th output rows, m-tiles of 16 over them
  int32_t plane = 8;                    // staged input elements a channel (nb x ph x rp)
  int32_t out_pitch = 8, out_plane = 8;  // staged output row pitch, elements a channel
  int32_t chunks = 1;                   // 32-item chunks of a staged input row
  int32_t rl = 1;                       // a staged tap row: the dilated taps, zeros around (dw_mma_b_index)
  int32_t runs = 1;                     // C / cb
  int64_t w_off = 0, out_off = 0;       // elements before the staged taps, before the staged outputs
  int64_t smem = 0, blocks = 0;
  FastDiv by_th, by_runs, by_tiles_w, by_bands, by_tw, by_kh;
};

// K columns an n-tile's B band spans: its 8 outputs' taps.
inline int32_t dw_mma_span(int32_t sw, int32_t kw, int32_t dw) { return 7 * sw + (kw - 1) * dw + 1; }

// Element offset of channel `cl`'s staged plane from its region's start:
// channels 8-15 sit 64 bytes further, so that the two half-warps that stage
// (or write back) channels e and 8 + e at the same columns use different banks.
IM2COL_HD int32_t dw_mma_plane_base(int32_t cl, int32_t plane) { return cl * plane + (cl >= 8 ? 32 : 0); }

inline int64_t dw_mma_bytes(DwMma& m, const DwGeom& g, int32_t nb, int32_t th) {
  m.nb = nb;
  m.th = th;
  m.ph = (th - 1) * g.stride[1] + (g.kernel[1] - 1) * g.dil[1] + 1;
  m.rows = nb * th;
  m.mtiles = (m.rows + 15) / 16;
  m.plane = nb * m.ph * m.rp;
  m.out_plane = m.mtiles * 16 * m.out_pitch;
  m.w_off = int64_t{m.cb} * m.plane + (m.cb > 8 ? 32 : 0);
  m.out_off = m.w_off + (int64_t{m.cb} * g.kernel[1] * m.rl + 7) / 8 * 8;
  const int64_t out_elems = int64_t{m.cb} * m.out_plane + (m.cb > 8 ? 32 : 0);
  return 2 * (m.out_off + out_elems);
}

// The tensor-core forward's plan for phase g (a forward, or the one phase of
// a unit-stride input gradient) over n images of C channels of a 16-bit type
// with outputs of the same type: false where it does not apply (rank 3,
// channels not a multiple of 8, windows whose B fragments exceed kDwMmaMaxB,
// nothing that fits `budget`). Whole images share a block while the grid
// keeps `min_blocks` blocks.
inline bool plan_dw_mma(const DwGeom& g, int64_t n, int64_t C, DwMma* out, int64_t budget = kDwMmaSmem,
                       int64_t min_blocks = kDwMmaMinBlocks) {
  if (g.nd > 2 || g.zero || g.kernel[0] != 1 || g.out[0] != 1 || g.in[0] != 1) return false;
  if (n < 1 || C < 8 || C % 8 != 0 || g.out_size() < 1) return false;
  DwMma m;
  m.cb = C % 16 == 0 ? 16 : 8;
  const int32_t KH = g.kernel[1], sW = g.stride[2];
  m.ksteps = (dw_mma_span(sW, g.kernel[2], g.dil[2]) + 15) / 16;
  m.frags = KH * m.ksteps;
  if (m.frags > kDwMmaMaxB) return false;
  const int32_t OH = g.out[1], OW = g.out[2];
  m.tiles_w = (OW + 8 * kDwMmaMaxNt - 1) / (8 * kDwMmaMaxNt);
  m.nt = ((OW + m.tiles_w - 1) / m.tiles_w + 7) / 8;
  m.tw = 8 * m.nt;
  m.tiles_w = (OW + m.tw - 1) / m.tw;
  // ldmatrix's 8 rows (consecutive rows at sH = 1) on distinct banks: an odd pitch in 16-byte units.
  m.rp = (8 * (m.nt - 1) * sW + 16 * m.ksteps + 7) / 8 * 8;
  if ((m.rp / 8) % 2 == 0) m.rp += 8;
  m.out_pitch = 8 * (m.nt | 1);
  m.chunks = (m.rp + 32 / (m.cb / 8) - 1) / (32 / (m.cb / 8));
  m.rl = 16 * m.ksteps + 7 * sW;
  m.runs = static_cast<int32_t>(C / m.cb);
  const int64_t width_blocks = int64_t{m.tiles_w} * m.runs;
  if (dw_mma_bytes(m, g, 1, OH) <= budget) {
    // Whole images, as many a block as fit while the grid stays full.
    int32_t nb = 1;
    while (nb < n && (nb + 1) * OH <= kDwMmaMaxRows && dw_mma_bytes(m, g, nb + 1, OH) <= budget &&
           (n + nb) / (nb + 1) * width_blocks >= min_blocks)
      ++nb;
    dw_mma_bytes(m, g, nb, OH);
    m.bands = 1;
  } else {
    int32_t th = std::min(OH, kDwMmaMaxRows);
    while (th > 1 && dw_mma_bytes(m, g, 1, th) > budget) --th;
    if (dw_mma_bytes(m, g, 1, th) > budget) return false;
    m.bands = (OH + th - 1) / th;
    dw_mma_bytes(m, g, 1, (OH + m.bands - 1) / m.bands);
  }
  m.groups = static_cast<int32_t>((n + m.nb - 1) / m.nb);
  m.smem = dw_mma_bytes(m, g, m.nb, m.th);
  m.blocks = int64_t{m.groups} * m.bands * width_blocks;
  if (m.blocks >= (int64_t{1} << 31)) return false;
  m.by_th = FastDiv(m.th);
  m.by_runs = FastDiv(m.runs);
  m.by_tiles_w = FastDiv(m.tiles_w);
  m.by_bands = FastDiv(m.bands);
  m.by_tw = FastDiv(m.tw);
  m.by_kh = FastDiv(KH);
  *out = m;
  return true;
}

// Where the tensor-core forward is taken over the other kernels (measured on
// an H200, bfloat16, batch 32-64; docs/optimization-log.md, step 121): unit
// strides and dilations and windows of 7 taps or more along W. ConvNeXt-T's
// 7x7 layers took 0.79-1.0x the tiles' time; EfficientNet-B0's 5x5 layers
// 0.98x on the 28² map but 1.07-1.10x on the 14² maps; MobileNetV2's 3x3
// layers 1.2-1.5x the streamed kernel's at stride 1 and 2.5-3.5x at stride
// 2, where the band's zeros outnumber the taps.
inline bool dw_mma_pays(const DwGeom& g) {
  return g.stride[1] == 1 && g.stride[2] == 1 && g.dil[1] == 1 && g.dil[2] == 1 && g.kernel[2] >= 7;
}

// --- the warps' index maps (lane l of a warp; mma.sync m16n8k16 layouts) ---------

// Where B[k][n] of channel cl, tap row kh, k-step s (k = 0..15) sits among
// the staged taps: row (cl, kh) holds at u + 7 sW the tap row dilated (tap
// kw at u = kw dW, zeros between and around), so every B element is one
// load, without a test (dw_mma_stage_taps fills the rows).
IM2COL_HD int32_t dw_mma_b_index(const DwMma& m, const DwGeom& g, int32_t cl, int32_t kh, int32_t s, int32_t k,
                                 int32_t n) {
  return (cl * g.kernel[1] + kh) * m.rl + 16 * s + k + (7 - n) * g.stride[2];
}

// B fragment register `reg` (0, 1) of lane l holds B[k][n], B[k + 1][n] with
// n = l / 4 and k = 2 (l % 4) + 8 reg.
IM2COL_HD int32_t dw_mma_b_k(int32_t lane, int32_t reg) { return 2 * (lane % 4) + 8 * reg; }
IM2COL_HD int32_t dw_mma_b_n(int32_t lane) { return lane / 4; }

// The staged element (from the channel's plane) that lane l addresses for
// ldmatrix.x4 of A at m-tile mt, tap row kh, k-step s, n-tile j: row
// l % 16 of the m-tile (rows past the block's last repeat it), columns
// from (l / 16) * 8.
IM2COL_HD int32_t dw_mma_a_row_offset(const DwMma& m, const DwGeom& g, int32_t mt, int32_t lane) {
  const int32_t r = std::min(mt * 16 + lane % 16, m.rows - 1);
  const int32_t img = r / m.th, ohl = r - img * m.th;
  return (img * m.ph + ohl * g.stride[1]) * m.rp + (lane / 16) * 8;
}
IM2COL_HD int32_t dw_mma_a_step(const DwMma& m, const DwGeom& g, int32_t kh, int32_t s, int32_t j) {
  return kh * g.dil[1] * m.rp + 16 * s + 8 * j * g.stride[2];
}

// The element, in the channel's output plane, where lane l stores its
// accumulators 2 half, 2 half + 1 of m-tile mt, n-tile j (row l / 4 + 8 half,
// columns 2 (l % 4) and the next) as one 32-bit word: the rows are an odd
// number of 16-byte units apart, so a warp's 32 words hit 32 banks.
IM2COL_HD int32_t dw_mma_c_offset(const DwMma& m, int32_t mt, int32_t j, int32_t lane, int32_t half) {
  return (mt * 16 + lane / 4 + 8 * half) * m.out_pitch + 8 * j + 2 * (lane % 4);
}

}  // namespace im2col::cuda
