// The implicit-GEMM convolution on Hopper: warpgroup MMA (wgmma) from shared
// memory, with two ways of filling it. Compiled for sm_90a (the device code
// is empty for other targets and launch_sm90 answers cudaErrorNotSupported
// without it).
//
// Both kernels keep the tiles of implicit_tile.cuh: a BM x BN tile of one
// group's y, k-tiles of 128 bytes of the reduction in 128-byte rows carrying
// the 128-byte swizzle, which the wgmma descriptors read as they are. One
// k-tile is 4 k-steps of 32 bytes: the descriptors' start address moves by 32
// bytes within the swizzle atom (1024-byte aligned tiles). Warpgroup g owns
// rows 64 g .. 64 g + 63 of the tile and the whole width.
//
// - The TMA kernel, where each 128-byte k-tile is one tap and a run of
//   channels (channels per group a multiple of the k-tile): one thread issues
//   the tensor-memory copies (an im2col box of BM windows for the columns,
//   with zeros for padding; a tiled box of the filter rows) into a ring of
//   STAGES buffers, full and empty mbarriers hand each buffer between it and
//   the two warpgroups that multiply. No thread computes an address per row.
// - The cp.async kernel for the rest (fewer channels per group): every thread
//   gathers as in the mma.sync kernel, then the warpgroups multiply.
//
// float32 multiplies as TF32 with the low 13 bits of each operand dropped
// (the tensor core reads the float32 bits as they are, as cuBLAS's and cuDNN's
// Hopper TF32 kernels do), not rounded to nearest like the mma.sync kernel.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/hopper.cuh"
#include "common/tensor_maps.h"
#include "common/wgmma.cuh"
#include "conv/implicit/implicit_gemm.h"
#include "conv/implicit/implicit_tile.cuh"

