// Direct filter gradient (direct_conv.h): the grouped kernels' partial sums
// where they apply, then the rank's kernels (direct_filter.cuh, compiled per
// rank in direct_filter_{1,2,3}d.cu).
#include "conv/direct/direct_conv.h"

namespace im2col::cuda {

using DataType = xla::ffi::DataType;

template <int ND>
cudaError_t direct_backward_filter_rank(const void* dy, const void* x, void* dw, void* partials,
                                        const FilterSlices& f, DataType type, const Geometry& g,
                                        const DirectShapes& s, bool grouped, cudaStream_t stream);
extern template cudaError_t direct_backward_filter_rank<1>(const void*, const void*, void*, void*,
                                                           const FilterSlices&, DataType, const Geometry&,
                                                           const DirectShapes&, bool, cudaStream_t);
extern template cudaError_t direct_backward_filter_rank<2>(const void*, const void*, void*, void*,
                                                           const FilterSlices&, DataType, const Geometry&,
                                                           const DirectShapes&, bool, cudaStream_t);
extern template cudaError_t direct_backward_filter_rank<3>(const void*, const void*, void*, void*,
                                                           const FilterSlices&, DataType, const Geometry&,
                                                           const DirectShapes&, bool, cudaStream_t);

cudaError_t direct_backward_filter(const void* dy, const void* x, void* dw, void* partials,
                                   const FilterSlices& f, DataType type, const Geometry& g,
                                   const DirectShapes& s, cudaStream_t stream) {
  const int64_t Cg = s.c / s.groups, taps = Cg * g.kernel_size;
  if (f.count != s.n * f.per_image || f.per_image * f.rows < g.out[0]) return cudaErrorInvalidValue;
  if (f.count == 0 || s.o == 0 || taps == 0) return cudaSuccess;
  bool grouped = false;
  if (const cudaError_t e = grouped_filter_partials(dy, x, partials, f, type, g, s, &grouped, stream);
      e != cudaSuccess)
    return e;
  switch (g.nd) {
    case 1: return direct_backward_filter_rank<1>(dy, x, dw, partials, f, type, g, s, grouped, stream);
    case 2: return direct_backward_filter_rank<2>(dy, x, dw, partials, f, type, g, s, grouped, stream);
    default: return direct_backward_filter_rank<3>(dy, x, dw, partials, f, type, g, s, grouped, stream);
  }
}

}  // namespace im2col::cuda
