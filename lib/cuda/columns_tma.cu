// Channels-first unfold and fold by the tensor-memory copy engine (sm_90; the
// device code exists in sm_90a builds only, as for the implicit GEMM). See
// columns_tma.h.
//
// unfold: a block's one thread walks its jobs (plane, band, tap; taps
// innermost, so a plane's box is read from DRAM once and from L2 for the
// other taps). Box i of the block lands in slot i % slots (a tiled copy of
// the input, zeros for padding, element strides for the strides of the outer
// dimensions) and leaves by one bulk store into the columns; a slot is loaded
// again once the store before the latest has read it.
//
// fold: one warp's first thread loads, for each output box of the block, the
// boxes of the columns that its taps read, in increasing tap order, into a
// ring of slots; four warps add each slot into their registers (16 bytes a
// lane, float accumulators for half types) and release it, then store the
// sums. Every element still sums its taps in increasing order, starting from
// what x holds with `accumulate`: deterministic, no atomics.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "columns_tma.h"
#include "device_info.h"
#include "device_util.cuh"
#include "hopper.cuh"
#include "implicit_gemm.h"
#include "tensor_maps.h"

namespace im2col::cuda {
namespace {

using DataType = xla::ffi::DataType;
using namespace hopper;

constexpr int kUnfoldThreads = 32;
constexpr int kFoldConsumers = 128;
constexpr int kFoldThreads = 32 + kFoldConsumers;
// Shared memory per block stays within the 48 KB that needs no opt-in.
constexpr uint32_t kSmemLimit = 48 * 1024;
constexpr uint32_t kSmemPerMultiprocessor = 228 * 1024;
constexpr uint32_t kUnfoldBoxTarget = 8 * 1024;
constexpr uint32_t kUnfoldSlots = 4;
// A fold box is at most 4096 elements and 16 KB: 32 (16 for double) sums per
// consumer thread.
constexpr int64_t kFoldBoxElements = 4096;
constexpr uint32_t kFoldBoxBytes = 16 * 1024;
constexpr uint32_t kFoldSlots = 4;
constexpr uint32_t kBarrierBytes = 128;  // room for 2 * kFoldSlots mbarriers
constexpr uint32_t kAlignSlack = 128;    // slots start 128-byte aligned

constexpr int64_t kMaxBox = 256;  // elements per box dimension

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows of dimension 0 per box: at most max_rows (rounded down to a multiple
// of `multiple`), spread evenly over `rows`, a multiple of `multiple`.
bool size_bands(int64_t rows, int64_t max_rows, int64_t multiple, ColumnsTmaPlan* p) {
  max_rows = max_rows / multiple * multiple;
  if (rows < 1 || max_rows < 1) return false;
  const int64_t band = ceil_div(ceil_div(rows, ceil_div(rows, max_rows)), multiple) * multiple;
  p->band = static_cast<int32_t>(band);
  p->bands = static_cast<int32_t>(ceil_div(rows, band));
  p->rows = static_cast<int32_t>(rows);
  return true;
}

void copy_window(const Geometry& g, ColumnsTmaPlan* p) {
  p->nd = g.nd;
  p->kernel_size = static_cast<int32_t>(g.kernel_size);
  for (int d = 0; d < g.nd; ++d) {
    p->kernel[d] = static_cast<int32_t>(g.kernel[d]);
    p->dilation[d] = static_cast<int32_t>(g.rhs_dilation[d]);
    p->stride[d] = static_cast<int32_t>(g.stride[d]);
    p->pad[d] = static_cast<int32_t>(g.pad_lo[d]);
  }
}

// Slots that fit the shared memory (at least two), blocks per multiprocessor
// that fit beside each other, and jobs spread over the grid.
bool size_grid(uint32_t max_slots, int threads, int multiprocessors, ColumnsTmaPlan* p) {
  p->slot_bytes = (p->box_bytes + 127) / 128 * 128;
  const uint32_t room = kSmemLimit - kAlignSlack - kBarrierBytes;
  p->slots = static_cast<int32_t>(std::min<uint32_t>(max_slots, room / p->slot_bytes));
  if (p->slots < 2) return false;
  p->smem = kAlignSlack + p->slots * p->slot_bytes + kBarrierBytes;
  const int64_t per_sm = std::max<int64_t>(
      1, std::min<int64_t>(2048 / threads, kSmemPerMultiprocessor / (p->smem + 1024)));
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(p->jobs, per_sm * multiprocessors));
  p->jobs_per_block = ceil_div(p->jobs, blocks);
  p->blocks = static_cast<uint32_t>(ceil_div(p->jobs, p->jobs_per_block));
  return true;
}

}  // namespace

bool plan_unfold_tma(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc,
                     size_t elem_bytes, int multiprocessors, ColumnsTmaPlan* p) {
  const int nd = g.nd;
  const int64_t V = 16 / static_cast<int64_t>(elem_bytes), e = static_cast<int64_t>(elem_bytes);
  if (nd < 1 || nd > kMaxSpatial || C < 1 || nc < 1 || lay.lc < 1 || g.out_size < 1) return false;
  if (g.any_lhs_dilation || g.stride[nd - 1] != 1) return false;
  for (int d = 0; d < nd; ++d)
    if (g.stride[d] > 8) return false;
  // Global strides and the box's inner extent in whole 16 bytes; stores of
  // whole vectors from 16-byte aligned smem to 16-byte aligned columns.
  if (g.in[nd - 1] % V != 0 || lay.l0 % V != 0 || lay.lc % V != 0 || lay.row_stride % V != 0 ||
      lay.image_stride % V != 0 || nc * C >= (int64_t{1} << 31))
    return false;
  if (nd >= 2 && (g.out[nd - 1] % V != 0 || g.out[nd - 1] > kMaxBox)) return false;
  if (nd == 3 && g.out[1] * g.stride[1] > kMaxBox) return false;
  const int64_t rest = g.out_size / g.out[0];
  const int64_t max_row_bytes = (kSmemLimit - kAlignSlack - kBarrierBytes) / 2;
  if (rest * e > max_row_bytes) return false;
  *p = ColumnsTmaPlan{};
  copy_window(g, p);
  p->rank = nd + 1;
  p->rest = rest;
  p->first_row = static_cast<int32_t>(lay.l0 / rest);
  const int64_t rows = (lay.l0 + lay.lc - 1) / rest - p->first_row + 1;
  const int64_t max_rows = std::min<int64_t>(kMaxBox / g.stride[0],
                                             std::max<int64_t>(1, kUnfoldBoxTarget / (rest * e)));
  if (!size_bands(rows, max_rows, nd == 1 ? V : 1, p)) return false;
  p->channels = C;
  p->in_size = g.in_size;
  p->layout = lay;
  p->box_bytes = static_cast<uint32_t>(p->band * rest * e);
  p->jobs = nc * C * p->bands * g.kernel_size;
  // The input planes of the chunk: spatial dimensions innermost first, then planes.
  for (int i = 0; i < nd; ++i) {
    const int d = nd - 1 - i;
    p->dims[i] = static_cast<cuuint64_t>(g.in[d]);
    p->strides[i] = (i == 0 ? static_cast<cuuint64_t>(e) : p->strides[i - 1]) * p->dims[i];
    const int64_t count = d == 0 ? p->band : g.out[d];
    p->box[i] = static_cast<cuuint32_t>(count * g.stride[d]);
    p->element_strides[i] = static_cast<cuuint32_t>(g.stride[d]);
    if (p->box[i] > kMaxBox) return false;
  }
  p->dims[nd] = static_cast<cuuint64_t>(nc * C);
  p->box[nd] = 1;
  p->element_strides[nd] = 1;
  return size_grid(kUnfoldSlots, kUnfoldThreads, multiprocessors, p);
}

bool plan_fold_tma(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc,
                   size_t cols_bytes, int multiprocessors, ColumnsTmaPlan* p) {
  const int nd = g.nd;
  const int64_t V = 16 / static_cast<int64_t>(cols_bytes), e = static_cast<int64_t>(cols_bytes);
  if (nd < 1 || nd > kMaxSpatial || C < 1 || nc < 1 || lay.lc < 1 || g.out_size < 1 || g.in_size < 1)
    return false;
  if (g.any_lhs_dilation) return false;
  for (int d = 0; d < nd; ++d)
    if (g.stride[d] != 1) return false;
  const int64_t rest_out = g.out_size / g.out[0], rest_in = g.in_size / g.in[0];
  // Whole rows of dimension 0 in the chunk (the map's extent there); strides
  // of the columns' map in whole 16 bytes and increasing; whole vectors of
  // the input per thread.
  if (lay.l0 % rest_out != 0 || lay.lc % rest_out != 0 || lay.row_stride % V != 0 ||
      lay.image_stride % V != 0 || lay.image_stride < C * g.kernel_size * lay.row_stride ||
      g.in[nd - 1] % V != 0 || C * g.kernel_size >= (int64_t{1} << 31) || nc >= (int64_t{1} << 31))
    return false;
  if (nd >= 2 && (g.out[nd - 1] % V != 0 || g.in[nd - 1] > kMaxBox)) return false;
  if (nd == 3 && g.in[1] > kMaxBox) return false;
  const int64_t max_elements = std::min<int64_t>(kFoldBoxElements, kFoldBoxBytes / e);
  if (rest_in > max_elements) return false;
  *p = ColumnsTmaPlan{};
  copy_window(g, p);
  p->rank = nd + 2;
  p->rest = rest_in;
  p->first_row = static_cast<int32_t>(lay.l0 / rest_out);
  if (!size_bands(g.in[0], std::min<int64_t>(kMaxBox, max_elements / rest_in), nd == 1 ? V : 1, p))
    return false;
  p->channels = C;
  p->in_size = g.in_size;
  p->layout = lay;
  p->box_bytes = static_cast<uint32_t>(p->band * rest_in * e);
  p->jobs = nc * C * p->bands;
  // The chunk's columns: output positions innermost first (dimension 0 cut
  // to the chunk's rows), then rows (channel, tap), then images.
  cuuint64_t stride = static_cast<cuuint64_t>(e);  // of dimension i
  for (int i = 0; i < nd; ++i) {
    const int d = nd - 1 - i;
    p->dims[i] = static_cast<cuuint64_t>(d == 0 ? lay.lc / rest_out : g.out[d]);
    p->box[i] = static_cast<cuuint32_t>(d == 0 ? p->band : g.in[d]);
    p->element_strides[i] = 1;
    if (i > 0) p->strides[i - 1] = stride;
    stride *= p->dims[i];
  }
  p->dims[nd] = static_cast<cuuint64_t>(C * g.kernel_size);
  p->dims[nd + 1] = static_cast<cuuint64_t>(nc);
  p->strides[nd - 1] = static_cast<cuuint64_t>(lay.row_stride * e);
  p->strides[nd] = static_cast<cuuint64_t>(lay.image_stride * e);
  p->box[nd] = p->box[nd + 1] = 1;
  p->element_strides[nd] = p->element_strides[nd + 1] = 1;
  return size_grid(kFoldSlots, kFoldThreads, multiprocessors, p);
}

namespace {

#ifdef IM2COL_WGMMA
__device__ __forceinline__ unsigned char* aligned_slots(unsigned char* raw) {
  return raw + (kAlignSlack - shared_address(raw) % kAlignSlack) % kAlignSlack;
}

// Tap kk's offsets along each dimension.
template <int ND>
__device__ __forceinline__ void tap_coordinates(const ColumnsTmaPlan& p, int32_t kk, int32_t (&k)[kMaxSpatial]) {
#pragma unroll
  for (int d = ND - 1; d >= 0; --d) {
    k[d] = kk % p.kernel[d];
    kk /= p.kernel[d];
  }
}
#endif

template <int ND, typename U>
__global__ void __launch_bounds__(kUnfoldThreads)
unfold_cf_tma_kernel(const __grid_constant__ CUtensorMap x_map, U* __restrict__ cols,
                     const __grid_constant__ ColumnsTmaPlan p) {
#ifdef IM2COL_WGMMA
  if (threadIdx.x != 0) return;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * p.jobs_per_block;
  const int64_t count = min(p.jobs_per_block, p.jobs - begin);
  if (count <= 0) return;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t slot0 = shared_address(aligned_slots(smem_raw));
  const uint32_t bar0 = slot0 + p.slots * p.slot_bytes;
  for (int s = 0; s < p.slots; ++s) barrier_init(bar0 + 8 * s, 1);
  barrier_init_fence();
  const int64_t K = p.kernel_size;

  struct Job {
    int64_t plane, band, k;
  };
  auto job = [&](int64_t i) {
    Job j;
    const int64_t t = (begin + i) / K;
    j.k = (begin + i) - t * K;
    j.plane = t / p.bands;
    j.band = t - j.plane * p.bands;
    return j;
  };
  auto load = [&](int64_t i) {
    const Job j = job(i);
    int32_t k[kMaxSpatial];
    tap_coordinates<ND>(p, static_cast<int32_t>(j.k), k);
    int32_t c[ND + 1];
#pragma unroll
    for (int d = 0; d < ND; ++d) {
      const int32_t o = d == 0 ? p.first_row + static_cast<int32_t>(j.band) * p.band : 0;
      c[ND - 1 - d] = o * p.stride[d] + k[d] * p.dilation[d] - p.pad[d];
    }
    c[ND] = static_cast<int32_t>(j.plane);
    const int s = static_cast<int>(i % p.slots);
    barrier_arrive_expect(bar0 + 8 * s, p.box_bytes);
    tma_tile<ND + 1>(slot0 + s * p.slot_bytes, &x_map, bar0 + 8 * s, c);
  };
  // The box's positions that lie in the chunk (whole vectors: the plan's
  // alignment), one bulk store.
  const ColumnsLayout& lay = p.layout;
  auto store = [&](int64_t i) {
    const Job j = job(i);
    const int64_t row0 = p.first_row + j.band * p.band;
    const int64_t box_begin = row0 * p.rest;
    const int64_t begin_pos = max(box_begin, lay.l0);
    const int64_t end_pos = min((row0 + p.band) * p.rest, lay.l0 + lay.lc);
    const int s = static_cast<int>(i % p.slots);
    if (end_pos > begin_pos) {
      const int64_t n = j.plane / p.channels, c = j.plane - n * p.channels;
      U* dst = cols + n * lay.image_stride + (c * K + j.k) * lay.row_stride + (begin_pos - lay.l0);
      bulk_store(dst, slot0 + s * p.slot_bytes + static_cast<uint32_t>((begin_pos - box_begin) * sizeof(U)),
                 static_cast<uint32_t>((end_pos - begin_pos) * sizeof(U)));
    }
    bulk_commit();
  };

  for (int64_t i = 0; i < min(count, static_cast<int64_t>(p.slots)); ++i) load(i);
  for (int64_t i = 0; i < count; ++i) {
    const int s = static_cast<int>(i % p.slots);
    barrier_wait(bar0 + 8 * s, static_cast<uint32_t>((i / p.slots) & 1));
    store(i);
    // Refill the slot of the store before this one once it has been read.
    if (i >= 1 && i - 1 + p.slots < count) {
      bulk_wait_read<1>();
      load(i - 1 + p.slots);
    }
  }
  bulk_wait_all();
#endif
}

template <int ND, typename TC, typename TX>
__global__ void __launch_bounds__(kFoldThreads)
fold_cf_tma_kernel(const __grid_constant__ CUtensorMap cols_map, TX* __restrict__ x, bool accumulate,
                   const __grid_constant__ ColumnsTmaPlan p) {
#ifdef IM2COL_WGMMA
  using A = typename Acc<TX>::type;
  constexpr int V = 16 / sizeof(TC);
  constexpr int kVectors = 32 / V < 8 ? 32 / V : 8;  // per consumer thread (see kFoldBoxElements)
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * p.jobs_per_block;
  const int64_t count = min(p.jobs_per_block, p.jobs - begin);
  if (count <= 0) return;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* slots = aligned_slots(smem_raw);
  const uint32_t slot0 = shared_address(slots);
  const uint32_t full0 = slot0 + p.slots * p.slot_bytes, empty0 = full0 + 8 * p.slots;
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.slots; ++s) {
      barrier_init(full0 + 8 * s, 1);
      barrier_init(empty0 + 8 * s, kFoldConsumers / 32);
    }
    barrier_init_fence();
  }
  __syncthreads();
  const int32_t K = p.kernel_size;

