// Convolution as im2col + cuBLAS GEMM: conv_forward, conv_backward_data and
// conv_backward_filter as XLA FFI handlers. Each call processes the batch in
// chunks of images (and of output positions when one image's columns exceed
// the cap) inside one handler, with columns in XLA-provided workspace.
//
// Shapes, channels-first (cf) / channels-last (cl):
//   x  (N, C, *in)  / (N, *in, C)
//   w  (O, Cg, *K)  / (O, *K, Cg)      Cg = C / G, Og = O / G
//   y  (N, O, *out) / (N, *out, O)
// cuBLAS is column-major; a row-major (r x c) matrix is a column-major
// (c x r) one, so every product below is written for the transposed view.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "../conv_workspace.h"
#include "../ffi_window.h"
#include "blas_handles.h"
#include "columns.h"
#include "conv_1d_cf.h"
#include "direct_conv.h"
#include "handlers.h"
#include "implicit_filter_gradient.h"
#include "implicit_gemm.h"
#include "relayout.h"

namespace im2col::cuda {
namespace {

// --- small kernels -------------------------------------------------------

__global__ void fill_pointers_kernel(void** out, const char* a, int64_t a_sn,
                                     int64_t a_sg, const char* b, int64_t b_sn,
                                     int64_t b_sg, const char* c, int64_t c_sn,
                                     int64_t c_sg, int64_t nb, int64_t groups) {
  const int64_t total = nb * groups;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / groups, g = i % groups;
    out[i] = const_cast<char*>(a + n * a_sn + g * a_sg);
    out[total + i] = const_cast<char*>(b + n * b_sn + g * b_sg);
    out[2 * total + i] = const_cast<char*>(c + n * c_sn + g * c_sg);
  }
}

template <typename T>
__global__ void from_float_kernel(const float* in, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if constexpr (std::is_same_v<T, __half>) out[i] = __float2half_rn(in[i]);
    else out[i] = __float2bfloat16_rn(in[i]);
  }
}

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 4096)));
}

// --- GEMM over a grid of (image, group) batches ----------------------------

struct Types {
  cudaDataType_t ab;       // A and B
  cublasComputeType_t compute;
  bool is_double;
};

cudaDataType_t cuda_type(DataType t) {
  switch (t) {
    case DataType::F16: return CUDA_R_16F;
    case DataType::BF16: return CUDA_R_16BF;
    case DataType::F64: return CUDA_R_64F;
    default: return CUDA_R_32F;
  }
}

bool is_half(DataType t) { return t == DataType::F16 || t == DataType::BF16; }

// precision: 0 lets float32 use TF32 tensor cores (XLA's DEFAULT), 1 is full
// float32 (HIGHEST). Half types always accumulate in float32.
Types gemm_types(DataType in, int64_t precision) {
  if (in == DataType::F64) return {CUDA_R_64F, CUBLAS_COMPUTE_64F, true};
  if (in == DataType::F32)
    return {CUDA_R_32F, precision == 0 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, false};
  return {cuda_type(in), CUBLAS_COMPUTE_32F, false};
}

// Matrix (n, g) of an operand starts at p + (n * sn + g * sg) elements.
struct Operand {
  const void* p;
  int64_t ld, sn, sg;
  size_t elt;
  cudaDataType_t type;
};

struct Gemm {
  cublasHandle_t handle;
  cudaStream_t stream;
  void** pointers;  // workspace for 3 * batches pointers
  Types types;
};

ffi::Error blas_error(cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS) return ffi::Error::Success();
  return ffi::Error::Internal(std::string("jax_im2col: cuBLAS: ") + cublasGetStatusString(s));
}

ffi::Error cuda_error(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string("jax_im2col ") + what + ": " + cudaGetErrorString(e));
}

// C[n, g] = op(A[n, g]) * op(B[n, g]) (+ C[n, g] when accumulating), for all
// n < nb, g < G, in as few cuBLAS calls as the strides allow: one strided
// batched call when the (n, g) grid is uniform, otherwise one pointer-array
// batched call.
ffi::Error gemm_grid(const Gemm& gm, cublasOperation_t ta, cublasOperation_t tb,
                     int64_t m, int64_t n, int64_t k, const Operand& A,
                     const Operand& B, const Operand& C, int64_t nb, int64_t G,
                     bool accumulate) {
  if (nb * G == 0 || m == 0 || n == 0) return ffi::Error::Success();
  const float alpha_f = 1.f, beta_f = accumulate ? 1.f : 0.f;
  const double alpha_d = 1.0, beta_d = accumulate ? 1.0 : 0.0;
  const void* alpha = gm.types.is_double ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = gm.types.is_double ? static_cast<const void*>(&beta_d) : &beta_f;
  auto uniform = [&](int64_t count, int64_t sa, int64_t sb, int64_t sc) {
    return blas_error(cublasGemmStridedBatchedEx_64(
        gm.handle, ta, tb, m, n, k, alpha, A.p, A.type, A.ld, sa, B.p, B.type, B.ld, sb,
        beta, const_cast<void*>(C.p), C.type, C.ld, sc, count, gm.types.compute,
        CUBLAS_GEMM_DEFAULT));
  };
  if (G == 1) return uniform(nb, A.sn, B.sn, C.sn);
  if (nb == 1) return uniform(G, A.sg, B.sg, C.sg);
  if (A.sn == G * A.sg && B.sn == G * B.sg && C.sn == G * C.sg)
    return uniform(nb * G, A.sg, B.sg, C.sg);
  const int64_t total = nb * G;
  const int64_t ea = static_cast<int64_t>(A.elt), eb = static_cast<int64_t>(B.elt),
                ec = static_cast<int64_t>(C.elt);
  fill_pointers_kernel<<<grid_for(total), 256, 0, gm.stream>>>(
      gm.pointers, static_cast<const char*>(A.p), A.sn * ea, A.sg * ea,
      static_cast<const char*>(B.p), B.sn * eb, B.sg * eb,
      static_cast<const char*>(C.p), C.sn * ec, C.sg * ec, nb, G);
  if (auto e = cuda_error(cudaGetLastError(), "pointer setup"); e.failure()) return e;
  return blas_error(cublasGemmBatchedEx_64(
      gm.handle, ta, tb, m, n, k, alpha, const_cast<const void* const*>(gm.pointers), A.type,
      A.ld, const_cast<const void* const*>(gm.pointers + total), B.type, B.ld, beta,
      gm.pointers + 2 * total, C.type, C.ld, total, gm.types.compute, CUBLAS_GEMM_DEFAULT));
}

