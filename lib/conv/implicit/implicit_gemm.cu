// The implicit-GEMM convolution (implicit_gemm.h): the mma.sync kernel for
// Ampere and newer, and the choice of kernel and tile per call (the wgmma
// kernel of implicit_gemm_sm90.cu on Hopper). Shared pieces: implicit_tile.cuh.
//
// Each block copies k-tiles into a ring of STAGES shared buffers so that the
// copies of later k-tiles overlap the arithmetic of this one. Warps hold
// fragments in the m16n8k8 (TF32) / m16n8k16 (half) mma layouts; in 32-bit
// words both are "16 rows x 8 words" for A and "8 rows x 8 words" for B, so
// one loader and one fragment schedule serve every type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/device_util.cuh"
#include "common/mma_sync.cuh"
#include "conv/implicit/implicit_gemm.h"
#include "conv/implicit/implicit_tile.cuh"

namespace im2col::cuda {
namespace {

using namespace implicit;

template <int BM, int BN, int STAGES>
constexpr int shared_bytes() {
  return STAGES * (BM + BN) * kRowBytes + row_bytes<BM>();
}

// A block of WARPS_M x WARPS_N warps; MIN_BLOCKS per multiprocessor bounds
// the registers.
template <typename T, typename TY, int BM, int BN, int WARPS_M, int WARPS_N, int STAGES,
          int MIN_BLOCKS>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, MIN_BLOCKS)
implicit_conv_kernel(const __grid_constant__ Passes ps) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // cp.async, ldmatrix, mma.sync
  constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;  // a warp's tile
  constexpr int MT = WTM / 16, NT = WTN / 8;              // its mma tiles
  static_assert(NT % 2 == 0, "tile shape");

  extern __shared__ __align__(128) uint4 smem[];
  uint4* a_tiles = smem;                                 // [STAGES][BM][kChunks]
  uint4* b_tiles = smem + STAGES * BM * kChunks;         // [STAGES][BN][kChunks]
  int4* origins = reinterpret_cast<int4*>(b_tiles + STAGES * BN * kChunks);  // [BM]
  int2* positions = reinterpret_cast<int2*>(origins + BM);                  // [BM]

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int64_t m0;
  const int pass = block_pass<BM>(ps, m0);
  if (pass < 0) return;
  const Params& p = ps.pass[pass];
  const int32_t n0 = blockIdx.y * BN, group = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  prepare_rows<BM, THREADS>(p, m0, origins, positions);
  __syncthreads();
  const TileLoader<T, BM, BN, THREADS> loader(p, origins, group, split, n0);
  const int k_tiles = loader.k_tiles;

  float acc[MT][NT][4];
  zero(acc);

  // ldmatrix: lane l gives the address of row l % 8 of matrix l / 8. A's four
  // matrices are (rows 0-7, 8-15) x (words 0-3, 4-7) of a 16-row tile; B's are
  // (words 0-3, 4-7) x (two 8-row tiles).
  const int warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
  const int a_row = warp_m * WTM + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int a_half = lane >> 4;
  const int b_row = warp_n * WTN + (lane & 7) + (lane >> 4) * 8;
  const int b_half = (lane >> 3) & 1;

  auto load = [&](int kt, int s) {
    loader.load(a_tiles + s * BM * kChunks, b_tiles + s * BN * kChunks, kt);
  };
  auto multiply = [&](int s) {
    const uint4* a = a_tiles + s * BM * kChunks;
    const uint4* b = b_tiles + s * BN * kChunks;
#pragma unroll
    for (int ks = 0; ks < kChunks / 2; ++ks) {
      uint32_t af[MT][4], bf[NT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const int r = a_row + i * 16, c = 2 * ks + a_half;
        load_matrices(af[i], shared_address(a + r * kChunks + (c ^ (r % 8))));
      }
#pragma unroll
      for (int j = 0; j < NT / 2; ++j) {
        const int r = b_row + j * 16, c = 2 * ks + b_half;
        uint32_t t[4];
        load_matrices(t, shared_address(b + r * kChunks + (c ^ (r % 8))));
        bf[2 * j][0] = t[0];
        bf[2 * j][1] = t[1];
        bf[2 * j + 1][0] = t[2];
        bf[2 * j + 1][1] = t[3];
      }
      multiply_fragments<T>(acc, af, bf);
    }
  };
  cp_async_ring<STAGES>(k_tiles, load, [](int) {}, multiply);

#pragma unroll
  for (int i = 0; i < MT; ++i)
    store_rows<TY, NT>(p, acc[i], warp_m * WTM + i * 16, warp_n * WTN, m0, n0, group, split,
                       positions);
#endif
}

