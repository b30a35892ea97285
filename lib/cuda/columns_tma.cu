// Channels-first unfold and fold fed by the tensor-memory copy engine (sm_90;
// the device code exists in sm_90a builds only, as for the implicit GEMM).
// See columns_tma.h; the index math is columns_tma.cuh's.
//
// Both kernels: one warp's first thread issues the box copies into a ring of
// slots (full[s] completes when a box has landed, empty[s] when the four
// consumer warps are done with it); the consumers read each 16-byte vector
// as two aligned ones from shared memory, shifted.
// - unfold: a job's input box serves every tap; each vector of the band's
//   columns is one 16-byte store, consecutive lanes on consecutive vectors.
// - fold: a job takes one box of the columns per tap, in increasing tap
//   order, summed into registers (float for half types) starting from what x
//   holds with `accumulate`; deterministic, no atomics.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "columns_tma.cuh"
#include "columns_tma.h"
#include "device_info.h"
#include "device_util.cuh"
#include "hopper.cuh"
#include "tensor_maps.h"

namespace im2col::cuda {
namespace {

using DataType = xla::ffi::DataType;
using namespace hopper;

#ifdef IM2COL_WGMMA
// Shared memory (the plan's smem): slots from the first 128-byte boundary,
// then the full and the empty mbarriers, then the tap table.
struct Ring {
  uint32_t slot0, full0, empty0;
  unsigned char* slots;
  int2* taps;
};

__device__ __forceinline__ Ring ring(unsigned char* raw, const ColumnsTmaPlan& p) {
  Ring r;
  r.slots = raw + (128 - shared_address(raw) % 128) % 128;
  r.slot0 = shared_address(r.slots);
  r.full0 = r.slot0 + p.slots * p.slot_bytes;
  r.empty0 = r.full0 + 8 * p.slots;
  r.taps = reinterpret_cast<int2*>(r.slots + p.slots * p.slot_bytes + 16 * p.slots);
  return r;
}

// Barriers initialised by thread 0 and the tap table filled by every thread,
// then a block barrier; returns false for a block with no jobs.
template <typename TapFn>
__device__ __forceinline__ bool start_ring(const Ring& r, const ColumnsTmaPlan& p, int64_t count, TapFn&& tap) {
  if (count <= 0) return false;
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.slots; ++s) {
      barrier_init(r.full0 + 8 * s, 1);
      barrier_init(r.empty0 + 8 * s, kTmaConsumers / 32);
    }
    barrier_init_fence();
  }
  for (int32_t kk = threadIdx.x; kk < p.kernel_size; kk += blockDim.x) r.taps[kk] = tap(kk);
  __syncthreads();
  return true;
}

// Use t of the ring (t = 0, 1, ...): its slot and the parity of its phase.
__device__ __forceinline__ void ring_use(const ColumnsTmaPlan& p, int64_t t, int& slot, uint32_t& parity) {
  slot = static_cast<int>(t % p.slots);
  parity = static_cast<uint32_t>((t / p.slots) & 1);
}

// The producer's wait for slot `slot` to be free before use t.
__device__ __forceinline__ void wait_empty(const Ring& r, const ColumnsTmaPlan& p, int64_t t, int slot) {
  if (t >= p.slots) barrier_wait(r.empty0 + 8 * slot, static_cast<uint32_t>((t / p.slots - 1) & 1));
}

// A consumer warp's release of a slot.
__device__ __forceinline__ void release(const Ring& r, int slot) {
  __syncwarp();
  if (threadIdx.x % 32 == 0) barrier_arrive(r.empty0 + 8 * slot);
}
#endif

template <int ND, typename U>
__global__ void __launch_bounds__(kTmaThreads)
unfold_cf_tma_kernel(const __grid_constant__ CUtensorMap x_map, U* __restrict__ cols,
                     const __grid_constant__ ColumnsTmaPlan p) {
#ifdef IM2COL_WGMMA
  constexpr int V = 16 / sizeof(U);
  extern __shared__ unsigned char smem_raw[];
  const Ring r = ring(smem_raw, p);
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * p.jobs_per_block;
  const int64_t count = min(p.jobs_per_block, p.jobs - begin);
  if (!start_ring(r, p, count, [&](int32_t kk) {
        int2 t;
        unfold_tap<ND, V>(p, kk, t.x, t.y);
        return t;
      }))
    return;
  int slot;
  uint32_t parity;
  if (threadIdx.x < 32) {
    if (threadIdx.x != 0) return;
    for (int64_t i = 0; i < count; ++i) {
      ring_use(p, i, slot, parity);
      wait_empty(r, p, i, slot);
      int32_t c[ND + 1];
      unfold_box_start<ND>(p, box_job(p, begin + i), c);
      barrier_arrive_expect(r.full0 + 8 * slot, p.box_bytes);
      tma_tile<ND + 1>(r.slot0 + slot * p.slot_bytes, &x_map, r.full0 + 8 * slot, c);
    }
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    ring_use(p, i, slot, parity);
    barrier_wait(r.full0 + 8 * slot, parity);
    unfold_from_box<ND, U>(p, box_job(p, begin + i),
                           reinterpret_cast<const Pack<U, V>*>(r.slots + slot * p.slot_bytes), r.taps, cols,
                           threadIdx.x - 32, kTmaConsumers);
    release(r, slot);
  }
#endif
}

