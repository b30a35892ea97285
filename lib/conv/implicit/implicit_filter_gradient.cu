// The implicit-GEMM filter gradient (implicit_filter_gradient.h).
//
// A block computes a BO x BKK tile of one group's dw (BO output channels, BKK
// of the reduction kk of the forward) over one part of the positions m, BP
// positions per k-tile. Both operands are channels-last, so a k-tile lands in
// shared memory as rows of positions with channels contiguous: dy's rows
// (BO channels) and the columns' rows (BKK of kk, gathered from x with zeros
// for padding; a 16-byte chunk of kk is a run of channels of one tap). Rows
// are split into panels of 128 bytes carrying the swizzle of
// implicit_tile.cuh. That is the transpose of what mma.sync's fragments hold
// (the reduction runs along rows), which ldmatrix.trans undoes for half types
// and single 32-bit loads for float32. On Hopper, for half types where each
// panel of the columns is one tap and a run of channels, TMA copies fill the
// k-tiles in place of every thread's gather (filter_gradient_tma_kernel).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/device_util.cuh"
#include "common/hopper.cuh"
#include "common/mma_sync.cuh"
#include "common/tensor_maps.h"
#include "conv/implicit/implicit_filter_gradient.h"
#include "conv/implicit/implicit_gemm.h"
#include "conv/implicit/implicit_tile.cuh"

namespace im2col::cuda {
namespace {

using namespace implicit;

constexpr int kFilterPositions = 32;  // positions per k-tile

struct FilterParams : WindowParams {
  const char* x;
  const char* dy;
  float* partials;
  int32_t m_total;    // images * L
  FastDiv positions;  // m -> (image, position)
  int32_t splits, per_split;  // parts of the positions, positions per part
  bool accumulate;
};

// Positions [begin, end) of part `split`; parts are whole k-tiles.
struct Part {
  int32_t begin, end;
  __device__ __forceinline__ Part(const FilterParams& p, int split) {
    const int64_t first = static_cast<int64_t>(split) * p.per_split, total = p.m_total;
    begin = static_cast<int32_t>(first < total ? first : total);
    end = static_cast<int32_t>(first + p.per_split < total ? first + p.per_split : total);
  }
  template <int BP>
  __device__ __forceinline__ int k_tiles() const {
    return end > begin ? (end - begin + BP - 1) / BP : 0;
  }
};

// Where chunk j of row r of a 128-byte panel is stored. Half types: the 8
// consecutive rows an ldmatrix.trans phase reads at one chunk hit 8 bank
// groups (TMA's 128-byte swizzle). float32: a warp's 32-bit loads read 4
// consecutive rows at 2 adjacent chunks, which j ^ 2r spreads over all 32
// banks (TMA copies could only write j ^ r: 2-way conflicts, and float32
// measured slower there; docs/optimization-log.md, step 26).
template <typename T>
__device__ __forceinline__ int stored_chunk(int r, int j) {
  return std::is_same_v<T, float> ? j ^ ((2 * r) & 7) : j ^ (r & 7);
}

template <typename T, int BO, int BKK, int BP, int STAGES>
constexpr int filter_shared_bytes() {
  return STAGES * BP * ((BO + BKK) * static_cast<int>(sizeof(T)) + static_cast<int>(sizeof(int4)));
}


// The copies of one thread into a k-tile: chunk (panel, j) of rows
// row0 + ROWS_PER_PASS * i of dy's tile and of the columns' tile. Each row's
// window origin is computed once per k-tile (origins) rather than by every
// thread that copies a chunk of it.
template <typename T, int BO, int BKK, int BP, int THREADS>
struct FilterLoader {
  static constexpr int E = kRowBytes / static_cast<int>(sizeof(T));  // elements per panel row
  static constexpr int VEC = 16 / static_cast<int>(sizeof(T));
  static constexpr int A_COLS = BO / E * kChunks, B_COLS = BKK / E * kChunks;
  static constexpr int A_RPP = THREADS / A_COLS, B_RPP = THREADS / B_COLS;  // rows per pass
  static_assert(THREADS % A_COLS == 0 && THREADS % B_COLS == 0 && BP % A_RPP == 0 &&
                    BP % B_RPP == 0 && BP <= THREADS,
                "tile shape");

