// The tensor-core depthwise filter gradient's launcher (depthwise_mma_filter.cuh).
#include "conv/depthwise/depthwise_launch.cuh"
#include "conv/depthwise/depthwise_mma_filter.cuh"

namespace im2col::cuda {

cudaError_t dw_filter_mma(xla::ffi::DataType type, const void* dy, const void* x, void* partials, const DwGeom& g,
                          const DwMmaFilter& m, int64_t c, cudaStream_t stream) {
  return with_half_type(type, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    // The smallest accumulator arrays that hold the window, and the most
    // blocks an SM their registers allow.
    const int32_t KH = g.kernel[1], KW = g.kernel[2];
    auto kernel = KH <= 8 && KW <= 8     ? dw_mma_filter_kernel<T, 8, 1, 4>
                  : KH <= 16 && KW <= 16 ? dw_mma_filter_kernel<T, 16, 2, 3>
                                         : dw_mma_filter_kernel<T, 32, 4, 2>;
    if (const cudaError_t e = dw_prepare(kernel, m.smem); e != cudaSuccess) return e;
    kernel<<<dw_grid(m.blocks), static_cast<unsigned>(kDwMmaFilterThreads), static_cast<size_t>(m.smem), stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<float*>(partials), g, m, c);
    return cudaGetLastError();
  });
}

}  // namespace im2col::cuda
