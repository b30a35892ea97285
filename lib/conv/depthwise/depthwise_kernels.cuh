// The depthwise kernels (depthwise_conv.h has the design): tile staging, the
// register rings, and the block bodies of the forward (also the input
// gradient's phases) and the filter gradient, plus the per-element kernels
// for geometries whose tiles do not fit and the filter gradient's fixed-order
// sum of slices.
//
// A block body is written once against an executor (DwDeviceExec on the GPU):
// each(f) runs f for the calling thread with its own state, sync() is the
// block's barrier. The host tests (tests/host/conv/depthwise/) run the same
// bodies with an executor that runs each(f) for all threads of the block in
// turn, so that what they check is the kernel's code itself.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/device_util.cuh"
#include "conv/depthwise/depthwise_plan.h"

namespace im2col::cuda {

// --- staging -----------------------------------------------------------------------

// BYTES from src to shared memory at dst (cp.async for 4, 8 and 16 bytes), or
// zeros where !valid (src is then not read, but must be a valid address).
template <int BYTES>
__device__ __forceinline__ void dw_stage(void* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__)
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
  } else if constexpr (BYTES == 8 || BYTES == 4) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(d), "l"(src), "n"(BYTES),
                 "r"(valid ? BYTES : 0));
  } else {
    static_assert(BYTES == 2, "2, 4, 8 or 16 bytes");
    *static_cast<unsigned short*>(dst) = valid ? __ldg(static_cast<const unsigned short*>(src)) : 0;
  }
#else
  if (valid) std::memcpy(dst, src, BYTES);
  else std::memset(dst, 0, BYTES);
#endif
}

// Waits for this thread's copies (before the barrier that publishes them).
__device__ __forceinline__ void dw_wait_copies() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.wait_group 0;\n" ::);
#endif
}

// Stages a channels-last block of rows x cols pixels, nv vectors of V
// channels each (c0..), from `plane` (pixels width apart, C channels) at
// pixel (h0, w0) into `tile` (rows `pitch` pixels apart, nv * V channels a
// pixel); zeros where h0 + r or w0 + c falls outside [0, h_hi) x [0, w_hi)
// or a vector's channels start at C or past. Item i = (row r, cell cc =
// column * nv + vector), cells fastest: a thread steps by the block's threads,
// carrying r, cc and both offsets rather than dividing, in 32 bits where every
// offset fits (Off). The loop with a division and 64-bit offsets took 48
// instructions an item, a fifth of ConvNeXt's 7x7 forward's; this one takes
// 33 (sm_90a, bfloat16), three of them no-ops nvcc puts before the copy.
template <int V, typename Off, typename T>
__device__ __forceinline__ void dw_stage_pixels_as(T* tile, int32_t pitch, const T* plane, int32_t rows,
                                                   int32_t cols, int32_t nv, int32_t nv_shift, int32_t h0, int32_t w0,
                                                   int32_t h_hi, int32_t w_hi, int32_t width, int64_t C, int64_t c0) {
  const int32_t tid = static_cast<int32_t>(threadIdx.x), nthreads = static_cast<int32_t>(blockDim.x);
  const int32_t cells = cols * nv, items = rows * cells;
  const int32_t dr = nthreads / cells, dc = nthreads - dr * cells;
  const Off channels = static_cast<Off>(C), row_step = static_cast<Off>(width) * channels;
  // Channels of the run left from c0: a vector is valid where it starts below.
  const int32_t run_left = static_cast<int32_t>(C - c0 < int64_t{nv} * V ? C - c0 : int64_t{nv} * V);
  const int32_t row_elems = pitch * nv * V;
  const int32_t d_tile = dr * row_elems + dc * V, wrap_tile = row_elems - cells * V;
  const int32_t r0 = tid / cells;
  int32_t cc = tid - r0 * cells, h = h0 + r0, at = r0 * row_elems + cc * V;
  Off row_off = static_cast<Off>(h) * row_step;
  const Off d_row = dr * row_step;
  const T* base = plane + c0;  // a valid address: c0 < C
  for (int32_t i = tid; i < items; i += nthreads) {
    const int32_t vec = cc & (nv - 1), w = w0 + (cc >> nv_shift);
    const bool valid = static_cast<uint32_t>(h) < static_cast<uint32_t>(h_hi) &&
                       static_cast<uint32_t>(w) < static_cast<uint32_t>(w_hi) && vec * V < run_left;
    const Off off = row_off + static_cast<Off>(w) * channels + vec * V;
    dw_stage<V * sizeof(T)>(tile + at, base + (valid ? off : Off{0}), valid);
    cc += dc;
    h += dr;
    at += d_tile;
    row_off += d_row;
    if (cc >= cells) {
      cc -= cells;
      ++h;
      at += wrap_tile;
      row_off += row_step;
    }
  }
}

#if defined(__CUDA_ARCH__)
constexpr int64_t kDwOffsets32 = 0x7fffffff;
#else
inline int64_t kDwOffsets32 = 0x7fffffff;  // the host tests lower it, to run the 64-bit loop
#endif

template <int V, typename T>
__device__ __forceinline__ void dw_stage_pixels(T* tile, int32_t pitch, const T* plane, int32_t rows,
                                                int32_t cols, int32_t nv, int32_t nv_shift, int32_t h0, int32_t w0,
                                                int32_t h_hi, int32_t w_hi, int32_t width, int64_t C, int64_t c0) {
  // The largest offset from plane + c0 that any item forms, valid or not.
  const int64_t h_reach = std::max<int64_t>(h0 < 0 ? -int64_t{h0} : h0, int64_t{h0} + rows) + 1;
  const int64_t w_reach = std::max<int64_t>(w0 < 0 ? -int64_t{w0} : w0, int64_t{w0} + cols) + 1;
  const int64_t reach = (h_reach * std::max(width, w_hi) + w_reach) * C;
  if (reach <= kDwOffsets32)
    dw_stage_pixels_as<V, int32_t>(tile, pitch, plane, rows, cols, nv, nv_shift, h0, w0, h_hi, w_hi, width, C, c0);
  else
    dw_stage_pixels_as<V, int64_t>(tile, pitch, plane, rows, cols, nv, nv_shift, h0, w0, h_hi, w_hi, width, C, c0);
}

