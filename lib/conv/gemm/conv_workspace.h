// Layout of the workspace buffer that XLA allocates for a convolution call.
// jax_im2col/_workspace.py computes the same sizes to size the buffer; the
// handler recomputes them here and refuses a buffer that is too small.
#pragma once

#include <cstddef>
#include <cstdint>

namespace im2col {

constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;
constexpr size_t kWorkspaceAlign = 256;

inline size_t align_up(size_t n) {
  return (n + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

struct ConvWorkspace {
  size_t blas = 0, pointers = 0, cols = 0, dyt = 0, image = 0, acc = 0;  // offsets
  size_t total = 0;
};

// `cols_elems`: columns of one chunk (0 when the conv needs none);
// `dyt_elems`: the transposed output gradient of one chunk (backward filter,
// channels-first); `image_bytes`: one chunk of x made channels-last (the
// filter gradient's algorithm 4); `acc_elems`: a float32 accumulator for the
// filter gradient of half types; `batches`: GEMM batches that may need
// pointer arrays.
inline ConvWorkspace conv_workspace(size_t cols_elems, size_t cols_bytes_per_elem,
                                    size_t dyt_elems, size_t dyt_bytes_per_elem,
                                    size_t acc_elems, size_t batches, size_t image_bytes = 0) {
  ConvWorkspace w;
  size_t at = 0;
  w.blas = at;
  at += align_up(kBlasWorkspaceBytes);
  w.pointers = at;
  at += align_up(3 * batches * sizeof(void*));
  w.cols = at;
  at += align_up(cols_elems * cols_bytes_per_elem);
  w.dyt = at;
  at += align_up(dyt_elems * dyt_bytes_per_elem);
  w.image = at;
  at += align_up(image_bytes);
  w.acc = at;
  at += align_up(acc_elems * 4);
  w.total = at;
  return w;
}

// Workspace of the implicit GEMM (algorithm 2): the filter in the kernel's row
// layout, one chunk of the input image made channels-last, and the partial
// sums of a split reduction; each part is 0 bytes where the call needs none.
struct ImplicitWorkspace {
  size_t filter = 0, image = 0, partials = 0, total = 0;  // offsets
};

// Three aligned regions end to end: their offsets and the total.
struct ThreeRegions {
  size_t first = 0, second = 0, third = 0, total = 0;
};

inline ThreeRegions three_regions(size_t first_bytes, size_t second_bytes, size_t third_bytes) {
  ThreeRegions r;
  r.second = align_up(first_bytes);
  r.third = r.second + align_up(second_bytes);
  r.total = r.third + align_up(third_bytes);
  return r;
}

inline ImplicitWorkspace implicit_workspace(size_t filter_bytes, size_t image_bytes,
                                            size_t partials_bytes) {
  const ThreeRegions r = three_regions(filter_bytes, image_bytes, partials_bytes);
  return ImplicitWorkspace{r.first, r.second, r.third, r.total};
}

// Workspace of the implicit filter gradient: one chunk of images of x and of
// dy made channels-last (channels-first calls only), and the float32 parts
// of the split reduction.
struct ImplicitFilterWorkspace {
  size_t image = 0, gradient = 0, partials = 0, total = 0;  // offsets
};

inline ImplicitFilterWorkspace implicit_filter_workspace(size_t image_bytes, size_t gradient_bytes,
                                                         size_t partials_bytes) {
  const ThreeRegions r = three_regions(image_bytes, gradient_bytes, partials_bytes);
  return ImplicitFilterWorkspace{r.first, r.second, r.third, r.total};
}

}  // namespace im2col