// --- shapes ----------------------------------------------------------------

// algorithm: 0 is im2col + GEMM, 1 the direct kernels (direct_conv.h), 2 the
// implicit GEMM (implicit_gemm.h for the forward and input gradient,
// implicit_filter_gradient.h for the filter gradient), 3 the implicit GEMM on
// packed groups (packed_groups below); 4 and 5 are filter gradients of
// channels-first operands (below, and backward_filter); 6 the channels-first
// 1-D kernels (conv_1d_cf.h); for the direct filter gradient,
// chunk_positions is the output rows per slice (FilterSlices); for the
// implicit GEMM, chunk_images is the images made channels-last at once and
// chunk_positions the parts its reduction is split into
// (ImplicitConv::splits, ImplicitFilterGradient::splits); for the
// channels-first 1-D filter gradient, chunk_positions is its slices.
enum Algorithm : int64_t {
  kAlgorithmGemm = 0,
  kAlgorithmDirect = 1,
  kAlgorithmImplicit = 2,
  kAlgorithmPacked = 3,
  // The filter gradient of channels-first operands as im2col + GEMM on
  // channels-last copies of whole images of x and dy (backward_filter).
  kAlgorithmGemmChannelsLast = 4,
  // The filter gradient of a channels-first 1x1 window: one GEMM per image
  // over its positions, on x and dy as they are, into chunk_images float32
  // slots, summed in order (per_image_backward_filter).
  kAlgorithmGemmPerImage = 5,
  // Channels-first 1-D convolutions read as they are (conv_1d_cf.h): every
  // op, stride 1.
  kAlgorithmConv1dCf = 6
};

// Small groups packed for the implicit GEMM: `pack` consecutive groups whose
// image channels together make kPackedChannels become one group with a
// block-diagonal filter (zeros between the packed groups), so that each
// k-tile is a whole run of channels (the Hopper TMA kernel). pack times the
// arithmetic, none of the columns. Mirrored by _packed() in
// jax_im2col/_conv_primitives.py.
constexpr int64_t kPackedChannels = 64;

// The packing factor of groups with `image_cg` image channels each, or 0.
int64_t packed_groups(int64_t image_cg, int64_t groups) {
  if (image_cg < 1 || image_cg >= kPackedChannels || kPackedChannels % image_cg != 0) return 0;
  const int64_t pack = kPackedChannels / image_cg;
  return groups % pack == 0 ? pack : 0;
}

struct ConvAttrs {
  WindowAttrs window;
  bool channels_last;
  int64_t groups, precision, chunk_images, chunk_positions, algorithm;
};

struct ConvShapes {
  ImageShape image;  // x
  Geometry g;
  int64_t O, G, Cg, Og, CgK;
  bool cl, identity;
};

// x_dims: the input image; w_dims: the filter; y_dims: the output image.
ffi::Error conv_shapes(ffi::AnyBuffer::Dimensions x_dims, ffi::AnyBuffer::Dimensions w_dims,
                       ffi::AnyBuffer::Dimensions y_dims, const ConvAttrs& a,
                       ConvShapes* s) {
  s->cl = a.channels_last;
  if (auto e = image_shape(x_dims, s->cl, &s->image); e.failure()) return e;
  if (auto e = make_geometry(a.window, s->image, &s->g); e.failure()) return e;
  ImageShape y;
  if (auto e = image_shape(y_dims, s->cl, &y); e.failure()) return e;
  const int nd = s->image.nd;
  s->G = a.groups;
  s->O = y.c;
  if (s->G < 1 || s->image.c % s->G != 0 || s->O % s->G != 0)
    return ffi::Error::InvalidArgument("conv: channels do not divide into groups");
  s->Cg = s->image.c / s->G;
  s->Og = s->O / s->G;
  s->CgK = s->Cg * s->g.kernel_size;
  bool ok = y.n == s->image.n && y.nd == nd && static_cast<int>(w_dims.size()) == nd + 2 &&
            w_dims[0] == s->O && w_dims[s->cl ? nd + 1 : 1] == s->Cg;
  for (int d = 0; d < nd; ++d)
    ok = ok && y.spatial[d] == s->g.out[d] && w_dims[s->cl ? 1 + d : 2 + d] == s->g.kernel[d];
  if (!ok) return ffi::Error::InvalidArgument("conv: operand shapes do not match the geometry");
  s->identity = true;
  for (int d = 0; d < nd; ++d)
    s->identity = s->identity && s->g.kernel[d] == 1 && s->g.stride[d] == 1 &&
                  s->g.lhs_dilation[d] == 1 && s->g.pad_lo[d] == 0 && s->g.out[d] == s->g.in[d];
  if (a.algorithm < kAlgorithmGemm || a.algorithm > kAlgorithmConv1dCf)
    return ffi::Error::InvalidArgument("conv: unknown algorithm");
  if (a.chunk_images < 1 || a.chunk_positions < 1 ||
      (a.algorithm == kAlgorithmGemm && a.chunk_positions < s->g.out_size && a.chunk_images != 1))
    return ffi::Error::InvalidArgument("conv: invalid chunking");
  return ffi::Error::Success();
}

DirectShapes direct_shapes(const ConvShapes& s) {
  return DirectShapes{s.image.n, s.image.c, s.O, s.G, s.cl};
}

// Layout of a chunk of channels-first columns, (n, c*K + k, l): torch order.
ColumnsLayout cf_image_major(const ConvShapes& s, int64_t l0, int64_t lc) {
  ColumnsLayout lay;
  lay.l0 = l0;
  lay.lc = lc;
  lay.row_stride = lc;
  lay.image_stride = s.image.c * s.g.kernel_size * lc;
  return lay;
}

// Channels-first columns with rows (c*K + k) spanning every image of the
// chunk, (c*K + k, n, l), as the filter gradient wants them.
ColumnsLayout cf_row_major(int64_t nc, int64_t l0, int64_t lc) {
  ColumnsLayout lay;
  lay.l0 = l0;
  lay.lc = lc;
  lay.row_stride = nc * lc;
  lay.image_stride = lc;
  return lay;
}

ColumnsLayout cl_layout(const ConvShapes& s, int64_t l0, int64_t lc) {
  ColumnsLayout lay;
  lay.l0 = l0;
  lay.lc = lc;
  lay.groups = s.G;
  return lay;
}

// Everything a handler needs once the buffers are checked.
struct Context {
  ConvShapes s;
  ConvAttrs a;
  ConvWorkspace ws;
  char* ws_base;
  cudaStream_t stream;
};