// V elements at p (shared memory, aligned to the vector) as accumulators.
template <int V, typename T, typename A>
__device__ __forceinline__ void dw_load(A (&d)[V], const T* p) {
#if defined(__CUDA_ARCH__)
  // bfloat16 is float32's upper half: one shift or mask an element (nvcc's
  // conversion took two: a byte permute, then the shift).
  if constexpr (std::is_same_v<T, __nv_bfloat16> && std::is_same_v<A, float> && V % 2 == 0) {
    const Pack<uint32_t, V / 2> u = *reinterpret_cast<const Pack<uint32_t, V / 2>*>(p);
#pragma unroll
    for (int j = 0; j < V / 2; ++j) {
      d[2 * j] = __uint_as_float(u.v[j] << 16);
      d[2 * j + 1] = __uint_as_float(u.v[j] & 0xffff0000u);
    }
    return;
  }
#endif
  if constexpr (V == 1) {
    d[0] = static_cast<A>(to_acc(*p));
  } else {
    const Pack<T, V> v = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
    for (int e = 0; e < V; ++e) d[e] = static_cast<A>(to_acc(v.v[e]));
  }
}

// --- executors ---------------------------------------------------------------------

template <typename State>
struct DwDeviceExec {
  State s;
  template <typename F>
  __device__ __forceinline__ void each(F&& f) { f(s); }
  __device__ __forceinline__ void sync() { __syncthreads(); }
};

// --- one row of products, for the forward and the filter gradient ----------------------

// acc[i] += sum over steps k < count of o[k * os] * x[(i + k) * xs], i < R: the
// forward's R outputs along a row over its taps (o: the weights), or the filter
// gradient's R taps of a kernel row over a run of outputs (o: dy); q apart, so
// that consecutive i + k step one dilation (S = 1). The ring holds
// x[k .. k + R - 1]: each step loads one input vector and one vector of o for R
// vector FMAs. Unrolled R steps at a time, so that every ring slot is a register.
template <int R, int V, typename T, typename O, typename A>
__device__ __forceinline__ void dw_ring_step(A (&acc)[R][V], A (&ring)[R][V], int s, const T*& xp, int32_t xs,
                                             const O*& op, int32_t os) {
  dw_load<V>(ring[(s + R - 1) % R], xp);
  A ov[V];
  dw_load<V>(ov, op);
  xp += xs;
  op += os;
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int e = 0; e < V; ++e) acc[i][e] += ring[(i + s) % R][e] * ov[e];
}

template <int R, int V, typename T, typename O, typename A>
__device__ __forceinline__ void dw_row_ring(A (&acc)[R][V], const T* x, int32_t xs, const O* o, int32_t os,
                                            int32_t count) {
  A ring[R][V];
#pragma unroll
  for (int j = 0; j < R - 1; ++j) dw_load<V>(ring[j], x + j * xs);
  const T* xp = x + (R - 1) * xs;
  const O* op = o;
  int32_t k0 = 0;
  // Whole rounds of R steps without tests, so that loads can be issued
  // ahead of the products, then the rest.
  for (; k0 + R <= count; k0 += R) {
#pragma unroll
    for (int s = 0; s < R; ++s) dw_ring_step<R, V>(acc, ring, s, xp, xs, op, os);
  }
#pragma unroll
  for (int s = 0; s < R - 1; ++s)
    if (k0 + s < count) dw_ring_step<R, V>(acc, ring, s, xp, xs, op, os);
}

// The same without the ring: acc[i] += o[k * os] * x[i * xi + k * xk], one
// input load per vector FMA (strides that do not divide the dilation).
template <int R, int V, typename T, typename O, typename A>
__device__ __forceinline__ void dw_row_direct(A (&acc)[R][V], const T* x, int32_t xi, int32_t xk, const O* o,
                                              int32_t os, int32_t count) {
#pragma unroll 1
  for (int32_t k = 0; k < count; ++k) {
    A ov[V];
    dw_load<V>(ov, o + k * os);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      A xv[V];
      dw_load<V>(xv, x + i * xi + k * xk);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[i][e] += xv[e] * ov[e];
    }
  }
}

// --- forward: blocks ----------------------------------------------------------------

struct DwBlock {
  int64_t n = 0, c0 = 0;
  int32_t phase = 0, od = 0, oh0 = 0, ow0 = 0;
};

// Block b of a launch: channel run fastest (neighbouring blocks read the other
// channels of the same pixels), then W tiles, H tiles, planes, images, phases.
__device__ __forceinline__ DwBlock dw_forward_block_at(const DwTile& t, int64_t n_images, int64_t b) {
  DwBlock k;
  if (t.decode32) {
    int32_t i = static_cast<int32_t>(b), run, tw, th;
    t.by_launch_phase.divmod(i, k.phase, i);
    t.by_runs.divmod(i, i, run);
    t.by_tiles_w.divmod(i, i, tw);
    t.by_tiles_h.divmod(i, i, th);
    int32_t image;
    t.by_planes.divmod(i, image, k.od);
    k.n = image;
    k.ow0 = tw * t.tw;
    k.oh0 = th * t.th;
    k.c0 = int64_t{run} * (t.cl ? t.cbp : t.nv);
    return k;
  }
  const int64_t per_phase = t.blocks * n_images;
  k.phase = static_cast<int32_t>(b / per_phase);
  b -= k.phase * per_phase;
  const int64_t run = b % t.runs;
  b /= t.runs;
  k.ow0 = static_cast<int32_t>(b % t.tiles_w) * t.tw;
  b /= t.tiles_w;
  k.oh0 = static_cast<int32_t>(b % t.tiles_h) * t.th;
  b /= t.tiles_h;
  k.od = static_cast<int32_t>(b % t.planes);
  k.n = b / t.planes;
  k.c0 = run * (t.cl ? t.cbp : t.nv);
  return k;
}

template <typename A, int V>
struct DwForwardState {
  A acc[kDwR][V];
};

// Thread tid's place in a forward block: its channel vector (channels-last)
// or channel (channels-first), row, and first output column (its kDwR outputs
// are q apart).
struct DwForwardThread {
  int32_t vec, row, col0;
};