namespace im2col::cuda {
namespace implicit {
namespace {

using namespace hopper;

// The ring's k-tile kt with one group of wgmma per warpgroup: acc (+)= A B^T.
template <typename T, int BN>
__device__ __forceinline__ void multiply_tile(float (&acc)[BN / 2], const uint4* a, const uint4* b,
                                              bool accumulate) {
#ifdef IM2COL_WGMMA
  const uint64_t da = matrix_descriptor(shared_address(a));
  const uint64_t db = matrix_descriptor(shared_address(b));
  pin(acc);
  wgmma_fence();
#pragma unroll
  for (int step = 0; step < kRowBytes / 32; ++step)  // + 32 bytes a step, in 16-byte units
    Wgmma<T, BN>::run(acc, da + 2 * step, db + 2 * step, accumulate || step > 0);
  wgmma_commit();
  pin(acc);
#endif
}

// --- the cp.async kernel --------------------------------------------------------
//
// Ring discipline, per k-tile kt: wait for its copies; make them visible to
// the tensor cores (fence.proxy.async) and to every warpgroup (barrier); issue
// the copies of k-tile kt + STAGES - 2 into the buffer of kt - 2, which every
// warpgroup finished with (each waits for all but its latest wgmma group
// before the barrier); issue kt's wgmma group.

template <int BM, int BN, int STAGES>
constexpr int gather_shared_bytes() {
  return kSwizzleAtomBytes + STAGES * (BM + BN) * kRowBytes + row_bytes<BM>();
}

template <typename T, typename TY, int BN, int WGS, int STAGES>
__global__ void __launch_bounds__(128 * WGS, 1)
implicit_conv_gather_kernel(const __grid_constant__ Passes ps) {
#ifdef IM2COL_WGMMA
  constexpr int BM = 64 * WGS, THREADS = 128 * WGS, NT = BN / 8;
  static_assert(STAGES >= 3, "one buffer in use by the tensor cores, one being filled");

  extern __shared__ uint8_t smem_raw[];
  uint4* a_tiles = reinterpret_cast<uint4*>(swizzle_aligned(smem_raw));  // [STAGES][BM][kChunks]
  uint4* b_tiles = a_tiles + STAGES * BM * kChunks;                    // [STAGES][BN][kChunks]
  int4* origins = reinterpret_cast<int4*>(b_tiles + STAGES * BN * kChunks);  // [BM]
  int2* positions = reinterpret_cast<int2*>(origins + BM);                  // [BM]

  const int warpgroup = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
  int64_t m0;
  const int pass = block_pass<BM>(ps, m0);
  if (pass < 0) return;
  const Params& p = ps.pass[pass];
  const int32_t n0 = blockIdx.y * BN, group = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  prepare_rows<BM, THREADS>(p, m0, origins, positions);
  __syncthreads();
  const TileLoader<T, BM, BN, THREADS> loader(p, origins, group, split, n0);
  const int k_tiles = loader.k_tiles;

  // Not zeroed: the first k-step overwrites (zeroing first would make ptxas
  // serialize the wgmma pipeline).
  float acc[BN / 2];

#pragma unroll
  for (int s = 0; s < STAGES - 2; ++s) {
    if (s < k_tiles) loader.load(a_tiles + s * BM * kChunks, b_tiles + s * BN * kChunks, s);
    commit_copies();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    wait_copies<STAGES - 3>();
    fence_to_async_proxy();
    __syncthreads();
    const int next = kt + STAGES - 2;
    if (next < k_tiles) {
      const int s = next % STAGES;
      loader.load(a_tiles + s * BM * kChunks, b_tiles + s * BN * kChunks, next);
    }
    commit_copies();
    const int s = kt % STAGES;
    multiply_tile<T, BN>(acc, a_tiles + (s * BM + warpgroup * 64) * kChunks,
                         b_tiles + s * BN * kChunks, kt > 0);
    wgmma_wait<1>();
    pin(acc);
  }
  wgmma_wait<0>();
  pin(acc);
  wait_copies<0>();
  if (k_tiles == 0) {  // a part of a split reduction past its end
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
  }

  // The m64nN accumulator is the m16n8 layout per warp: warp w of the group
  // holds rows 16 w .. 16 w + 15.
  store_rows<TY, NT>(p, *reinterpret_cast<const float(*)[NT][4]>(acc), warpgroup * 64 + warp * 16,
                     0, m0, n0, group, split, positions);
#endif
}

template <typename T, typename TY, int BN, int WGS, int STAGES>
cudaError_t launch_gather(const Passes& ps, int64_t groups, cudaStream_t stream) {
  constexpr int BM = 64 * WGS;
  return launch_tiles(implicit_conv_gather_kernel<T, TY, BN, WGS, STAGES>, ps, groups, BM, BN,
                      128 * WGS, gather_shared_bytes<BM, BN, STAGES>(), stream);
}

// --- the TMA kernel -------------------------------------------------------------
//
// Two warpgroups multiply (rows 0-63, 64-127); one more warp's first thread
// issues the copies. Buffer s of the ring holds k-tile kt (s = kt % STAGES,
// round kt / STAGES): full[s] completes when its bytes have landed, empty[s]
// when both warpgroups have finished reading it (each arrives once its next
// wgmma group is issued and the one reading s has completed).

constexpr int kTmaBM = 128;
constexpr int kTmaThreads = 2 * 128 + 32;

template <int BN, int STAGES>
constexpr int tma_shared_bytes() {
  return kSwizzleAtomBytes + STAGES * (kTmaBM + BN) * kRowBytes + 2 * STAGES * sizeof(uint64_t) +
         row_bytes<kTmaBM>();
}

// Each pass's tensor maps: its image as an im2col map, its filter rows as a
// tiled one.
struct PassMaps {
  CUtensorMap image[kMaxPasses], filter[kMaxPasses];
};

template <typename T, typename TY, int BN, int STAGES, int MIN_BLOCKS>
__global__ void __launch_bounds__(kTmaThreads, MIN_BLOCKS)
implicit_conv_tma_kernel(const __grid_constant__ Passes ps, const __grid_constant__ PassMaps maps) {
#ifdef IM2COL_WGMMA
  constexpr int BM = kTmaBM, NT = BN / 8;
  constexpr int BKE = kRowBytes / sizeof(T);
  constexpr uint32_t kStageBytes = (BM + BN) * kRowBytes;

  extern __shared__ uint8_t smem_raw[];
  uint4* a_tiles = reinterpret_cast<uint4*>(swizzle_aligned(smem_raw));  // [STAGES][BM][kChunks]
  uint4* b_tiles = a_tiles + STAGES * BM * kChunks;                    // [STAGES][BN][kChunks]
  uint64_t* full = reinterpret_cast<uint64_t*>(b_tiles + STAGES * BN * kChunks);  // [STAGES]
  uint64_t* empty = full + STAGES;                                                // [STAGES]
  int4* origins = reinterpret_cast<int4*>(empty + STAGES);                        // [BM]
  int2* positions = reinterpret_cast<int2*>(origins + BM);                        // [BM]

  int64_t m0;
  const int pass = block_pass<BM>(ps, m0);
  if (pass < 0) return;
  const Params& p = ps.pass[pass];
  const int32_t n0 = blockIdx.y * BN, group = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  prepare_rows<BM, kTmaThreads>(p, m0, origins, positions);
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      barrier_init(shared_address(full + s), 1);
      barrier_init(shared_address(empty + s), 2);
    }
    barrier_init_fence();
  }
  __syncthreads();

