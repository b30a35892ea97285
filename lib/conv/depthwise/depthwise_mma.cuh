// The tensor-core depthwise forward (plan and index maps in
// depthwise_mma_plan.h): channels-last, 16-bit types. A block takes nb images
// (or a band of rows of one), a W tile of 8 nt outputs and cb channels, in
// three phases between barriers: stage its input channel-major, each warp
// multiplies its channels' rows against their Toeplitz bands on the tensor
// cores into a channel-major output tile (m-tiles that met an inf or NaN
// recomputed window by window, dw_mma_direct), and the block writes the tile
// back channels-last. Staging and write-back are per-thread code (the host tests
// run them); the warps' phase runs on the GPU only, its index maps are the
// host tests'.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/device_util.cuh"
#include "conv/depthwise/depthwise_kernels.cuh"
#include "conv/depthwise/depthwise_mma_plan.h"
#if defined(__CUDA_ARCH__)
#include "common/mma_sync.cuh"
#endif

namespace im2col::cuda {

struct DwMmaBlock {
  int32_t run = 0, wt = 0, band = 0, group = 0;
};

// Block b's coordinates: channel runs fastest (neighbouring blocks read the
// same pixels), then W tiles, row bands, image groups.
__device__ __forceinline__ DwMmaBlock dw_mma_block(const DwMma& m, int32_t b) {
  DwMmaBlock k;
  m.by_runs.divmod(b, b, k.run);
  m.by_tiles_w.divmod(b, b, k.wt);
  m.by_bands.divmod(b, k.group, k.band);
  return k;
}

// A chunk of 32 items covers 32 / (cb / 8) columns: half-warps take the two
// 8-channel halves of a 16-channel run at the same columns.
IM2COL_HD int32_t dw_mma_chunk_cols(const DwMma& m) { return m.cb > 8 ? 16 : 32; }

// The 8 16-bit channels of v, each to its plane (`plane` elements apart) at d.
__device__ __forceinline__ void dw_mma_scatter(uint16_t* d, const uint4& v, int32_t plane) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    d[(2 * e) * plane] = static_cast<uint16_t>(words[e] & 0xffffu);
    d[(2 * e + 1) * plane] = static_cast<uint16_t>(words[e] >> 16);
  }
}

// Stages the block's input: for each image, row and column of its tile, the
// cb channels (16-byte vectors of 8) as cb planes of rows (zeros outside the
// input, past the images, and in the pitch's slack). A staged row is Q =
// 32 chunks items (a column's half of the channels each); a thread keeps one
// item of the row and walks rows S apart (S rows side by side where Q
// divides into the threads), four loads ahead of their stores.
template <typename T>
__device__ __forceinline__ void dw_mma_stage(uint16_t* tile, const T* __restrict__ x, const DwGeom& g,
                                             const DwMma& m, int64_t n_images, int64_t C, const DwMmaBlock& k,
                                             int32_t tid, int32_t nthreads) {
  constexpr int kAhead = 4;
  const int32_t cw = dw_mma_chunk_cols(m);
  const int32_t Q = m.chunks * 32;
  const int32_t S = Q <= nthreads ? nthreads / Q : 1;
  const int32_t r0 = Q <= nthreads ? tid / Q : 0;
  if (r0 >= S) return;
  const int32_t IH = g.in[1], IW = g.in[2];
  const int32_t ih0 = k.band * m.th * g.stride[1] - g.pad[1];
  const int32_t iw0 = k.wt * m.tw * g.stride[2] - g.pad[2];
  const int64_t c0 = int64_t{k.run} * m.cb, n0 = int64_t{k.group} * m.nb;
  const int64_t row_step = int64_t{IW} * C;
  for (int32_t q = Q <= nthreads ? tid - r0 * Q : tid; q < Q; q += nthreads) {
    const int32_t within = q & 31, h = within / cw, col = (q >> 5) * cw + within - h * cw;
    if (col >= m.rp) continue;
    const int32_t iw = iw0 + col;
    const bool col_ok = static_cast<uint32_t>(iw) < static_cast<uint32_t>(IW);
    uint16_t* dst_col = tile + dw_mma_plane_base(8 * h, m.plane) + col;
    for (int32_t img = 0; img < m.nb; ++img) {
      const bool img_ok = col_ok && n0 + img < n_images;
      // Offset of (image, row ih0, column iw, channel c0 + 8h): valid rows add r row_step.
      const int64_t base = ((n0 + img) * IH + ih0) * row_step + int64_t{iw} * C + c0 + 8 * h;
      uint16_t* dst = dst_col + img * m.ph * m.rp;
      for (int32_t row = r0; row < m.ph; row += kAhead * S) {
        uint4 v[kAhead];
#pragma unroll
        for (int a = 0; a < kAhead; ++a) {
          const int32_t r = row + a * S;
          v[a] = make_uint4(0, 0, 0, 0);
          if (img_ok && r < m.ph && static_cast<uint32_t>(ih0 + r) < static_cast<uint32_t>(IH))
            v[a] = __ldg(reinterpret_cast<const uint4*>(x + base + int64_t{r} * row_step));
        }
#pragma unroll
        for (int a = 0; a < kAhead; ++a) {
          const int32_t r = row + a * S;
          if (r >= m.ph) break;
          dw_mma_scatter(dst + r * m.rp, v[a], m.plane);
        }
      }
    }
  }
}