__host__ __device__ __forceinline__ DwForwardThread dw_forward_thread(const DwTile& t, int32_t tid) {
  DwForwardThread h;
  int32_t wt;
  if (t.cl) {
    h.vec = tid & (t.nv - 1);
    const int32_t rest = tid >> t.nv_shift;
    h.row = rest / t.gw;
    wt = rest - h.row * t.gw;
  } else {
    wt = tid % t.gw;
    const int32_t rest = tid / t.gw;
    h.vec = rest / t.th;
    h.row = rest - h.vec * t.th;
  }
  const int32_t group = wt / t.q, p = wt - group * t.q;
  h.col0 = group * kDwR * t.q + p;
  return h;
}

// Stages, for stage (kd at input plane id, taps from kh0, kw0), the input
// under the block's tile and the stage's weights (accumulator type, 0 for
// taps past the window and channels past C; the filter's tap through g's map).
template <bool CL, typename T, typename A>
__device__ __forceinline__ void dw_forward_fill(unsigned char* smem, const T* __restrict__ x,
                                                const T* __restrict__ w, const DwGeom& g, const DwTile& t,
                                                int64_t C, const DwBlock& k, int32_t id, int32_t kd, int32_t kh0,
                                                int32_t kw0) {
  T* tile = reinterpret_cast<T*>(smem);
  A* weights = reinterpret_cast<A*>(smem + t.tile_bytes);
  const int32_t IH = g.in[1], IW = g.in[2];
  const int32_t ih0 = k.oh0 * g.stride[1] + kh0 * g.dil[1] - g.pad[1];
  const int32_t iw0 = k.ow0 * g.stride[2] + kw0 * g.dil[2] - g.pad[2];
  const int32_t tid = static_cast<int32_t>(threadIdx.x), nthreads = static_cast<int32_t>(blockDim.x);
  if constexpr (CL) {
    const T* xp = x + (k.n * g.in[0] + id) * static_cast<int64_t>(IH) * IW * C;
    if (t.vector_io) {
      constexpr int V = sizeof(T) == 8 ? 2 : 4;
      dw_stage_pixels<V>(tile, t.pwa, xp, t.ph, t.pw, t.nv, t.nv_shift, ih0, iw0, IH, IW, IW, C, k.c0);
    } else {
      const int32_t items = t.ph * t.pw * t.cbp;
      for (int32_t i = tid; i < items; i += nthreads) {
        const int32_t e = i & (t.cbp - 1);
        int32_t r, c;
        t.by_pw.divmod(i >> t.cbp_shift, r, c);
        const int32_t ih = ih0 + r, iw = iw0 + c;
        const int64_t ch = k.c0 + e;
        const bool valid = static_cast<uint32_t>(ih) < static_cast<uint32_t>(IH) &&
                           static_cast<uint32_t>(iw) < static_cast<uint32_t>(IW) && ch < C;
        dw_stage<sizeof(T)>(tile + (r * t.pwa + c) * t.cbp + e,
                            valid ? xp + (static_cast<int64_t>(ih) * IW + iw) * C + ch : x, valid);
      }
    }
  } else {
    const int32_t items = t.nv * t.ph * t.pw;
    for (int32_t i = tid; i < items; i += nthreads) {
      int32_t rest, c, ci, r;
      t.by_pw.divmod(i, rest, c);
      t.by_ph.divmod(rest, ci, r);
      const int32_t ih = ih0 + r, iw = iw0 + c;
      const int64_t ch = k.c0 + ci;
      const bool valid = static_cast<uint32_t>(ih) < static_cast<uint32_t>(IH) &&
                         static_cast<uint32_t>(iw) < static_cast<uint32_t>(IW) && ch < C;
      const T* src = x + (((k.n * C + ch) * g.in[0] + id) * IH + ih) * static_cast<int64_t>(IW) + iw;
      dw_stage<sizeof(T)>(tile + ci * t.plane + r * t.pwa + c, valid ? src : x, valid);
    }
  }
  // Weights: [khl][kwl][cbp] channels-last, [ci][khl][kwl] channels-first.
  const int32_t taps = t.khc * t.kwc;
  const int32_t items = (CL ? t.cbp : t.nv) * taps;
  const int64_t wsize = g.w_size();
  for (int32_t i = tid; i < items; i += nthreads) {
    int32_t e, tap;
    if constexpr (CL) {
      e = i & (t.cbp - 1);
      tap = i >> t.cbp_shift;
    } else {
      t.by_taps.divmod(i, e, tap);
    }
    int32_t khl, kwl;
    t.by_kwc.divmod(tap, khl, kwl);
    const int32_t kh = kh0 + khl, kw = kw0 + kwl;
    const int64_t ch = k.c0 + e;
    A value = A(0);
    if (kh < g.kernel[1] && kw < g.kernel[2] && ch < C) {
      const int64_t fd = g.w_first[0] + g.w_step[0] * kd, fh = g.w_first[1] + g.w_step[1] * kh,
                    fw = g.w_first[2] + g.w_step[2] * kw;
      value = static_cast<A>(to_acc(w[ch * wsize + (fd * g.wk[1] + fh) * g.wk[2] + fw]));
    }
    weights[CL ? tap * t.cbp + e : e * taps + tap] = value;
  }
}

// The thread's outputs of one stage (taps kh0.., kw0..): its rows of taps,
// each with the ring (S = 1) or without (S = 0).
template <bool CL, int S, typename T, typename A, int V>
__device__ __forceinline__ void dw_forward_compute(const unsigned char* smem, A (&acc)[kDwR][V], const DwGeom& g,
                                                   const DwTile& t, const DwForwardThread& h, int32_t kh0,
                                                   int32_t kw0) {
  const T* tile = reinterpret_cast<const T*>(smem);
  const A* weights = reinterpret_cast<const A*>(smem + t.tile_bytes);
  const int32_t nkh = min(t.khc, g.kernel[1] - kh0), nkw = min(t.kwc, g.kernel[2] - kw0);
  const int32_t col = CL ? t.cbp : 1;  // elements between staged pixels of a row
  const T* x = tile + (CL ? h.vec * V : h.vec * t.plane) + (h.row * g.stride[1] * t.pwa + h.col0 * g.stride[2]) * col;
  const A* w = weights + (CL ? h.vec * V : h.vec * t.khc * t.kwc);
  const int32_t wcol = CL ? t.cbp : 1;
  for (int32_t khl = 0; khl < nkh; ++khl) {
    const T* xr = x + khl * g.dil[1] * t.pwa * col;
    const A* wr = w + khl * t.kwc * wcol;
    if constexpr (S == 1) {
      dw_row_ring<kDwR, V>(acc, xr, g.dil[2] * col, wr, wcol, nkw);
    } else {
      dw_row_direct<kDwR, V>(acc, xr, t.q * g.stride[2] * col, g.dil[2] * col, wr, wcol, nkw);
    }
  }
}

