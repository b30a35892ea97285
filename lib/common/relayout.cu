#include "common/relayout.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/device_util.cuh"
#include "common/transpose_tile.cuh"

namespace im2col::cuda {
namespace {

// One tile (transpose_tile.cuh) per block: 64 positions (across images) x
// 128 bytes of channels.
template <typename T, bool kVectorLoads, bool kVectorStores>
__global__ void __launch_bounds__(kThreads)
    to_channels_last_kernel(const T* x, T* out, int32_t c, FastDiv size, int32_t total,
                            FastDiv run) {
  __shared__ alignas(16) T tile[transpose::Tile<T>::kElements];
  const int32_t s0 = blockIdx.x * transpose::kPositions;
  const int32_t c0 = blockIdx.y * transpose::Tile<T>::kChannels;
  transpose::load_tile<T, kVectorLoads>(x, c, size, total, s0, c0, tile, threadIdx.x);
  __syncthreads();
  transpose::store_tile<T, kVectorStores>(tile, c, total, s0, c0, run, out, threadIdx.x);
}

// A TapMap in 32 bits, 3-D view (leading dimensions of extent 1).
struct TapMap3 {
  FastDiv kernel_size, kernel_w, kernel_h;
  int32_t w_kernel[3], first[3], step[3];

  __device__ __forceinline__ int32_t operator()(int32_t u) const {
    int32_t rest, ud, uh, uw;
    kernel_w.divmod(u, rest, uw);
    kernel_h.divmod(rest, ud, uh);
    return ((first[0] + step[0] * ud) * w_kernel[1] + first[1] + step[1] * uh) * w_kernel[2] +
           first[2] + step[2] * uw;
  }
};

TapMap3 tap_map_3d(const TapMap& m) {
  TapMap3 t;
  int64_t kernel[3];
  const int lead = 3 - m.nd;
  for (int d = 0; d < 3; ++d) {
    const bool real = d >= lead;
    kernel[d] = real ? m.kernel[d - lead] : 1;
    t.w_kernel[d] = static_cast<int32_t>(real ? m.w_kernel[d - lead] : 1);
    t.first[d] = static_cast<int32_t>(real ? m.first[d - lead] : 0);
    t.step[d] = static_cast<int32_t>(real ? m.step[d - lead] : 1);
  }
  t.kernel_size = FastDiv(kernel[0] * kernel[1] * kernel[2]);
  t.kernel_w = FastDiv(kernel[2]);
  t.kernel_h = FastDiv(kernel[1]);
  return t;
}

// Up to kMapsPerLaunch tap maps' rows, end to end: map i's elements end at
// ends[i].
constexpr int kMapsPerLaunch = 8;
struct FilterMaps {
  TapMap3 map[kMapsPerLaunch];
  int32_t ends[kMapsPerLaunch];
  int32_t count;
};

// Element e of the (packed) rows of its map: (packed group, row, tap,
// position in row), the row and position splitting into (which packed
// group, index in it).
template <typename T>
__global__ void implicit_filter_kernel(const T* w, T* out, const __grid_constant__ FilterMaps maps,
                                       FastDiv inner, FastDiv rows, FastDiv group_inner,
                                       FastDiv group_rows, int32_t w_taps, int32_t pack,
                                       int32_t og, int32_t cg, bool w_cl, bool input_gradient) {
  const int32_t total = maps.ends[maps.count - 1];
  for (int32_t e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    int i = 0;
    while (e >= maps.ends[i]) ++i;
    const TapMap3& tap_of = maps.map[i];
    int32_t t, s, u, r, gp, pr, ps;
    inner.divmod(e - (i > 0 ? maps.ends[i - 1] : 0), t, s);
    tap_of.kernel_size.divmod(t, t, u);
    rows.divmod(t, gp, r);
    group_rows.divmod(r, pr, r);
    group_inner.divmod(s, ps, s);
    if (pr != ps) {  // off the diagonal of a packed group
      out[e] = T{};
      continue;
    }
    const int32_t g = gp * pack + pr;
    const int32_t o = input_gradient ? s : r, ch = input_gradient ? r : s;
    const int32_t k = tap_of(u);
    const int64_t row = static_cast<int64_t>(g) * og + o;
    out[e] = w[row * cg * w_taps + (w_cl ? k * cg + ch : ch * w_taps + k)];
  }
}

// out (n, size, c) = x (n, c, size), with the positions reversed within runs
// of `run` (transpose::reversed_in_runs; size a multiple of run); launches of
// as many images as keep their positions in 32 bits.
cudaError_t transpose_images(const void* x, void* out, size_t elem_bytes, int64_t n, int64_t c,
                             int64_t size, int64_t run, cudaStream_t stream) {
  if (n == 0 || c == 0 || size == 0) return cudaSuccess;
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (size >= kLimit || c >= kLimit || run < 1 || size % run != 0 || elem_bytes == 0 ||
      16 % elem_bytes != 0)
    return cudaErrorInvalidValue;
  const int64_t vector = 16 / static_cast<int64_t>(elem_bytes);
  const int64_t tiles_c = (c + transpose::kChunks * vector - 1) / (transpose::kChunks * vector);
  if (tiles_c > 65535) return cudaErrorInvalidValue;
  const int64_t per_launch = std::max<int64_t>(1, (kLimit - transpose::kPositions) / size);
  return with_element_bytes(elem_bytes, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t n0 = 0; n0 < n; n0 += per_launch) {
      const int64_t total = std::min(per_launch, n - n0) * size;
      const T* src = static_cast<const T*>(x) + n0 * c * size;
      T* dst = static_cast<T*>(out) + n0 * c * size;
      const bool vector_loads = size % vector == 0 && aligned_to(src, 16);
      const bool vector_stores = c % vector == 0 && aligned_to(dst, 16);
      const dim3 grid(static_cast<unsigned>((total + transpose::kPositions - 1) / transpose::kPositions),
                      static_cast<unsigned>(tiles_c));
      auto launch = [&](auto kernel) {
        kernel<<<grid, kThreads, 0, stream>>>(src, dst, static_cast<int32_t>(c), FastDiv(size),
                                              static_cast<int32_t>(total), FastDiv(run));
        return cudaGetLastError();
      };
      cudaError_t e;
      if (vector_loads && vector_stores) e = launch(to_channels_last_kernel<T, true, true>);
      else if (vector_loads) e = launch(to_channels_last_kernel<T, true, false>);
      else if (vector_stores) e = launch(to_channels_last_kernel<T, false, true>);
      else e = launch(to_channels_last_kernel<T, false, false>);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  });
}

}  // namespace