  const int all_tiles = p.Kg / BKE, per_split = (all_tiles + p.splits - 1) / p.splits;
  const int k_begin = split * per_split;
  const int k_tiles = max(0, min(all_tiles, k_begin + per_split) - k_begin);

  if (threadIdx.x >= 256) {
    if (threadIdx.x != 256) return;
    // The producer. The window corner of the tile's first position; the
    // im2col box walks BM positions from there, across rows and images.
    const int4 o = origins[0];
    const int32_t corner[3] = {o.x, o.y, o.z};
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = kt % STAGES;
      if (kt >= STAGES) barrier_wait(shared_address(empty + s), (kt / STAGES - 1) & 1);
      const uint32_t bar = shared_address(full + s);
      barrier_arrive_expect(bar, kStageBytes);
      const int32_t kk = (k_begin + kt) * BKE;
      int32_t c, disp[3];
      tap_of(p, kk, c, disp);
      tma_im2col_nd(p.nd, shared_address(a_tiles + s * BM * kChunks), &maps.image[pass], bar,
                    group * p.Cg + c, corner, o.w, disp);
      tma_tile_2d(shared_address(b_tiles + s * BN * kChunks), &maps.filter[pass], bar, kk,
                  group * p.Og + n0);
    }
    return;
  }

  const int warpgroup = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
  float acc[BN / 2];  // not zeroed: see the gather kernel
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt % STAGES;
    barrier_wait(shared_address(full + s), (kt / STAGES) & 1);
    multiply_tile<T, BN>(acc, a_tiles + (s * BM + warpgroup * 64) * kChunks,
                         b_tiles + s * BN * kChunks, kt > 0);
    wgmma_wait<1>();
    pin(acc);
    if (kt > 0 && threadIdx.x % 128 == 0)
      barrier_arrive(shared_address(empty + (kt - 1) % STAGES));
  }
  wgmma_wait<0>();
  pin(acc);
  if (k_tiles == 0) {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
  }
  store_rows<TY, NT>(p, *reinterpret_cast<const float(*)[NT][4]>(acc), warpgroup * 64 + warp * 16,
                     0, m0, n0, group, split, positions);
#endif
}

WindowBox window_box(const Params& p) {
  return WindowBox{p.nd, p.in, p.out, p.stride, p.dilation, p.pad, p.kernel};
}

// Whether the TMA kernel takes every pass of a call: k-tiles of whole taps,
// and windows the im2col box can describe.
template <typename T>
bool tma_applies(const Passes& ps) {
  for (int i = 0; i < ps.count; ++i) {
    const Params& p = ps.pass[i];
    if (!tma_operands_fit<T>(p) || !im2col_box_fits(window_box(p))) return false;
  }
  return true;
}