// Output (od, oh, ow) of phase geometry g (through its output map), flat in
// the result's spatial extents.
__host__ __device__ __forceinline__ int64_t dw_output_offset(const DwGeom& g, int32_t od, int32_t oh, int32_t ow) {
  const int64_t yd = g.o_first[0] + int64_t{g.o_step[0]} * od, yh = g.o_first[1] + int64_t{g.o_step[1]} * oh,
                yw = g.o_first[2] + int64_t{g.o_step[2]} * ow;
  return (yd * g.yk[1] + yh) * g.yk[2] + yw;
}

// Channels-last: each thread stores its outputs from its registers.
template <typename TY, int V, typename Exec>
__device__ __forceinline__ void dw_forward_store_cl(Exec& e, TY* __restrict__ y, const DwGeom& g, const DwTile& t,
                                                    const DwBlock& k, int64_t C) {
  const int64_t y_plane = g.y_size();
  e.each([&](auto& s) {
    const DwForwardThread h = dw_forward_thread(t, static_cast<int32_t>(threadIdx.x));
    const int32_t oh = k.oh0 + h.row;
    const int64_t ch = k.c0 + h.vec * V;
    if (oh >= g.out[1] || ch >= C) return;
#pragma unroll
    for (int i = 0; i < kDwR; ++i) {
      const int32_t ow = k.ow0 + h.col0 + t.q * i;
      if (ow < g.out[2]) {
        TY* dst = y + (k.n * y_plane + dw_output_offset(g, k.od, oh, ow)) * C + ch;
        if (t.vector_io) {
          Pack<TY, V> out;
#pragma unroll
          for (int v = 0; v < V; ++v) out.v[v] = store_value<TY>(s.acc[i][v]);
          *reinterpret_cast<Pack<TY, V>*>(dst) = out;
        } else {
#pragma unroll
          for (int v = 0; v < V; ++v)
            if (ch + v < C) dst[v] = store_value<TY>(s.acc[i][v]);
        }
      }
    }
  });
}

// The block body of the forward and of the input gradient's phases: for
// each stage of taps, stage its input and weights, then add its products;
// then store (channels-last from registers, channels-first through shared
// memory so that the stores coalesce).
template <bool CL, int S, typename T, typename TY, typename Exec>
__device__ __forceinline__ void dw_forward_block(Exec& e, unsigned char* smem, const T* __restrict__ x,
                                                 const T* __restrict__ w, TY* __restrict__ y, const DwPhases& phases,
                                                 const DwTile& t, int64_t n_images, int64_t C, int64_t b) {
  using A = typename Acc<T>::type;
  constexpr int V = CL ? (sizeof(T) == 8 ? 2 : 4) : 1;
  const DwBlock k = dw_forward_block_at(t, n_images, b);
  const DwGeom& g = phases.g[k.phase];
  if (k.od >= g.out[0] || k.oh0 >= g.out[1] || k.ow0 >= g.out[2]) return;  // the same for the whole block
  e.each([&](auto& s) {
#pragma unroll
    for (int i = 0; i < kDwR; ++i)
#pragma unroll
      for (int v = 0; v < V; ++v) s.acc[i][v] = A(0);
  });
  if (!g.zero) {
    for (int32_t kd = 0; kd < g.kernel[0]; ++kd) {
      const int32_t id = k.od * g.stride[0] + kd * g.dil[0] - g.pad[0];
      if (id < 0 || id >= g.in[0]) continue;
      for (int32_t kh0 = 0; kh0 < g.kernel[1]; kh0 += t.khc) {
        for (int32_t kw0 = 0; kw0 < g.kernel[2]; kw0 += t.kwc) {
          e.sync();  // the previous stage's reads are done
          e.each([&](auto&) {
            dw_forward_fill<CL, T, A>(smem, x, w, g, t, C, k, id, kd, kh0, kw0);
            dw_wait_copies();
          });
          e.sync();
          e.each([&](auto& s) {
            const DwForwardThread h = dw_forward_thread(t, static_cast<int32_t>(threadIdx.x));
            dw_forward_compute<CL, S, T, A, V>(smem, s.acc, g, t, h, kh0, kw0);
          });
        }
      }
    }
  }
  const int64_t y_plane = g.y_size();
  if constexpr (CL) {
    dw_forward_store_cl<TY, V>(e, y, g, t, k, C);
  } else {
    TY* staged = reinterpret_cast<TY*>(smem);
    e.sync();  // the last stage's reads are done
    e.each([&](auto& s) {
      const DwForwardThread h = dw_forward_thread(t, static_cast<int32_t>(threadIdx.x));
#pragma unroll
      for (int i = 0; i < kDwR; ++i)
        staged[(h.vec * t.th + h.row) * t.tw + h.col0 + t.q * i] = store_value<TY>(s.acc[i][0]);
    });
    e.sync();
    e.each([&](auto&) {
      const int32_t items = t.nv * t.th * t.tw;
      for (int32_t i = static_cast<int32_t>(threadIdx.x); i < items; i += static_cast<int32_t>(blockDim.x)) {
        int32_t rest, c, ci, r;
        t.by_tw.divmod(i, rest, c);
        t.by_th.divmod(rest, ci, r);
        const int32_t oh = k.oh0 + r, ow = k.ow0 + c;
        const int64_t ch = k.c0 + ci;
        if (oh < g.out[1] && ow < g.out[2] && ch < C)
          y[(k.n * C + ch) * y_plane + dw_output_offset(g, k.od, oh, ow)] = staged[i];
      }
    });
  }
}

