// The implicit-GEMM convolution on Hopper for unit-stride windows, from
// staged halos: each warpgroup takes an 8 x 8 tile of output positions (a
// line of 64 in 1-D) and, per 128-byte run of channels (and per depth tap in
// 3-D), one tiled TMA box of the input under the tile's windows: the tile
// plus the window's reach, (8 + reach_h) x (8 + reach_w) positions of 128
// bytes. Every tap of the window plane then multiplies out of that one box:
// the A operand of tap (kh, kw) is the box's rows from (kh * dh) * box_w +
// kw * dw on, in 8-row groups box_w rows apart (one group per output row),
// which a wgmma descriptor describes directly (hopper.cuh,
// matrix_descriptor). The TMA kernel of implicit_gemm_sm90.cu copies one
// im2col box per tap instead: the same input 9 times for a 3 x 3 window.
//
// One producer thread issues the copies into two rings: halos (2 slots, each
// the two warpgroups' boxes) and filter k-tiles (BN rows x 128 bytes of one
// tap, STAGES slots), with full / empty mbarriers as in the TMA kernel. Blocks
// are persistent (as many as fit at once), each taking pairs of tiles in turn,
// so that the next pair's copies overlap this pair's multiplies and stores. The
// reduction runs run-major (all taps of a run of channels, then the next
// run), a different order of the float32 sums than the other kernels'.
//
// Taken where every pass has unit strides, whole 128-byte runs of channels
// per group, no split reduction, boxes of at most 256 rows, and tiles that
// waste at most 15% of their positions past the output's edges (halo_applies).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "common/hopper.cuh"
#include "common/switches.h"
#include "common/tensor_maps.h"
#include "common/wgmma.cuh"
#include "conv/implicit/implicit_gemm.h"
#include "conv/implicit/implicit_tile.cuh"

