// Channels-first fold of 2-byte elements at unit stride where every
// dimension but the first keeps its extent (out[d] == in[d] for d >= 1, a
// "same" window: pad_lo + pad_hi == (T - 1) * dilation there). Then tap k
// reads, for the plane position p of x, the column entry p + shift[k] of its
// row, shift[k] the sum over dimensions of (pad_lo - j * dilation) times the
// plane's stride: four consecutive positions of x read four consecutive
// entries of each row, at any alignment.
//
// A thread sums four consecutive positions of one plane of x (an 8-byte
// store where the planes allow). For each tap it loads the three 4-byte
// words of the columns that hold its four entries, aligns them with one
// funnel shift a pair, replaces the entries of taps that read nothing (padding, or
// a line wrapped into the next) by -0 with one LOP3 a word, and widens them
// with a shift or an AND. The window fold (fold_cf_window.cuh) spends two
// 2-byte loads, a predicate pair and a -0 default a pair of entries; this
// spends under half the instructions an element (docs/optimization-log.md,
// step 124).
//
// Sums are those of the window fold: each element adds its taps in increasing
// order in float32, from x's value with accumulate, -0 for a tap that reads
// nothing, rounded once.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "columns/fold_cf_window.cuh"
#include "common/device_util.cuh"
#include "common/geometry.h"

namespace im2col::cuda {

constexpr int kShiftedRun = 4;  // positions a thread: one 8-byte group of 2-byte elements

struct FoldShiftedPlan {
  int32_t items = 0;              // threads of work: nc * C * runs
  int32_t plane = 0;              // positions of a plane of x (in_size)
  FastDiv runs_div;               // runs of kShiftedRun positions a plane
  FastDiv channels;               // C
  FastDiv dims[kMaxSpatial];      // in[d] for d = 1..ND-1 (unravel_fast)
  int32_t margin = 0;             // entries a thread's words reach beyond its block's rows, at most
  int64_t columns_end = 0;        // entries of the columns from the first block's start to the last row's end
};

// Whether the kernel applies: 2-byte elements (the caller's), T taps and
// stride 1 along every dimension, no lhs dilation, out[d] == in[d] for
// d >= 1, the whole columns, every index of the work and offset within an
// (n, c) block of the columns in 32 bits. Fills *p.
inline bool plan_fold_shifted(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc,
                              FoldShiftedPlan* p) {
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  constexpr int64_t T = kFoldWindowTaps;
  const int nd = g.nd;
  if (g.any_lhs_dilation || C <= 0 || nc <= 0) return false;
  int64_t reach = 0;  // the largest |shift| of a tap
  for (int d = nd - 1, stride = 1; d >= 0; stride *= static_cast<int>(g.in[d]), --d) {
    if (g.kernel[d] != T || g.stride[d] != 1 || (d > 0 && g.out[d] != g.in[d])) return false;
    if (g.in[d] > kMax || g.rhs_dilation[d] > kMax || g.pad_lo[d] > kMax || g.pad_lo[d] < -kMax) return false;
    const int64_t lo = g.pad_lo[d] - (T - 1) * g.rhs_dilation[d], hi = g.pad_lo[d];
    reach += std::max(lo < 0 ? -lo : lo, hi < 0 ? -hi : hi) * stride;
    if (reach > kMax / 4) return false;
  }
  if (lay.l0 != 0 || lay.lc != g.out_size || g.in_size > kMax / 4 || g.out_size > kMax) return false;
  if (lay.row_stride > (kMax / 2) / g.kernel_size) return false;
  const int64_t runs = (g.in_size + kShiftedRun - 1) / kShiftedRun;
  if (nc * C > kMax / runs) return false;
  p->items = static_cast<int32_t>(nc * C * runs);
  p->plane = static_cast<int32_t>(g.in_size);
  p->runs_div = FastDiv(runs);
  p->channels = FastDiv(C);
  for (int d = 1; d < nd; ++d) p->dims[d] = FastDiv(g.in[d]);
  // A thread's words reach up to reach + 1 entries before its block's rows
  // and, since x's first dimension may be longer than the columns', past them.
  p->margin = static_cast<int32_t>(reach + 2 * kShiftedRun + std::max<int64_t>(g.in_size - g.out_size, 0));
  p->columns_end = (nc - 1) * lay.image_stride + (C * g.kernel_size - 1) * lay.row_stride + lay.lc;
  return true;
}

// The 2-byte entries (lo, hi) of a word as float32.
template <typename TC>
__device__ __forceinline__ void widen_pair(uint32_t w, float& lo, float& hi) {
  if constexpr (std::is_same_v<TC, __nv_bfloat16>) {
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xffff0000u);
  } else {
    __half2 h;
    std::memcpy(&h, &w, sizeof(w));
    const float2 f = __half22float2(h);
    lo = f.x;
    hi = f.y;
  }
}