// Stages the block's taps as dw_mma_b_index reads them: for each channel
// and tap row (a thread each), the row dilated along W (through g's maps: the
// input gradient's filter read backwards) with zeros between and around.
template <typename T>
__device__ __forceinline__ void dw_mma_stage_taps(uint16_t* taps, const T* __restrict__ w, const DwGeom& g,
                                                  const DwMma& m, int64_t c0, int32_t tid, int32_t nthreads) {
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(w);
  const int64_t wsize = g.w_size();
  const int32_t rows = m.cb * g.kernel[1], lead = 7 * g.stride[2];
  for (int32_t i = tid; i < rows; i += nthreads) {
    int32_t cl, kh;
    m.by_kh.divmod(i, cl, kh);
    uint16_t* row = taps + i * m.rl;
    for (int32_t u = 0; u < m.rl; ++u) row[u] = 0;
    const uint16_t* src =
        bits + (c0 + cl) * wsize + (g.w_first[1] + g.w_step[1] * kh) * g.wk[2] + g.w_first[2];
    for (int32_t kw = 0; kw < g.kernel[2]; ++kw) row[lead + kw * g.dil[2]] = __ldg(src + g.w_step[2] * kw);
  }
}

// Writes the block's staged outputs (cb planes of rows x tw) back to y,
// channels-last, 8 channels a 16-byte store; the outputs past the images,
// the rows and the columns are not written.
template <typename T>
__device__ __forceinline__ void dw_mma_write(T* __restrict__ y, const uint16_t* outs, const DwGeom& g,
                                             const DwMma& m, int64_t n_images, int64_t C, const DwMmaBlock& k,
                                             int32_t tid, int32_t nthreads) {
  const int32_t cw = dw_mma_chunk_cols(m);
  const int32_t pixels = m.rows * m.tw;
  const int32_t items = (pixels + cw - 1) / cw * 32;
  const int64_t c0 = int64_t{k.run} * m.cb, n0 = int64_t{k.group} * m.nb;
  for (int32_t i = tid; i < items; i += nthreads) {
    const int32_t within = i & 31, h = within / cw, p = (i >> 5) * cw + within - h * cw;
    if (p >= pixels) continue;
    int32_t r, owl, img, ohl;
    m.by_tw.divmod(p, r, owl);
    m.by_th.divmod(r, img, ohl);
    const int32_t oh = k.band * m.th + ohl, ow = k.wt * m.tw + owl;
    if (n0 + img >= n_images || oh >= g.out[1] || ow >= g.out[2]) continue;
    const uint16_t* src = outs + dw_mma_plane_base(8 * h, m.out_plane) + r * m.out_pitch + owl;
    uint32_t words[4];
#pragma unroll
    for (int e = 0; e < 4; ++e)
      words[e] = uint32_t{src[(2 * e) * m.out_plane]} | (uint32_t{src[(2 * e + 1) * m.out_plane]} << 16);
    const int64_t o = (n0 + img) * g.y_size() + dw_output_offset(g, 0, oh, ow);
    *reinterpret_cast<uint4*>(y + o * C + c0 + 8 * h) = make_uint4(words[0], words[1], words[2], words[3]);
  }
}