// y = the sum of the parts in order, written in y's layout and type at y's
// positions (Params::y_first ...). Channels-first, consecutive threads take
// consecutive positions of one channel.
template <typename TY>
__global__ void sum_parts_kernel(const Params p) {
  TY* y = static_cast<TY*>(p.y);
  const int64_t total = p.m_total * p.O;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    int64_t image, c;
    int32_t l;
    if (p.y_cl) {
      const int64_t m = e / p.O;
      c = e - m * p.O;
      image = m / p.L;
      l = static_cast<int32_t>(m - image * p.L);
    } else {
      image = e / (static_cast<int64_t>(p.O) * p.L);
      const int64_t rest = e - image * p.O * p.L;
      c = rest / p.L;
      l = static_cast<int32_t>(rest - c * p.L);
    }
    const int64_t m = image * p.L + l;
    float sum = 0.f;
    for (int32_t s = 0; s < p.splits; ++s) sum += p.partials[(s * p.m_total + m) * p.O + c];
    const int64_t at = placed(p, l);
    y[p.y_cl ? (image * p.y_L + at) * p.O + c : (image * p.O + c) * p.y_L + at] =
        store_value<TY>(sum);
  }
}

// Tile shapes: BM x BN with the warps' arrangement and the depth of the ring.
template <typename T, typename TY, int BM, int BN, int WARPS_M, int WARPS_N, int STAGES,
          int MIN_BLOCKS>
cudaError_t launch(const Passes& ps, int64_t groups, cudaStream_t stream) {
  return launch_tiles(implicit_conv_kernel<T, TY, BM, BN, WARPS_M, WARPS_N, STAGES, MIN_BLOCKS>, ps,
                      groups, BM, BN, 32 * WARPS_M * WARPS_N, shared_bytes<BM, BN, STAGES>(), stream);
}

// The mma.sync kernel's tile for a call: the largest that still gives two
// blocks per multiprocessor.
template <typename T, typename TY>
cudaError_t launch_sm80(const Passes& ps, int64_t groups, int multiprocessors, cudaStream_t stream) {
  const int64_t want = 2 * static_cast<int64_t>(multiprocessors), og = ps.pass[0].Og;
  auto blocks = [&](int64_t bm, int64_t bn) { return ps.tiles(bm) * ((og + bn - 1) / bn) * groups; };
  if (ps.pass[0].splits > 1) return launch<T, TY, 128, 64, 2, 2, 3, 3>(ps, groups, stream);
  // Warp tiles of 64 x 64 (32 x 32 for the smallest) keep ldmatrix traffic
  // below what the shared memory delivers: 2 mma per 16 bytes read.
  if (og > 64 && blocks(128, 128) >= want)
    return launch<T, TY, 128, 128, 2, 2, 3, 2>(ps, groups, stream);
  if (blocks(128, 64) >= want) return launch<T, TY, 128, 64, 2, 2, 3, 3>(ps, groups, stream);
  return launch<T, TY, 64, 64, 2, 2, 4, 3>(ps, groups, stream);
}