// The word mask of a pair of entries: 0xffff for each one a tap reads.
__device__ __forceinline__ uint32_t pair_mask(bool lo, bool hi) {
  return (lo ? 0x0000ffffu : 0u) | (hi ? 0xffff0000u : 0u);
}

template <int ND, typename TC, typename TX>
__global__ void __launch_bounds__(kThreads)
fold_cf_shifted_kernel(const TC* __restrict__ cols, TX* __restrict__ x, Geometry g, int64_t C, int64_t n0,
                       ColumnsLayout lay, FoldShiftedPlan p, bool accumulate, bool vector_store) {
  static_assert(sizeof(TC) == 2, "2-byte columns");
  constexpr int T = static_cast<int>(kFoldWindowTaps);
  constexpr int K = ND == 1 ? T : ND == 2 ? T * T : T * T * T;
  constexpr int KO = K / T;          // taps of the outer dimensions 0..ND-2
  constexpr int R = kShiftedRun, Wd = R / 2;  // positions, words a thread
  const int32_t row_stride = static_cast<int32_t>(lay.row_stride);
  const int64_t block = K * lay.row_stride;
  // Tap k's offset from a plane position to its entry in the block, as the
  // outer dimensions' part (with the row of the tap's first last-dimension
  // tap) plus the last dimension's part (loop invariant).
  int32_t outer_shift[KO], last_shift[T];
#pragma unroll
  for (int i = 0; i < KO; ++i) {
    int32_t s = i * T * row_stride, span = static_cast<int32_t>(g.in[ND - 1]);
#pragma unroll
    for (int d = ND - 2, ii = i; d >= 0; --d, ii /= T) {
      s += (static_cast<int32_t>(g.pad_lo[d]) - (ii % T) * static_cast<int32_t>(g.rhs_dilation[d])) * span;
      span *= static_cast<int32_t>(g.in[d]);
    }
    outer_shift[i] = s;
  }
#pragma unroll
  for (int j = 0; j < T; ++j)
    last_shift[j] = j * row_stride + static_cast<int32_t>(g.pad_lo[ND - 1]) -
                    j * static_cast<int32_t>(g.rhs_dilation[ND - 1]);
  TX* const x_images = x + n0 * C * g.in_size;
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < static_cast<uint32_t>(p.items);
       t += gridDim.x * blockDim.x) {
    int32_t plane, run, n, c;
    p.runs_div.divmod(static_cast<int32_t>(t), plane, run);  // plane: (n, c)
    p.channels.divmod(plane, n, c);
    const int32_t pos0 = run * R;
    // Per dimension and tap, which of the thread's positions the tap reads:
    // a word mask for each pair of them.
    uint32_t outer_mask[KO][Wd], last_mask[T][Wd];
    {
      bool ok[ND][T][R];
#pragma unroll
      for (int e = 0; e < R; ++e) {
        const bool in_plane = pos0 + e < p.plane;
        int32_t q[kMaxSpatial];
        unravel_fast<ND>(in_plane ? pos0 + e : 0, p.dims, q);
#pragma unroll
        for (int d = 0; d < ND; ++d) {
          int32_t o[T];
          bool okd[T];
          window_positions<T>(g, d, q[d], o, okd);
#pragma unroll
          for (int j = 0; j < T; ++j) ok[d][j][e] = okd[j] && (d < ND - 1 || in_plane);
        }
      }
#pragma unroll
      for (int w = 0; w < Wd; ++w) {
#pragma unroll
        for (int j = 0; j < T; ++j) last_mask[j][w] = pair_mask(ok[ND - 1][j][2 * w], ok[ND - 1][j][2 * w + 1]);
#pragma unroll
        for (int i = 0; i < KO; ++i) {
          uint32_t m = ~0u;
#pragma unroll
          for (int d = 0, span = KO / T; d < ND - 1; ++d, span /= T) {
            const int j = (i / span) % T;  // dimension d's tap
            m &= pair_mask(ok[d][j][2 * w], ok[d][j][2 * w + 1]);
          }
          outer_mask[i][w] = m;
        }
      }
    }
    const int64_t block_start = n * lay.image_stride + c * block;
    const TC* base = cols + block_start;
    keep_in_register(base);
    // Threads of the first and last blocks could reach outside the columns
    // with whole words: they load entry by entry.
    const bool edge = block_start < p.margin || block_start + block > p.columns_end - p.margin;
    float acc[R];
    TX* const xp = x_images + static_cast<int64_t>(plane) * p.plane + pos0;
    const bool whole = pos0 + R <= p.plane;
    if (accumulate && vector_store && whole) {
      const Pack<TX, R> old = *reinterpret_cast<const Pack<TX, R>*>(xp);
#pragma unroll
      for (int e = 0; e < R; ++e) acc[e] = to_acc(old.v[e]);
    } else {
#pragma unroll
      for (int e = 0; e < R; ++e) acc[e] = accumulate && pos0 + e < p.plane ? to_acc(xp[e]) : 0.f;
    }
    if (!edge) {
      // Words from base - odd0 (4-byte aligned); an entry's offset from there
      // gives its word (off >> 1) and, by its parity, the funnel shift that
      // aligns the pair read from two words (16 * (off & 1): SHF.R.W takes
      // its amount modulo 32, so off << 4).
      const int32_t odd0 = static_cast<int32_t>(reinterpret_cast<uintptr_t>(base) >> 1) & 1;
      const uint32_t* words_base = reinterpret_cast<const uint32_t*>(base - odd0);
      keep_in_register(words_base);
      const int32_t start = pos0 + odd0;
      // A slab of taps a time: their loads in flight together.
      constexpr int kSlab = K < 9 ? K : 9;
#pragma unroll
      for (int k0 = 0; k0 < K; k0 += kSlab) {
        uint32_t words[kSlab][Wd];
#pragma unroll
        for (int kk = 0; kk < kSlab; ++kk) {
          const int32_t off = outer_shift[(k0 + kk) / T] + last_shift[(k0 + kk) % T] + start;
          const uint32_t* w = words_base + (off >> 1);
          const uint32_t w0 = __ldg(w), w1 = __ldg(w + 1), w2 = __ldg(w + 2);
          const uint32_t bits = static_cast<uint32_t>(off) << 4;
          words[kk][0] = __funnelshift_r(w0, w1, bits);
          words[kk][1] = __funnelshift_r(w1, w2, bits);
        }
#pragma unroll
        for (int kk = 0; kk < kSlab; ++kk) {
          const int k = k0 + kk;
#pragma unroll
          for (int w = 0; w < Wd; ++w) {
            const uint32_t mask = outer_mask[k / T][w] & last_mask[k % T][w];
            const uint32_t v = (words[kk][w] & mask) | (0x80008000u & ~mask);  // -0 where the tap reads nothing
            float lo, hi;
            widen_pair<TC>(v, lo, hi);
            acc[2 * w] += lo;
            acc[2 * w + 1] += hi;
          }
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const TC* entry = base + (outer_shift[k / T] + last_shift[k % T] + pos0);
#pragma unroll
        for (int e = 0; e < R; ++e) {
          const bool reads = (outer_mask[k / T][e / 2] & last_mask[k % T][e / 2] & (0xffffu << (16 * (e % 2)))) != 0;
          acc[e] += reads ? to_acc(__ldg(entry + e)) : -0.f;
        }
      }
    }
    Pack<TX, R> out;
#pragma unroll
    for (int e = 0; e < R; ++e) out.v[e] = store_value<TX>(acc[e]);
    if (vector_store && whole) {
      *reinterpret_cast<Pack<TX, R>*>(xp) = out;
    } else {
#pragma unroll
      for (int e = 0; e < R; ++e)
        if (pos0 + e < p.plane) xp[e] = out.v[e];
    }
  }
}

}  // namespace im2col::cuda
