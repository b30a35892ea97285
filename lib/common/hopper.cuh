// Hopper (sm_90a) primitives for the implicit GEMM (implicit_gemm_sm90.cu):
// warpgroup MMA ordering, shared-memory matrix descriptors, mbarriers and
// tensor-memory-access (TMA) copies. Defined only where IM2COL_WGMMA is: in
// device code compiled for sm_90a.
#pragma once

#include <cuda.h>

#include <cstdint>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define IM2COL_WGMMA 1
#endif

namespace im2col::cuda::hopper {

constexpr int kSwizzleAtomBytes = 1024;  // one period of the 128-byte swizzle: 8 rows

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
// Shared memory written through the generic proxy (stores, cp.async) made
// visible to the async proxy (wgmma, TMA).
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

// A K-major operand in 128-byte-swizzled rows: 8-row groups `group_bytes`
// apart (the stride byte offset; 1024 for consecutive rows); the leading byte
// offset is unused for this layout. The swizzle is a function of the absolute
// shared address (the chunk's address bits 4-6 XOR bits 7-9), so the start
// may be any 128-byte row and the groups any whole number of rows apart, with
// the base-offset field left 0: benchmarks/probe_descriptor.cu checked this on
// the H100 (docs/optimization-log.md, step 46).
__device__ __forceinline__ uint64_t matrix_descriptor(uint32_t address, uint32_t group_bytes = 1024) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (uint64_t{1} << 16) |
         (static_cast<uint64_t>(group_bytes >> 4) << 32) | (uint64_t{1} << 62);
}

// The first 1024-byte boundary (one period of the 128-byte swizzle) at or
// after `raw`: tiles placed there read as the descriptors expect.
__device__ __forceinline__ uint8_t* swizzle_aligned(uint8_t* raw) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  return raw + ((kSwizzleAtomBytes - a % kSwizzleAtomBytes) % kSwizzleAtomBytes);
}

// --- mbarriers (shared-memory addresses) ---------------------------------------
__device__ __forceinline__ void barrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void barrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival that also expects `bytes` from asynchronous copies.
__device__ __forceinline__ void barrier_arrive_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Until the phase of parity `parity` has completed.
__device__ __forceinline__ void barrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// --- TMA ------------------------------------------------------------------------
// A box of the tiled 2-D map at (x0 innermost, x1) into dst, completing on bar.
__device__ __forceinline__ void tma_tile_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int32_t x0, int32_t x1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x0), "r"(x1)
      : "memory");
}

// A box of a tiled map of rank 3-5 at coordinates c (innermost first).
__device__ __forceinline__ void tma_tile_nd(int rank, uint32_t dst, const CUtensorMap* map,
                                            uint32_t bar, const int32_t (&c)[5]) {
  const uint64_t m = reinterpret_cast<uint64_t>(map);
  if (rank == 3) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
        "l"(m), "r"(bar), "r"(c[0]), "r"(c[1]), "r"(c[2])
        : "memory");
  } else if (rank == 4) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
        "l"(m), "r"(bar), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3])
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n" ::"r"(dst),
        "l"(m), "r"(bar), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4])
        : "memory");
  }
}

// A column of the im2col map: pixels from the window corner (w, h, d) of image
// n on, channels from c, each displaced by the tap's (dw, dh, dd).
template <int NDIM>
__device__ __forceinline__ void tma_im2col(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                           int32_t c, const int32_t (&corner)[3], int32_t n,
                                           const uint16_t (&tap)[3]) {
  const uint64_t m = reinterpret_cast<uint64_t>(map);
  if constexpr (NDIM == 1) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5}], [%2], {%6};\n" ::"r"(dst),
        "l"(m), "r"(bar), "r"(c), "r"(corner[2]), "r"(n), "h"(tap[2])
        : "memory");
  } else if constexpr (NDIM == 2) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2], {%7, %8};\n" ::"r"(dst),
        "l"(m), "r"(bar), "r"(c), "r"(corner[2]), "r"(corner[1]), "r"(n), "h"(tap[2]), "h"(tap[1])
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6, %7}], [%2], {%8, %9, %10};\n" ::"r"(dst),
        "l"(m), "r"(bar), "r"(c), "r"(corner[2]), "r"(corner[1]), "r"(corner[0]), "r"(n),
        "h"(tap[2]), "h"(tap[1]), "h"(tap[0])
        : "memory");
  }
}

// tma_im2col for an image of nd (1-3) spatial dimensions, the tap given as
// displacements per dimension of the 3-D view.
__device__ __forceinline__ void tma_im2col_nd(int nd, uint32_t dst, const CUtensorMap* map,
                                              uint32_t bar, int32_t c, const int32_t (&corner)[3],
                                              int32_t n, const int32_t (&disp)[3]) {
  const uint16_t tap[3] = {static_cast<uint16_t>(disp[0]), static_cast<uint16_t>(disp[1]),
                           static_cast<uint16_t>(disp[2])};
  if (nd == 1) tma_im2col<1>(dst, map, bar, c, corner, n, tap);
  else if (nd == 2) tma_im2col<2>(dst, map, bar, c, corner, n, tap);
  else tma_im2col<3>(dst, map, bar, c, corner, n, tap);
}
#endif

}  // namespace im2col::cuda::hopper
