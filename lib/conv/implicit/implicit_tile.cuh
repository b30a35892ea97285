// What the implicit-GEMM kernels share (implicit_gemm.cu: mma.sync, Ampere
// and newer; implicit_gemm_sm90.cu: wgmma, Hopper): the kernel parameters, the
// gather of a k-tile of the columns and the filter rows into shared memory,
// and the store of accumulator rows.
//
// A block computes a BM x BN tile of one group's y (BM positions m, BN output
// channels) in k-tiles of 128 bytes of the reduction (kk): 32 float32 or 64
// half elements. Each k-tile of A (the columns, gathered from x) and of B (the
// filter rows) lands in shared memory by cp.async, 16 bytes per copy. A
// 16-byte chunk of kk is one run of channels of one tap (the channels per
// group are a multiple of the vector), so one bounds check covers it; padding
// reads as zeros (cp.async with source size 0).
//
// Shared rows are 8 chunks of 16 bytes, chunk j of row r stored at j ^ (r % 8):
// the 8 rows an ldmatrix phase reads hit 8 distinct bank groups, and it is
// the 128-byte swizzle of Hopper's shared-memory matrix descriptors.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/device_info.h"
#include "common/device_util.cuh"
#include "common/geometry.h"
#include "conv/implicit/implicit_gemm.h"

namespace im2col::cuda::implicit {

constexpr int kRowBytes = 128;
constexpr int kChunks = kRowBytes / 16;

// The window and channels of an implicit GEMM's call: every spatial quantity
// as 3-D (leading dimensions of extent 1), in 32 bits (fits_32_bits holds for
// every geometry the handlers accept). Shared by the forward's Params and the
// filter gradient's; set_window_3d fills the spatial part.
struct WindowParams {
  int32_t L, in_size;
  int32_t in[3], stride[3], dilation[3], pad[3];
  FastDiv out_w, out_h;       // output position -> coordinates
  FastDiv kernel_w, kernel_h;  // tap -> coordinates
  FastDiv cg_div;             // kk -> (tap, channel)
  int32_t C, Cg, O, Og, Kg;   // Kg = taps * Cg, the reduction length
  int32_t nd, images;         // spatial dimensions (1-3) and images of the call
  int32_t out[3], kernel[3];  // output and window extents (3-D view)
};

struct Params : WindowParams {
  const char* x;
  const char* w;
  void* y;
  int64_t m_total;  // images * L
  // OutputPlacement (3-D view): output position (od, oh, ow) is y's position
  // y_first + y_step * (od, oh, ow) of extents y_extent, y_L per image.
  int32_t y_L, y_extent[3], y_first[3], y_step[3];
  bool y_cl, y_pairs;
  int32_t splits;   // parts of the reduction (blockIdx.z = group * splits + part)
  float* partials;  // where the parts go when splits > 1
};

// The convolutions of one launch (kMaxPasses in implicit_gemm.h; the phases
// of a strided input gradient): their BM-row tiles interleaved along
// blockIdx.x (block_pass); all share Og, groups and splits. Kernels take it
// __grid_constant__, so that indexing it by pass reads their parameters in
// place rather than copying them.
struct Passes {
  Params pass[kMaxPasses];
  int32_t count;

  // BM-row tiles of the pass with the most.
  int64_t most_tiles(int64_t bm) const {
    int64_t t = 0;
    for (int i = 0; i < count; ++i) t = std::max<int64_t>(t, (pass[i].m_total + bm - 1) / bm);
    return t;
  }
  // BM-row tiles of all passes.
  int64_t tiles(int64_t bm) const {
    int64_t t = 0;
    for (int i = 0; i < count; ++i) t += (pass[i].m_total + bm - 1) / bm;
    return t;
  }
};

// This block's pass and the first row m0 of its tile in that pass, or -1
// where that pass has no such tile (the block then exits). Block b takes tile
// b / count of pass b % count: the phases of a strided input gradient write
// each region of y at about the same time, so that their stores, stride apart
// in y, fill each other's sectors in L2 before they go to memory (pass after
// pass, each left its sectors part-written: docs/optimization-log.md, step 40).
template <int BM>
__device__ __forceinline__ int block_pass(const Passes& ps, int64_t& m0) {
  const int i = static_cast<int>(blockIdx.x % static_cast<unsigned>(ps.count));
  m0 = static_cast<int64_t>(blockIdx.x / static_cast<unsigned>(ps.count)) * BM;
  return m0 < ps.pass[i].m_total ? i : -1;
}

// Whether the Hopper kernels' tensor-memory copies can read a pass's
// operands: channels per group in whole 128-byte k-tiles (one tap each), at
// least one image, x and the filter rows on 16-byte boundaries.
template <typename T>
inline bool tma_operands_fit(const Params& p) {
  constexpr int BKE = kRowBytes / sizeof(T);
  return p.Cg % BKE == 0 && p.images >= 1 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.w) % 16 == 0;
}

