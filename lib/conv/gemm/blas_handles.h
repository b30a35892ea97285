// cuBLAS handles, pooled per device. Handles are created in the FFI
// initialize stage (see prepare_blas_handle), never per call; a call borrows
// one, binds it to its stream and to workspace that XLA allocated, and gives
// it back when done.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "xla/ffi/api/ffi.h"

namespace im2col::cuda {

// Makes sure `device` has a pooled handle; runs outside the execute path.
xla::ffi::Error prepare_blas_handle(int device);

class BlasLease {
 public:
  // Borrows a handle of `device` bound to `stream`, using `workspace` as the
  // cuBLAS workspace (cublasSetStream resets it, so it is set after it).
  static xla::ffi::ErrorOr<BlasLease> borrow(int device, cudaStream_t stream,
                                             void* workspace, size_t bytes);
  BlasLease(BlasLease&& other) noexcept;
  BlasLease& operator=(BlasLease&&) = delete;
  BlasLease(const BlasLease&) = delete;
  ~BlasLease();
  cublasHandle_t get() const { return handle_; }

 private:
  BlasLease(int device, cublasHandle_t handle) : device_(device), handle_(handle) {}
  int device_;
  cublasHandle_t handle_;
};

}  // namespace im2col::cuda
