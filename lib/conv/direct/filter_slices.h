// The slices of a deterministic filter gradient (the direct kernels,
// direct_conv.h, and the depthwise kernels, depthwise/depthwise_conv.h):
// host code without the XLA headers, so that the host tests can use it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace im2col::cuda {

// The filter gradient sums over output positions in slices, each `rows`
// output rows (along the first spatial dimension) of one image, slice
// i * per_image + j covering rows [j * rows, (j + 1) * rows) of image i. Each
// slice's partial sums go to a workspace, then are summed in a fixed order:
// the result is deterministic.
struct FilterSlices {
  int64_t rows = 1;
  int64_t per_image = 0;  // ceil(out[0] / rows)
  int64_t count = 0;      // N * per_image
};

inline FilterSlices filter_slices(int64_t n, int64_t out0, int64_t rows) {
  FilterSlices f;
  f.rows = rows < 1 ? 1 : rows;
  f.per_image = (out0 + f.rows - 1) / f.rows;
  f.count = n * f.per_image;
  return f;
}

// Bytes of the partial sums: float32 (float64 for float64) per slice and
// filter element.
inline size_t filter_partials_bytes(const FilterSlices& f, int64_t filter_elements, bool f64) {
  return static_cast<size_t>(f.count * filter_elements) * (f64 ? 8 : 4);
}

}  // namespace im2col::cuda
