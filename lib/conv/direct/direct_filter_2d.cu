// The direct filter gradient's kernels for 2-d geometries (direct_filter.cuh).
#include "conv/direct/direct_filter.cuh"

namespace im2col::cuda {
template cudaError_t direct_backward_filter_rank<2>(const void*, const void*, void*, void*,
                                                     const FilterSlices&, DataType, const Geometry&,
                                                     const DirectShapes&, bool, cudaStream_t);
}  // namespace im2col::cuda