  const FilterParams& p;
  const T* dy;  // this thread's channel of the block's first dy row
  const T* x;   // this thread's channel in the group
  int a_row0, a_at, b_row0, b_at, b_chunk, a_chunk;
  bool a_valid, b_valid;
  int32_t disp[3];  // the thread's tap displacement, less the padding
  int32_t m_begin, m_end;

  __device__ __forceinline__ FilterLoader(const FilterParams& params, int group, int split,
                                          int32_t o0, int32_t kk0)
      : p(params) {
    const int ta = threadIdx.x % A_COLS, tb = threadIdx.x % B_COLS;
    a_row0 = threadIdx.x / A_COLS;
    b_row0 = threadIdx.x / B_COLS;
    a_chunk = ta % kChunks;
    b_chunk = tb % kChunks;
    a_at = ta / kChunks * BP;  // panel offset in rows
    b_at = tb / kChunks * BP;
    const int32_t o = o0 + ta / kChunks * E + a_chunk * VEC;
    a_valid = o < p.Og;
    dy = reinterpret_cast<const T*>(p.dy) + static_cast<int64_t>(group) * p.Og + o;
    const int32_t kk = kk0 + tb / kChunks * E + b_chunk * VEC;
    b_valid = kk < p.Kg;
    int32_t ch;
    tap_of(p, b_valid ? kk : 0, ch, disp);
    for (int d = 0; d < 3; ++d) disp[d] -= p.pad[d];
    x = reinterpret_cast<const T*>(p.x) + static_cast<int64_t>(group) * p.Cg + ch;
    const Part part(p, split);
    m_begin = part.begin;
    m_end = part.end;
  }

  // The BP rows' window origins of k-tile kt (before the tap displacement)
  // and image, by the first BP threads.
  __device__ __forceinline__ void prepare(int4* origins, int kt) const {
    if (threadIdx.x >= BP) return;
    const int32_t m = m_begin + kt * BP + static_cast<int32_t>(threadIdx.x);
    if (m >= m_end) {
      origins[threadIdx.x] = make_int4(0, 0, 0, -1);  // past the part: no image
      return;
    }
    int32_t image, l, rest, od, oh, ow;
    p.positions.divmod(m, image, l);
    p.out_w.divmod(l, rest, ow);
    p.out_h.divmod(rest, od, oh);
    origins[threadIdx.x] = make_int4(od * p.stride[0], oh * p.stride[1], ow * p.stride[2], image);
  }

  // k-tile kt of this block's part into a ([BO / E][BP][kChunks]) and b
  // ([BKK / E][BP][kChunks]), its rows' origins prepared.
  __device__ __forceinline__ void load(uint4* a, uint4* b, const int4* origins, int kt) const {
    const int32_t mb = m_begin + kt * BP;
#pragma unroll
    for (int i = 0; i < BP / A_RPP; ++i) {
      const int r = a_row0 + A_RPP * i;
      const int32_t m = mb + r;
      const bool valid = a_valid && m < m_end;
      copy_async(shared_address(a + (a_at + r) * kChunks + stored_chunk<T>(r, a_chunk)),
                 valid ? static_cast<const void*>(dy + static_cast<int64_t>(m) * p.O) : p.dy,
                 valid);
    }
#pragma unroll
    for (int i = 0; i < BP / B_RPP; ++i) {
      const int r = b_row0 + B_RPP * i;
      const int4 o = origins[r];
      int64_t pixel;
      const bool valid = pixel_at(p, o, disp, pixel) && b_valid && o.w >= 0;
      copy_async(shared_address(b + (b_at + r) * kChunks + stored_chunk<T>(r, b_chunk)),
                 valid ? static_cast<const void*>(x + pixel * p.C) : p.x, valid);
    }
  }
};

// Fragments of one k-step (16 positions for half types, 8 for float32) of a
// warp's MT x NT mma tiles, from tiles whose rows are positions: af from dy's
// (row = position, element = output channel o from o_first), bf from the
// columns' (element = kk from n_first).
template <typename T, int BP, int MT, int NT>
__device__ __forceinline__ void load_fragments(uint32_t (&af)[MT][4], uint32_t (&bf)[NT][2],
                                               const uint4* a, const uint4* b, int ks,
                                               int o_first, int n_first) {
  constexpr int E = kRowBytes / static_cast<int>(sizeof(T));
  const int lane = threadIdx.x & 31;
  if constexpr (std::is_same_v<T, float>) {
    // m16n8k8: a[v] = A[o + 8 (v % 2)][k + 4 (v / 2)], b[v] = B[k + 4 v][n],
    // o / n = lane / 4, k = lane % 4.
    const int g = lane >> 2, t = lane & 3;
    auto word = [&](const uint4* tile, int element, int row) {
      const int panel = element / E, e = element % E;
      const uint32_t* chunk = reinterpret_cast<const uint32_t*>(
          tile + (panel * BP + row) * kChunks + stored_chunk<T>(row, e / 4));
      return chunk[e % 4];
    };
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int v = 0; v < 4; ++v)
        af[i][v] = word(a, o_first + i * 16 + g + (v & 1) * 8, ks * 8 + t + (v >> 1) * 4);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int v = 0; v < 2; ++v) bf[j][v] = word(b, n_first + j * 8 + g, ks * 8 + t + v * 4);
  } else {
    // ldmatrix.trans: lane l addresses row l % 8 of matrix l / 8; A's matrices
    // are (positions 0-7, 8-15) x (channels 0-7, 8-15) with channels fastest,
    // B's (positions 0-7, 8-15) fastest x (kk 0-7, 8-15).
    const int mi = lane >> 3, lr = lane & 7;
    auto address = [&](const uint4* tile, int element, int row) {
      const int panel = element / E, e = element % E;
      return shared_address(tile + (panel * BP + row) * kChunks + stored_chunk<T>(row, e / 8));
    };
#pragma unroll
    for (int i = 0; i < MT; ++i)
      load_matrices<true>(af[i], address(a, o_first + i * 16 + (mi & 1) * 8,
                                         ks * 16 + (mi >> 1) * 8 + lr));
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
      uint32_t r[4];
      load_matrices<true>(r, address(b, n_first + j * 16 + (mi >> 1) * 8,
                                     ks * 16 + (mi & 1) * 8 + lr));
      bf[2 * j][0] = r[0];
      bf[2 * j][1] = r[1];
      bf[2 * j + 1][0] = r[2];
      bf[2 * j + 1][1] = r[3];
    }
  }
}