template <bool CL, int S, typename T, typename TY>
__global__ void __launch_bounds__(kDwThreads, 2)
dw_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, TY* __restrict__ y,
                  const __grid_constant__ DwPhases phases, DwTile t, int64_t n_images, int64_t C) {
  using A = typename Acc<T>::type;
  constexpr int V = CL ? (sizeof(T) == 8 ? 2 : 4) : 1;
  extern __shared__ __align__(16) unsigned char smem[];
  DwDeviceExec<DwForwardState<A, V>> e;
  const int64_t total = phases.count * n_images * t.blocks;
  for (int64_t b = blockIdx.x; b < total; b += gridDim.x)
    dw_forward_block<CL, S, T, TY>(e, smem, x, w, y, phases, t, n_images, C, b);
}

// --- filter gradient: blocks ----------------------------------------------------------

struct DwFilterBlock {
  int64_t n = 0, slice = 0, c0 = 0;
  int32_t kd = 0, kh_lo = 0, kw_lo = 0;  // the block's first taps
  int32_t lo[3] = {0, 0, 0}, hi[3] = {1, 1, 1};  // its output region
};

// Block b: channel run fastest, then chunk groups, row groups, kd, slices.
__host__ __device__ __forceinline__ DwFilterBlock dw_filter_block_at(const DwGeom& g, const DwFilterTile& t,
                                                                     const FilterSlices& f, int64_t b) {
  DwFilterBlock k;
  const int64_t run = b % t.runs;
  b /= t.runs;
  const int32_t chg = static_cast<int32_t>(b % t.ch_groups);
  b /= t.ch_groups;
  const int32_t khg = static_cast<int32_t>(b % t.kh_groups);
  b /= t.kh_groups;
  k.kd = static_cast<int32_t>(b % g.kernel[0]);
  k.slice = b / g.kernel[0];
  k.n = k.slice / f.per_image;
  const int64_t part = k.slice - k.n * f.per_image;
  k.c0 = run * (t.cl ? t.cbp : t.nv);
  k.kh_lo = khg * t.khb;
  k.kw_lo = chg * t.chb * t.kc;
  for (int d = 0; d < 3; ++d) {
    k.lo[d] = 0;
    k.hi[d] = g.out[d];
  }
  const int d0 = 3 - g.nd;
  const int64_t lo = part * f.rows, hi = lo + f.rows < g.out[d0] ? lo + f.rows : g.out[d0];
  k.lo[d0] = static_cast<int32_t>(lo);
  k.hi[d0] = static_cast<int32_t>(hi);
  return k;
}

template <typename A, int V, int KC>
struct DwFilterState {
  A acc[KC][V];
};

struct DwFilterThread {
  int32_t vec, khl, chunk, p;
};

__host__ __device__ __forceinline__ DwFilterThread dw_filter_thread(const DwFilterTile& t, int32_t tid) {
  DwFilterThread h;
  h.vec = tid & (t.nv - 1);
  int32_t rest = tid >> t.nv_shift;
  h.khl = rest % t.khb;
  rest /= t.khb;
  h.chunk = rest % t.chb;
  h.p = rest / t.chb;
  return h;
}

// Stages the x tile under output rows oh0.. and columns ow0.. of plane od
// (input plane id) for the block's taps, and the dy tile of those outputs
// (zeros past the block's region).
template <bool CL, typename T>
__device__ __forceinline__ void dw_filter_fill(unsigned char* smem, const T* __restrict__ dy,
                                               const T* __restrict__ x, const DwGeom& g, const DwFilterTile& t,
                                               int64_t C, const DwFilterBlock& k, int32_t od, int32_t id, int32_t oh0,
                                               int32_t ow0) {
  T* xt = reinterpret_cast<T*>(smem);
  T* dyt = reinterpret_cast<T*>(smem + t.x_bytes);
  const int32_t IH = g.in[1], IW = g.in[2], OH = g.out[1], OW = g.out[2];
  const int32_t ih0 = oh0 * g.stride[1] + k.kh_lo * g.dil[1] - g.pad[1];
  const int32_t iw0 = ow0 * g.stride[2] + k.kw_lo * g.dil[2] - g.pad[2];
  const int32_t tid = static_cast<int32_t>(threadIdx.x), nthreads = static_cast<int32_t>(blockDim.x);
  const int32_t h_hi = k.hi[1], w_hi = k.hi[2];
  if constexpr (CL) {
    constexpr int V = sizeof(T) == 8 ? 2 : 4;
    const T* xp = x + (k.n * g.in[0] + id) * static_cast<int64_t>(IH) * IW * C;
    const T* dp = dy + (k.n * g.out[0] + od) * static_cast<int64_t>(OH) * OW * C;
    if (t.vector_io) {
      dw_stage_pixels<V>(xt, t.pwa, xp, t.ph, t.pw, t.nv, t.nv_shift, ih0, iw0, IH, IW, IW, C, k.c0);
      dw_stage_pixels<V>(dyt, t.tw, dp, t.tr, t.tw, t.nv, t.nv_shift, oh0, ow0, h_hi, w_hi, OW, C, k.c0);
    } else {
      const int32_t items = t.ph * t.pw * t.cbp;
      for (int32_t i = tid; i < items; i += nthreads) {
        const int32_t e = i & (t.cbp - 1);
        int32_t r, c;
        t.by_pw.divmod(i >> t.cbp_shift, r, c);
        const int32_t ih = ih0 + r, iw = iw0 + c;
        const int64_t ch = k.c0 + e;
        const bool valid = static_cast<uint32_t>(ih) < static_cast<uint32_t>(IH) &&
                           static_cast<uint32_t>(iw) < static_cast<uint32_t>(IW) && ch < C;
        dw_stage<sizeof(T)>(xt + (r * t.pwa + c) * t.cbp + e,
                            valid ? xp + (static_cast<int64_t>(ih) * IW + iw) * C + ch : x, valid);
      }
      const int32_t ditems = t.tr * t.tw * t.cbp;
      for (int32_t i = tid; i < ditems; i += nthreads) {
        const int32_t e = i & (t.cbp - 1);
        int32_t r, c;
        t.by_tw.divmod(i >> t.cbp_shift, r, c);
        const int32_t oh = oh0 + r, ow = ow0 + c;
        const int64_t ch = k.c0 + e;
        const bool valid = oh < h_hi && ow < w_hi && ch < C;
        dw_stage<sizeof(T)>(dyt + (r * t.tw + c) * t.cbp + e,
                            valid ? dp + (static_cast<int64_t>(oh) * OW + ow) * C + ch : dy, valid);
      }
    }
  } else {
    const int32_t items = t.nv * t.ph * t.pw;
    for (int32_t i = tid; i < items; i += nthreads) {
      int32_t rest, c, ci, r;
      t.by_pw.divmod(i, rest, c);
      t.by_ph.divmod(rest, ci, r);
      const int32_t ih = ih0 + r, iw = iw0 + c;
      const int64_t ch = k.c0 + ci;
      const bool valid = static_cast<uint32_t>(ih) < static_cast<uint32_t>(IH) &&
                         static_cast<uint32_t>(iw) < static_cast<uint32_t>(IW) && ch < C;
      const T* src = x + (((k.n * C + ch) * g.in[0] + id) * IH + ih) * static_cast<int64_t>(IW) + iw;
      dw_stage<sizeof(T)>(xt + ci * t.plane + r * t.pwa + c, valid ? src : x, valid);
    }
    const int32_t ditems = t.nv * t.tr * t.tw;
    for (int32_t i = tid; i < ditems; i += nthreads) {
      int32_t rest, c, ci, r;
      t.by_tw.divmod(i, rest, c);
      t.by_tr.divmod(rest, ci, r);
      const int32_t oh = oh0 + r, ow = ow0 + c;
      const int64_t ch = k.c0 + ci;
      const bool valid = oh < h_hi && ow < w_hi && ch < C;
      const T* src = dy + (((k.n * C + ch) * g.out[0] + od) * OH + oh) * static_cast<int64_t>(OW) + ow;
      dw_stage<sizeof(T)>(dyt + ci * t.dplane + r * t.tw + c, valid ? src : dy, valid);
    }
  }
}