cudaError_t image_to_channels_last(const void* x, void* out, size_t elem_bytes, int64_t n,
                                   int64_t c, int64_t size, cudaStream_t stream) {
  return transpose_images(x, out, elem_bytes, n, c, size, 1, stream);
}

TapMap all_taps(const Geometry& g) {
  TapMap m;
  m.nd = g.nd;
  for (int d = 0; d < g.nd; ++d) m.kernel[d] = m.w_kernel[d] = g.kernel[d];
  return m;
}

TapMap phase_taps(const Geometry& g, const GradientPhase& phase) {
  TapMap m;
  m.nd = g.nd;
  for (int d = 0; d < g.nd; ++d) {
    m.kernel[d] = phase.g.kernel[d];
    m.w_kernel[d] = g.kernel[d];
    m.first[d] = phase.tap_first[d];
    m.step[d] = -g.tap_step[d];
  }
  return m;
}

namespace {

// Whether the map takes every tap of its window in order (backwards: in
// reverse order).
bool every_tap(const TapMap& m, bool backwards) {
  for (int d = 0; d < m.nd; ++d) {
    const int64_t first = backwards ? m.w_kernel[d] - 1 : 0, step = backwards ? -1 : 1;
    if (m.kernel[d] != m.w_kernel[d] || m.first[d] != first || m.step[d] != step) return false;
  }
  return true;
}

// dw[o][c][t] = acc[o][t][c]: per block a tile of kFilterTaps taps (or all of
// them) x tile_c channels of one output channel, read along c, written along
// t then c (with every tap in the tile, one contiguous run of dw). tile_c + 1
// is odd, so the column reads of the tile hit distinct banks.
constexpr int kFilterTile = 2048, kFilterTaps = 64;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    filter_to_channels_first_kernel(const float* acc, T* dw, int32_t taps, int32_t cg,
                                    int32_t tile_t, int32_t tile_c, int32_t c_tiles) {
  __shared__ float tile[kFilterTile + kFilterTaps];
  const int64_t o = blockIdx.x / c_tiles;
  const int32_t c0 = static_cast<int32_t>(blockIdx.x % c_tiles) * tile_c;
  const int32_t t0 = blockIdx.y * tile_t, pitch = tile_c + 1;
  const int32_t nt = min(tile_t, taps - t0), nc = min(tile_c, cg - c0);
  const float* src = acc + (o * taps + t0) * cg + c0;
#pragma unroll 4
  for (int32_t i = threadIdx.x; i < nt * nc; i += blockDim.x) {
    const int32_t t = i / nc, c = i - t * nc;
    tile[t * pitch + c] = src[static_cast<int64_t>(t) * cg + c];
  }
  __syncthreads();
  T* dst = dw + (o * cg + c0) * taps + t0;
#pragma unroll 4
  for (int32_t i = threadIdx.x; i < nt * nc; i += blockDim.x) {
    const int32_t c = i / nt, t = i - c * nt;
    dst[static_cast<int64_t>(c) * taps + t] = from_acc<T>(tile[t * pitch + c]);
  }
}

}  // namespace