// Each pass's image as an im2col map (boxes of kTmaBM windows) and filter
// rows as a tiled map.
template <typename T, int BN>
bool encode_maps(const Passes& ps, int64_t groups, PassMaps* maps) {
  constexpr uint32_t BKE = kRowBytes / sizeof(T);
  for (int i = 0; i < ps.count; ++i) {
    const Params& p = ps.pass[i];
    if (!encode_im2col_map<T>(&maps->image[i], p.x, window_box(p), p.C, p.images, BKE, kTmaBM) ||
        !encode_rows_map<T>(&maps->filter[i], p.w, groups * p.Og, p.Kg, BKE, BN))
      return false;
  }
  return true;
}

// MIN_BLOCKS per multiprocessor: where the ring is short enough for two, one
// block's start (the first copies' latency) and end (the stores) overlap the
// other's multiplies.
template <typename T, typename TY, int BN, int STAGES, int MIN_BLOCKS>
cudaError_t launch_tma(const Passes& ps, int64_t groups, cudaStream_t stream) {
  PassMaps maps;
  if (!encode_maps<T, BN>(ps, groups, &maps)) return cudaErrorNotSupported;
  static_assert(MIN_BLOCKS * tma_shared_bytes<BN, STAGES>() <= 227 * 1024, "shared memory");
  return launch_tiles(implicit_conv_tma_kernel<T, TY, BN, STAGES, MIN_BLOCKS>, ps, groups, kTmaBM,
                      BN, kTmaThreads, tma_shared_bytes<BN, STAGES>(), stream, maps);
}

}  // namespace

// Tiles: the widest the output channels fill whose grid still covers every
// multiprocessor once, else the smallest. Split reductions keep 128 x 64
// tiles (the plan in Python counts them).
template <typename T, typename TY>
cudaError_t launch_sm90(const Passes& ps, int64_t groups, int multiprocessors, cudaStream_t stream) {
#ifndef JAX_IM2COL_SM90A
  (void)ps, (void)groups, (void)multiprocessors, (void)stream;
  return cudaErrorNotSupported;
#else
  const int64_t og = ps.pass[0].Og;
  const bool split = ps.pass[0].splits > 1;
  auto blocks = [&](int64_t bm, int64_t bn) { return ps.tiles(bm) * ((og + bn - 1) / bn) * groups; };
  const int64_t want = multiprocessors;
  if (cudaError_t e = launch_halo_sm90<T, TY>(ps, groups, multiprocessors, stream);
      e != cudaErrorNotSupported)
    return e;
  if (tma_applies<T>(ps)) {
    cudaError_t e;
    if (!split && og > 128 && blocks(128, 256) >= want)
      e = launch_tma<T, TY, 256, 4, 1>(ps, groups, stream);
    else if (!split && og > 64 && blocks(128, 128) >= want)
      e = launch_tma<T, TY, 128, 3, 2>(ps, groups, stream);
    else
      e = launch_tma<T, TY, 64, 4, 2>(ps, groups, stream);
    if (e != cudaErrorNotSupported) return e;
  }
  if (split) return launch_gather<T, TY, 64, 2, 6>(ps, groups, stream);
  if (og > 128 && blocks(128, 256) >= want) return launch_gather<T, TY, 256, 2, 4>(ps, groups, stream);
  if (og > 64 && blocks(128, 128) >= want) return launch_gather<T, TY, 128, 2, 5>(ps, groups, stream);
  if (blocks(128, 64) >= want) return launch_gather<T, TY, 64, 2, 6>(ps, groups, stream);
  return launch_gather<T, TY, 64, 1, 6>(ps, groups, stream);
#endif
}

template cudaError_t launch_sm90<float, float>(const Passes&, int64_t, int, cudaStream_t);
template cudaError_t launch_sm90<__nv_bfloat16, __nv_bfloat16>(const Passes&, int64_t, int,
                                                               cudaStream_t);
template cudaError_t launch_sm90<__nv_bfloat16, float>(const Passes&, int64_t, int, cudaStream_t);
template cudaError_t launch_sm90<__half, __half>(const Passes&, int64_t, int, cudaStream_t);
template cudaError_t launch_sm90<__half, float>(const Passes&, int64_t, int, cudaStream_t);

}  // namespace implicit

bool hopper_kernels_compiled() {
#ifdef JAX_IM2COL_SM90A
  return true;
#else
  return false;
#endif
}

}  // namespace im2col::cuda
