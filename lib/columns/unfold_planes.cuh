// The channels-first unfold of small maps, written flat (columns.cu,
// unfold_cf_planes_kernel).
//
// Where a chunk's columns hold every output position and leave no gaps
// (rows L apart, images C * K * L apart), they are one array of planes
// (image, channel) of K * L entries each, and which input element an entry
// reads repeats every P = lcm(K * L, V) entries (V: a 16-byte vector's
// elements), that is every P / (K * L) planes. A run is that many planes
// (doubled while it has under kPlanesMinThreads vectors); a block takes
// `runs` runs, thread i the i-th vector of each: its V entries read the
// same offsets within each run's input, so it works them out once (from
// the last entry's coordinates where there is no lhs dilation, else a
// source_offset an entry) and then spends V shared-memory reads and one
// 16-byte store a run. The runs' input planes follow one another in x as
// well: the block stages them flat, each run followed by a zero that its
// padding entries read. The tiled unfold (unfold_write.cuh) pays a block's
// setup per band of 7 x 7 positions and stores 2-byte elements, 64 positions
// a warp of which 49 are used; this kernel's offsets cost a thread about as
// much as writing 8 runs, so blocks take many (plan_planes_grid): 7 x 7 and
// 14 x 14 maps 1.15-1.25x faster (docs/optimization-log.md, step 78).
//
// Skew: a warp's 32 threads read entries about V apart, 16 bytes, so the
// threads 8 apart hit one bank (ncu: 3.3-way conflicts on 14 x 14 bfloat16
// maps). Staged element e sits at e + (e / every) * pad, a pad of 4 bytes
// (8 for 8-byte types) after every 128: the 4 groups of 8 threads then read
// 4 different banks; warps that span two taps still collide (1.9
// wavefronts a read). Runs are whole 128-byte chunks, so the skew of an
// offset is the same in every run. c256 bfloat16 10.88 -> 10.31 us, the
// 7 x 7 rows level (docs/optimization-log.md, step 97).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <type_traits>

#include "common/device_util.cuh"
#include "common/geometry.h"