// One k-tile: BP / KSTEP k-steps of the warp's MT x NT mma tiles.
template <typename T, int BP, int MT, int NT>
__device__ __forceinline__ void multiply_tile(float (&acc)[MT][NT][4], const uint4* a,
                                              const uint4* b, int o_first, int n_first) {
  constexpr int KSTEP = std::is_same_v<T, float> ? 8 : 16;  // positions per mma
  static_assert(BP % KSTEP == 0, "tile shape");
#pragma unroll
  for (int ks = 0; ks < BP / KSTEP; ++ks) {
    uint32_t af[MT][4], bf[NT][2];
    load_fragments<T, BP, MT, NT>(af, bf, a, b, ks, o_first, n_first);
    multiply_fragments<T>(acc, af, bf);
  }
}

// The warp's tile of its part's sums (or their addition to it): m16n8
// accumulators, value v of tile (i, j) at o = lane / 4 + 8 (v / 2), kk = 2
// (lane % 4) + v % 2. Kg is even (whole vectors of channels), so a pair is
// either inside or past the row.
template <int MT, int NT>
__device__ __forceinline__ void store_part(const FilterParams& p, const float (&acc)[MT][NT][4],
                                           int group, int split, int32_t o_first,
                                           int32_t kk_first) {
  const int lane = threadIdx.x & 31;
  float* part = p.partials +
                (static_cast<int64_t>(split) * p.O + static_cast<int64_t>(group) * p.Og) * p.Kg;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int32_t o = o_first + i * 16 + h * 8 + (lane >> 2);
      if (o >= p.Og) continue;
      float* row = part + static_cast<int64_t>(o) * p.Kg;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int32_t kk = kk_first + j * 8 + 2 * (lane & 3);
        if (kk >= p.Kg) continue;
        float2 v = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        float2* dst = reinterpret_cast<float2*>(row + kk);
        if (p.accumulate) {
          const float2 before = *dst;
          v.x += before.x;
          v.y += before.y;
        }
        *dst = v;
      }
    }
}