// image_elems: channels-last copies of x, of dyt_elt bytes each.
ffi::Error check_workspace(const ffi::AnyBuffer& ws, size_t cols_elems, size_t cols_elt,
                           size_t dyt_elems, size_t dyt_elt, size_t acc_elems,
                           Context* c, size_t image_elems = 0) {
  const size_t batches = static_cast<size_t>(c->a.chunk_images * c->s.G);
  c->ws = conv_workspace(cols_elems, cols_elt, dyt_elems, dyt_elt, acc_elems, batches,
                         image_elems * dyt_elt);
  c->ws_base = static_cast<char*>(ws.untyped_data());
  if (ws.size_bytes() < c->ws.total)
    return ffi::Error::InvalidArgument("conv: workspace buffer is smaller than the plan needs");
  return ffi::Error::Success();
}

// A cuBLAS handle bound to the call's stream and workspace, and the GEMM
// settings of the call; the handle returns to the pool with the session.
struct GemmSession {
  BlasLease lease;
  Gemm gemm;
};

ffi::ErrorOr<GemmSession> start_gemm(const Context& c, int32_t device, DataType in) {
  auto lease = BlasLease::borrow(device, c.stream, c.ws_base + c.ws.blas, kBlasWorkspaceBytes);
  if (lease.has_error()) return ffi::Unexpected<ffi::Error>(lease.error());
  const Gemm gemm{lease->get(), c.stream, reinterpret_cast<void**>(c.ws_base + c.ws.pointers),
                  gemm_types(in, c.a.precision)};
  return GemmSession{std::move(lease.value()), gemm};
}

template <typename Body>
ffi::Error for_each_chunk(const Context& c, Body body) {
  const int64_t N = c.s.image.n, L = c.s.g.out_size;
  for (int64_t n0 = 0; n0 < N; n0 += c.a.chunk_images) {
    const int64_t nc = std::min(c.a.chunk_images, N - n0);
    for (int64_t l0 = 0; l0 < L; l0 += c.a.chunk_positions) {
      const int64_t lc = std::min(c.a.chunk_positions, L - l0);
      if (auto e = body(n0, nc, l0, lc); e.failure()) return e;
    }
  }
  return ffi::Error::Success();
}

Operand operand(const void* p, int64_t ld, int64_t sn, int64_t sg, DataType t) {
  return Operand{p, ld, sn, sg, ffi::ByteWidth(t), cuda_type(t)};
}

// --- implicit GEMM -------------------------------------------------------------

// Calls body(n0, nc) for chunks [n0, n0 + nc) of `chunk` of the n images;
// once, with nc = 0, where there are none (the filter gradient then zeroes
// its parts).
template <typename Body>
ffi::Error for_each_image_chunk(int64_t n, int64_t chunk, Body body) {
  chunk = std::max<int64_t>(chunk, 1);
  int64_t n0 = 0;
  do {
    if (auto err = body(n0, std::min(chunk, n - n0)); err.failure()) return err;
    n0 += chunk;
  } while (n0 < n);
  return ffi::Error::Success();
}

// Images [n0, n0 + nc) of a channels-first image of c channels and `size`
// positions of elem_bytes each, made channels-last at dst.
ffi::Error chunk_to_channels_last(const void* image, int64_t n0, int64_t nc, int64_t c,
                                  int64_t size, size_t elem_bytes, void* dst,
                                  cudaStream_t stream) {
  return cuda_error(image_to_channels_last(static_cast<const char*>(image) +
                                               n0 * c * size * elem_bytes,
                                           dst, elem_bytes, nc, c, size, stream),
                    "channels-last copy");
}

// The input gradient has at most this many phases (gradient_phase): strides
// whose product is larger take im2col + GEMM. Mirrored by _MAX_PHASES in
// jax_im2col/_conv_primitives.py.
constexpr int64_t kMaxGradientPhases = 64;

// The passes of the forward (one, on the forward's geometry) or of the input
// gradient (one per phase whose positions some tap reaches; `zeros`: some
// other phase has positions, so the output must be zeroed first), and the
// filter taps each one's rows take. The rows are set later.
ffi::Error implicit_passes(const ConvShapes& s, bool input_gradient,
                           std::vector<ImplicitPass>* passes, std::vector<TapMap>* taps,
                           bool* zeros) {
  *zeros = false;
  if (!input_gradient) {
    passes->push_back({s.g, nullptr, {}});
    taps->push_back(all_taps(s.g));
    return ffi::Error::Success();
  }
  const int64_t count = gradient_phase_count(s.g);
  if (count > kMaxGradientPhases)
    return ffi::Error::InvalidArgument("conv_backward_data: too many phases for the implicit GEMM");
  for (int64_t i = 0; i < count; ++i) {
    GradientPhase ph;
    if (!gradient_phase(s.g, i, &ph))
      return ffi::Error::InvalidArgument("conv_backward_data: the implicit GEMM does not apply");
    if (!ph.has_positions) continue;
    if (!ph.has_taps) {
      *zeros = true;
      continue;
    }
    OutputPlacement at;
    at.nd = s.g.nd;
    for (int d = 0; d < s.g.nd; ++d) {
      at.extent[d] = s.g.in[d];
      at.first[d] = ph.first[d];
      at.step[d] = s.g.stride[d];
    }
    passes->push_back({ph.g, nullptr, at});
    taps->push_back(phase_taps(s.g, ph));
  }
  return ffi::Error::Success();
}

// out = the passes' convolutions of `image`, out_size positions per image of
// out, kMaxPasses a launch (each pass a launch of its own with a split
// reduction: their parts share the workspace). A channels-first image is made
// channels-last a chunk of images at a time in the workspace, every pass
// reading each chunk; the kernel writes either layout.
ffi::Error implicit_run(const void* image, int64_t c_in, const std::vector<ImplicitPass>& passes,
                        void* out, int64_t c_out, int64_t out_size, int64_t groups,
                        const ConvShapes& s, const ConvAttrs& a, DataType in, DataType out_type,
                        char* chunk, float* partials, cudaStream_t stream) {
  const int64_t N = s.image.n, splits = a.chunk_positions;
  const size_t e = ffi::ByteWidth(in), eo = ffi::ByteWidth(out_type);
  const int64_t in_size = passes.front().g.in_size;
  return for_each_image_chunk(N, s.cl ? N : a.chunk_images, [&](int64_t n0, int64_t nc) {
    const void* x = image;
    if (!s.cl) {
      if (auto err = chunk_to_channels_last(image, n0, nc, c_in, in_size, e, chunk, stream);
          err.failure())
        return err;
      x = chunk;
    }
    void* part = static_cast<char*>(out) + n0 * c_out * out_size * eo;
    const ImplicitConv conv{x, part, nc, c_in, c_out, groups, s.cl, splits, partials};
    const int64_t per_launch = splits > 1 ? 1 : kMaxPasses, count = passes.size();
    for (int64_t i = 0; i < count; i += per_launch) {
      const int n = static_cast<int>(std::min(per_launch, count - i));
      if (auto err = cuda_error(implicit_conv(conv, passes.data() + i, n, in, out_type, stream),
                                "implicit GEMM");
          err.failure())
        return err;
    }
    return ffi::Error::Success();
  });
}

