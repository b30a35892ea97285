// The launchers of the streaming depthwise forwards (depthwise_stream.cuh,
// depthwise_stream_staged.cuh) and of the stride-2 input gradient by cells
// (depthwise_cells.cuh).
#include "conv/depthwise/depthwise_cells.cuh"
#include "conv/depthwise/depthwise_launch.h"
#include "conv/depthwise/depthwise_stream.cuh"
#include "conv/depthwise/depthwise_stream_staged.cuh"
#include "conv/direct/direct_util.cuh"

namespace im2col::cuda {

cudaError_t dw_forward_stream(xla::ffi::DataType in, xla::ffi::DataType out, const void* x, const void* w, void* y,
                              const DwGeom& g, const DwStreamPlan& s, int64_t c, cudaStream_t stream) {
  return with_types(in, out, [&](auto tag, auto out_tag) -> cudaError_t {
    using T = decltype(tag);
    using TY = decltype(out_tag);
    auto kernel = g.stride[1] == 1 ? dw_stream_kernel<1, T, TY> : dw_stream_kernel<2, T, TY>;
    kernel<<<static_cast<unsigned>(s.blocks), kDwStreamThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<TY*>(y), g, s, c);
    return cudaGetLastError();
  });
}

cudaError_t dw_forward_staged(xla::ffi::DataType in, xla::ffi::DataType out, const void* x, const void* w, void* y,
                              const DwGeom& g, const DwStagedPlan& s, int64_t c, cudaStream_t stream) {
  return with_types(in, out, [&](auto tag, auto out_tag) -> cudaError_t {
    using T = decltype(tag);
    using TY = decltype(out_tag);
    auto kernel = g.stride[1] == 1 ? dw_staged_kernel<1, T, TY> : dw_staged_kernel<2, T, TY>;
    kernel<<<static_cast<unsigned>(s.blocks), kDwStagedThreads, static_cast<size_t>(s.smem), stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<TY*>(y), g, s, c);
    return cudaGetLastError();
  });
}

cudaError_t dw_input_gradient_cells(xla::ffi::DataType type, const void* dy, const void* w, void* dx,
                                    const DwGeom& g, const DwCellsPlan& s, int64_t c, cudaStream_t stream) {
  return with_type(type, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    const bool odd_h = (g.pad[1] & 1) != 0, odd_w = (g.pad[2] & 1) != 0;
    auto kernel = odd_h ? (odd_w ? dw_cells_kernel<1, 1, T> : dw_cells_kernel<1, 0, T>)
                        : (odd_w ? dw_cells_kernel<0, 1, T> : dw_cells_kernel<0, 0, T>);
    kernel<<<static_cast<unsigned>(s.grid.blocks), kDwCellsThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(w), static_cast<T*>(dx), g, s, c);
    return cudaGetLastError();
  });
}

}  // namespace im2col::cuda