// The wgmma kernel on Hopper (sm_90, when compiled for sm_90a), else mma.sync;
// then, with splits (one pass), the sum of the parts.
template <typename T, typename TY>
cudaError_t launch_for(const Passes& ps, int64_t groups, cudaStream_t stream) {
  DeviceInfo info;
  if (auto e = current_device_info(&info); e != cudaSuccess) return e;
  if (info.major < 8) return cudaErrorNotSupported;  // Python routes these GPUs elsewhere
  cudaError_t e = cudaErrorNotSupported;
  if (info.major == 9 && info.minor == 0 && hopper_kernels_compiled())
    e = launch_sm90<T, TY>(ps, groups, info.multiprocessors, stream);
  if (e == cudaErrorNotSupported) e = launch_sm80<T, TY>(ps, groups, info.multiprocessors, stream);
  const Params& p = ps.pass[0];
  if (e != cudaSuccess || p.splits == 1) return e;
  sum_parts_kernel<TY><<<blocks_for(p.m_total * p.O), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

// p's y placement (3-D view) from `at`, or the geometry's own output extents.
bool set_placement_3d(const OutputPlacement& at, const Geometry& g, Params& p) {
  const int nd = at.nd == 0 ? g.nd : at.nd;
  if (nd != g.nd) return false;
  int64_t size = 1;
  const int lead = 3 - nd;
  for (int d = 0; d < 3; ++d) {
    const int s = d - lead;
    const bool real = s >= 0;
    const int64_t extent = !real ? 1 : at.nd == 0 ? g.out[s] : at.extent[s];
    const int64_t first = real && at.nd != 0 ? at.first[s] : 0;
    const int64_t step = real && at.nd != 0 ? at.step[s] : 1;
    // Every placed position inside y.
    if (real && (first < 0 || step < 1 || first + step * (g.out[s] - 1) >= extent)) return false;
    p.y_extent[d] = static_cast<int32_t>(extent);
    p.y_first[d] = static_cast<int32_t>(first);
    p.y_step[d] = static_cast<int32_t>(step);
    size *= extent;
  }
  if (size >= (int64_t{1} << 31)) return false;
  p.y_L = static_cast<int32_t>(size);
  return true;
}

}  // namespace

bool implicit_applies(xla::ffi::DataType in, bool tf32, const Geometry& g, int64_t cg,
                      int64_t groups) {
  using xla::ffi::DataType;
  const bool half = in == DataType::F16 || in == DataType::BF16;
  if (!(half || (in == DataType::F32 && tf32))) return false;
  const int64_t vec = half ? 8 : 4;
  constexpr int64_t k32 = int64_t{1} << 31;
  return !g.any_lhs_dilation && cg > 0 && cg % vec == 0 && groups >= 1 && groups <= 65535 &&
         g.nd >= 1 && g.nd <= 3 && cg * g.kernel_size < k32 && cg * groups < k32;
}

cudaError_t implicit_conv(const ImplicitConv& c, const ImplicitPass* passes, int count,
                          xla::ffi::DataType in, xla::ffi::DataType out, cudaStream_t stream) {
  using xla::ffi::DataType;
  const int64_t og = c.o / c.groups;
  if (count < 1 || count > kMaxPasses || (c.splits > 1 && count > 1)) return cudaErrorInvalidValue;
  if (c.o >= (int64_t{1} << 31) || c.c >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  if (c.splits < 1 || c.groups * c.splits > 65535 || (c.splits > 1 && c.partials == nullptr))
    return cudaErrorInvalidValue;
  Passes ps;
  ps.count = 0;
  for (int i = 0; i < count; ++i) {
    const Geometry& g = passes[i].g;
    const int64_t m_total = c.n * g.out_size;
    if (m_total == 0) continue;
    Params& p = ps.pass[ps.count++];
    p.x = static_cast<const char*>(c.x);
    p.w = static_cast<const char*>(passes[i].w);
    p.y = c.y;
    p.m_total = m_total;
    set_window_3d(g, p);
    if (!set_placement_3d(passes[i].at, g, p)) return cudaErrorInvalidValue;
    set_channels(p, c.n, c.c, c.o, c.groups, g.kernel_size);
    p.y_cl = c.y_channels_last;
    p.y_pairs = c.o % 2 == 0 && og % 2 == 0;
    p.splits = static_cast<int32_t>(c.splits);
    p.partials = c.partials;
  }
  if (ps.count == 0 || og == 0) return cudaSuccess;
  switch (in) {
    case DataType::F32: return launch_for<float, float>(ps, c.groups, stream);
    case DataType::BF16:
      return out == DataType::F32 ? launch_for<__nv_bfloat16, float>(ps, c.groups, stream)
                                  : launch_for<__nv_bfloat16, __nv_bfloat16>(ps, c.groups, stream);
    case DataType::F16:
      return out == DataType::F32 ? launch_for<__half, float>(ps, c.groups, stream)
                                  : launch_for<__half, __half>(ps, c.groups, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace im2col::cuda
