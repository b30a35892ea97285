// The launchers of the streaming depthwise filter gradients
// (depthwise_stream_filter.cuh, depthwise_stream_staged_filter.cuh).
#include "conv/depthwise/depthwise_launch.h"
#include "conv/depthwise/depthwise_stream_filter.cuh"
#include "conv/depthwise/depthwise_stream_staged_filter.cuh"
#include "conv/direct/direct_util.cuh"

namespace im2col::cuda {

cudaError_t dw_filter_stream(xla::ffi::DataType type, const void* dy, const void* x, void* partials,
                             const DwGeom& g, const DwStreamFilterPlan& s, int64_t c, cudaStream_t stream) {
  return with_type(type, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    using A = typename Acc<T>::type;
    auto kernel = g.stride[1] == 1 ? dw_stream_filter_kernel<1, T> : dw_stream_filter_kernel<2, T>;
    kernel<<<static_cast<unsigned>(s.blocks), static_cast<unsigned>(s.threads), 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<A*>(partials), g, s, c);
    return cudaGetLastError();
  });
}

cudaError_t dw_filter_staged(xla::ffi::DataType type, const void* dy, const void* x, void* partials,
                             const DwGeom& g, const DwStagedFilterPlan& f, int64_t c, cudaStream_t stream) {
  return with_type(type, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    using A = typename Acc<T>::type;
    auto kernel = g.stride[1] == 1 ? dw_staged_filter_kernel<1, T> : dw_staged_filter_kernel<2, T>;
    kernel<<<static_cast<unsigned>(f.s.blocks), kDwStagedThreads, static_cast<size_t>(f.smem), stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<A*>(partials), g, f, c);
    return cudaGetLastError();
  });
}

}  // namespace im2col::cuda