// A staged 16-bit element's value, and a value's bits, for T.
template <typename T>
__device__ __forceinline__ float dw_mma_value(uint16_t bits) {
  if constexpr (std::is_same_v<T, __half>) {
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
  } else {
    __nv_bfloat16_raw r;
    r.x = bits;
    return __bfloat162float(__nv_bfloat16(r));
  }
}
template <typename T>
__device__ __forceinline__ uint16_t dw_mma_bits(float v) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half_raw r = __float2half_rn(v);
    return r.x;
  } else {
    const __nv_bfloat16_raw r = __float2bfloat16_rn(v);
    return r.x;
  }
}

// Channel cl's outputs of m-tile mt, one lane's share, straight from the
// staged input and taps over each output's own window: the path for m-tiles
// whose products met an infinite or NaN input or tap, which B's zeros would
// otherwise spread to outputs outside its window (0 x inf). Slow; each
// output sums its own window's products, as the convolution is defined.
template <typename T>
__device__ __forceinline__ void dw_mma_direct(const uint16_t* tile, const uint16_t* taps, uint16_t* outs,
                                              const DwGeom& g, const DwMma& m, int32_t cl, int32_t mt, int32_t lane) {
  const uint16_t* plane = tile + dw_mma_plane_base(cl, m.plane);
  const uint16_t* w = taps + cl * g.kernel[1] * m.rl + 7 * g.stride[2];
  uint16_t* out = outs + dw_mma_plane_base(cl, m.out_plane);
  const int32_t r0 = mt * 16, items = min(16, m.rows - r0) * m.tw;
  for (int32_t i = lane; i < items; i += 32) {
    int32_t rl, col, img, ohl;
    m.by_tw.divmod(i, rl, col);
    m.by_th.divmod(r0 + rl, img, ohl);
    const uint16_t* in = plane + (img * m.ph + ohl * g.stride[1]) * m.rp + col * g.stride[2];
    float acc = 0.f;
    for (int32_t kh = 0; kh < g.kernel[1]; ++kh)
      for (int32_t kw = 0; kw < g.kernel[2]; ++kw)
        acc += dw_mma_value<T>(in[kh * g.dil[1] * m.rp + kw * g.dil[2]]) * dw_mma_value<T>(w[kh * m.rl + kw * g.dil[2]]);
    out[(r0 + rl) * m.out_pitch + col] = dw_mma_bits<T>(acc);
  }
}