// image_channels, out_channels, out_size: those of the implicit GEMM's
// geometry (the input gradient's are the transposed ones; out_size the
// largest of its passes).
ffi::ErrorOr<char*> implicit_workspace_of(const ffi::AnyBuffer& ws, const ConvShapes& s,
                                          const ConvAttrs& a, size_t filter_bytes,
                                          int64_t image_elements, size_t elem_bytes,
                                          int64_t out_channels, int64_t out_size,
                                          ImplicitWorkspace* plan) {
  const int64_t images = s.cl ? s.image.n : std::min(a.chunk_images, s.image.n);
  *plan = implicit_workspace(
      filter_bytes, s.cl ? 0 : a.chunk_images * image_elements * elem_bytes,
      implicit_partials_bytes(a.chunk_positions, images, out_size, out_channels));
  if (ws.size_bytes() < plan->total)
    return ffi::Unexpected<ffi::Error>(
        ffi::Error::InvalidArgument("conv: workspace buffer is smaller than the plan needs"));
  return static_cast<char*>(ws.untyped_data());
}

// The forward, or (input_gradient) the input gradient as forward
// convolutions of dy, one per phase of the input (gradient_phase: the
// sub-filter of the taps that reach it, flipped and transposed per group;
// one phase for unit strides). a.algorithm: kAlgorithmImplicit, or
// kAlgorithmPacked (groups packed into one, packed_groups).
ffi::Error implicit_call(cudaStream_t stream, const ffi::AnyBuffer& image, const ffi::AnyBuffer& w,
                         ffi::AnyBuffer& out, const ffi::AnyBuffer& workspace, const ConvShapes& s,
                         const ConvAttrs& a, bool input_gradient) {
  const std::string what = input_gradient ? "conv_backward_data" : "conv_forward";
  const int64_t image_cg = input_gradient ? s.Og : s.Cg;
  const int64_t pack = a.algorithm == kAlgorithmPacked ? packed_groups(image_cg, s.G) : 1;
  if (pack == 0) return ffi::Error::InvalidArgument(what + ": the groups do not pack");
  const DataType in = image.element_type();
  std::vector<ImplicitPass> passes;
  std::vector<TapMap> taps;
  bool zeros = false;
  if (auto err = implicit_passes(s, input_gradient, &passes, &taps, &zeros); err.failure())
    return err;
  int64_t pass_out_size = 0;
  for (const ImplicitPass& pass : passes) {
    if (!implicit_applies(in, a.precision == 0, pass.g, image_cg * pack, s.G / pack))
      return ffi::Error::InvalidArgument(what + ": the implicit GEMM does not apply");
    pass_out_size = std::max(pass_out_size, pass.g.out_size);
  }
  const size_t e = ffi::ByteWidth(in);
  const int64_t c_in = input_gradient ? s.O : s.image.c, c_out = input_gradient ? s.image.c : s.O;
  const int64_t image_size = input_gradient ? s.g.out_size : s.g.in_size;
  const int64_t out_size = input_gradient ? s.g.in_size : s.g.out_size;
  // The kernel reads channels-last forward rows (O, K, Cg) as they are.
  const bool relayout = input_gradient || !s.cl || pack > 1;
  ImplicitWorkspace plan;
  auto ws = implicit_workspace_of(workspace, s, a, relayout ? pack * s.O * s.CgK * e : 0,
                                  c_in * image_size, e, c_out, pass_out_size, &plan);
  if (ws.has_error()) return ws.error();
  if (zeros) {
    if (auto err = cuda_error(cudaMemsetAsync(out.untyped_data(), 0, out.size_bytes(), stream),
                              "zero fill");
        err.failure())
      return err;
  }
  char* rows = *ws + plan.filter;  // the passes' rows end to end
  for (size_t i = 0; i < passes.size(); ++i) {
    if (!relayout) {
      passes[i].w = w.untyped_data();
      continue;
    }
    passes[i].w = rows;
    rows += pack * s.O * s.Cg * passes[i].g.kernel_size * e;
  }
  if (relayout && !passes.empty()) {
    if (auto err = cuda_error(implicit_filter(w.untyped_data(), *ws + plan.filter, e, s.cl, s.G,
                                              s.Og, s.Cg, taps.data(), static_cast<int>(taps.size()),
                                              input_gradient, pack, stream),
                              "filter layout");
        err.failure())
      return err;
  }
  return implicit_run(image.untyped_data(), c_in, passes, out.untyped_data(), c_out, out_size,
                      s.G / pack, s, a, in, out.element_type(), *ws + plan.image,
                      reinterpret_cast<float*>(*ws + plan.partials), stream);
}