// The Hopper kernels for T inputs and TY outputs (implicit_gemm_sm90.cu);
// cudaErrorNotSupported where they were not compiled (no sm_90a target).
template <typename T, typename TY>
cudaError_t launch_sm90(const Passes& ps, int64_t groups, int multiprocessors, cudaStream_t stream);

// The Hopper kernel for unit-stride windows from staged halos
// (implicit_halo_sm90.cu); cudaErrorNotSupported where it does not apply.
template <typename T, typename TY>
cudaError_t launch_halo_sm90(const Passes& ps, int64_t groups, int multiprocessors,
                             cudaStream_t stream);

// Launches `kernel` on `grid` with `bytes` of dynamic shared memory.
template <typename Kernel, typename... Args>
cudaError_t launch_with_shared(Kernel kernel, dim3 grid, int threads, int bytes,
                               cudaStream_t stream, const Args&... args) {
  // No stream work, so it is safe under graph capture.
  if (auto e = allow_shared_bytes(reinterpret_cast<const void*>(kernel), bytes); e != cudaSuccess)
    return e;
  kernel<<<grid, threads, bytes, stream>>>(args...);
  return cudaGetLastError();
}

// Launches an implicit-GEMM kernel with `bytes` of dynamic shared memory on
// its grid: BM x BN tiles of each group's y for every pass, and the parts of
// a split reduction (blockIdx.z = group * splits + part).
template <typename Kernel, typename... Args>
cudaError_t launch_tiles(Kernel kernel, Passes ps, int64_t groups, int bm, int bn, int threads,
                         int bytes, cudaStream_t stream, const Args&... args) {
  const int64_t tiles = ps.most_tiles(bm) * ps.count;  // block_pass's interleave
  if (tiles >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>((ps.pass[0].Og + bn - 1) / bn),
                  static_cast<unsigned>(groups * ps.pass[0].splits));
  return launch_with_shared(kernel, grid, threads, bytes, stream, ps, args...);
}

// The spatial fields of p from g.
inline void set_window_3d(const Geometry& g, WindowParams& p) {
  const int lead = 3 - g.nd;
  for (int d = 0; d < 3; ++d) {
    const int s = d - lead;
    const bool real = s >= 0;
    p.in[d] = static_cast<int32_t>(real ? g.in[s] : 1);
    p.stride[d] = static_cast<int32_t>(real ? g.stride[s] : 1);
    p.dilation[d] = static_cast<int32_t>(real ? g.rhs_dilation[s] : 1);
    p.pad[d] = static_cast<int32_t>(real ? g.pad_lo[s] : 0);
    p.kernel[d] = static_cast<int32_t>(real ? g.kernel[s] : 1);
    p.out[d] = static_cast<int32_t>(real ? g.out[s] : 1);
  }
  p.nd = static_cast<int32_t>(g.nd);
  p.L = static_cast<int32_t>(g.out_size);
  p.in_size = static_cast<int32_t>(g.in_size);
  p.out_w = FastDiv(p.out[2]);
  p.out_h = FastDiv(p.out[1]);
  p.kernel_w = FastDiv(p.kernel[2]);
  p.kernel_h = FastDiv(p.kernel[1]);
}

// y's position per image of output position (od, oh, ow).
__device__ __forceinline__ int32_t placed(const Params& p, int32_t od, int32_t oh, int32_t ow) {
  return ((p.y_first[0] + p.y_step[0] * od) * p.y_extent[1] + p.y_first[1] + p.y_step[1] * oh) *
             p.y_extent[2] +
         p.y_first[2] + p.y_step[2] * ow;
}

// y's position per image of output position l.
__device__ __forceinline__ int32_t placed(const Params& p, int32_t l) {
  int32_t rest, od, oh, ow;
  p.out_w.divmod(l, rest, ow);
  p.out_h.divmod(rest, od, oh);
  return placed(p, od, oh, ow);
}

// The channel fields of p: n images of c channels in, o out, in groups, for a
// window of `taps` taps.
inline void set_channels(WindowParams& p, int64_t n, int64_t c, int64_t o, int64_t groups,
                         int64_t taps) {
  const int64_t cg = c / groups, og = o / groups;
  p.images = static_cast<int32_t>(n);
  p.cg_div = FastDiv(cg);
  p.C = static_cast<int32_t>(c);
  p.Cg = static_cast<int32_t>(cg);
  p.O = static_cast<int32_t>(o);
  p.Og = static_cast<int32_t>(og);
  p.Kg = static_cast<int32_t>(cg * taps);
}