#if defined(__CUDA_ARCH__)
template <typename T>
__device__ __forceinline__ uint32_t dw_mma_pack(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// Warp `warp`'s channels cl = warp, warp + kDwMmaWarps, ...: their B fragments
// from the staged taps, then each m-tile's n-tiles over the fragments, stored
// channel-major into `outs`. MAXB and MAXNT bound m.frags and m.nt: the
// fragment and accumulator arrays take 2 MAXB + 4 MAXNT registers.
template <typename T, int MAXB, int MAXNT>
__device__ __forceinline__ void dw_mma_multiply(const uint16_t* tile, const uint16_t* taps, uint16_t* outs,
                                                const DwGeom& g, const DwMma& m, int32_t warp, int32_t lane) {
  const uint32_t tile_s = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  const uint32_t a_step_j = 16u * static_cast<uint32_t>(g.stride[2]);  // 8 sW elements
  for (int32_t cl = warp; cl < m.cb; cl += kDwMmaWarps) {
    uint32_t bf[MAXB][2];
    int32_t kh = 0, s = 0;
#pragma unroll
    for (int32_t f = 0; f < MAXB; ++f) {
      if (f < m.frags) {
#pragma unroll
        for (int reg = 0; reg < 2; ++reg) {
          const int32_t at = dw_mma_b_index(m, g, cl, kh, s, dw_mma_b_k(lane, reg), dw_mma_b_n(lane));
          bf[f][reg] = uint32_t{taps[at]} | (uint32_t{taps[at + 1]} << 16);
        }
        if (++s == m.ksteps) {
          s = 0;
          ++kh;
        }
      }
    }
    const uint32_t a_plane = tile_s + 2u * static_cast<uint32_t>(dw_mma_plane_base(cl, m.plane));
    for (int32_t mt = 0; mt < m.mtiles; ++mt) {
      const uint32_t a_row = a_plane + 2u * static_cast<uint32_t>(dw_mma_a_row_offset(m, g, mt, lane));
      float acc[MAXNT][4];
#pragma unroll
      for (int32_t j = 0; j < MAXNT; ++j)
#pragma unroll
        for (int v = 0; v < 4; ++v) acc[j][v] = 0.f;
      kh = 0;
      s = 0;
#pragma unroll
      for (int32_t f = 0; f < MAXB; ++f) {
        if (f < m.frags) {
          const uint32_t a_f = a_row + 2u * static_cast<uint32_t>(dw_mma_a_step(m, g, kh, s, 0));
#pragma unroll
          for (int32_t j = 0; j < MAXNT; ++j) {
            if (j < m.nt) {
              uint32_t a[4];
              implicit::load_matrices(a, a_f + a_step_j * static_cast<uint32_t>(j));
              implicit::Mma<T>::run(acc[j], a, bf[f]);
            }
          }
          if (++s == m.ksteps) {
            s = 0;
            ++kh;
          }
        }
      }
      // A non-finite accumulator (rarely a finite overflow) marks an m-tile
      // whose products met an inf or NaN: recomputed window by window.
      float total = 0.f;
#pragma unroll
      for (int32_t j = 0; j < MAXNT; ++j)
        if (j < m.nt) total += (acc[j][0] + acc[j][1]) + (acc[j][2] + acc[j][3]);
      if (__any_sync(0xffffffffu, !isfinite(total))) {
        dw_mma_direct<T>(tile, taps, outs, g, m, cl, mt, lane);
        continue;
      }
      uint32_t* out_words = reinterpret_cast<uint32_t*>(outs + dw_mma_plane_base(cl, m.out_plane));
#pragma unroll
      for (int32_t j = 0; j < MAXNT; ++j) {
        if (j < m.nt) {
          out_words[dw_mma_c_offset(m, mt, j, lane, 0) / 2] = dw_mma_pack<T>(acc[j][0], acc[j][1]);
          out_words[dw_mma_c_offset(m, mt, j, lane, 1) / 2] = dw_mma_pack<T>(acc[j][2], acc[j][3]);
        }
      }
    }
  }
}
#endif

// MINBLOCKS blocks an SM: the launch bound that sizes the registers.
template <typename T, int MAXB, int MAXNT, int MINBLOCKS>
__global__ void __launch_bounds__(kDwMmaThreads, MINBLOCKS)
dw_mma_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, const DwGeom g,
                      const DwMma m, int64_t n_images, int64_t C) {
  extern __shared__ __align__(16) unsigned char dw_mma_smem[];
  uint16_t* tile = reinterpret_cast<uint16_t*>(dw_mma_smem);
  uint16_t* taps = tile + m.w_off;
  uint16_t* outs = tile + m.out_off;
  const DwMmaBlock k = dw_mma_block(m, static_cast<int32_t>(blockIdx.x));
  const int32_t tid = static_cast<int32_t>(threadIdx.x);
  dw_mma_stage(tile, x, g, m, n_images, C, k, tid, kDwMmaThreads);
  dw_mma_stage_taps(taps, w, g, m, int64_t{k.run} * m.cb, tid, kDwMmaThreads);
  __syncthreads();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // ldmatrix, mma.sync
  dw_mma_multiply<T, MAXB, MAXNT>(tile, taps, outs, g, m, tid / 32, tid % 32);
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
  __syncthreads();
  dw_mma_write(y, outs, g, m, n_images, C, k, tid, kDwMmaThreads);
}

}  // namespace im2col::cuda
