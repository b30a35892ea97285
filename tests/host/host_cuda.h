// What nvcc would provide to the CUDA kernels and device functions that the
// host tests (tests/host/*.cc) compile as host code: qualifiers, the thread
// indices, intrinsics, and the overloads of min / max that device code
// finds unqualified. Include before the CUDA sources.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
struct HostDim3 {
  unsigned x = 0, y = 1, z = 1;
};
static HostDim3 blockIdx, threadIdx, blockDim, gridDim;
inline unsigned __umulhi(unsigned a, unsigned b) { return static_cast<unsigned>((uint64_t{a} * b) >> 32); }
inline size_t __cvta_generic_to_shared(const void* p) { return reinterpret_cast<size_t>(p); }
using std::max;
using std::min;
// The kernels' barrier: the host tests run the phases it separates one after
// the other for all threads of a block, so here it does nothing.
inline void __syncthreads() {}
template <typename T>
inline T __ldg(const T* p) { return *p; }
// Bytes of {y, x} (x's 0-3, y's 4-7) picked by the selector's nibbles, low first.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t bytes = (uint64_t{y} << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<unsigned>((bytes >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
  return static_cast<unsigned>(((uint64_t{hi} << 32) | lo) >> (shift & 31));
}