// Reduction index kk = (tap, channel c) of the implicit GEMMs: c and the tap's
// displacement per dimension (3-D view, times the dilation).
template <typename P>
__device__ __forceinline__ void tap_of(const P& p, int32_t kk, int32_t& c, int32_t (&disp)[3]) {
  int32_t tap, rest, kd, kh, kw;
  p.cg_div.divmod(kk, tap, c);
  p.kernel_w.divmod(tap, rest, kw);
  p.kernel_h.divmod(rest, kd, kh);
  disp[0] = kd * p.dilation[0];
  disp[1] = kh * p.dilation[1];
  disp[2] = kw * p.dilation[2];
}

// The pixel (image * in_size + spatial position) that window origin o (per
// dimension, and the image in o.w) displaced by disp reads, and whether it
// lies inside the image (no padding).
template <typename P>
__device__ __forceinline__ bool pixel_at(const P& p, int4 o, const int32_t (&disp)[3],
                                         int64_t& pixel) {
  const int32_t zd = o.x + disp[0], zh = o.y + disp[1], zw = o.z + disp[2];
  const uint32_t spatial =
      (static_cast<uint32_t>(zd) * p.in[1] + static_cast<uint32_t>(zh)) * p.in[2] +
      static_cast<uint32_t>(zw);
  pixel = static_cast<int64_t>(o.w) * p.in_size + spatial;
  return static_cast<uint32_t>(zd) < static_cast<uint32_t>(p.in[0]) &&
         static_cast<uint32_t>(zh) < static_cast<uint32_t>(p.in[1]) &&
         static_cast<uint32_t>(zw) < static_cast<uint32_t>(p.in[2]);
}

// The cp.async ring of the mma.sync kernels: k-tile kt's copies (load(kt,
// slot), slot = kt % STAGES) are issued STAGES - 1 k-tiles ahead of its
// multiply (multiply(slot)). The barrier at the top of each iteration makes
// k-tile kt visible to all and frees the slot of kt - 1 for the next copies;
// issued(kt) runs once k-tile kt + STAGES - 1's copies are issued, before kt
// is multiplied.
template <int STAGES, typename Load, typename Issued, typename Multiply>
__device__ __forceinline__ void cp_async_ring(int k_tiles, Load load, Issued issued,
                                              Multiply multiply) {
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load(s, s);
    commit_copies();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    wait_copies<STAGES - 2>();
    __syncthreads();
    const int next = kt + STAGES - 1;
    if (next < k_tiles) load(next, next % STAGES);
    commit_copies();
    issued(kt);
    multiply(kt % STAGES);
  }
  wait_copies<0>();
}

// Bytes of shared memory besides the tiles: each row's window origin and
// position.
template <int BM>
constexpr int row_bytes() {
  return BM * (sizeof(int4) + sizeof(int2));
}

// Each row's window origin (o * stride - pad per dimension, and the image)
// and (image, y's position). Rows past the end repeat the last position's
// origin (valid reads) and have image -1 (never stored: store_rows).
template <int BM, int THREADS>
__device__ __forceinline__ void prepare_rows(const Params& p, int64_t m0, int4* origins,
                                             int2* positions) {
  for (int r = threadIdx.x; r < BM; r += THREADS) {
    const int64_t m = m0 + r < p.m_total ? m0 + r : p.m_total - 1;
    const int64_t image = m / p.L;
    const int32_t l = static_cast<int32_t>(m - image * p.L);
    int32_t rest, od, oh, ow;
    p.out_w.divmod(l, rest, ow);
    p.out_h.divmod(rest, od, oh);
    origins[r] = make_int4(od * p.stride[0] - p.pad[0], oh * p.stride[1] - p.pad[1],
                           ow * p.stride[2] - p.pad[2], static_cast<int32_t>(image));
    positions[r] = make_int2(m0 + r < p.m_total ? static_cast<int32_t>(image) : -1,
                             placed(p, od, oh, ow));
  }
}

// The copies of one thread into a k-tile: chunk `chunk` of rows
// row0 + ROWS_PER_PASS * i of A and of B.
template <typename T, int BM, int BN, int THREADS>
struct TileLoader {
  static constexpr int ROWS_PER_PASS = THREADS / kChunks;
  static constexpr int VEC = 16 / sizeof(T);
  static constexpr int BKE = kRowBytes / sizeof(T);  // elements per k-tile
  static_assert(BM % ROWS_PER_PASS == 0 && BN % ROWS_PER_PASS == 0 && ROWS_PER_PASS % 8 == 0,
                "tile shape");

  const Params& p;
  const int4* origins;
  const T* x;
  const T* w;
  int32_t n0;
  int chunk, row0, stored_chunk;
  int k_begin, k_tiles;