// The thread's sums over one staged tile (valid rows trv, columns twv):
// items p, p + P, ... (a row's segment each), each swept along its columns
// with the ring (per class of columns q apart) or without it.
template <bool CL, int S, int KC, typename T, typename A, int V>
__device__ __forceinline__ void dw_filter_compute(const unsigned char* smem, A (&acc)[KC][V], const DwGeom& g,
                                                  const DwFilterTile& t, const DwFilterBlock& k,
                                                  const DwFilterThread& h, int32_t trv, int32_t twv) {
  const int32_t kh = k.kh_lo + h.khl, kw_rel = h.chunk * KC;
  if (kh >= g.kernel[1] || k.kw_lo + kw_rel >= g.kernel[2]) return;
  const T* xt = reinterpret_cast<const T*>(smem);
  const T* dyt = reinterpret_cast<const T*>(smem + t.x_bytes);
  const int32_t col = CL ? t.cbp : 1;
  const T* xbase = xt + (CL ? h.vec * V : h.vec * t.plane) + h.khl * g.dil[1] * t.pwa * col;
  const T* dbase = dyt + (CL ? h.vec * V : h.vec * t.dplane);
  const int32_t sh = g.stride[1], sw = g.stride[2], dw = g.dil[2];
  const int32_t items = trv * t.segs;
  for (int32_t it = h.p; it < items; it += t.p) {
    int32_t r, sg;
    t.by_segs.divmod(it, r, sg);
    const int32_t c_lo = sg * t.segw, c_hi = min(c_lo + t.segw, twv);
    const T* xr = xbase + r * sh * t.pwa * col;
    const T* dr = dbase + r * t.tw * col;
    if constexpr (S == 1) {
      for (int32_t pc = 0; pc < t.q; ++pc) {
        const int32_t o = c_lo + pc;
        if (o >= c_hi) break;
        const int32_t count = (c_hi - o + t.q - 1) / t.q;
        dw_row_ring<KC, V>(acc, xr + (o * sw + kw_rel * dw) * col, dw * col, dr + o * col, t.q * col, count);
      }
    } else {
      if (c_lo < c_hi)
        dw_row_direct<KC, V>(acc, xr + (c_lo * sw + kw_rel * dw) * col, dw * col, sw * col, dr + c_lo * col, col,
                             c_hi - c_lo);
    }
  }
}

// Writes the thread's sums of tap k (P == 1) or meets the other P - 1
// threads of its (vector, row, chunk) in shared memory: sum_write stores
// the sums, sum_read (thread p == 0) adds them in order of p and writes.
template <bool CL, int KC, typename A, int V>
__device__ __forceinline__ void dw_filter_write(A* __restrict__ partials, const A (&sum)[V], const DwGeom& g,
                                                const DwFilterTile& t, const DwFilterBlock& k, const DwFilterThread& h,
                                                int64_t C, int k_index) {
  const int32_t kh = k.kh_lo + h.khl, kw = k.kw_lo + h.chunk * KC + k_index;
  if (kh >= g.kernel[1] || kw >= g.kernel[2]) return;
  const int64_t K = g.kernel_size();
  const int64_t tap = (static_cast<int64_t>(k.kd) * g.kernel[1] + kh) * g.kernel[2] + kw;
  const int64_t ch = k.c0 + (CL ? h.vec * V : h.vec);
  if (ch >= C) return;
  A* dst = partials + (k.slice * K + tap) * C + ch;
  if (CL && V > 1 && t.vector_io) {
    Pack<A, V> p;
#pragma unroll
    for (int v = 0; v < V; ++v) p.v[v] = sum[v];
    *reinterpret_cast<Pack<A, V>*>(dst) = p;
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v)
      if (ch + v < C) dst[v] = sum[v];
  }
}