// The filter gradient as an implicit GEMM (implicit_filter_gradient.h): one
// call for channels-last operands; channels-first x and dy made
// channels-last a chunk of images at a time, each chunk adding to the float32
// parts; then the parts summed in order into dw. With kAlgorithmPacked,
// `pack` consecutive small groups (packed_groups of x's channels) are one:
// the GEMM computes their whole block of (pack * Og) x (pack * Cg) per tap,
// and the sum keeps its diagonal.
ffi::Error implicit_backward_filter(cudaStream_t stream, const ffi::AnyBuffer& dy,
                                    const ffi::AnyBuffer& x, ffi::AnyBuffer& dw,
                                    const ffi::AnyBuffer& workspace, const ConvShapes& s,
                                    const ConvAttrs& a) {
  const DataType in = x.element_type();
  const int64_t N = s.image.n, L = s.g.out_size, C = s.image.c, K = s.g.kernel_size;
  const int64_t images = s.cl ? N : std::min(a.chunk_images, N), splits = a.chunk_positions;
  const int64_t pack = a.algorithm == kAlgorithmPacked ? packed_groups(s.Cg, s.G) : 1;
  if (pack == 0) return ffi::Error::InvalidArgument("conv_backward_filter: the groups do not pack");
  const int64_t groups = s.G / pack;
  if (!implicit_filter_applies(in, a.precision == 0, s.g, s.Cg * pack, s.Og * pack, groups,
                               images * L))
    return ffi::Error::InvalidArgument("conv_backward_filter: the implicit GEMM does not apply");
  const size_t e = ffi::ByteWidth(in);
  const ImplicitFilterWorkspace plan = implicit_filter_workspace(
      s.cl ? 0 : images * C * s.g.in_size * e, s.cl ? 0 : images * s.O * L * e,
      implicit_filter_partials_bytes(splits, s.O, s.Cg * pack, K));
  if (workspace.size_bytes() < plan.total)
    return ffi::Error::InvalidArgument("conv: workspace buffer is smaller than the plan needs");
  char* ws = static_cast<char*>(workspace.untyped_data());
  ImplicitFilterGradient p{x.untyped_data(), dy.untyped_data(), N, C, s.O, groups,
                           splits, reinterpret_cast<float*>(ws + plan.partials), false};
  auto chunk = [&](int64_t n0, int64_t nc) -> ffi::Error {
    if (!s.cl) {
      if (auto err = chunk_to_channels_last(x.untyped_data(), n0, nc, C, s.g.in_size, e,
                                            ws + plan.image, stream);
          err.failure())
        return err;
      if (auto err = chunk_to_channels_last(dy.untyped_data(), n0, nc, s.O, L, e,
                                            ws + plan.gradient, stream);
          err.failure())
        return err;
      p.x = ws + plan.image;
      p.dy = ws + plan.gradient;
    }
    p.n = nc;
    p.accumulate = n0 > 0;
    return cuda_error(implicit_filter_gradient(p, s.g, in, stream), "implicit GEMM");
  };
  if (auto err = for_each_image_chunk(N, images, chunk); err.failure()) return err;
  return cuda_error(implicit_filter_finish(p.partials, dw.untyped_data(), dw.element_type(), s.O,
                                           s.Og, s.Cg, K, splits, pack, s.cl, stream),
                    "filter gradient sum");
}

// --- channels-first 1-D kernels ----------------------------------------------

// The forward, or (input_gradient) the input gradient as the stride-1
// convolution of dy with the taps reversed and the filter transposed per group.
ffi::Error conv_1d_cf_call(cudaStream_t stream, const ffi::AnyBuffer& image,
                           const ffi::AnyBuffer& w, ffi::AnyBuffer& out, const ConvShapes& s,
                           const ConvAttrs& a, bool input_gradient) {
  const int64_t ci = input_gradient ? s.Og : s.Cg, co = input_gradient ? s.Cg : s.Og;
  const int64_t in_w = input_gradient ? s.g.out[0] : s.g.in[0];
  if (s.cl || !conv_1d_cf_applies(image.element_type(), a.precision == 0, s.g, ci, co, in_w))
    return ffi::Error::InvalidArgument(
        std::string(input_gradient ? "conv_backward_data" : "conv_forward") +
        ": the channels-first 1-D kernel does not apply");
  const int64_t reach = (s.g.kernel[0] - 1) * s.g.rhs_dilation[0];
  const Conv1dCf p{static_cast<const float*>(image.untyped_data()),
                   static_cast<const float*>(w.untyped_data()),
                   static_cast<float*>(out.untyped_data()),
                   s.image.n, s.G, ci, co, in_w,
                   input_gradient ? s.g.in[0] : s.g.out[0],
                   s.g.kernel[0], s.g.rhs_dilation[0],
                   input_gradient ? reach - s.g.pad_lo[0] : s.g.pad_lo[0],
                   input_gradient};
  return cuda_error(conv_1d_cf(p, stream), "channels-first 1-D conv");
}

// The filter gradient in at most chunk_positions slices, summed in order
// into dw.
ffi::Error conv_1d_cf_backward_filter(cudaStream_t stream, const ffi::AnyBuffer& dy,
                                      const ffi::AnyBuffer& x, ffi::AnyBuffer& dw,
                                      const ffi::AnyBuffer& workspace, const ConvShapes& s,
                                      const ConvAttrs& a) {
  const int64_t K = s.g.kernel[0], slices = a.chunk_positions;
  if (s.cl || s.G > 65535 || s.g.out[0] % 4 != 0 ||
      !conv_1d_cf_applies(x.element_type(), a.precision == 0, s.g, s.Cg, s.Og, s.g.in[0]))
    return ffi::Error::InvalidArgument(
        "conv_backward_filter: the channels-first 1-D kernel does not apply");
  if (workspace.size_bytes() < implicit_filter_partials_bytes(slices, s.O, s.Cg, K))
    return ffi::Error::InvalidArgument("conv: workspace buffer is smaller than the plan needs");
  float* partials = static_cast<float*>(workspace.untyped_data());
  const Conv1dCfFilterGradient p{static_cast<const float*>(x.untyped_data()),
                                 static_cast<const float*>(dy.untyped_data()), partials,
                                 s.image.n, s.G, s.Cg, s.Og, s.g.in[0], s.g.out[0], K,
                                 s.g.rhs_dilation[0], s.g.pad_lo[0], slices};
  int64_t written = 0;
  if (auto err = cuda_error(conv_1d_cf_filter_gradient(p, &written, stream),
                            "channels-first 1-D filter gradient");
      err.failure())
    return err;
  return cuda_error(implicit_filter_finish(partials, dw.untyped_data(), dw.element_type(), s.O,
                                           s.Og, s.Cg, K, written, 1, false, stream),
                    "filter gradient sum");
}

// --- handlers ----------------------------------------------------------------