// grid: (kk tiles, o tiles, groups * splits).
template <typename T, int BO, int BKK, int BP, int WARPS_O, int WARPS_K, int STAGES, int MIN_BLOCKS>
__global__ void __launch_bounds__(32 * WARPS_O * WARPS_K, MIN_BLOCKS)
filter_gradient_kernel(const FilterParams p) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // cp.async, ldmatrix, mma.sync
  constexpr int THREADS = 32 * WARPS_O * WARPS_K;
  constexpr int E = kRowBytes / static_cast<int>(sizeof(T));
  constexpr int WTO = BO / WARPS_O, WTK = BKK / WARPS_K;  // a warp's tile
  constexpr int MT = WTO / 16, NT = WTK / 8;
  constexpr int A_TILE = BO / E * BP * kChunks, B_TILE = BKK / E * BP * kChunks;  // uint4s
  static_assert(BO % E == 0 && BKK % E == 0 && NT % 2 == 0 && WTO % 16 == 0, "tile shape");

  extern __shared__ __align__(128) uint4 smem[];
  uint4* a_tiles = smem;                     // [STAGES][BO / E][BP][kChunks]
  uint4* b_tiles = smem + STAGES * A_TILE;   // [STAGES][BKK / E][BP][kChunks]
  int4* origins = reinterpret_cast<int4*>(b_tiles + STAGES * B_TILE);  // [STAGES][BP]

  const int warp = threadIdx.x >> 5;
  const int32_t kk0 = blockIdx.x * BKK, o0 = blockIdx.y * BO;
  const int group = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  const FilterLoader<T, BO, BKK, BP, THREADS> loader(p, group, split, o0, kk0);
  const int k_tiles = Part(p, split).k_tiles<BP>();
  const int warp_o = warp % WARPS_O, warp_k = warp / WARPS_O;
  float acc[MT][NT][4];
  zero(acc);

  // Origins of k-tile t sit in slot t % STAGES, prepared one iteration before
  // its copies are issued (the barrier at the top of each iteration orders both).
#pragma unroll
  for (int s = 0; s < STAGES; ++s)
    if (s < k_tiles) loader.prepare(origins + s * BP, s);
  __syncthreads();
  cp_async_ring<STAGES>(
      k_tiles,
      [&](int kt, int s) {
        loader.load(a_tiles + s * A_TILE, b_tiles + s * B_TILE, origins + s * BP, kt);
      },
      [&](int kt) {  // slot kt % STAGES: k-tile kt's copies were issued long ago
        if (kt + STAGES < k_tiles) loader.prepare(origins + (kt % STAGES) * BP, kt + STAGES);
      },
      [&](int s) {
        multiply_tile<T, BP>(acc, a_tiles + s * A_TILE, b_tiles + s * B_TILE, warp_o * WTO,
                             warp_k * WTK);
      });
  store_part(p, acc, group, split, o0 + warp_o * WTO, kk0 + warp_k * WTK);
#endif
}

// --- Hopper: k-tiles by TMA -----------------------------------------------------
//
// Half types, where each panel of the columns is one tap and a run of
// channels (channels per group a multiple of 64): per k-tile, one thread issues
// a tiled copy per panel of dy's rows (dy as a (positions, channels) matrix)
// and an im2col copy per panel of the columns (BP windows from the k-tile's
// first position on, displaced by the panel's tap), all completing on the
// k-tile's mbarrier. Parts are whole k-tiles, and rows past the call's
// positions read as zeros from dy's map, so no row needs masking. The barrier
// at the top of each iteration frees the buffer the next copies go to.

template <typename T, int BO, int BKK, int BP, int STAGES>
constexpr int tma_shared_bytes() {
  return hopper::kSwizzleAtomBytes + STAGES * BP * (BO + BKK) * static_cast<int>(sizeof(T)) +
         STAGES * static_cast<int>(sizeof(uint64_t));
}