cudaError_t filter_to_channels_first(const float* acc, void* dw, xla::ffi::DataType type,
                                     int64_t o, int64_t taps, int64_t cg, cudaStream_t stream) {
  if (o == 0 || taps == 0 || cg == 0) return cudaSuccess;
  const int64_t tile_t = std::min<int64_t>(taps, kFilterTaps);
  int64_t tile_c = std::min<int64_t>(cg, kFilterTile / tile_t);
  tile_c -= tile_c > 1 && tile_c % 2 == 1;  // an odd pitch
  const int64_t c_tiles = (cg + tile_c - 1) / tile_c, t_tiles = (taps + tile_t - 1) / tile_t;
  if (o * c_tiles >= (int64_t{1} << 31) || t_tiles > 65535 || cg >= (int64_t{1} << 31))
    return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(o * c_tiles), static_cast<unsigned>(t_tiles));
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    filter_to_channels_first_kernel<T><<<grid, kThreads, 0, stream>>>(
        acc, static_cast<T*>(dw), static_cast<int32_t>(taps), static_cast<int32_t>(cg),
        static_cast<int32_t>(tile_t), static_cast<int32_t>(tile_c), static_cast<int32_t>(c_tiles));
    return cudaGetLastError();
  };
  switch (type) {
    case xla::ffi::DataType::F32: return launch(float{});
    case xla::ffi::DataType::BF16: return launch(__nv_bfloat16{});
    case xla::ffi::DataType::F16: return launch(__half{});
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t implicit_filter(const void* w, void* out, size_t elem_bytes, bool w_channels_last,
                            int64_t groups, int64_t og, int64_t cg, const TapMap* taps, int count,
                            bool input_gradient, int64_t pack, cudaStream_t stream) {
  if (pack < 1 || groups % pack != 0 || count < 0) return cudaErrorInvalidValue;
  // An unpacked channels-first filter read by one map of all its taps: its
  // rows are a transpose, per output channel in the forward ((cg, K) to
  // (K, cg)), per group in the input gradient ((og, cg * K) to (cg * K, og),
  // the taps of each channel reversed), on the image copy's coalesced tiles.
  if (pack == 1 && count == 1 && !w_channels_last && every_tap(taps[0], input_gradient)) {
    int64_t k = 1;
    for (int d = 0; d < taps[0].nd; ++d) k *= taps[0].w_kernel[d];
    return input_gradient ? transpose_images(w, out, elem_bytes, groups, og, cg * k, k, stream)
                          : transpose_images(w, out, elem_bytes, groups * og, cg, k, 1, stream);
  }
  const int64_t inner = input_gradient ? og : cg, rows = input_gradient ? cg : og;
  const int64_t per_tap = pack * groups * og * cg;  // row elements per tap
  int64_t w_taps = 1;
  for (int d = 0; count > 0 && d < taps[0].nd; ++d) w_taps *= taps[0].w_kernel[d];
  if (groups * og * cg * w_taps >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  for (int first = 0; first < count; first += kMapsPerLaunch) {
    FilterMaps maps;
    maps.count = std::min(kMapsPerLaunch, count - first);
    int64_t total = 0;
    for (int i = 0; i < maps.count; ++i) {
      const TapMap& m = taps[first + i];
      if (m.nd < 1 || m.nd > 3) return cudaErrorInvalidValue;
      int64_t row_taps = 1;
      for (int d = 0; d < m.nd; ++d) row_taps *= m.kernel[d];
      total += per_tap * row_taps;
      if (total >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
      maps.map[i] = tap_map_3d(m);
      maps.ends[i] = static_cast<int32_t>(total);
    }
    if (total == 0) continue;
    const cudaError_t e = with_element_bytes(elem_bytes, [&](auto tag) {
      using T = decltype(tag);
      implicit_filter_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(
          static_cast<const T*>(w), static_cast<T*>(out), maps, FastDiv(pack * inner),
          FastDiv(pack * rows), FastDiv(inner), FastDiv(rows), static_cast<int32_t>(w_taps),
          static_cast<int32_t>(pack), static_cast<int32_t>(og), static_cast<int32_t>(cg),
          w_channels_last, input_gradient);
      return cudaGetLastError();
    });
    if (e != cudaSuccess) return e;
    out = static_cast<char*>(out) + total * elem_bytes;
  }
  return cudaSuccess;
}

}  // namespace im2col::cuda
