// The tensor-core depthwise filter gradient (plan and index maps in
// depthwise_mma_filter_plan.h): channels-last, 16-bit types, unit stride
// along W. A block takes 8 channels (a warp each) and a group of consecutive
// units (a band of dy rows of one W tile; W tile fastest, then band, image).
// For each unit it stages the input under the band's tile and the tile's dy
// rows channel-major (its first items loaded while the unit before
// multiplies), then each warp multiplies its channel's rows on the tensor
// cores into accumulators that are the window's taps, kept across the units
// (a unit that met an inf or NaN summed again output by output); at the end
// the block writes them as its group's partial sums. Staging, the direct
// sums and the write-back are per-thread code (the host tests run them); the
// warps' products run on the GPU only, their index maps are the host tests'.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/device_util.cuh"
#include "conv/depthwise/depthwise_mma.cuh"
#include "conv/depthwise/depthwise_mma_filter_plan.h"
#if defined(__CUDA_ARCH__)
#include "common/mma_sync.cuh"
#endif

namespace im2col::cuda {

struct DwMmaFilterUnit {
  int32_t img = 0, band = 0, wt = 0;
};

// Unit u's image, band and W tile.
__device__ __forceinline__ DwMmaFilterUnit dw_mma_filter_unit(const DwMmaFilter& m, int32_t u) {
  DwMmaFilterUnit k;
  m.by_tiles_w.divmod(u, u, k.wt);
  m.by_bands.divmod(u, k.img, k.band);
  return k;
}

// Accumulators of the tap rows (MROWS: 8, 16 or 32) and n-tiles a warp holds.
template <int MROWS>
constexpr int dw_mma_filter_mtiles() {
  return MROWS == 32 ? 2 : 1;
}

// A warp's accumulators: the m-tiles x n-tiles of its channel's taps.
template <int MT, int NT>
struct DwMmaFilterTaps {
  float v[MT][NT][4];
};

// The staged items of a unit: the input under its band's tile (ph rows x
// xcols pixels of 8 channels) then its dy rows (th x tw), one 16-byte vector
// each.
IM2COL_HD int32_t dw_mma_filter_items(const DwMmaFilter& m) { return m.ph * m.xcols + m.th * m.tw; }

// Item i of unit k (channels ch0 .. ch0 + 7): its vector (zeros outside the
// maps) and, in `at`, its element offset in the staged planes of channel
// ch0 (-1 past the items).
template <typename T>
__device__ __forceinline__ uint4 dw_mma_filter_fetch(const T* __restrict__ x, const T* __restrict__ dy, const DwGeom& g,
                                                     const DwMmaFilter& m, int64_t C, int64_t ch0,
                                                     const DwMmaFilterUnit& k, int32_t i, int32_t& at) {
  const int32_t x_items = m.ph * m.xcols;
  const bool is_x = i < x_items;
  int32_t r, c;
  if (is_x) m.by_xcols.divmod(i, r, c);
  else m.by_tw.divmod(i - x_items, r, c);
  // Pixel (r, c) of the input under the tile, or of the tile's dy rows.
  const int32_t h = is_x ? k.band * m.th * g.stride[1] - g.pad[1] + r : k.band * m.th + r;
  const int32_t w = is_x ? k.wt * m.tw - g.pad[2] + c : k.wt * m.tw + c;
  const int32_t H = is_x ? g.in[1] : g.out[1], W = is_x ? g.in[2] : g.out[2];
  at = i >= x_items + m.th * m.tw ? -1 : is_x ? r * m.rp + c : static_cast<int32_t>(m.dy_off) + r * m.dp + m.lead + c;
  if (at < 0 || static_cast<uint32_t>(h) >= static_cast<uint32_t>(H) || static_cast<uint32_t>(w) >= static_cast<uint32_t>(W))
    return make_uint4(0, 0, 0, 0);
  const T* src = is_x ? x : dy;
  return __ldg(reinterpret_cast<const uint4*>(src + ((int64_t{k.img} * H + h) * W + w) * C + ch0));
}

// A thread's P staged items in flight: items tid + (a0 + a) nthreads.
template <int P>
struct DwMmaFilterLoads {
  uint4 v[P];
  int32_t at[P];
};

template <typename T, int P>
__device__ __forceinline__ void dw_mma_filter_load(DwMmaFilterLoads<P>& l, const T* __restrict__ x,
                                                   const T* __restrict__ dy, const DwGeom& g, const DwMmaFilter& m,
                                                   int64_t C, int64_t ch0, const DwMmaFilterUnit& k, int32_t a0,
                                                   int32_t tid, int32_t nthreads) {
#pragma unroll
  for (int a = 0; a < P; ++a) l.v[a] = dw_mma_filter_fetch(x, dy, g, m, C, ch0, k, (a0 + a) * nthreads + tid, l.at[a]);
}

// Each loaded vector's 8 channels to their planes.
template <int P>
__device__ __forceinline__ void dw_mma_filter_scatter(uint16_t* xs, const DwMmaFilterLoads<P>& l, const DwMmaFilter& m) {
#pragma unroll
  for (int a = 0; a < P; ++a)
    if (l.at[a] >= 0) dw_mma_scatter(xs + l.at[a], l.v[a], l.at[a] < m.dy_off ? m.x_plane : m.dy_plane);
}

// Stages unit k: the P items a thread loaded ahead (`ahead`), then the
// rest, P at a time.
template <typename T, int P>
__device__ __forceinline__ void dw_mma_filter_stage(uint16_t* xs, const DwMmaFilterLoads<P>& ahead,
                                                    const T* __restrict__ x, const T* __restrict__ dy,
                                                    const DwGeom& g, const DwMmaFilter& m, int64_t C, int64_t ch0,
                                                    const DwMmaFilterUnit& k, int32_t tid, int32_t nthreads) {
  dw_mma_filter_scatter(xs, ahead, m);
  const int32_t items = dw_mma_filter_items(m);
  for (int32_t a0 = P; a0 * nthreads < items; a0 += P) {
    DwMmaFilterLoads<P> more;
    dw_mma_filter_load(more, x, dy, g, m, C, ch0, k, a0, tid, nthreads);
    dw_mma_filter_scatter(xs, more, m);
  }
}

// Zeros what the products read and no band stages: the input columns from
// xcols to the k-steps' end of every row, the dy columns before `lead` and
// from lead + tw on.
__device__ __forceinline__ void dw_mma_filter_zero_margins(uint16_t* xs, uint16_t* ds, const DwMmaFilter& m,
                                                           int32_t tid, int32_t nthreads) {
  const int32_t x_tail = 16 * m.ksteps - m.xcols, dy_side = m.dp - m.tw;
  const int32_t x_items = kDwMmaFilterChannels * m.ph * x_tail;
  const int32_t dy_items = kDwMmaFilterChannels * m.th * dy_side;
  for (int32_t i = tid; i < x_items; i += nthreads) {
    const int32_t row = i / x_tail;  // over the planes' rows
    xs[row * m.rp + m.xcols + (i - row * x_tail)] = 0;
  }
  for (int32_t i = tid; i < dy_items; i += nthreads) {
    const int32_t row = i / dy_side, j = i - row * dy_side;
    ds[row * m.dp + (j < m.lead ? j : j + m.tw)] = 0;
  }
}

// Calls f(mt, nt, v, kh, kw) for each of lane l's accumulators (m-tile mt,
// n-tile nt, register v) that holds a tap (kh, kw) of the window.
template <int MT, int NT, typename F>
__device__ __forceinline__ void dw_mma_filter_each_tap(const DwGeom& g, int32_t lane, F&& f) {
#pragma unroll
  for (int32_t mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int32_t nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int32_t v = 0; v < 4; ++v) {
        const int32_t kh = dw_mma_filter_c_kh(mt, lane, v), kw = dw_mma_filter_c_kw(nt, lane, v);
        if (kh < g.kernel[1] && kw < g.kernel[2]) f(mt, nt, v, kh, kw);
      }
}

// Lane l's accumulators of one band summed again output by output, over the
// band's `rows` x `cols` outputs (the products lax computes) from the
// staged planes of its channel: for bands whose products met an inf or NaN.
template <typename T, int MT, int NT>
__device__ __forceinline__ void dw_mma_filter_direct(const uint16_t* xp, const uint16_t* dyp, const DwGeom& g,
                                                     const DwMmaFilter& m, int32_t rows, int32_t cols, int32_t lane,
                                                     float (&acc)[MT][NT][4]) {
  dw_mma_filter_each_tap<MT, NT>(g, lane, [&](int32_t mt, int32_t nt, int32_t v, int32_t kh, int32_t kw) {
    float sum = 0.f;
    for (int32_t r = 0; r < rows; ++r) {
      const uint16_t* xr = xp + (r * g.stride[1] + kh * g.dil[1]) * m.rp + kw * g.dil[2];
      const uint16_t* dr = dyp + r * m.dp + m.lead;
      for (int32_t c = 0; c < cols; ++c) sum += dw_mma_value<T>(xr[c]) * dw_mma_value<T>(dr[c]);
    }
    acc[mt][nt][v] += sum;
  });
}

// Writes lane l's accumulators of channel c (the window's taps, not those
// past it) as slice `slice`'s partial sums: partials[(slice K + k) C + c].
template <int MT, int NT>
__device__ __forceinline__ void dw_mma_filter_write(float* __restrict__ partials, const float (&acc)[MT][NT][4],
                                                    const DwGeom& g, int64_t slice, int64_t C, int64_t c,
                                                    int32_t lane) {
  const int64_t K = g.kernel_size();
  dw_mma_filter_each_tap<MT, NT>(g, lane, [&](int32_t mt, int32_t nt, int32_t v, int32_t kh, int32_t kw) {
    partials[(slice * K + int64_t{kh} * g.kernel[2] + kw) * C + c] = acc[mt][nt][v];
  });
}

#if defined(__CUDA_ARCH__)
// One band's products of the warp's channel (input plane xp, dy plane dyp)
// into acc: for each of its `rows` dy rows and each k-step of 16 input
// columns, A of each m-tile by ldmatrix (x2 for windows of at most 8 tap
// rows, the other 8 rows zero), B of each n-tile element by element.
template <typename T, int MROWS, int NT>
__device__ __forceinline__ void dw_mma_filter_products(const uint16_t* xp, const uint16_t* dyp, const DwGeom& g,
                                                       const DwMmaFilter& m, int32_t rows, int32_t lane,
                                                       float (&acc)[dw_mma_filter_mtiles<MROWS>()][NT][4]) {
  constexpr int MT = dw_mma_filter_mtiles<MROWS>();
  constexpr bool kPair = MROWS == 8;
  uint32_t a_addr[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    a_addr[mt] = static_cast<uint32_t>(__cvta_generic_to_shared(xp)) +
                 2u * static_cast<uint32_t>(dw_mma_filter_a_offset(m, g, mt, lane, kPair));
  int32_t b_off[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) b_off[nt] = dw_mma_filter_b_offset(m, g, nt, lane, 0);
  const uint32_t a_row_step = 2u * static_cast<uint32_t>(g.stride[1] * m.rp);
  for (int32_t h = 0; h < rows; ++h) {
    const uint16_t* drow = dyp + h * m.dp;
    for (int32_t s = 0; s < m.ksteps; ++s) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (kPair) {
          uint32_t pair[2];
          implicit::load_matrix_pair(pair, a_addr[mt] + 32u * static_cast<uint32_t>(s));
          a[mt][0] = pair[0];
          a[mt][1] = 0;
          a[mt][2] = pair[1];
          a[mt][3] = 0;
        } else {
          implicit::load_matrices(a[mt], a_addr[mt] + 32u * static_cast<uint32_t>(s));
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint16_t* b = drow + b_off[nt] + 16 * s;
        const uint32_t bf[2] = {uint32_t{b[0]} | (uint32_t{b[1]} << 16), uint32_t{b[8]} | (uint32_t{b[9]} << 16)};
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) implicit::Mma<T>::run(acc[mt][nt], a[mt], bf);
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) a_addr[mt] += a_row_step;
  }
}
#endif

// MROWS tap rows (8: ldmatrix x2; 16; 32: two m-tiles) and NT n-tiles of 8
// tap columns a warp; MINBLOCKS blocks an SM, the launch bound that sizes
// the registers.
template <typename T, int MROWS, int NT, int MINBLOCKS>
__global__ void __launch_bounds__(kDwMmaFilterThreads, MINBLOCKS)
dw_mma_filter_kernel(const T* __restrict__ dy, const T* __restrict__ x, float* __restrict__ partials, const DwGeom g,
                     const DwMmaFilter m, int64_t C) {
  constexpr int MT = dw_mma_filter_mtiles<MROWS>();
  extern __shared__ __align__(16) unsigned char dw_mma_filter_smem[];
  uint16_t* xs = reinterpret_cast<uint16_t*>(dw_mma_filter_smem);
  uint16_t* ds = xs + m.dy_off;  // the dy planes
  // Channel run fastest: neighbouring blocks read the same pixels.
  int32_t group, run;
  m.by_runs.divmod(static_cast<int32_t>(blockIdx.x), group, run);
  const int32_t tid = static_cast<int32_t>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t ch0 = int64_t{run} * kDwMmaFilterChannels;
  dw_mma_filter_zero_margins(xs, ds, m, tid, kDwMmaFilterThreads);
  DwMmaFilterTaps<MT, NT> acc{};
  const int32_t first = group * m.per_group, last = min(m.units, first + m.per_group);
  const uint16_t* xp = xs + warp * m.x_plane;
  const uint16_t* dyp = ds + warp * m.dy_plane;
  // Each unit's first items are loaded while the unit before multiplies.
  DwMmaFilterLoads<kDwMmaFilterAhead> ahead;
  DwMmaFilterUnit k = dw_mma_filter_unit(m, first);
  dw_mma_filter_load(ahead, x, dy, g, m, C, ch0, k, 0, tid, kDwMmaFilterThreads);
  for (int32_t u = first; u < last; ++u) {
    const int32_t oh0 = k.band * m.th, ow0 = k.wt * m.tw;
    __syncthreads();  // the last unit's products are done
    dw_mma_filter_stage(xs, ahead, x, dy, g, m, C, ch0, k, tid, kDwMmaFilterThreads);
    __syncthreads();
    if (u + 1 < last) {
      k = dw_mma_filter_unit(m, u + 1);
      dw_mma_filter_load(ahead, x, dy, g, m, C, ch0, k, 0, tid, kDwMmaFilterThreads);
    }
    const int32_t rows = min(m.th, g.out[1] - oh0), cols = min(m.tw, g.out[2] - ow0);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // ldmatrix, mma.sync
    const DwMmaFilterTaps<MT, NT> before = acc;
    dw_mma_filter_products<T, MROWS, NT>(xp, dyp, g, m, rows, lane, acc.v);
    float total = 0.f;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        total += (acc.v[mt][nt][0] + acc.v[mt][nt][1]) + (acc.v[mt][nt][2] + acc.v[mt][nt][3]);
    // A non-finite accumulator (rarely a finite overflow) marks a band whose
    // products met an inf or NaN: summed again output by output.
    if (__any_sync(0xffffffffu, !isfinite(total))) {
      acc = before;
      dw_mma_filter_direct<T>(xp, dyp, g, m, rows, cols, lane, acc.v);
    }
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
  }
  dw_mma_filter_write(partials, acc.v, g, group, C, ch0 + warp, lane);
}

}  // namespace im2col::cuda
