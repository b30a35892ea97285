// Convolution as im2col + cuBLAS GEMM (algorithms kAlgorithmGemm,
// kAlgorithmGemmChannelsLast and kAlgorithmGemmPerImage). Each call processes
// the batch in chunks of images (and of output positions when one image's
// columns exceed the cap), with columns in XLA-provided workspace
// (conv_workspace.h).
//
// cuBLAS is column-major; a row-major (r x c) matrix is a column-major
// (c x r) one, so every product below is written for the transposed view.
#include "conv/gemm/gemm_conv.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "columns/columns.h"
#include "common/relayout.h"
#include "conv/gemm/blas_handles.h"
#include "conv/gemm/conv_workspace.h"
#include "conv/implicit/implicit_filter_gradient.h"

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

// --- chunks, workspace and layouts ------------------------------------------

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

}  // namespace

ffi::Error gemm_forward(cudaStream_t stream, int32_t device, ffi::AnyBuffer x,
                        ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> y,
                        ffi::Result<ffi::AnyBuffer> workspace, const ConvShapes& shapes,
                        const ConvAttrs& a) {
  Context c{shapes, a, {}, nullptr, stream};
  const ConvShapes& s = c.s;
  const DataType in = x.element_type(), out = y->element_type();
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

ffi::Error gemm_backward_data(cudaStream_t stream, int32_t device, ffi::AnyBuffer dy,
                              ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> dx,
                              ffi::Result<ffi::AnyBuffer> workspace, const ConvShapes& shapes,
                              const ConvAttrs& a) {
  Context c{shapes, a, {}, nullptr, stream};
  const ConvShapes& s = c.s;
  const DataType in = dy.element_type(), out = dx->element_type();
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

ffi::Error gemm_backward_filter(cudaStream_t stream, int32_t device, ffi::AnyBuffer dy,
                                ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> dw,
                                ffi::Result<ffi::AnyBuffer> workspace, const ConvShapes& shapes,
                                const ConvAttrs& a) {
  Context c{shapes, a, {}, nullptr, stream};
  const ConvShapes& s = c.s;
  const DataType in = x.element_type();
  if (a.algorithm == kAlgorithmGemmPerImage)
    return per_image_backward_filter(c, device, dy, x, *dw, *workspace);
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

}  // namespace im2col::cuda