  if (threadIdx.x < 32) {
    if (threadIdx.x != 0) return;
    int64_t t = 0;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t plane = (begin + i) / p.bands, band = (begin + i) - plane * p.bands;
      const int64_t n = plane / p.channels, c = plane - n * p.channels;
      for (int32_t kk = 0; kk < K; ++kk, ++t) {
        const int s = static_cast<int>(t % p.slots);
        if (t >= p.slots) barrier_wait(empty0 + 8 * s, static_cast<uint32_t>((t / p.slots - 1) & 1));
        int32_t k[kMaxSpatial];
        tap_coordinates<ND>(p, kk, k);
        int32_t co[ND + 2];
#pragma unroll
        for (int d = 0; d < ND; ++d) {
          const int32_t q = d == 0 ? static_cast<int32_t>(band) * p.band - p.first_row : 0;
          co[ND - 1 - d] = q + p.pad[d] - k[d] * p.dilation[d];
        }
        co[ND] = static_cast<int32_t>(c * K + kk);
        co[ND + 1] = static_cast<int32_t>(n);
        barrier_arrive_expect(full0 + 8 * s, p.box_bytes);
        tma_tile<ND + 2>(slot0 + s * p.slot_bytes, &cols_map, full0 + 8 * s, co);
      }
    }
    return;
  }

  const int thread = threadIdx.x - 32;
  int64_t t = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t plane = (begin + i) / p.bands, band = (begin + i) - plane * p.bands;
    const int64_t rows = min(static_cast<int64_t>(p.band), p.rows - band * p.band);
    const int32_t vectors = static_cast<int32_t>(rows * p.rest / V);
    TX* xb = x + plane * p.in_size + band * p.band * p.rest;
    A acc[kVectors][V];
