// The channels-last depthwise forward (and input-gradient phases) on tiles.
#include "conv/depthwise/depthwise_launch.cuh"

namespace im2col::cuda {

cudaError_t dw_forward_tiles_cl(xla::ffi::DataType in, xla::ffi::DataType out, const void* x, const void* w, void* y,
                                const DwPhases& p, const DwTile& t, int64_t n, int64_t c, cudaStream_t stream) {
  return dw_forward_tiles<true>(in, out, x, w, y, p, t, n, c, stream);
}

}  // namespace im2col::cuda
