// Template launchers of the tiled depthwise kernels (depthwise_launch.h),
// instantiated per layout by depthwise_{forward,filter}_{cl,cf}.cu.
#pragma once

#include <algorithm>

#include "common/device_info.h"
#include "conv/depthwise/depthwise_kernels.cuh"
#include "conv/depthwise/depthwise_launch.h"
#include "conv/direct/direct_util.cuh"

namespace im2col::cuda {

// Blocks in the grid: all of them (the kernels also loop over blocks, for
// grids past the hardware's limit).
inline unsigned dw_grid(int64_t blocks) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, (int64_t{1} << 31) - 1)));
}

template <typename Kernel>
cudaError_t dw_prepare(Kernel kernel, int64_t smem) {
  if (smem <= 48 * 1024) return cudaSuccess;
  return allow_shared_bytes(reinterpret_cast<const void*>(kernel), static_cast<int>(smem));
}

template <bool CL>
cudaError_t dw_forward_tiles(xla::ffi::DataType in, xla::ffi::DataType out, const void* x, const void* w, void* y,
                             const DwPhases& p, const DwTile& t, int64_t n, int64_t c, cudaStream_t stream) {
  return with_types(in, out, [&](auto tag, auto out_tag) -> cudaError_t {
    using T = decltype(tag);
    using TY = decltype(out_tag);
    const int64_t total = p.count * n * t.blocks;
    auto kernel = t.ring ? dw_forward_kernel<CL, 1, T, TY> : dw_forward_kernel<CL, 0, T, TY>;
    if (const cudaError_t e = dw_prepare(kernel, t.smem); e != cudaSuccess) return e;
    kernel<<<dw_grid(total), static_cast<unsigned>(t.threads), static_cast<size_t>(t.smem), stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<TY*>(y), p, t, n, c);
    return cudaGetLastError();
  });
}

template <bool CL>
cudaError_t dw_filter_tiles(xla::ffi::DataType type, const void* dy, const void* x, void* partials, const DwGeom& g,
                            const DwFilterTile& t, const FilterSlices& f, int64_t c, cudaStream_t stream) {
  return with_type(type, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    using A = typename Acc<T>::type;
    auto launch = [&](auto kc) -> cudaError_t {
      constexpr int KC = decltype(kc)::value;
      auto kernel = t.ring ? dw_filter_kernel<CL, 1, KC, T> : dw_filter_kernel<CL, 0, KC, T>;
      if (const cudaError_t e = dw_prepare(kernel, t.smem); e != cudaSuccess) return e;
      kernel<<<dw_grid(t.blocks), static_cast<unsigned>(t.threads), static_cast<size_t>(t.smem), stream>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<A*>(partials), g, t, f, c);
      return cudaGetLastError();
    };
    switch (t.kc) {
      case 3: return launch(std::integral_constant<int, 3>{});
      case 5: return launch(std::integral_constant<int, 5>{});
      case 7: return launch(std::integral_constant<int, 7>{});
      default: return launch(std::integral_constant<int, 8>{});
    }
  });
}

}  // namespace im2col::cuda