template <int ND, typename TC, typename TX>
__global__ void __launch_bounds__(kTmaThreads)
fold_cf_tma_kernel(const __grid_constant__ CUtensorMap cols_map, TX* __restrict__ x, bool accumulate,
                   const __grid_constant__ ColumnsTmaPlan p) {
#ifdef IM2COL_WGMMA
  using A = typename Acc<TX>::type;
  constexpr int V = 16 / sizeof(TC);
  constexpr int kVectors = 32 / V < 8 ? 32 / V : 8;  // per consumer (the plan's box limits)
  extern __shared__ unsigned char smem_raw[];
  const Ring r = ring(smem_raw, p);
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * p.jobs_per_block;
  const int64_t count = min(p.jobs_per_block, p.jobs - begin);
  if (!start_ring(r, p, count, [&](int32_t kk) { return make_int2(0, fold_tap_shift<ND, V>(p, kk)); }))
    return;
  const int32_t K = p.kernel_size;
  int slot;
  uint32_t parity;
  if (threadIdx.x < 32) {
    if (threadIdx.x != 0) return;
    int64_t t = 0;
    for (int64_t i = 0; i < count; ++i) {
      const BoxJob j = box_job(p, begin + i);
      for (int32_t kk = 0; kk < K; ++kk, ++t) {
        ring_use(p, t, slot, parity);
        wait_empty(r, p, t, slot);
        int32_t c[ND + 2], shift;
        fold_box_start<ND, V>(p, j, kk, c, shift);
        barrier_arrive_expect(r.full0 + 8 * slot, p.box_bytes);
        tma_tile<ND + 2>(r.slot0 + slot * p.slot_bytes, &cols_map, r.full0 + 8 * slot, c);
      }
    }
    return;
  }
  const int32_t first = threadIdx.x - 32;
  int64_t t = 0;
  for (int64_t i = 0; i < count; ++i) {
    const BoxJob j = box_job(p, begin + i);
    const int32_t vectors = fold_job_elements(p, j) / V;
    TX* xb = x + j.plane * p.in_size + j.band * p.band * p.rest;
    A acc[kVectors][V];
#pragma unroll
    for (int u = 0; u < kVectors; ++u) {
      const int32_t vec = first + u * kTmaConsumers;
      Pack<TX, V> old{};
      if (accumulate && vec < vectors) old = *reinterpret_cast<const Pack<TX, V>*>(xb + vec * V);
#pragma unroll
      for (int v = 0; v < V; ++v) acc[u][v] = accumulate ? static_cast<A>(to_acc(old.v[v])) : A(0);
    }
    for (int32_t kk = 0; kk < K; ++kk, ++t) {
      ring_use(p, t, slot, parity);
      barrier_wait(r.full0 + 8 * slot, parity);
      fold_add_box<ND, TC, A, kVectors>(p, reinterpret_cast<const Pack<TC, V>*>(r.slots + slot * p.slot_bytes),
                                        r.taps[kk].y, vectors, first, kTmaConsumers, acc);
      release(r, slot);
    }
#pragma unroll
    for (int u = 0; u < kVectors; ++u) {
      const int32_t vec = first + u * kTmaConsumers;
      if (vec < vectors) {
        Pack<TX, V> out;
#pragma unroll
        for (int v = 0; v < V; ++v) out.v[v] = store_value<TX>(acc[u][v]);
        *reinterpret_cast<Pack<TX, V>*>(xb + vec * V) = out;
      }
    }
  }
#endif
}

#ifdef JAX_IM2COL_SM90A
// The plan for the current device (an sm_90 GPU), or cudaErrorNotSupported.
template <typename Planner>
cudaError_t plan_on_device(Planner&& plan, ColumnsTmaPlan* p) {
  DeviceInfo info;
  if (auto e = current_device_info(&info); e != cudaSuccess) return e;
  if (info.major != 9 || info.minor != 0) return cudaErrorNotSupported;
  return plan(info.multiprocessors, p) ? cudaSuccess : cudaErrorNotSupported;
}