#pragma unroll
    for (int u = 0; u < kVectors; ++u) {
      const int32_t vec = thread + u * kFoldConsumers;
      Pack<TX, V> old;
      if (accumulate && vec < vectors) old = *reinterpret_cast<const Pack<TX, V>*>(xb + vec * V);
#pragma unroll
      for (int v = 0; v < V; ++v)
        acc[u][v] = accumulate && vec < vectors ? static_cast<A>(to_acc(old.v[v])) : A(0);
    }
    for (int32_t kk = 0; kk < K; ++kk, ++t) {
      const int s = static_cast<int>(t % p.slots);
      barrier_wait(full0 + 8 * s, static_cast<uint32_t>((t / p.slots) & 1));
      const Pack<TC, V>* box = reinterpret_cast<const Pack<TC, V>*>(slots + s * p.slot_bytes);
#pragma unroll
      for (int u = 0; u < kVectors; ++u) {
        const int32_t vec = thread + u * kFoldConsumers;
        if (vec < vectors) {
          const Pack<TC, V> c = box[vec];
#pragma unroll
          for (int v = 0; v < V; ++v) acc[u][v] += static_cast<A>(to_acc(c.v[v]));
        }
      }
      __syncwarp();
      if (threadIdx.x % 32 == 0) barrier_arrive(empty0 + 8 * s);
    }