namespace im2col::cuda {
namespace implicit {
namespace {

using namespace hopper;

constexpr int kHaloSlots = 2;
constexpr int kHaloThreads = 2 * 128 + 32;  // two warpgroups multiply, one warp copies
constexpr int kMaxHaloRows = 256;           // rows (128 bytes) of one warpgroup's box

// A warpgroup's tile of a pass and the box under its windows (3-D view).
struct HaloShape {
  int32_t th, tw;          // tile extents: 8 x 8, or 1 x 64 in 1-D
  int32_t box_h, box_w;    // the tile plus the window's reach
  int32_t tiles_h, tiles_w;  // tiles per output plane
  int64_t tiles;           // tiles of the pass: images x depth x plane
};

__host__ __device__ inline HaloShape halo_shape(const Params& p) {
  HaloShape s;
  s.th = p.nd == 1 ? 1 : 8;
  s.tw = 64 / s.th;
  s.box_h = s.th + p.dilation[1] * (p.kernel[1] - 1);
  s.box_w = s.tw + p.dilation[2] * (p.kernel[2] - 1);
  s.tiles_h = (p.out[1] + s.th - 1) / s.th;
  s.tiles_w = (p.out[2] + s.tw - 1) / s.tw;
  s.tiles = static_cast<int64_t>(p.images) * p.out[0] * s.tiles_h * s.tiles_w;
  return s;
}

// Rows of a warpgroup's region in shared memory: whole swizzle periods.
__host__ __device__ inline int32_t region_rows(const HaloShape& s) {
  return (s.box_h * s.box_w + 7) / 8 * 8;
}

// Tile t's image, output depth and first output row and column.
struct HaloTile {
  int32_t image, od, oh, ow;
};

// (32-bit: halo_applies keeps a pass's tiles below 2**31.)
__device__ __forceinline__ HaloTile halo_tile(const Params& p, const HaloShape& s, int32_t t) {
  HaloTile h;
  h.ow = t % s.tiles_w * s.tw;
  t /= s.tiles_w;
  h.oh = t % s.tiles_h * s.th;
  t /= s.tiles_h;
  h.od = t % p.out[0];
  h.image = t / p.out[0];
  return h;
}

struct HaloMaps {
  CUtensorMap image[kMaxPasses], filter[kMaxPasses];
  int32_t region_rows;  // the largest pass's, the stride of the regions
  int32_t items;        // pairs of tiles: the largest pass's, times the passes
};

// Item w of a launch: pass w % count's pair of tiles w / count (interleaved
// as block_pass interleaves); `ok` false where that pass has no such pair.
// Its reduction runs in rounds, one halo each: (run of BKE channels, depth
// tap), each round all taps of the window plane.
struct HaloItem {
  bool ok;
  int pass;
  int32_t first_tile;
  HaloShape s;
  int32_t depth_taps, plane_taps, rounds;
};

template <int BKE>
__device__ __forceinline__ HaloItem halo_item(const Passes& ps, int32_t w) {
  HaloItem it;
  it.pass = w % ps.count;
  it.first_tile = w / ps.count * 2;
  const Params& p = ps.pass[it.pass];
  it.s = halo_shape(p);
  it.ok = it.first_tile < it.s.tiles;
  it.depth_taps = p.kernel[0];
  it.plane_taps = p.kernel[1] * p.kernel[2];
  it.rounds = p.Cg / BKE * it.depth_taps;
  return it;
}

template <int BN, int STAGES>
constexpr int halo_fixed_bytes() {
  return kSwizzleAtomBytes + STAGES * BN * kRowBytes +
         2 * (kHaloSlots + STAGES) * static_cast<int>(sizeof(uint64_t)) + 128 * sizeof(int2);
}

#ifdef IM2COL_WGMMA
// A barrier of one warpgroup's 128 threads (ids 1 and 2; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_barrier(int warpgroup) {
  if (warpgroup == 0) asm volatile("bar.sync 1, 128;\n" ::: "memory");
  else asm volatile("bar.sync 2, 128;\n" ::: "memory");
}
#endif

// Persistent: block (x, n-tile, group) takes items x, x + gridDim.x, ...; the
// rings' counters run across items, so that the producer copies the next
// item's halo and filter k-tiles while the warpgroups multiply and store this
// one's.
template <typename T, typename TY, int BN, int STAGES, int MIN_BLOCKS>
__global__ void __launch_bounds__(kHaloThreads, MIN_BLOCKS)
implicit_conv_halo_kernel(const __grid_constant__ Passes ps, const __grid_constant__ HaloMaps maps) {
#ifdef IM2COL_WGMMA
  constexpr int NT = BN / 8, BKE = kRowBytes / sizeof(T);
  extern __shared__ uint8_t smem_raw[];
  uint8_t* halos = swizzle_aligned(smem_raw);  // [kHaloSlots][2][region_rows][128 bytes]
  const int32_t region_bytes = maps.region_rows * kRowBytes;
  uint8_t* b_tiles = halos + kHaloSlots * 2 * region_bytes;  // [STAGES][BN][128 bytes]
  uint64_t* full_a = reinterpret_cast<uint64_t*>(b_tiles + STAGES * BN * kRowBytes);
  uint64_t* empty_a = full_a + kHaloSlots;
  uint64_t* full_b = empty_a + kHaloSlots;
  uint64_t* empty_b = full_b + STAGES;
  int2* positions = reinterpret_cast<int2*>(empty_b + STAGES);  // [128]

  if (threadIdx.x == 0) {
    for (int i = 0; i < kHaloSlots; ++i) {
      barrier_init(shared_address(full_a + i), 1);
      barrier_init(shared_address(empty_a + i), 2);
    }
    for (int i = 0; i < STAGES; ++i) {
      barrier_init(shared_address(full_b + i), 1);
      barrier_init(shared_address(empty_b + i), 2);
    }
    barrier_init_fence();
  }
  __syncthreads();
  const int32_t n0 = blockIdx.y * BN, group = blockIdx.z;

  if (threadIdx.x >= 256) {
    if (threadIdx.x != 256) return;
    // The producer. A second tile past the pass's last is a copy of the
    // first, never stored.
    int round = 0, kt = 0;
    for (int32_t w = blockIdx.x; w < maps.items; w += gridDim.x) {
      const HaloItem it = halo_item<BKE>(ps, w);
      if (!it.ok) continue;
      const Params& p = ps.pass[it.pass];
      const HaloShape& s = it.s;
      HaloTile tile[2];
      for (int g = 0; g < 2; ++g)
        tile[g] = halo_tile(p, s, it.first_tile + g < s.tiles ? it.first_tile + g : it.first_tile);
      const uint32_t box_bytes = static_cast<uint32_t>(s.box_h * s.box_w * kRowBytes);
      for (int32_t r = 0; r < it.rounds; ++r, ++round) {
        const int32_t run = r / it.depth_taps, kd = r % it.depth_taps;
        const int sa = round % kHaloSlots;
        if (round >= kHaloSlots)
          barrier_wait(shared_address(empty_a + sa), (round / kHaloSlots - 1) & 1);
        const uint32_t bar_a = shared_address(full_a + sa);
        barrier_arrive_expect(bar_a, 2 * box_bytes);
        for (int g = 0; g < 2; ++g) {
          // Coordinates innermost first: channel, w, h, d, image (1-D: channel, w, image).
          int32_t c[5] = {group * p.Cg + run * BKE, tile[g].ow - p.pad[2], 0, 0, 0};
          if (p.nd == 1) {
            c[2] = tile[g].image;
          } else {
            c[2] = tile[g].oh - p.pad[1];
            if (p.nd == 2) {
              c[3] = tile[g].image;
            } else {
              c[3] = tile[g].od - p.pad[0] + kd * p.dilation[0];
              c[4] = tile[g].image;
            }
          }
          tma_tile_nd(p.nd + 2, shared_address(halos + (sa * 2 + g) * region_bytes),
                      &maps.image[it.pass], bar_a, c);
        }
        for (int32_t t = 0; t < it.plane_taps; ++t, ++kt) {
          const int sb = kt % STAGES;
          if (kt >= STAGES) barrier_wait(shared_address(empty_b + sb), (kt / STAGES - 1) & 1);
          const uint32_t bar_b = shared_address(full_b + sb);
          barrier_arrive_expect(bar_b, BN * kRowBytes);
          const int32_t kk = (kd * it.plane_taps + t) * p.Cg + run * BKE;
          tma_tile_2d(shared_address(b_tiles + sb * BN * kRowBytes), &maps.filter[it.pass], bar_b,
                      kk, group * p.Og + n0);
        }
      }
    }
    return;
  }

  const int warpgroup = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
  const int lane128 = threadIdx.x % 128;
  int round = 0, kt = 0;
  for (int32_t w = blockIdx.x; w < maps.items; w += gridDim.x) {
    const HaloItem it = halo_item<BKE>(ps, w);
    if (!it.ok) continue;
    const Params& p = ps.pass[it.pass];
    const HaloShape& s = it.s;
    // This warpgroup's rows: position r of its tile (after its stores of the
    // previous item have read them: the barrier at the end of the loop).
    const int32_t my_tile = it.first_tile + warpgroup;
    if (lane128 < 64) {
      const HaloTile h = halo_tile(p, s, my_tile < s.tiles ? my_tile : it.first_tile);
      const int32_t oh = h.oh + lane128 / s.tw, ow = h.ow + lane128 % s.tw;
      const bool stored = my_tile < s.tiles && oh < p.out[1] && ow < p.out[2];
      positions[warpgroup * 64 + lane128] =
          make_int2(stored ? h.image : -1, stored ? placed(p, h.od, oh, ow) : 0);
    }
    // One 8-row group per output row of the tile (box_w rows apart), or eight
    // consecutive rows in 1-D.
    const uint32_t group_bytes = static_cast<uint32_t>((s.th == 1 ? 8 : s.box_w) * kRowBytes);
    float acc[BN / 2];  // not zeroed: the item's first k-step overwrites
    bool first = true;
    for (int32_t r = 0; r < it.rounds; ++r, ++round) {
      const int sa = round % kHaloSlots;
      barrier_wait(shared_address(full_a + sa), (round / kHaloSlots) & 1);
      const uint32_t region = shared_address(halos + (sa * 2 + warpgroup) * region_bytes);
      for (int32_t t = 0; t < it.plane_taps; ++t, ++kt) {
        const int sb = kt % STAGES;
        barrier_wait(shared_address(full_b + sb), (kt / STAGES) & 1);
        int32_t kh, kw;
        p.kernel_w.divmod(t, kh, kw);
        const int32_t shift = kh * p.dilation[1] * s.box_w + kw * p.dilation[2];
        const uint64_t da = matrix_descriptor(region + shift * kRowBytes, group_bytes);
        const uint64_t db = matrix_descriptor(shared_address(b_tiles + sb * BN * kRowBytes));
        pin(acc);
        wgmma_fence();
#pragma unroll
        for (int step = 0; step < kRowBytes / 32; ++step)  // + 32 bytes a step, in 16-byte units
          Wgmma<T, BN>::run(acc, da + 2 * step, db + 2 * step, !first || step > 0);
        wgmma_commit();
        pin(acc);
        wgmma_wait<1>();
        pin(acc);
        first = false;
        // The k-tile before this one (perhaps the previous item's last) has
        // been read: free its filter slot, and its halo slot where it was its
        // round's last.
        if (kt > 0 && lane128 == 0) {
          barrier_arrive(shared_address(empty_b + (kt - 1) % STAGES));
          if (t == 0) barrier_arrive(shared_address(empty_a + (round - 1) % kHaloSlots));
        }
      }
    }
    wgmma_wait<0>();
    pin(acc);
    warpgroup_barrier(warpgroup);  // the positions written above
    store_rows<TY, NT>(p, *reinterpret_cast<const float(*)[NT][4]>(acc), warpgroup * 64 + warp * 16,
                       0, 0, n0, group, 0, positions);
    warpgroup_barrier(warpgroup);  // read before the next item's are written
  }
#endif
}

// Whether the halo kernel takes every pass of a call.
template <typename T>
bool halo_applies(const Passes& ps) {
  for (int i = 0; i < ps.count; ++i) {
    const Params& p = ps.pass[i];
    if (p.splits != 1 || !tma_operands_fit<T>(p) || p.nd < 1 || p.nd > 3) return false;
    for (int d = 0; d < 3; ++d)
      if (p.stride[d] != 1) return false;
    const HaloShape s = halo_shape(p);
    if (s.box_w > 256 || s.box_h > 256 || s.box_h * s.box_w > kMaxHaloRows) return false;
    if (s.tiles >= (int64_t{1} << 31)) return false;
    // At least 85% of the tiles' positions inside the output.
    const int64_t covered = int64_t{s.tiles_h} * s.th * s.tiles_w * s.tw;
    if (100 * int64_t{p.out[1]} * p.out[2] < 85 * covered) return false;
  }
  return true;
}

template <typename T, typename TY, int BN, int STAGES, int MIN_BLOCKS>
cudaError_t launch_halo(const Passes& ps, int64_t groups, int multiprocessors, cudaStream_t stream) {
  constexpr uint32_t BKE = kRowBytes / sizeof(T);
  HaloMaps maps;
  maps.region_rows = 0;
  int64_t most_tiles = 0;
  for (int i = 0; i < ps.count; ++i) {
    const Params& p = ps.pass[i];
    const HaloShape s = halo_shape(p);
    maps.region_rows = std::max(maps.region_rows, region_rows(s));
    most_tiles = std::max(most_tiles, s.tiles);
    if (!encode_halo_map<T>(&maps.image[i], p.x, p.nd, p.in, p.C, p.images, BKE,
                            static_cast<uint32_t>(s.box_w), static_cast<uint32_t>(s.box_h)) ||
        !encode_rows_map<T>(&maps.filter[i], p.w, groups * p.Og, p.Kg, BKE, BN))
      return cudaErrorNotSupported;
  }
  const int64_t items = (most_tiles + 1) / 2 * ps.count;
  if (items >= (int64_t{1} << 31)) return cudaErrorNotSupported;
  maps.items = static_cast<int32_t>(items);
  const int bytes = halo_fixed_bytes<BN, STAGES>() + kHaloSlots * 2 * maps.region_rows * kRowBytes;
  if (bytes > 227 * 1024) return cudaErrorNotSupported;
  const auto kernel = implicit_conv_halo_kernel<T, TY, BN, STAGES, MIN_BLOCKS>;
  int per_sm = 0;
  if (auto e = resident_blocks(reinterpret_cast<const void*>(kernel), kHaloThreads, bytes, &per_sm);
      e != cudaSuccess)
    return e;
  // As many blocks as fit at once, each taking every gridDim.x-th item.
  const int64_t others = ((ps.pass[0].Og + BN - 1) / BN) * groups;
  const int64_t resident =
      std::max<int64_t>(1, int64_t{std::max(per_sm, 1)} * multiprocessors / others);
  const int64_t x = std::min(items, resident);
  const dim3 grid(static_cast<unsigned>(x), static_cast<unsigned>((ps.pass[0].Og + BN - 1) / BN),
                  static_cast<unsigned>(groups));
  return launch_with_shared(kernel, grid, kHaloThreads, bytes, stream, ps, maps);
}

}  // namespace

// Tiles as launch_sm90 picks them: the widest the output channels fill whose
// grid still covers every multiprocessor once.
template <typename T, typename TY>
cudaError_t launch_halo_sm90(const Passes& ps, int64_t groups, int multiprocessors,
                             cudaStream_t stream) {
#ifndef JAX_IM2COL_SM90A
  (void)ps, (void)groups, (void)multiprocessors, (void)stream;
  return cudaErrorNotSupported;
#else
  // JAX_IM2COL_NO_HALO=1 leaves these calls to the other kernels: the
  // benchmark's same-run comparison (docs/optimization-log.md, step 46).
  static const bool on = switch_on(Switch::kHalo);
  if (!on || !halo_applies<T>(ps)) return cudaErrorNotSupported;
  const int64_t og = ps.pass[0].Og;
  int64_t pairs = 0;
  for (int i = 0; i < ps.count; ++i) pairs += (halo_shape(ps.pass[i]).tiles + 1) / 2;
  auto blocks = [&](int64_t bn) { return pairs * ((og + bn - 1) / bn) * groups; };
  if (og > 128 && blocks(256) >= multiprocessors)
    return launch_halo<T, TY, 256, 4, 1>(ps, groups, multiprocessors, stream);
  if (og > 64 && blocks(128) >= multiprocessors)
    return launch_halo<T, TY, 128, 3, 2>(ps, groups, multiprocessors, stream);
  return launch_halo<T, TY, 64, 4, 2>(ps, groups, multiprocessors, stream);
#endif
}

template cudaError_t launch_halo_sm90<float, float>(const Passes&, int64_t, int, cudaStream_t);
template cudaError_t launch_halo_sm90<__nv_bfloat16, __nv_bfloat16>(const Passes&, int64_t, int,
                                                                    cudaStream_t);
template cudaError_t launch_halo_sm90<__nv_bfloat16, float>(const Passes&, int64_t, int,
                                                            cudaStream_t);
template cudaError_t launch_halo_sm90<__half, __half>(const Passes&, int64_t, int, cudaStream_t);
template cudaError_t launch_halo_sm90<__half, float>(const Passes&, int64_t, int, cudaStream_t);

}  // namespace implicit
}  // namespace im2col::cuda
