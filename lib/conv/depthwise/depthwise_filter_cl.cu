// The channels-last depthwise filter gradient's partial sums on tiles.
#include "conv/depthwise/depthwise_launch.cuh"

namespace im2col::cuda {

cudaError_t dw_filter_tiles_cl(xla::ffi::DataType type, const void* dy, const void* x, void* partials,
                               const DwGeom& g, const DwFilterTile& t, const FilterSlices& f, int64_t c,
                               cudaStream_t stream) {
  return dw_filter_tiles<true>(type, dy, x, partials, g, t, f, c, stream);
}

}  // namespace im2col::cuda
