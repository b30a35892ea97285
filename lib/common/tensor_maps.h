// TMA tensor maps of the Hopper kernels (implicit_gemm_sm90.cu, and the
// implicit filter gradient): the driver's encoders, looked up once (no link to
// libcuda), and the channels-last image as an im2col map. Host code.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace im2col::cuda {

struct TensorMapEncoders {
  PFN_cuTensorMapEncodeIm2col_v12000 im2col = nullptr;
  PFN_cuTensorMapEncodeTiled_v12000 tiled = nullptr;
};

inline const TensorMapEncoders& tensor_map_encoders() {
  static const TensorMapEncoders e = [] {
    TensorMapEncoders out;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeIm2col", &fn, 12000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      out.im2col = reinterpret_cast<PFN_cuTensorMapEncodeIm2col_v12000>(fn);
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      out.tiled = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    return out;
  }();
  return e;
}

template <typename T>
constexpr CUtensorMapDataType map_type() {
  if constexpr (std::is_same_v<T, float>) return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  else if constexpr (std::is_same_v<T, __half>) return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  else return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

// A convolution's windows in the 3-D view of the implicit GEMMs (leading
// dimensions of extent 1; dimension 2 innermost).
struct WindowBox {
  int nd;
  const int32_t* in;  // [3] each
  const int32_t* out;
  const int32_t* stride;
  const int32_t* dilation;
  const int32_t* pad;
  const int32_t* kernel;
};

// Whether an im2col box can describe the windows: their corners are 16-, 8- or
// 5-bit signed offsets for 1-, 2- and 3-D images, and strides at most 8.
inline bool im2col_box_fits(const WindowBox& w) {
  if (w.nd < 1 || w.nd > 3) return false;
  const int32_t limit = w.nd == 1 ? 32767 : w.nd == 2 ? 127 : 15;
  for (int d = 3 - w.nd; d < 3; ++d) {
    const int32_t lower = -w.pad[d];
    const int32_t upper = lower + (w.out[d] - 1) * w.stride[d] - (w.in[d] - 1);
    const int32_t reach = w.dilation[d] * (w.kernel[d] - 1);
    if (w.stride[d] > 8 || lower < -limit - 1 || lower > limit || upper < -limit - 1 ||
        upper > limit || reach > limit)
      return false;
  }
  return true;
}

// The channels-last image (images, *in, channels_total) of nd spatial
// dimensions (`in` in the 3-D view, leading extents 1) as a map's dimensions
// and byte strides, innermost first: channels, the spatial ones from the
// last, then images. Returns the rank, nd + 2.
template <typename T>
int image_map_dims(int nd, const int32_t* in, int64_t channels_total, int64_t images,
                   cuuint64_t (&dims)[5], cuuint64_t (&strides)[4]) {
  const int rank = nd + 2;
  dims[0] = static_cast<cuuint64_t>(channels_total);
  for (int i = 0; i < nd; ++i) dims[1 + i] = static_cast<cuuint64_t>(in[2 - i]);
  dims[rank - 1] = static_cast<cuuint64_t>(images);
  strides[0] = dims[0] * sizeof(T);
  for (int i = 1; i < rank - 1; ++i) strides[i] = strides[i - 1] * dims[i];
  return rank;
}

// The channels-last image x (images, *in, channels_total) as an im2col map
// (dimensions innermost first: channels, the spatial ones from the last, then
// images) whose box is `pixels` consecutive windows x `box_channels`
// channels, 128-byte swizzled.
template <typename T>
bool encode_im2col_map(CUtensorMap* map, const void* x, const WindowBox& w, int64_t channels_total,
                       int64_t images, uint32_t box_channels, uint32_t pixels) {
  const TensorMapEncoders& e = tensor_map_encoders();
  if (!e.im2col) return false;
  cuuint64_t dims[5], strides[4];
  const int rank = image_map_dims<T>(w.nd, w.in, channels_total, images, dims, strides);
  cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  int lower[3], upper[3];
  for (int i = 0; i < w.nd; ++i) {
    const int d = 2 - i;  // innermost spatial dimension first
    element_strides[1 + i] = static_cast<cuuint32_t>(w.stride[d]);
    lower[i] = -w.pad[d];
    upper[i] = lower[i] + (w.out[d] - 1) * w.stride[d] - (w.in[d] - 1);
  }
  return e.im2col(map, map_type<T>(), rank, const_cast<void*>(x), dims, strides, lower, upper,
                  box_channels, pixels, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The channels-last image x (images, *in, channels_total), nd spatial
// dimensions given in the 3-D view `in` (leading extents 1), as a tiled map
// (dimensions innermost first: channels, the spatial ones from the last, then
// images) whose box is box_channels x box_w x box_h (2-D and 3-D; x 1 along
// depth) of one image, 128-byte swizzled; coordinates outside the image read
// as zeros. The halo kernel's staged windows (implicit_halo_sm90.cu).
template <typename T>
bool encode_halo_map(CUtensorMap* map, const void* x, int nd, const int32_t (&in)[3],
                     int64_t channels_total, int64_t images, uint32_t box_channels,
                     uint32_t box_w, uint32_t box_h) {
  const TensorMapEncoders& e = tensor_map_encoders();
  if (!e.tiled || nd < 1 || nd > 3) return false;
  cuuint64_t dims[5], strides[4];
  const int rank = image_map_dims<T>(nd, in, channels_total, images, dims, strides);
  // channels, w, h, depth 1, image 1 (1-D: channels, w, image 1)
  cuuint32_t box[5] = {box_channels, box_w, nd > 1 ? box_h : 1, 1, 1}, ones[5] = {1, 1, 1, 1, 1};
  return e.tiled(map, map_type<T>(), rank, const_cast<void*>(x), dims, strides, box, ones,
                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                 CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// A row-major (rows, cols) matrix as a tiled map with a box of box_rows x
// box_cols (128 bytes), 128-byte swizzled; out-of-range elements read as zeros.
template <typename T>
bool encode_rows_map(CUtensorMap* map, const void* p, int64_t rows, int64_t cols,
                     uint32_t box_cols, uint32_t box_rows) {
  const TensorMapEncoders& e = tensor_map_encoders();
  if (!e.tiled) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * sizeof(T)};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t ones[2] = {1, 1};
  return e.tiled(map, map_type<T>(), 2, const_cast<void*>(p), dims, strides, box, ones,
                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace im2col::cuda