template <typename Kernel, typename... Args>
cudaError_t launch_columns(Kernel kernel, const ColumnsTmaPlan& p, const void* base, size_t elem_bytes,
                           cudaStream_t stream, Args... args) {
  CUtensorMap map;
  if (!encode_tiled_map(&map, elem_bytes, p.rank, base, p.dims, p.strides, p.box, p.element_strides))
    return cudaErrorNotSupported;
  if (p.smem > 48 * 1024) {
    if (auto e = allow_shared_bytes(reinterpret_cast<const void*>(kernel), static_cast<int>(p.smem));
        e != cudaSuccess)
      return e;
  }
  kernel<<<p.blocks, kTmaThreads, p.smem, stream>>>(map, args..., p);
  return cudaGetLastError();
}
#endif

}  // namespace

cudaError_t unfold_cf_tma(const void* x, void* cols, size_t elem_bytes, const Geometry& g, int64_t C,
                          int64_t n0, int64_t nc, const ColumnsLayout& lay, cudaStream_t stream) {
#ifndef JAX_IM2COL_SM90A
  (void)x, (void)cols, (void)elem_bytes, (void)g, (void)C, (void)n0, (void)nc, (void)lay, (void)stream;
  return cudaErrorNotSupported;
#else
  if (!aligned_to(x, 16) || !aligned_to(cols, 16)) return cudaErrorNotSupported;
  ColumnsTmaPlan p;
  if (auto e = plan_on_device([&](int sms, ColumnsTmaPlan* q) {
        return plan_unfold_tma(g, lay, C, nc, elem_bytes, sms, q);
      }, &p);
      e != cudaSuccess)
    return e;
  const void* base = static_cast<const char*>(x) + n0 * C * g.in_size * static_cast<int64_t>(elem_bytes);
  return dispatch_rank(g.nd, [&](auto rank) {
    constexpr int ND = decltype(rank)::value;
    return with_element_bytes(elem_bytes, [&](auto tag) {
      using U = decltype(tag);
      return launch_columns(unfold_cf_tma_kernel<ND, U>, p, base, elem_bytes, stream, static_cast<U*>(cols));
    });
  });
#endif
}

cudaError_t fold_cf_tma(const void* cols, DataType cols_type, void* x, DataType x_type, const Geometry& g,
                        int64_t C, int64_t n0, int64_t nc, const ColumnsLayout& lay, bool accumulate,
                        cudaStream_t stream) {
#ifndef JAX_IM2COL_SM90A
  (void)cols, (void)cols_type, (void)x, (void)x_type, (void)g, (void)C, (void)n0, (void)nc, (void)lay,
      (void)accumulate, (void)stream;
  return cudaErrorNotSupported;
#else
  const size_t ec = xla::ffi::ByteWidth(cols_type), ex = xla::ffi::ByteWidth(x_type);
  if (ec == 0 || ex == 0 || !aligned_to(cols, 16) || !aligned_to(x, ex * (16 / ec)))
    return cudaErrorNotSupported;
  ColumnsTmaPlan p;
  if (auto e = plan_on_device([&](int sms, ColumnsTmaPlan* q) {
        return plan_fold_tma(g, lay, C, nc, ec, sms, q);
      }, &p);
      e != cudaSuccess)
    return e;
  void* xc = static_cast<char*>(x) + n0 * C * g.in_size * static_cast<int64_t>(ex);
  return dispatch_rank(g.nd, [&](auto rank) -> cudaError_t {
    constexpr int ND = decltype(rank)::value;
#define IM2COL_FOLD_TMA(TC, TX) \
  return launch_columns(fold_cf_tma_kernel<ND, TC, TX>, p, cols, ec, stream, static_cast<TX*>(xc), accumulate)
    if (cols_type == x_type) {
      switch (x_type) {
        case DataType::F16: IM2COL_FOLD_TMA(__half, __half);
        case DataType::BF16: IM2COL_FOLD_TMA(__nv_bfloat16, __nv_bfloat16);
        case DataType::F32: IM2COL_FOLD_TMA(float, float);
        case DataType::F64: IM2COL_FOLD_TMA(double, double);
        default: return cudaErrorNotSupported;
      }
    }
    if (cols_type == DataType::F32 && x_type == DataType::F16) IM2COL_FOLD_TMA(float, __half);
    if (cols_type == DataType::F32 && x_type == DataType::BF16) IM2COL_FOLD_TMA(float, __nv_bfloat16);
#undef IM2COL_FOLD_TMA
    return cudaErrorNotSupported;
  });
#endif
}

}  // namespace im2col::cuda