ffi::Error forward(cudaStream_t stream, int32_t device, ffi::AnyBuffer x,
                   ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> y,
                   ffi::Result<ffi::AnyBuffer> workspace, const ConvAttrs& a) {
  Context c{{}, a, {}, nullptr, stream};
  if (auto e = conv_shapes(x.dimensions(), w.dimensions(), y->dimensions(), a, &c.s); e.failure())
    return e;
  const ConvShapes& s = c.s;
  const DataType in = x.element_type(), out = y->element_type();
  if (w.element_type() != in || !(out == in || (is_half(in) && out == DataType::F32)))
    return ffi::Error::InvalidArgument("conv_forward: unsupported dtypes");
  if (a.algorithm == kAlgorithmConv1dCf) return conv_1d_cf_call(stream, x, w, *y, s, a, false);
  if (a.algorithm >= kAlgorithmGemmChannelsLast)
    return ffi::Error::InvalidArgument("conv_forward: algorithms 4 and 5 are filter gradients");
  if (a.algorithm == kAlgorithmImplicit || a.algorithm == kAlgorithmPacked)
    return implicit_call(stream, x, w, *y, *workspace, s, a, false);
  if (a.algorithm == kAlgorithmDirect)
    return cuda_error(direct_forward(x.untyped_data(), w.untyped_data(), y->untyped_data(), in,
                                     out, s.g, direct_shapes(s), stream),
                      "direct conv");
  const int64_t C = s.image.c, K = s.g.kernel_size, L = s.g.out_size, O = s.O;
  const size_t cols_elems = s.identity ? 0 : a.chunk_images * C * K * a.chunk_positions;
  if (auto e = check_workspace(*workspace, cols_elems, ffi::ByteWidth(in), 0, 0, 0, &c); e.failure())
    return e;
  auto session = start_gemm(c, device, in);
  if (session.has_error()) return session.error();
  const Gemm& gm = session->gemm;
  void* cols = c.ws_base + c.ws.cols;
  const int64_t in_size = s.g.in_size;
  return for_each_chunk(c, [&](int64_t n0, int64_t nc, int64_t l0, int64_t lc) -> ffi::Error {
    if (!s.cl) {
      Operand A = operand(static_cast<const char*>(x.untyped_data()) +
                              (n0 * C * in_size + l0) * ffi::ByteWidth(in),
                          in_size, C * in_size, s.Cg * in_size, in);
      if (!s.identity) {
        const ColumnsLayout lay = cf_image_major(s, l0, lc);
        if (auto e = cuda_error(launch_unfold(x.untyped_data(), cols, ffi::ByteWidth(in), s.g, C,
                                              n0, nc, lay, false, false, stream), "unfold");
            e.failure())
          return e;
        A = operand(cols, lc, C * K * lc, s.CgK * lc, in);
      }
      const Operand B = operand(w.untyped_data(), s.CgK, 0, s.Og * s.CgK, in);
      const Operand Y = operand(static_cast<char*>(y->untyped_data()) +
                                    (n0 * O * L + l0) * ffi::ByteWidth(out),
                                L, O * L, s.Og * L, out);
      return gemm_grid(gm, CUBLAS_OP_N, CUBLAS_OP_N, lc, s.Og, s.CgK, A, B, Y, nc, s.G, false);
    }
    const int64_t row0 = n0 * L + l0, M = nc * lc;
    Operand B = operand(static_cast<const char*>(x.untyped_data()) + row0 * C * ffi::ByteWidth(in),
                        C, 0, s.Cg, in);
    if (!s.identity) {
      if (auto e = cuda_error(launch_unfold(x.untyped_data(), cols, ffi::ByteWidth(in), s.g, C, n0,
                                            nc, cl_layout(s, l0, lc), true, false, stream), "unfold");
          e.failure())
        return e;
      B = operand(cols, C * K, 0, s.CgK, in);
    }
    const Operand A = operand(w.untyped_data(), s.CgK, 0, s.Og * s.CgK, in);
    const Operand Y = operand(static_cast<char*>(y->untyped_data()) + row0 * O * ffi::ByteWidth(out),
                              O, 0, s.Og, out);
    return gemm_grid(gm, CUBLAS_OP_T, CUBLAS_OP_N, s.Og, M, s.CgK, A, B, Y, 1, s.G, false);
  });
}

ffi::Error backward_data(cudaStream_t stream, int32_t device, ffi::AnyBuffer dy,
                         ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> dx,
                         ffi::Result<ffi::AnyBuffer> workspace, const ConvAttrs& a) {
  Context c{{}, a, {}, nullptr, stream};
  if (auto e = conv_shapes(dx->dimensions(), w.dimensions(), dy.dimensions(), a, &c.s); e.failure())
    return e;
  const ConvShapes& s = c.s;
  const DataType in = dy.element_type(), out = dx->element_type();
  if (w.element_type() != in || out != in)
    return ffi::Error::InvalidArgument("conv_backward_data: unsupported dtypes");
  if (a.algorithm == kAlgorithmConv1dCf) return conv_1d_cf_call(stream, dy, w, *dx, s, a, true);
  if (a.algorithm >= kAlgorithmGemmChannelsLast)
    return ffi::Error::InvalidArgument("conv_backward_data: algorithms 4 and 5 are filter gradients");
  if (a.algorithm == kAlgorithmImplicit || a.algorithm == kAlgorithmPacked)
    return implicit_call(stream, dy, w, *dx, *workspace, s, a, true);
  if (a.algorithm == kAlgorithmDirect)
    return cuda_error(direct_backward_data(dy.untyped_data(), w.untyped_data(), dx->untyped_data(),
                                           in, s.g, direct_shapes(s), stream),
                      "direct conv input gradient");
  const DataType cols_type = is_half(in) ? DataType::F32 : in;
  const int64_t C = s.image.c, K = s.g.kernel_size, L = s.g.out_size, O = s.O;
  const size_t cols_elems = s.identity ? 0 : a.chunk_images * C * K * a.chunk_positions;
  if (auto e = check_workspace(*workspace, cols_elems, ffi::ByteWidth(cols_type), 0, 0, 0, &c);
      e.failure())
    return e;
  auto session = start_gemm(c, device, in);
  if (session.has_error()) return session.error();
  const Gemm& gm = session->gemm;
  void* cols = c.ws_base + c.ws.cols;
  const size_t ein = ffi::ByteWidth(in);
  return for_each_chunk(c, [&](int64_t n0, int64_t nc, int64_t l0, int64_t lc) -> ffi::Error {
    if (!s.cl) {
      const Operand A = operand(static_cast<const char*>(dy.untyped_data()) + (n0 * O * L + l0) * ein,
                                L, O * L, s.Og * L, in);
      const Operand B = operand(w.untyped_data(), s.CgK, 0, s.Og * s.CgK, in);
      const Operand D = s.identity
          ? operand(static_cast<char*>(dx->untyped_data()) + n0 * C * L * ein, L, C * L, s.Cg * L, out)
          : operand(cols, lc, C * K * lc, s.CgK * lc, cols_type);
      if (auto e = gemm_grid(gm, CUBLAS_OP_N, CUBLAS_OP_T, lc, s.CgK, s.Og, A, B, D, nc, s.G, false);
          e.failure())
        return e;
      if (s.identity) return ffi::Error::Success();
      return cuda_error(launch_fold(cols, cols_type, dx->untyped_data(), out, s.g, C, n0, nc,
                                    cf_image_major(s, l0, lc), false, l0 > 0, stream), "fold");
    }
    const int64_t row0 = n0 * L + l0, M = nc * lc;
    const Operand A = operand(w.untyped_data(), s.CgK, 0, s.Og * s.CgK, in);
    const Operand B = operand(static_cast<const char*>(dy.untyped_data()) + row0 * O * ein, O, 0, s.Og, in);
    const Operand D = s.identity
        ? operand(static_cast<char*>(dx->untyped_data()) + row0 * C * ein, C, 0, s.Cg, out)
        : operand(cols, C * K, 0, s.CgK, cols_type);
    if (auto e = gemm_grid(gm, CUBLAS_OP_N, CUBLAS_OP_N, s.CgK, M, s.Og, A, B, D, 1, s.G, false);
        e.failure())
      return e;
    if (s.identity) return ffi::Error::Success();
    return cuda_error(launch_fold(cols, cols_type, dx->untyped_data(), out, s.g, C, n0, nc,
                                  cl_layout(s, l0, lc), true, l0 > 0, stream), "fold");
  });
}