template <typename T, int BO, int BKK, int BP, int WARPS_O, int WARPS_K, int STAGES, int MIN_BLOCKS>
__global__ void __launch_bounds__(32 * WARPS_O * WARPS_K, MIN_BLOCKS)
filter_gradient_tma_kernel(const FilterParams p, const __grid_constant__ CUtensorMap dy_map,
                           const __grid_constant__ CUtensorMap x_map) {
#ifdef IM2COL_WGMMA
  using namespace hopper;
  constexpr int E = kRowBytes / static_cast<int>(sizeof(T));
  constexpr int WTO = BO / WARPS_O, WTK = BKK / WARPS_K;
  constexpr int MT = WTO / 16, NT = WTK / 8;
  constexpr int PANEL = BP * kChunks;  // uint4s
  constexpr int A_TILE = BO / E * PANEL, B_TILE = BKK / E * PANEL;
  static_assert(BO % E == 0 && BKK % E == 0 && NT % 2 == 0 && WTO % 16 == 0 &&
                    (PANEL * 16) % kSwizzleAtomBytes == 0 && !std::is_same_v<T, float>,
                "tile shape, half types");

  extern __shared__ uint8_t smem_raw[];
  uint4* a_tiles = reinterpret_cast<uint4*>(swizzle_aligned(smem_raw));
  uint4* b_tiles = a_tiles + STAGES * A_TILE;
  uint64_t* full = reinterpret_cast<uint64_t*>(b_tiles + STAGES * B_TILE);  // [STAGES]

  const int warp = threadIdx.x >> 5;
  const int32_t kk0 = blockIdx.x * BKK, o0 = blockIdx.y * BO;
  const int group = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  const Part part(p, split);
  const int k_tiles = part.k_tiles<BP>();
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) barrier_init(shared_address(full + s), 1);
    barrier_init_fence();
  }
  __syncthreads();

  auto issue = [&](int kt) {  // by thread 0
    const int s = kt % STAGES;
    int32_t image, l, rest, od, oh, ow;
    const int32_t m = part.begin + kt * BP;
    p.positions.divmod(m, image, l);
    p.out_w.divmod(l, rest, ow);
    p.out_h.divmod(rest, od, oh);
    const int32_t corner[3] = {od * p.stride[0] - p.pad[0], oh * p.stride[1] - p.pad[1],
                               ow * p.stride[2] - p.pad[2]};
    uint32_t bytes = 0;
    for (int q = 0; q < BO / E; ++q) bytes += o0 + q * E < p.Og ? PANEL * 16 : 0;
    for (int q = 0; q < BKK / E; ++q) bytes += kk0 + q * E < p.Kg ? PANEL * 16 : 0;
    const uint32_t bar = shared_address(full + s);
    barrier_arrive_expect(bar, bytes);
    for (int q = 0; q < BO / E; ++q)
      if (o0 + q * E < p.Og)
        tma_tile_2d(shared_address(a_tiles + s * A_TILE + q * PANEL), &dy_map, bar,
                    group * p.Og + o0 + q * E, m);
    for (int q = 0; q < BKK / E; ++q) {
      const int32_t kk = kk0 + q * E;
      if (kk >= p.Kg) continue;
      int32_t c, disp[3];
      tap_of(p, kk, c, disp);
      tma_im2col_nd(p.nd, shared_address(b_tiles + s * B_TILE + q * PANEL), &x_map, bar,
                    group * p.Cg + c, corner, image, disp);
    }
  };

  const int warp_o = warp % WARPS_O, warp_k = warp / WARPS_O;
  float acc[MT][NT][4];
  zero(acc);
  if (threadIdx.x == 0)
    for (int s = 0; s < STAGES - 1 && s < k_tiles; ++s) issue(s);
  for (int kt = 0; kt < k_tiles; ++kt) {
    __syncthreads();  // every warp is done with k-tile kt - 1's buffer
    if (threadIdx.x == 0 && kt + STAGES - 1 < k_tiles) issue(kt + STAGES - 1);
    barrier_wait(shared_address(full + kt % STAGES), (kt / STAGES) & 1);
    multiply_tile<T, BP>(acc, a_tiles + (kt % STAGES) * A_TILE,
                               b_tiles + (kt % STAGES) * B_TILE, warp_o * WTO, warp_k * WTK);
  }
  store_part(p, acc, group, split, o0 + warp_o * WTO, kk0 + warp_k * WTK);
#endif
}

// dw[e] = the sum over parts of partials[part][o][tap * pack * cg + block * cg + c]
// for e in the filter's layout, block (o / og) % pack: the diagonal block of
// o's pack of groups.
template <typename T>
__global__ void filter_finish_kernel(const float* partials, T* dw, int64_t total, int32_t og,
                                     int32_t cg, int32_t taps, int32_t splits, int32_t pack,
                                     bool dw_cl) {
  const int32_t kg = cg * taps;
  const int64_t part = total * pack;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t o = e / kg;
    const int32_t rest = static_cast<int32_t>(e - o * kg);
    const int32_t c = dw_cl ? rest % cg : rest / taps, tap = dw_cl ? rest / cg : rest % taps;
    const int32_t block = pack > 1 ? static_cast<int32_t>(o / og % pack) : 0;
    const int64_t at = (o * taps + tap) * (static_cast<int64_t>(cg) * pack) + block * cg + c;
    float sum = 0.f;
#pragma unroll 8
    for (int32_t s = 0; s < splits; ++s) sum += partials[s * part + at];
    dw[e] = store_value<T>(sum);
  }
}