// The block body of the filter gradient's first pass: tiles of the slice's
// region (planes od, rows oh0.., columns ow0..), each staged then summed;
// then the block's partial sums.
template <bool CL, int S, int KC, typename T, typename Exec>
__device__ __forceinline__ void dw_filter_block(Exec& e, unsigned char* smem, const T* __restrict__ dy,
                                                const T* __restrict__ x, typename Acc<T>::type* __restrict__ partials,
                                                const DwGeom& g, const DwFilterTile& t, const FilterSlices& f,
                                                int64_t C, int64_t b) {
  using A = typename Acc<T>::type;
  constexpr int V = CL ? (sizeof(T) == 8 ? 2 : 4) : 1;
  const DwFilterBlock k = dw_filter_block_at(g, t, f, b);
  e.each([&](auto& s) {
#pragma unroll
    for (int i = 0; i < KC; ++i)
#pragma unroll
      for (int v = 0; v < V; ++v) s.acc[i][v] = A(0);
  });
  for (int32_t od = k.lo[0]; od < k.hi[0]; ++od) {
    const int32_t id = od * g.stride[0] + k.kd * g.dil[0] - g.pad[0];
    if (id < 0 || id >= g.in[0]) continue;
    for (int32_t oh0 = k.lo[1]; oh0 < k.hi[1]; oh0 += t.tr) {
      for (int32_t ow0 = k.lo[2]; ow0 < k.hi[2]; ow0 += t.tw) {
        e.sync();  // the previous tile's reads are done
        e.each([&](auto&) {
          dw_filter_fill<CL, T>(smem, dy, x, g, t, C, k, od, id, oh0, ow0);
          dw_wait_copies();
        });
        e.sync();
        const int32_t trv = min(t.tr, k.hi[1] - oh0), twv = min(t.tw, k.hi[2] - ow0);
        e.each([&](auto& s) {
          const DwFilterThread h = dw_filter_thread(t, static_cast<int32_t>(threadIdx.x));
          dw_filter_compute<CL, S, KC, T, A, V>(smem, s.acc, g, t, k, h, trv, twv);
        });
      }
    }
  }
  if (t.p == 1) {
    e.each([&](auto& s) {
      const DwFilterThread h = dw_filter_thread(t, static_cast<int32_t>(threadIdx.x));
#pragma unroll
      for (int kk = 0; kk < KC; ++kk) dw_filter_write<CL, KC, A, V>(partials, s.acc[kk], g, t, k, h, C, kk);
    });
    return;
  }
  A* red = reinterpret_cast<A*>(smem);
  const int32_t group = t.nv * t.khb * t.chb;
#pragma unroll
  for (int kk = 0; kk < KC; ++kk) {
    e.sync();
    e.each([&](auto& s) {
#pragma unroll
      for (int v = 0; v < V; ++v) red[threadIdx.x * V + v] = s.acc[kk][v];
    });
    e.sync();
    e.each([&](auto&) {
      const DwFilterThread h = dw_filter_thread(t, static_cast<int32_t>(threadIdx.x));
      if (h.p != 0) return;
      A sum[V];
#pragma unroll
      for (int v = 0; v < V; ++v) sum[v] = red[threadIdx.x * V + v];
#pragma unroll 4
      for (int32_t pp = 1; pp < t.p; ++pp)
#pragma unroll
        for (int v = 0; v < V; ++v) sum[v] += red[(threadIdx.x + pp * group) * V + v];
      dw_filter_write<CL, KC, A, V>(partials, sum, g, t, k, h, C, kk);
    });
  }
}

template <bool CL, int S, int KC, typename T>
__global__ void __launch_bounds__(kDwThreads, 2)
dw_filter_kernel(const T* __restrict__ dy, const T* __restrict__ x, typename Acc<T>::type* __restrict__ partials,
                 DwGeom g, DwFilterTile t, FilterSlices f, int64_t C) {
  using A = typename Acc<T>::type;
  constexpr int V = CL ? (sizeof(T) == 8 ? 2 : 4) : 1;
  extern __shared__ __align__(16) unsigned char smem[];
  DwDeviceExec<DwFilterState<A, V, KC>> e;
  for (int64_t b = blockIdx.x; b < t.blocks; b += gridDim.x) dw_filter_block<CL, S, KC, T>(e, smem, dy, x, partials, g, t, f, C, b);
}

// --- per-element kernels (geometries whose tiles do not fit) ---------------------------

// Output element i (image, position, channel in the layout's order) of the
// phases: the sum over its taps, read from global memory.
template <typename T, typename TY>
__host__ __device__ __forceinline__ void dw_gather_element(const T* __restrict__ x, const T* __restrict__ w,
                                                           TY* __restrict__ y, const DwGeom& g, int64_t C, bool cl,
                                                           int64_t i) {
  using A = typename Acc<T>::type;
  const int64_t L = g.out_size();
  int64_t n, l, c;
  if (cl) {
    c = i % C;
    l = (i / C) % L;
    n = i / C / L;
  } else {
    l = i % L;
    c = (i / L) % C;
    n = i / L / C;
  }
  const int32_t ow = static_cast<int32_t>(l % g.out[2]), oh = static_cast<int32_t>((l / g.out[2]) % g.out[1]),
                od = static_cast<int32_t>(l / g.out[2] / g.out[1]);
  A sum = A(0);
  if (!g.zero) {
    const int64_t wsize = g.w_size();
    for (int32_t kd = 0; kd < g.kernel[0]; ++kd) {
      const int64_t id = int64_t{od} * g.stride[0] + int64_t{kd} * g.dil[0] - g.pad[0];
      if (id < 0 || id >= g.in[0]) continue;
      for (int32_t kh = 0; kh < g.kernel[1]; ++kh) {
        const int64_t ih = int64_t{oh} * g.stride[1] + int64_t{kh} * g.dil[1] - g.pad[1];
        if (ih < 0 || ih >= g.in[1]) continue;
        for (int32_t kw = 0; kw < g.kernel[2]; ++kw) {
          const int64_t iw = int64_t{ow} * g.stride[2] + int64_t{kw} * g.dil[2] - g.pad[2];
          if (iw < 0 || iw >= g.in[2]) continue;
          const int64_t s = (id * g.in[1] + ih) * g.in[2] + iw;
          const int64_t fd = g.w_first[0] + int64_t{g.w_step[0]} * kd, fh = g.w_first[1] + int64_t{g.w_step[1]} * kh,
                        fw = g.w_first[2] + int64_t{g.w_step[2]} * kw;
          const A wv = static_cast<A>(to_acc(w[c * wsize + (fd * g.wk[1] + fh) * g.wk[2] + fw]));
          const T xv = cl ? x[(n * g.in_size() + s) * C + c] : x[(n * C + c) * g.in_size() + s];
          sum += static_cast<A>(to_acc(xv)) * wv;
        }
      }
    }
  }
  const int64_t o = dw_output_offset(g, od, oh, ow);
  y[cl ? (n * g.y_size() + o) * C + c : (n * C + c) * g.y_size() + o] = store_value<TY>(sum);
}