#pragma unroll
    for (int u = 0; u < kVectors; ++u) {
      const int32_t vec = thread + u * kFoldConsumers;
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
// The plan for the current device, or cudaErrorNotSupported.
template <typename Planner>
cudaError_t plan_on_device(Planner&& plan, ColumnsTmaPlan* p) {
  DeviceInfo info;
  if (auto e = current_device_info(&info); e != cudaSuccess) return e;
  if (info.major != 9 || info.minor != 0) return cudaErrorNotSupported;
  return plan(info.multiprocessors, p) ? cudaSuccess : cudaErrorNotSupported;
}

template <typename Kernel, typename... Args>
cudaError_t launch_columns(Kernel kernel, const ColumnsTmaPlan& p, int threads, const void* base,
                           size_t elem_bytes, cudaStream_t stream, Args... args) {
  CUtensorMap map;
  if (!encode_tiled_map(&map, elem_bytes, p.rank, base, p.dims, p.strides, p.box, p.element_strides))
    return cudaErrorNotSupported;
  kernel<<<p.blocks, threads, p.smem, stream>>>(map, args..., p);
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
      return launch_columns(unfold_cf_tma_kernel<ND, U>, p, kUnfoldThreads, base, elem_bytes, stream,
                            static_cast<U*>(cols));
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
#define IM2COL_FOLD_TMA(TC, TX)                                                                 \
  return launch_columns(fold_cf_tma_kernel<ND, TC, TX>, p, kFoldThreads, cols, ec, stream,     \
                        static_cast<TX*>(xc), accumulate)
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
