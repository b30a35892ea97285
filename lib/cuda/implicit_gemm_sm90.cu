// The implicit-GEMM convolution on Hopper: warpgroup MMA (wgmma) from shared
// memory. Compiled for sm_90a (its device code is empty for other targets and
// launch_sm90 answers cudaErrorNotSupported without it).
//
// A block is WGS warpgroups; warpgroup g owns rows 64 g .. 64 g + 63 of the
// BM x BN tile and the whole width. Every thread also copies: the k-tiles land
// by cp.async (implicit_tile.cuh) in a ring of STAGES buffers whose 128-byte
// rows carry the 128-byte swizzle, so the wgmma descriptors read them as they
// are. One k-tile is 4 k-steps of 32 bytes: the descriptors' start address
// moves by 32 bytes within the swizzle atom (1024-byte aligned tiles).
//
// Ring discipline, per k-tile kt: wait for its copies; make them visible to
// the tensor cores (fence.proxy.async) and to every warpgroup (barrier); issue
// the copies of k-tile kt + STAGES - 2 into the buffer of kt - 2, which every
// warpgroup finished with (each waits for all but its latest wgmma group
// before the barrier); issue kt's wgmma group. So one group is in flight while
// the next k-tile's copies are issued, and STAGES - 2 k-tiles of copies ahead.
//
// float32 multiplies as TF32 with the low 13 bits of each operand dropped
// (the tensor core reads the float32 bits as they are, as cuBLAS's and cuDNN's
// Hopper TF32 kernels do), not rounded to nearest like the mma.sync kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "implicit_gemm.h"
#include "implicit_tile.cuh"
#include "wgmma.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define IM2COL_WGMMA 1
#endif

namespace im2col::cuda {
namespace implicit {
namespace {

#ifdef IM2COL_WGMMA
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int Pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}
// cp.async writes shared memory through the generic proxy; wgmma reads it
// through the async proxy.
__device__ __forceinline__ void fence_to_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accesses of the accumulators across the
// asynchronous MMA's issue and wait.
template <int N>
__device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// A K-major operand in 128-byte-swizzled rows: 8-row groups 1024 bytes apart
// (the stride byte offset); the leading byte offset is unused for this layout.
__device__ __forceinline__ uint64_t matrix_descriptor(uint32_t address) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (uint64_t{1} << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}
#endif

constexpr int kAtomBytes = 1024;  // the swizzle pattern's period: 8 rows

template <int BM, int BN, int STAGES>
constexpr int shared_bytes() {
  return kAtomBytes + STAGES * (BM + BN) * kRowBytes + row_bytes<BM>();
}

template <typename T, typename TY, int BN, int WGS, int STAGES>
__global__ void __launch_bounds__(128 * WGS, 1) implicit_conv_sm90_kernel(const Params p) {
#ifdef IM2COL_WGMMA
  constexpr int BM = 64 * WGS, THREADS = 128 * WGS, NT = BN / 8;
  constexpr int STEPS = kRowBytes / 32;  // k-steps per k-tile
  static_assert(STAGES >= 3, "one buffer in use by the tensor cores, one being filled");

  extern __shared__ uint8_t smem_raw[];
  uint8_t* base = smem_raw + ((kAtomBytes - shared_address(smem_raw) % kAtomBytes) % kAtomBytes);
  uint4* a_tiles = reinterpret_cast<uint4*>(base);              // [STAGES][BM][kChunks]
  uint4* b_tiles = a_tiles + STAGES * BM * kChunks;             // [STAGES][BN][kChunks]
  int4* origins = reinterpret_cast<int4*>(b_tiles + STAGES * BN * kChunks);  // [BM]
  int2* positions = reinterpret_cast<int2*>(origins + BM);                  // [BM]

  const int warpgroup = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * BM;
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
    const uint64_t a = matrix_descriptor(
        shared_address(a_tiles + (s * BM + warpgroup * 64) * kChunks));
    const uint64_t b = matrix_descriptor(shared_address(b_tiles + s * BN * kChunks));
    pin(acc);
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < STEPS; ++step)  // + 32 bytes a step, in 16-byte units
      Wgmma<T, BN>::run(acc, a + 2 * step, b + 2 * step, kt > 0 || step > 0);
    wgmma_commit();
    pin(acc);
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
cudaError_t launch(const Params& p, int64_t groups, cudaStream_t stream) {
  constexpr int BM = 64 * WGS;
  constexpr int bytes = shared_bytes<BM, BN, STAGES>();
  auto kernel = implicit_conv_sm90_kernel<T, TY, BN, WGS, STAGES>;
  if (auto e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      e != cudaSuccess)
    return e;
  const dim3 grid(static_cast<unsigned>((p.m_total + BM - 1) / BM),
                  static_cast<unsigned>((p.Og + BN - 1) / BN),
                  static_cast<unsigned>(groups * p.splits));
  kernel<<<grid, 128 * WGS, bytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

// Tiles: the widest the output channels fill whose grid still covers every
// multiprocessor once (one block each: the rings take most of the shared
// memory), else the smallest.
template <typename T, typename TY>
cudaError_t launch_sm90(const Params& p, int64_t groups, int multiprocessors, cudaStream_t stream) {
#ifndef JAX_IM2COL_SM90A
  (void)p, (void)groups, (void)multiprocessors, (void)stream;
  return cudaErrorNotSupported;
#else
  auto blocks = [&](int64_t bm, int64_t bn) {
    return (p.m_total + bm - 1) / bm * ((p.Og + bn - 1) / bn) * groups;
  };
  const int64_t want = multiprocessors;
  if (p.splits > 1) return launch<T, TY, 64, 2, 6>(p, groups, stream);
  if (p.Og > 128 && blocks(128, 256) >= want) return launch<T, TY, 256, 2, 4>(p, groups, stream);
  if (p.Og > 64 && blocks(128, 128) >= want) return launch<T, TY, 128, 2, 5>(p, groups, stream);
  if (blocks(128, 64) >= want) return launch<T, TY, 64, 2, 6>(p, groups, stream);
  return launch<T, TY, 64, 1, 6>(p, groups, stream);
#endif
}

template cudaError_t launch_sm90<float, float>(const Params&, int64_t, int, cudaStream_t);
template cudaError_t launch_sm90<__nv_bfloat16, __nv_bfloat16>(const Params&, int64_t, int,
                                                               cudaStream_t);
template cudaError_t launch_sm90<__nv_bfloat16, float>(const Params&, int64_t, int, cudaStream_t);
template cudaError_t launch_sm90<__half, __half>(const Params&, int64_t, int, cudaStream_t);
template cudaError_t launch_sm90<__half, float>(const Params&, int64_t, int, cudaStream_t);

}  // namespace implicit

bool hopper_kernels_compiled() {
#ifdef JAX_IM2COL_SM90A
  return true;
#else
  return false;
#endif
}

}  // namespace im2col::cuda