// grid: (kk tiles, o tiles, groups * splits).
template <int BO, int BKK>
dim3 filter_grid(const FilterParams& p, int64_t groups) {
  return dim3(static_cast<unsigned>((p.Kg + BKK - 1) / BKK), static_cast<unsigned>((p.Og + BO - 1) / BO),
              static_cast<unsigned>(groups * p.splits));
}

template <typename T, int BO, int BKK, int BP, int WARPS_O, int WARPS_K, int STAGES, int MIN_BLOCKS>
cudaError_t launch(const FilterParams& p, int64_t groups, cudaStream_t stream) {
  return launch_with_shared(filter_gradient_kernel<T, BO, BKK, BP, WARPS_O, WARPS_K, STAGES, MIN_BLOCKS>,
                            filter_grid<BO, BKK>(p, groups), 32 * WARPS_O * WARPS_K,
                            filter_shared_bytes<T, BO, BKK, BP, STAGES>(), stream, p);
}

// The TMA kernel where it applies: each panel of the columns one tap (channels
// per group a multiple of the panel), windows an im2col box describes, 16-byte
// aligned operands; cudaErrorNotSupported otherwise (or where a map does not
// encode), and the caller falls back.
template <typename T, int BO, int BKK, int BP, int WARPS_O, int WARPS_K, int STAGES, int MIN_BLOCKS>
cudaError_t launch_tma(const FilterParams& p, int64_t groups, cudaStream_t stream) {
#ifndef JAX_IM2COL_SM90A
  (void)p, (void)groups, (void)stream;
  return cudaErrorNotSupported;
#else
  constexpr int E = kRowBytes / static_cast<int>(sizeof(T));
  const WindowBox box{p.nd, p.in, p.out, p.stride, p.dilation, p.pad, p.kernel};
  if (p.Cg % E != 0 || p.images < 1 || reinterpret_cast<uintptr_t>(p.x) % 16 ||
      reinterpret_cast<uintptr_t>(p.dy) % 16 || !im2col_box_fits(box))
    return cudaErrorNotSupported;
  CUtensorMap dy_map, x_map;
  if (!encode_rows_map<T>(&dy_map, p.dy, p.m_total, p.O, E, BP) ||
      !encode_im2col_map<T>(&x_map, p.x, box, p.C, p.images, E, BP))
    return cudaErrorNotSupported;
  constexpr int bytes = tma_shared_bytes<T, BO, BKK, BP, STAGES>();
  static_assert(MIN_BLOCKS * bytes <= 227 * 1024, "shared memory");
  return launch_with_shared(
      filter_gradient_tma_kernel<T, BO, BKK, BP, WARPS_O, WARPS_K, STAGES, MIN_BLOCKS>,
      filter_grid<BO, BKK>(p, groups), 32 * WARPS_O * WARPS_K, bytes, stream, p, dy_map, x_map);
#endif
}

bool on_hopper() {
  DeviceInfo info;
  return current_device_info(&info) == cudaSuccess && info.major == 9 && info.minor == 0;
}

// 64 x 128 tiles of dw in 4 warps, or 128 x 128 in 8 where a group has 128
// output channels or more (each k-tile of the columns then feeds twice the
// arithmetic). Warp tiles of 32 x 64 either way. float32 groups of at most
// kNarrowFilterChannels output channels (jax#13800's grouped 1-D conv) take
// 32 x 128 tiles in 4 warps of 32 x 32, whose multiplies and dy copies are
// not half spent on channels past the group's (docs/optimization-log.md, step 48; a
// half type's panel is 64 channels). On Hopper (sm_90a builds) the TMA kernel
// for half types where it applies. Mirrored by _filter_tile_o() in
// jax_im2col/_conv_primitives.py (which counts such a group's one tile as 64:
// the same count).
constexpr int kNarrowFilterChannels = 32;