  __device__ __forceinline__ TileLoader(const Params& params, const int4* row_origins, int group,
                                        int split, int32_t first_channel)
      : p(params), origins(row_origins), n0(first_channel) {
    chunk = threadIdx.x % kChunks;
    row0 = threadIdx.x / kChunks;
    stored_chunk = chunk ^ (row0 % 8);  // the same for every row it copies
    x = reinterpret_cast<const T*>(p.x) + static_cast<int64_t>(group) * p.Cg;
    w = reinterpret_cast<const T*>(p.w) + static_cast<int64_t>(group) * p.Og * p.Kg;
    const int all_tiles = (p.Kg + BKE - 1) / BKE, per_split = (all_tiles + p.splits - 1) / p.splits;
    k_begin = split * per_split;
    k_tiles = max(0, min(all_tiles, k_begin + per_split) - k_begin);
  }

  // k-tile kt of this block's part into a ([BM][kChunks]) and b ([BN][kChunks]).
  __device__ __forceinline__ void load(uint4* a, uint4* b, int kt) const {
    const int32_t kk = (k_begin + kt) * BKE + chunk * VEC;
    const bool k_valid = kk < p.Kg;
    int32_t ch, disp[3];
    tap_of(p, kk, ch, disp);
#pragma unroll
    for (int i = 0; i < BM / ROWS_PER_PASS; ++i) {
      const int r = row0 + ROWS_PER_PASS * i;
      int64_t pixel;
      const bool valid = pixel_at(p, origins[r], disp, pixel) && k_valid;
      copy_async(shared_address(a + r * kChunks + stored_chunk),
                 valid ? static_cast<const void*>(x + pixel * p.C + ch) : p.x, valid);
    }
#pragma unroll
    for (int i = 0; i < BN / ROWS_PER_PASS; ++i) {
      const int r = row0 + ROWS_PER_PASS * i;
      const bool valid = k_valid && n0 + r < p.Og;
      copy_async(shared_address(b + r * kChunks + stored_chunk),
                 valid ? static_cast<const void*>(w + static_cast<int64_t>(n0 + r) * p.Kg + kk) : p.w,
                 valid);
    }
  }
};

template <typename TY>
__device__ __forceinline__ void store_pair(TY* dst, float a, float b) {
  if constexpr (std::is_same_v<TY, float>) {
    *reinterpret_cast<float2*>(dst) = make_float2(a, b);
  } else if constexpr (std::is_same_v<TY, __half>) {
    *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(a, b);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a, b);
  }
}

// Stores a warp's 16 x (8 * NT) accumulators in the m16n8 layout: value v of
// n-tile j at row r0 + lane / 4 + 8 * (v / 2), column c0 + 8 * j + 2 * (lane % 4)
// + v % 2 of the block's tile (rows from m0, columns from n0); rows whose
// position has image -1 are not stored. With splits, float32 partial sums of
// this block's part instead.
template <typename TY, int NT>
__device__ __forceinline__ void store_rows(const Params& p, const float (&acc)[NT][4], int r0,
                                           int c0, int64_t m0, int32_t n0, int group, int split,
                                           const int2* positions) {
  const int lane = threadIdx.x & 31;
  TY* y = static_cast<TY*>(p.y);
  const int32_t channel0 = group * p.Og;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + h * 8 + (lane >> 2);
    const int2 at = positions[r];
    if (at.x < 0) continue;
    if (p.splits > 1) {
      float* row = p.partials + (split * p.m_total + m0 + r) * p.O + channel0;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int32_t col = n0 + c0 + j * 8 + 2 * (lane & 3);
        if (col < p.Og) row[col] = acc[j][2 * h];
        if (col + 1 < p.Og) row[col + 1] = acc[j][2 * h + 1];
      }
    } else if (p.y_cl) {
      TY* row = y + (static_cast<int64_t>(at.x) * p.y_L + at.y) * p.O + channel0;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int32_t col = n0 + c0 + j * 8 + 2 * (lane & 3);
        const float v0 = acc[j][2 * h], v1 = acc[j][2 * h + 1];
        if (p.y_pairs) {
          if (col < p.Og) store_pair(row + col, v0, v1);
        } else {
          if (col < p.Og) row[col] = store_value<TY>(v0);
          if (col + 1 < p.Og) row[col + 1] = store_value<TY>(v1);
        }
      }
    } else {
      TY* first = y + (static_cast<int64_t>(at.x) * p.O + channel0) * p.y_L + at.y;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int32_t col = n0 + c0 + j * 8 + 2 * (lane & 3);
        if (col < p.Og) first[static_cast<int64_t>(col) * p.y_L] = store_value<TY>(acc[j][2 * h]);
        if (col + 1 < p.Og)
          first[static_cast<int64_t>(col + 1) * p.y_L] = store_value<TY>(acc[j][2 * h + 1]);
      }
    }
  }
}

}  // namespace im2col::cuda::implicit