// The filter gradient of a channels-first 1x1 window without stride or
// padding: dw_g = sum over images of dy_{n,g} (Og x L) times x_{n,g}^T (L x
// Cg), each image's product one GEMM over its L positions in one strided
// batched call, on x and dy as they are (the im2col + GEMM path would first
// copy both into rows spanning the images). Image n adds to float32 slot
// n % chunk_images; implicit_filter_finish sums the slots in order.
ffi::Error per_image_backward_filter(Context& c, int32_t device, const ffi::AnyBuffer& dy,
                                     const ffi::AnyBuffer& x, ffi::AnyBuffer& dw,
                                     const ffi::AnyBuffer& workspace) {
  const ConvShapes& s = c.s;
  const DataType in = x.element_type();
  if (s.cl || !s.identity || !(is_half(in) || in == DataType::F32))
    return ffi::Error::InvalidArgument(
        "conv_backward_filter: algorithm 5 takes a channels-first 1x1 window in float32 or half "
        "types");
  const int64_t N = s.image.n, L = s.g.out_size, C = s.image.c, O = s.O;
  const int64_t slots = std::min(c.a.chunk_images, N);
  if (auto e = check_workspace(workspace, 0, 0, 0, 0, slots * O * s.Cg, &c); e.failure()) return e;
  auto session = start_gemm(c, device, in);
  if (session.has_error()) return session.error();
  float* acc = reinterpret_cast<float*>(c.ws_base + c.ws.acc);
  const size_t e = ffi::ByteWidth(in);
  const Operand D = operand(acc, s.Cg, O * s.Cg, s.Og * s.Cg, DataType::F32);
  for (int64_t n0 = 0; n0 < N; n0 += slots) {
    const int64_t nc = std::min(slots, N - n0);
    const Operand A = operand(static_cast<const char*>(x.untyped_data()) + n0 * C * L * e, L,
                              C * L, s.Cg * L, in);
    const Operand B = operand(static_cast<const char*>(dy.untyped_data()) + n0 * O * L * e, L,
                              O * L, s.Og * L, in);
    if (auto err = gemm_grid(session->gemm, CUBLAS_OP_T, CUBLAS_OP_N, s.Cg, s.Og, L, A, B, D, nc,
                             s.G, n0 > 0);
        err.failure())
      return err;
  }
  return cuda_error(implicit_filter_finish(acc, dw.untyped_data(), in, O, s.Og, s.Cg, 1, slots, 1,
                                           false, c.stream),
                    "filter gradient sum");
}