template <typename T>
cudaError_t launch_for(const FilterParams& p, int64_t groups, cudaStream_t stream) {
  constexpr bool f32 = std::is_same_v<T, float>;
  constexpr int BP = kFilterPositions;
  const bool wide = p.Og >= 128;
  if constexpr (f32) {
    if (p.Og <= kNarrowFilterChannels) return launch<T, 32, 128, BP, 1, 4, 4, 2>(p, groups, stream);
  }
  if constexpr (!f32) {
    if (hopper_kernels_compiled() && on_hopper()) {
      const cudaError_t e = wide ? launch_tma<T, 128, 128, BP, 4, 2, 4, 2>(p, groups, stream)
                                 : launch_tma<T, 64, 128, BP, 2, 2, 4, 4>(p, groups, stream);
      if (e != cudaErrorNotSupported) return e;
    }
  }
  if (wide) return launch<T, 128, 128, BP, 4, 2, f32 ? 3 : 4, 2>(p, groups, stream);
  return launch<T, 64, 128, BP, 2, 2, 4, f32 ? 2 : 4>(p, groups, stream);
}

}  // namespace

bool implicit_filter_applies(xla::ffi::DataType in, bool tf32, const Geometry& g, int64_t cg,
                             int64_t og, int64_t groups, int64_t positions) {
  // The forward's conditions on x's channels (implicit_applies), and the same
  // vectors of dy's.
  if (!implicit_applies(in, tf32, g, cg, groups)) return false;
  const int64_t vec = 16 / static_cast<int64_t>(xla::ffi::ByteWidth(in));
  return og > 0 && og % vec == 0 && og * groups < (int64_t{1} << 31) && og / 64 < 65535 &&
         positions <= kMaxFilterPositions;
}

cudaError_t implicit_filter_gradient(const ImplicitFilterGradient& c, const Geometry& g,
                                     xla::ffi::DataType in, cudaStream_t stream) {
  using xla::ffi::DataType;
  const int64_t cg = c.c / c.groups, og = c.o / c.groups;
  const int64_t m_total = c.n * g.out_size;
  if (c.splits < 1 || c.groups * c.splits > 65535 || c.partials == nullptr ||
      m_total > kMaxFilterPositions)
    return cudaErrorInvalidValue;
  FilterParams p;
  p.x = static_cast<const char*>(c.x);
  p.dy = static_cast<const char*>(c.dy);
  p.partials = c.partials;
  p.m_total = static_cast<int32_t>(m_total);
  set_window_3d(g, p);
  set_channels(p, c.n, c.c, c.o, c.groups, g.kernel_size);
  p.positions = FastDiv(g.out_size);
  p.splits = static_cast<int32_t>(c.splits);
  p.accumulate = c.accumulate;
  const int64_t tiles = (m_total + kFilterPositions - 1) / kFilterPositions;
  p.per_split = static_cast<int32_t>((tiles + c.splits - 1) / c.splits * kFilterPositions);
  if (og == 0 || cg == 0) return cudaSuccess;
  if (m_total == 0) {  // no positions: the parts are zeros (or unchanged)
    if (c.accumulate) return cudaSuccess;
    return cudaMemsetAsync(c.partials, 0,
                           implicit_filter_partials_bytes(c.splits, c.o, cg, g.kernel_size), stream);
  }
  switch (in) {
    case DataType::F32: return launch_for<float>(p, c.groups, stream);
    case DataType::BF16: return launch_for<__nv_bfloat16>(p, c.groups, stream);
    case DataType::F16: return launch_for<__half>(p, c.groups, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t implicit_filter_finish(const float* partials, void* dw, xla::ffi::DataType type,
                                   int64_t o, int64_t og, int64_t cg, int64_t taps, int64_t splits,
                                   int64_t pack, bool dw_channels_last, cudaStream_t stream) {
  using xla::ffi::DataType;
  const int64_t total = o * cg * taps;
  if (total == 0) return cudaSuccess;
  if (pack < 1 || og < 1 || cg * taps * pack >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  const unsigned blocks = blocks_for(total);
  const int32_t o32 = static_cast<int32_t>(og), c32 = static_cast<int32_t>(cg),
                t32 = static_cast<int32_t>(taps), s32 = static_cast<int32_t>(splits),
                p32 = static_cast<int32_t>(pack);
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    filter_finish_kernel<T><<<blocks, kThreads, 0, stream>>>(
        partials, static_cast<T*>(dw), total, o32, c32, t32, s32, p32, dw_channels_last);
    return cudaGetLastError();
  };
  switch (type) {
    case DataType::F32: return launch(float{});
    case DataType::BF16: return launch(__nv_bfloat16{});
    case DataType::F16: return launch(__half{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace im2col::cuda