template <typename T, typename TY>
__global__ void __launch_bounds__(kDwThreads)
dw_gather_kernel(const T* __restrict__ x, const T* __restrict__ w, TY* __restrict__ y, DwGeom g, int64_t n_images,
                 int64_t C, bool cl) {
  const int64_t total = n_images * C * g.out_size();
  for (int64_t i = grid_start(); i < total; i += grid_step()) dw_gather_element<T, TY>(x, w, y, g, C, cl, i);
}

// Partial sum (slice, tap, channel) of the filter gradient: dy * x over the
// slice's outputs, in order, from global memory.
template <typename T>
__host__ __device__ __forceinline__ void dw_filter_element(const T* __restrict__ dy, const T* __restrict__ x,
                                                           typename Acc<T>::type* __restrict__ partials,
                                                           const DwGeom& g, const FilterSlices& f, int64_t C, bool cl,
                                                           int64_t i) {
  using A = typename Acc<T>::type;
  const int64_t K = g.kernel_size();
  const int64_t c = i % C, tap = (i / C) % K, slice = i / C / K;
  const int32_t kw = static_cast<int32_t>(tap % g.kernel[2]), kh = static_cast<int32_t>((tap / g.kernel[2]) % g.kernel[1]),
                kd = static_cast<int32_t>(tap / g.kernel[2] / g.kernel[1]);
  const int64_t n = slice / f.per_image, part = slice % f.per_image;
  int64_t lo[3] = {0, 0, 0}, hi[3] = {g.out[0], g.out[1], g.out[2]};
  const int d0 = 3 - g.nd;
  lo[d0] = part * f.rows;
  hi[d0] = lo[d0] + f.rows < hi[d0] ? lo[d0] + f.rows : hi[d0];
  A sum = A(0);
  for (int64_t od = lo[0]; od < hi[0]; ++od) {
    const int64_t id = od * g.stride[0] + int64_t{kd} * g.dil[0] - g.pad[0];
    if (id < 0 || id >= g.in[0]) continue;
    for (int64_t oh = lo[1]; oh < hi[1]; ++oh) {
      const int64_t ih = oh * g.stride[1] + int64_t{kh} * g.dil[1] - g.pad[1];
      if (ih < 0 || ih >= g.in[1]) continue;
      for (int64_t ow = lo[2]; ow < hi[2]; ++ow) {
        const int64_t iw = ow * g.stride[2] + int64_t{kw} * g.dil[2] - g.pad[2];
        if (iw < 0 || iw >= g.in[2]) continue;
        const int64_t s = (id * g.in[1] + ih) * g.in[2] + iw, o = (od * g.out[1] + oh) * g.out[2] + ow;
        const T xv = cl ? x[(n * g.in_size() + s) * C + c] : x[(n * C + c) * g.in_size() + s];
        const T dv = cl ? dy[(n * g.out_size() + o) * C + c] : dy[(n * C + c) * g.out_size() + o];
        sum += static_cast<A>(to_acc(dv)) * static_cast<A>(to_acc(xv));
      }
    }
  }
  partials[(slice * K + tap) * C + c] = sum;
}

template <typename T>
__global__ void __launch_bounds__(kDwThreads)
dw_filter_gather_kernel(const T* __restrict__ dy, const T* __restrict__ x, typename Acc<T>::type* __restrict__ partials,
                        DwGeom g, FilterSlices f, int64_t C, bool cl) {
  const int64_t total = f.count * g.kernel_size() * C;
  for (int64_t i = grid_start(); i < total; i += grid_step()) dw_filter_element<T>(dy, x, partials, g, f, C, cl, i);
}

// --- the filter gradient's second pass --------------------------------------------------

// dw[c * K + k] = the sum over slices s of partials[(s * K + k) * C + c], in a
// fixed order: block of 32 elements x kDwReduceLanes lanes, lane l sums slices
// l, l + kDwReduceLanes, ... (four sums in flight), then the lanes meet in a
// fixed pairwise tree. Deterministic: no atomics, no timing-dependent order.
constexpr int kDwReduceLanes = 32;

template <typename A>
__host__ __device__ __forceinline__ A dw_reduce_lane(const A* __restrict__ partials, int64_t elements, int64_t slices,
                                                     int64_t i, int32_t lane) {
  A acc[4] = {A(0), A(0), A(0), A(0)};
  for (int64_t p = lane; p < slices; p += 4 * kDwReduceLanes) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t q = p + u * kDwReduceLanes;
      if (q < slices) acc[u] += partials[q * elements + i];
    }
  }
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

template <typename T, typename A>
__global__ void __launch_bounds__(32 * kDwReduceLanes)
dw_filter_reduce_kernel(const A* __restrict__ partials, T* __restrict__ dw, int64_t C, int64_t K, int64_t slices) {
  __shared__ A sums[kDwReduceLanes][33];
  const int32_t xl = threadIdx.x, lane = threadIdx.y;
  const int64_t elements = C * K;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * 32 + xl;
  sums[lane][xl] = i < elements ? dw_reduce_lane(partials, elements, slices, i, lane) : A(0);
  __syncthreads();
  for (int32_t half = kDwReduceLanes / 2; half > 0; half /= 2) {
    if (lane < half) sums[lane][xl] += sums[lane + half][xl];
    __syncthreads();
  }
  if (lane == 0 && i < elements) {
    const int64_t k = i / C, c = i - k * C;
    dw[c * K + k] = store_value<T>(sums[0][xl]);
  }
}

}  // namespace im2col::cuda