ffi::Error backward_filter(cudaStream_t stream, int32_t device, ffi::AnyBuffer dy,
                           ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> dw,
                           ffi::Result<ffi::AnyBuffer> workspace, const ConvAttrs& a) {
  Context c{{}, a, {}, nullptr, stream};
  if (auto e = conv_shapes(x.dimensions(), dw->dimensions(), dy.dimensions(), a, &c.s); e.failure())
    return e;
  const ConvShapes& s = c.s;
  const DataType in = x.element_type(), out = dw->element_type();
  if (dy.element_type() != in || out != in)
    return ffi::Error::InvalidArgument("conv_backward_filter: unsupported dtypes");
  if (a.algorithm == kAlgorithmImplicit || a.algorithm == kAlgorithmPacked)
    return implicit_backward_filter(stream, dy, x, *dw, *workspace, s, a);
  if (a.algorithm == kAlgorithmGemmPerImage)
    return per_image_backward_filter(c, device, dy, x, *dw, *workspace);
  if (a.algorithm == kAlgorithmConv1dCf)
    return conv_1d_cf_backward_filter(stream, dy, x, *dw, *workspace, s, a);
  if (a.algorithm == kAlgorithmDirect) {
    const FilterSlices slices = filter_slices(s.image.n, s.g.out[0], a.chunk_positions);
    if (workspace->size_bytes() < filter_partials_bytes(slices, s.O * s.CgK, in == DataType::F64))
      return ffi::Error::InvalidArgument("conv: workspace buffer is smaller than the plan needs");
    return cuda_error(direct_backward_filter(dy.untyped_data(), x.untyped_data(), dw->untyped_data(),
                                             workspace->untyped_data(), slices, in, s.g,
                                             direct_shapes(s), stream),
                      "direct conv filter gradient");
  }
  const int64_t C = s.image.c, K = s.g.kernel_size, L = s.g.out_size, O = s.O;
  // Channels-first x and dy made channels-last a chunk of whole images at a
  // time (into the image and dyt regions), then the channels-last path.
  // The GEMM then writes dw in the channels-last order (O, K, Cg), as float
  // into the accumulator, which filter_to_channels_first puts in dw's order.
  const bool relayout = a.algorithm == kAlgorithmGemmChannelsLast;
  if (relayout && (s.cl || a.chunk_positions < L || !(is_half(in) || in == DataType::F32)))
    return ffi::Error::InvalidArgument(
        "conv_backward_filter: algorithm 4 takes channels-first float32 or half operands in "
        "whole images");
  const bool rows_cl = s.cl || relayout;  // x and dy reach the GEMM channels-last
  const bool use_cols = !(s.identity && rows_cl);
  const size_t cols_elems = use_cols ? a.chunk_images * C * K * a.chunk_positions : 0;
  const size_t dyt_elems = s.cl ? 0 : a.chunk_images * O * a.chunk_positions;
  const size_t image_elems = relayout ? a.chunk_images * C * s.g.in_size : 0;
  const bool float_acc = is_half(in) || relayout;
  const size_t acc_elems = float_acc ? O * s.CgK : 0;
  const size_t ein = ffi::ByteWidth(in);
  if (auto e = check_workspace(*workspace, cols_elems, ein, dyt_elems, ein, acc_elems, &c,
                               image_elems);
      e.failure())
    return e;
  auto session = start_gemm(c, device, in);
  if (session.has_error()) return session.error();
  const Gemm& gm = session->gemm;
  void* cols = c.ws_base + c.ws.cols;
  void* dyt = c.ws_base + c.ws.dyt;
  const DataType acc_type = float_acc ? DataType::F32 : in;
  void* acc = float_acc ? static_cast<void*>(c.ws_base + c.ws.acc) : dw->untyped_data();
  const Operand D = operand(acc, s.CgK, 0, s.Og * s.CgK, acc_type);
  // The output gradient seen as an image with a 1x1 window: unfolding it
  // with the row-spanning layout transposes it to (o, n, l).
  Geometry gy;
  gy.nd = s.g.nd;
  const int64_t no_pad[kMaxSpatial] = {0, 0, 0};
  for (int d = 0; d < s.g.nd; ++d) gy.in[d] = s.g.out[d];
  finish_geometry(gy, no_pad);  // within 32 bits: its extents are s.g's outputs
  bool first = true;
  auto e = for_each_chunk(c, [&](int64_t n0, int64_t nc, int64_t l0, int64_t lc) -> ffi::Error {
    const int64_t M = nc * lc;
    const bool accumulate = !first;
    first = false;
    if (!rows_cl) {
      const ColumnsLayout lay = cf_row_major(nc, l0, lc);
      if (auto e = cuda_error(launch_unfold(x.untyped_data(), cols, ein, s.g, C, n0, nc, lay, false,
                                            false, stream), "unfold");
          e.failure())
        return e;
      if (auto e = cuda_error(launch_unfold(dy.untyped_data(), dyt, ein, gy, O, n0, nc, lay, false,
                                            false, stream), "transpose");
          e.failure())
        return e;
      const Operand A = operand(cols, M, 0, s.CgK * M, in);
      const Operand B = operand(dyt, M, 0, s.Og * M, in);
      return gemm_grid(gm, CUBLAS_OP_T, CUBLAS_OP_N, s.CgK, s.Og, M, A, B, D, 1, s.G, accumulate);
    }
    // The channels-last x and dy, and the chunk's first image in them.
    const void* xs = x.untyped_data();
    const void* dys = dy.untyped_data();
    int64_t image0 = n0;
    if (relayout) {
      void* image = c.ws_base + c.ws.image;
      if (auto e = chunk_to_channels_last(xs, n0, nc, C, s.g.in_size, ein, image, stream);
          e.failure())
        return e;
      if (auto e = chunk_to_channels_last(dys, n0, nc, O, L, ein, dyt, stream); e.failure())
        return e;
      xs = image, dys = dyt, image0 = 0;
    }
    const int64_t row0 = image0 * L + l0;
    Operand A = operand(static_cast<const char*>(xs) + row0 * C * ein, C, 0, s.Cg, in);
    if (use_cols) {
      if (auto e = cuda_error(launch_unfold(xs, cols, ein, s.g, C, image0, nc, cl_layout(s, l0, lc),
                                            true, false, stream), "unfold");
          e.failure())
        return e;
      A = operand(cols, C * K, 0, s.CgK, in);
    }
    const Operand B = operand(static_cast<const char*>(dys) + row0 * O * ein, O, 0, s.Og, in);
    return gemm_grid(gm, CUBLAS_OP_N, CUBLAS_OP_T, s.CgK, s.Og, M, A, B, D, 1, s.G, accumulate);
  });
  if (e.failure()) return e;
  if (relayout)
    return cuda_error(filter_to_channels_first(static_cast<const float*>(acc), dw->untyped_data(),
                                               in, O, K, s.Cg, stream),
                      "filter gradient order");
  if (!is_half(in)) return e;
  const int64_t n = O * s.CgK;
  if (in == DataType::F16)
    from_float_kernel<__half><<<grid_for(n), 256, 0, stream>>>(
        static_cast<const float*>(acc), static_cast<__half*>(dw->untyped_data()), n);
  else
    from_float_kernel<__nv_bfloat16><<<grid_for(n), 256, 0, stream>>>(
        static_cast<const float*>(acc), static_cast<__nv_bfloat16*>(dw->untyped_data()), n);
  return cuda_error(cudaGetLastError(), "filter gradient cast");
}

template <typename Op>
auto conv_handler(Op op) {
  return [op](cudaStream_t stream, int32_t device, ffi::AnyBuffer a, ffi::AnyBuffer b,
              ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> ws, I64Span kernel,
              I64Span stride, I64Span rhs_dilation, I64Span lhs_dilation, I64Span padding,
              bool channels_last, int64_t groups, int64_t precision, int64_t chunk_images,
              int64_t chunk_positions, int64_t algorithm) {
    const ConvAttrs attrs{{kernel, stride, rhs_dilation, lhs_dilation, padding},
                          channels_last, groups, precision, chunk_images, chunk_positions,
                          algorithm};
    return op(stream, device, a, b, out, ws, attrs);
  };
}

auto conv_binding() {
  return bind_window(ffi::Ffi::Bind()
                         .Ctx<ffi::PlatformStream<cudaStream_t>>()
                         .Ctx<ffi::DeviceOrdinal>()
                         .Arg<ffi::AnyBuffer>()
                         .Arg<ffi::AnyBuffer>()
                         .Ret<ffi::AnyBuffer>()
                         .Ret<ffi::AnyBuffer>())
      .Attr<int64_t>("groups")
      .Attr<int64_t>("precision")
      .Attr<int64_t>("chunk_images")
      .Attr<int64_t>("chunk_positions")
      .Attr<int64_t>("algorithm");
}

ffi::Error initialize(int32_t device) { return prepare_blas_handle(device); }

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(jax_im2col_conv_initialize_cuda, initialize,
                              ffi::Ffi::BindInitialize().Ctx<ffi::DeviceOrdinal>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(jax_im2col_conv_forward_cuda, conv_handler(forward), conv_binding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(jax_im2col_conv_backward_data_cuda, conv_handler(backward_data),
                              conv_binding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(jax_im2col_conv_backward_filter_cuda, conv_handler(backward_filter),
                              conv_binding());

}  // namespace im2col::cuda
