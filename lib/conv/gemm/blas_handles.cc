#include "conv/gemm/blas_handles.h"

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace im2col::cuda {
namespace {

namespace ffi = xla::ffi;

struct Pool {
  std::mutex mu;
  std::unordered_map<int, std::vector<cublasHandle_t>> free;
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: handles outlive Python's exit
  return *p;
}

ffi::ErrorOr<cublasHandle_t> create_handle(int device) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess)
    return ffi::Unexpected<ffi::Error>(ffi::Error::Internal(
        "jax_im2col: cannot select CUDA device " + std::to_string(device)));
  cublasHandle_t h = nullptr;
  const cublasStatus_t s = cublasCreate(&h);
  cudaSetDevice(previous);
  if (s != CUBLAS_STATUS_SUCCESS)
    return ffi::Unexpected<ffi::Error>(ffi::Error::Internal(
        std::string("jax_im2col: cublasCreate failed: ") + cublasGetStatusString(s)));
  return h;
}

}  // namespace

ffi::Error prepare_blas_handle(int device) {
  {
    std::lock_guard<std::mutex> lock(pool().mu);
    if (!pool().free[device].empty()) return ffi::Error::Success();
  }
  auto h = create_handle(device);
  if (h.has_error()) return h.error();
  std::lock_guard<std::mutex> lock(pool().mu);
  pool().free[device].push_back(h.value());
  return ffi::Error::Success();
}

ffi::ErrorOr<BlasLease> BlasLease::borrow(int device, cudaStream_t stream,
                                          void* workspace, size_t bytes) {
  cublasHandle_t h = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool().mu);
    auto& list = pool().free[device];
    if (!list.empty()) {
      h = list.back();
      list.pop_back();
    }
  }
  if (h == nullptr) {
    // Only when more calls run at once on this device than were prepared;
    // never while a CUDA graph is being recorded (cublasCreate allocates).
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess ||
        capture != cudaStreamCaptureStatusNone)
      return ffi::Unexpected<ffi::Error>(ffi::Error::Internal(
          "jax_im2col: no prepared cuBLAS handle for a call recorded into a CUDA graph"));
    auto made = create_handle(device);
    if (made.has_error()) return ffi::Unexpected<ffi::Error>(made.error());
    h = made.value();
  }
  BlasLease lease(device, h);
  if (cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS ||
      cublasSetWorkspace(h, workspace, bytes) != CUBLAS_STATUS_SUCCESS)
    return ffi::Unexpected<ffi::Error>(
        ffi::Error::Internal("jax_im2col: cannot bind the cuBLAS handle to the stream"));
  return lease;
}

BlasLease::BlasLease(BlasLease&& other) noexcept
    : device_(other.device_), handle_(other.handle_) {
  other.handle_ = nullptr;
}

BlasLease::~BlasLease() {
  if (handle_ == nullptr) return;
  std::lock_guard<std::mutex> lock(pool().mu);
  pool().free[device_].push_back(handle_);
}

}  // namespace im2col::cuda
