// The tensor-core depthwise forward's launcher (depthwise_mma.cuh).
#include "conv/depthwise/depthwise_launch.cuh"
#include "conv/depthwise/depthwise_mma.cuh"

namespace im2col::cuda {

cudaError_t dw_forward_mma(xla::ffi::DataType type, const void* x, const void* w, void* y, const DwGeom& g,
                           const DwMma& m, int64_t n, int64_t c, cudaStream_t stream) {
  return with_half_type(type, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    // The smallest fragment and accumulator arrays that hold the plan's, and
    // the most blocks an SM their registers allow.
    auto kernel = m.frags <= 8 && m.nt <= 2   ? dw_mma_forward_kernel<T, 8, 2, 4>
                  : m.frags <= 8 && m.nt <= 4 ? dw_mma_forward_kernel<T, 8, 4, 4>
                  : m.frags <= 8              ? dw_mma_forward_kernel<T, 8, 8, 3>
                                              : dw_mma_forward_kernel<T, kDwMmaMaxB, kDwMmaMaxNt, 2>;
    if (const cudaError_t e = dw_prepare(kernel, m.smem); e != cudaSuccess) return e;
    kernel<<<dw_grid(m.blocks), static_cast<unsigned>(kDwMmaThreads), static_cast<size_t>(m.smem), stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), g, m, n, c);
    return cudaGetLastError();
  });
}

}  // namespace im2col::cuda