namespace im2col::cuda {

struct PlanesPlan {
  int32_t threads = 0;          // vectors of a run: one a thread
  int32_t run_planes = 0;       // planes a run
  int32_t run_elements = 0;     // input elements of a run: run_planes * in_size
  int32_t run_stride = 0;       // a run's input and its zero, in whole vectors (whole skew chunks if skewed)
  int32_t staged_run = 0;       // shared-memory elements a run takes: run_stride, skewed
  int32_t runs = 0;             // runs a block
  int32_t vector_loads = 0;     // 1: staged by 16-byte loads
  int32_t plain = 0;            // 1: no lhs dilation (plane_offsets)
  int32_t skew = 0;             // 1: staged skewed (planes_skewed)
  int64_t run_count = 0;        // runs in all
  unsigned blocks = 0;
  size_t smem = 0;
  FastDiv plane_entries;        // K * L
  FastDiv positions;            // L
  FastDiv run_loads;            // loads a run's staging takes
};

constexpr int64_t kPlanesMinThreads = 256;  // runs of several periods below it
// One vector a thread; runs of 28 x 28 bfloat16 planes (882 vectors) were
// 1.4-1.9x slower than the tiled unfold: a thread's offsets cost as much as
// writing 8 runs, and it wrote one (docs/optimization-log.md, step 78).
constexpr int64_t kPlanesMaxThreads = 512;
constexpr int kPlanesLoads = 4;  // staging loads a thread
constexpr size_t kPlanesSmem = 24 * 1024;  // staged input a block

// A block's threads: the run's vectors, in whole warps.
__host__ __device__ inline int32_t planes_block_threads(const PlanesPlan& p) { return (p.threads + 31) / 32 * 32; }

// The skew's chunk and pad, in elements of `elem_bytes`.
__host__ __device__ constexpr int32_t planes_skew_every(size_t elem_bytes) { return 128 / static_cast<int32_t>(elem_bytes); }
__host__ __device__ constexpr int32_t planes_skew_pad(size_t elem_bytes) {
  return elem_bytes >= 4 ? 1 : 4 / static_cast<int32_t>(elem_bytes);
}

// Where staged element e of a run sits in shared memory.
template <typename U>
__host__ __device__ __forceinline__ int32_t planes_skewed(int32_t e, const PlanesPlan& p) {
  return p.skew ? e + e / planes_skew_every(sizeof(U)) * planes_skew_pad(sizeof(U)) : e;
}

// The plan for nc images of C channels from x_chunk into cols, but for its
// grid (plan_planes_grid), or false where the columns leave gaps, a run
// would take more than a block's threads, or its input more than
// kPlanesSmem or kPlanesLoads loads a thread, or the planes are not whole
// runs.
inline bool plan_unfold_planes(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc,
                               size_t elem_bytes, const void* x_chunk, const void* cols, PlanesPlan* p,
                               bool skew = true) {
  const int64_t L = g.out_size, KL = g.kernel_size * L, V = 16 / static_cast<int64_t>(elem_bytes);
  if (lay.l0 != 0 || lay.lc != L || lay.row_stride != L || (nc > 1 && lay.image_stride != C * KL) ||
      !aligned_to(cols, 16) || KL <= 0)
    return false;
  const int64_t common = std::gcd(KL, V);
  int64_t threads = KL / common, run_planes = V / common;
  while (threads * 2 <= kPlanesMinThreads) {
    threads *= 2;
    run_planes *= 2;
  }
  const int64_t planes = nc * C;
  if (threads > kPlanesMaxThreads || planes % run_planes != 0) return false;
  const int64_t run_elements = run_planes * g.in_size;
  const int64_t every = skew ? planes_skew_every(elem_bytes) : V;
  const int64_t run_stride = (run_elements + 1 + every - 1) / every * every;
  const int64_t staged_run = skew ? run_stride + run_stride / every * planes_skew_pad(elem_bytes) : run_stride;
  if (static_cast<size_t>(staged_run) * elem_bytes > kPlanesSmem) return false;
  p->threads = static_cast<int32_t>(threads);
  p->run_planes = static_cast<int32_t>(run_planes);
  p->run_elements = static_cast<int32_t>(run_elements);
  p->run_stride = static_cast<int32_t>(run_stride);
  p->staged_run = static_cast<int32_t>(staged_run);
  p->skew = skew;
  p->run_count = planes / run_planes;
  p->vector_loads = aligned_to(x_chunk, 16) && run_elements * static_cast<int64_t>(elem_bytes) % 16 == 0;
  p->plain = !g.any_lhs_dilation;
  const int64_t run_loads = p->vector_loads ? run_elements / V : run_elements;
  if (run_loads > kPlanesLoads * planes_block_threads(*p)) return false;
  p->plane_entries = FastDiv(KL);
  p->positions = FastDiv(L);
  p->run_loads = FastDiv(run_loads);
  return true;
}

// As many runs a block as spread the runs over one wave of `resident`
// blocks (the device's multiprocessors times the blocks of the kernel each
// holds at once), within the staging's bytes and loads. False where the grid
// would not fit.
inline bool plan_planes_grid(int64_t resident, size_t elem_bytes, PlanesPlan* p) {
  const size_t run_bytes = static_cast<size_t>(p->staged_run) * elem_bytes;
  const int64_t most = std::min<int64_t>(static_cast<int64_t>(kPlanesSmem / run_bytes),
                                         kPlanesLoads * planes_block_threads(*p) / p->run_loads.d);
  const int64_t wave = std::max<int64_t>(1, resident);
  p->runs = static_cast<int32_t>(std::min(most, std::max<int64_t>(1, (p->run_count + wave - 1) / wave)));
  const int64_t blocks = (p->run_count + p->runs - 1) / p->runs;
  p->blocks = static_cast<unsigned>(blocks);
  p->smem = static_cast<size_t>(p->runs) * run_bytes;
  return blocks < (int64_t{1} << 31);
}

// The staging's loads: load i of the block is thread i % blockDim's
// (i / blockDim)-th, at most kPlanesLoads a thread (plan_unfold_planes),
// all issued before the thread works out its offsets, which hide their
// latency.
template <bool VECTOR_LOADS, typename U>
using PlanesLoad = std::conditional_t<VECTOR_LOADS, uint4, U>;

template <bool VECTOR_LOADS, typename U>
struct PlanesLoads {
  PlanesLoad<VECTOR_LOADS, U> v[kPlanesLoads];
};

// This thread's loads of the block's `runs` runs of input (x_block: the
// first one's first plane).
template <bool VECTOR_LOADS, typename U>
__device__ __forceinline__ PlanesLoads<VECTOR_LOADS, U> load_planes(const U* x_block, const PlanesPlan& p,
                                                                    int32_t runs) {
  PlanesLoads<VECTOR_LOADS, U> r;
  const int32_t loads = runs * static_cast<int32_t>(p.run_loads.d);
  const PlanesLoad<VECTOR_LOADS, U>* src = reinterpret_cast<const PlanesLoad<VECTOR_LOADS, U>*>(x_block);
#pragma unroll
  for (int j = 0; j < kPlanesLoads; ++j) {
    const int32_t i = threadIdx.x + j * blockDim.x;
    if (i < loads) r.v[j] = __ldg(src + i);
  }
  return r;
}

// Stores this thread's loads at staged, run j at j * staged_run, and each
// run's zero after its input (planes_skewed places them). Skewed, a 16-byte
// load's place is only 4-byte aligned: it goes as four words.
template <bool VECTOR_LOADS, typename U>
__device__ __forceinline__ void stage_planes(U* staged, const PlanesLoads<VECTOR_LOADS, U>& r,
                                             const PlanesPlan& p, int32_t runs) {
  using L = PlanesLoad<VECTOR_LOADS, U>;
  constexpr int32_t E = sizeof(L) / sizeof(U);
  for (int32_t j = threadIdx.x; j < runs; j += blockDim.x)
    staged[j * p.staged_run + planes_skewed<U>(p.run_elements, p)] = U(0);
  const int32_t loads = runs * static_cast<int32_t>(p.run_loads.d);
#pragma unroll
  for (int j = 0; j < kPlanesLoads; ++j) {
    const int32_t i = threadIdx.x + j * blockDim.x;
    if (i < loads) {
      int32_t run, at;
      p.run_loads.divmod(i, run, at);
      U* dst = staged + run * p.staged_run + planes_skewed<U>(at * E, p);
      if constexpr (VECTOR_LOADS) {
        if (p.skew) {
          uint32_t* words = reinterpret_cast<uint32_t*>(dst);
          words[0] = r.v[j].x;
          words[1] = r.v[j].y;
          words[2] = r.v[j].z;
          words[3] = r.v[j].w;
          continue;
        }
      }
      *reinterpret_cast<L*>(dst) = r.v[j];
    }
  }
}

// Where this thread's vector of a run reads: its V entries' (skewed) offsets
// in the run's staged input, the run's zero for padding (threads past the run's
// vectors get zeros, and write nothing).
template <typename U>
struct PlaneOffsets {
  int32_t v[16 / sizeof(U)] = {};
};

// A thread's entries follow one another (positions, then taps, then
// planes): its first one's coordinates come from two divisions, each next
// one's from the last one's, the carries setting the next tap and plane.
// Without lhs dilation (p.plain) the entry's input coordinates c are carried
// along too, the last one's plus the stride along the last dimension, so an
// offset is a bounds check and a flat index; with it, a source_offset an
// entry (~30 instructions, as much as writing 8 runs; the plain offsets took
// c512 bf16 7.2-7.5 -> 6.2-6.8 us, c256 bf16 10.8-11.0 -> 10.2 us;
// docs/optimization-log.md, step 80).
template <int ND, typename U>
__device__ __forceinline__ PlaneOffsets<U> plane_offsets(const Geometry& g, const PlanesPlan& p) {
  constexpr int V = 16 / sizeof(U);
  PlaneOffsets<U> off;
  const int32_t i = threadIdx.x;
  if (i >= p.threads) return off;
  const int32_t K = static_cast<int32_t>(g.kernel_size), in_size = static_cast<int32_t>(g.in_size);
  int32_t plane, entry, kk, l;
  p.plane_entries.divmod(i * V, plane, entry);
  p.positions.divmod(entry, kk, l);
  int32_t o[kMaxSpatial], k[kMaxSpatial], c[kMaxSpatial];
  unravel<ND>(l, g.out, o);
  unravel<ND>(kk, g.kernel, k);
#pragma unroll
  for (int d = 0; d < ND; ++d)
    c[d] = o[d] * static_cast<int32_t>(g.stride[d]) - static_cast<int32_t>(g.pad_lo[d]) +
           k[d] * static_cast<int32_t>(g.rhs_dilation[d]);
  int32_t base = plane * in_size;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    int32_t s;
    if (p.plain) {
      bool inside = true;
      s = 0;
#pragma unroll
      for (int d = 0; d < ND; ++d) {
        inside = inside && static_cast<uint32_t>(c[d]) < static_cast<uint32_t>(g.in[d]);
        s = s * static_cast<int32_t>(g.in[d]) + c[d];
      }
      s = inside ? s : -1;
    } else {
      s = source_offset<ND, int32_t>(g, o, k);
    }
    off.v[v] = planes_skewed<U>(s >= 0 ? base + s : p.run_elements, p);
    if (v + 1 == V) break;
    bool carry = true;  // into the next tap
#pragma unroll
    for (int d = ND - 1; d >= 0; --d) {
      if (!carry) break;
      const int32_t step = static_cast<int32_t>(g.stride[d]);
      c[d] += step;
      if (++o[d] < static_cast<int32_t>(g.out[d])) {
        carry = false;
      } else {
        o[d] = 0;
        c[d] -= static_cast<int32_t>(g.out[d]) * step;
      }
    }
    if (carry) {
      increment<ND>(k, g.kernel);
      if (++kk == K) {
        kk = 0;
        base += in_size;
      }
#pragma unroll
      for (int d = 0; d < ND; ++d)
        c[d] = k[d] * static_cast<int32_t>(g.rhs_dilation[d]) - static_cast<int32_t>(g.pad_lo[d]);
    }
  }
  return off;
}

// Writes the block's runs from the staged input: thread i the i-th vector of
// each run (cols_block: the first run's first entry).
template <bool STREAM = false, typename U>
__device__ __forceinline__ void write_planes(const U* staged, U* cols_block, const PlaneOffsets<U>& off,
                                             const PlanesPlan& p, int32_t runs) {
  constexpr int V = 16 / sizeof(U);
  const int32_t i = threadIdx.x;
  if (i >= p.threads) return;
  Pack<U, V>* dst = reinterpret_cast<Pack<U, V>*>(cols_block) + i;
  for (int32_t j = 0; j < runs; ++j, staged += p.staged_run, dst += p.threads) {
    Pack<U, V> out;
#pragma unroll
    for (int v = 0; v < V; ++v) out.v[v] = staged[off.v[v]];
    store_maybe_streaming<STREAM>(dst, out);
  }
}

}  // namespace im2col::cuda
