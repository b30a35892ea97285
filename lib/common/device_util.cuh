// Small device-side helpers shared by the CUDA kernels: element types and
// their accumulators, vector packs, grid-stride loops.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace im2col::cuda {

constexpr int kThreads = 256;

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// V elements of T held as raw 32-bit words by kernels that keep loads in
// flight: a Pack<bfloat16, 8> held its 8 elements in 8 registers (118 a
// thread in fold_cl_taps_kernel, step 59), as words it takes 4. Unpacked
// (memcpy into a Pack) where the elements are added.
template <typename T, int V>
using RawWords = Pack<uint32_t, (sizeof(T) * V + 3) / 4>;

// V elements at src as whole words, or one 2-byte element in the low half of
// a word (a memcpy of it compiled to byte loads). READ_ONLY: through __ldg
// (src read-only for the kernel's lifetime), for pointers nvcc cannot trace
// to a kernel argument (keep_in_register's), whose plain loads it makes
// generic ones.
template <typename T, int V, bool READ_ONLY = false>
__device__ __forceinline__ RawWords<T, V> load_raw(const T* src) {
  using Raw = RawWords<T, V>;
  static_assert(sizeof(T) * V == sizeof(Raw) || sizeof(T) * V == 2, "whole words or one 2-byte element");
  Raw r;
  if constexpr (!READ_ONLY && sizeof(T) * V == sizeof(Raw)) {
    r = *reinterpret_cast<const Raw*>(src);
  } else if constexpr (!READ_ONLY) {
    r.v[0] = *reinterpret_cast<const uint16_t*>(src);
  } else if constexpr (sizeof(T) * V == 16) {
    const uint4 w = __ldg(reinterpret_cast<const uint4*>(src));
    r.v[0] = w.x, r.v[1] = w.y, r.v[2] = w.z, r.v[3] = w.w;
  } else if constexpr (sizeof(T) * V == 8) {
    const uint2 w = __ldg(reinterpret_cast<const uint2*>(src));
    r.v[0] = w.x, r.v[1] = w.y;
  } else if constexpr (sizeof(T) * V == 4) {
    r.v[0] = __ldg(reinterpret_cast<const unsigned int*>(src));
  } else {
    r.v[0] = __ldg(reinterpret_cast<const unsigned short*>(src));
  }
  return r;
}

template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_acc(float v);
template <> __device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_acc<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__device__ __forceinline__ T store_value(typename Acc<T>::type v) {
  if constexpr (std::is_same_v<T, double>) return v; else return from_acc<T>(v);
}

__device__ __forceinline__ int64_t grid_start() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_step() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Division by a divisor fixed at launch, for 0 <= n < 2^31: a multiply-high,
// an add and a shift (the round-up method of Granlund and Montgomery) in
// place of the ~20 instructions of an integer division.
struct FastDiv {
  uint32_t d = 1, m = 1, s = 0;
  FastDiv() = default;
  explicit FastDiv(int64_t divisor) : d(static_cast<uint32_t>(divisor > 1 ? divisor : 1)) {
    while ((uint64_t{1} << s) < d) ++s;
    m = static_cast<uint32_t>((uint64_t{1} << 32) * ((uint64_t{1} << s) - d) / d + 1);
  }
  __device__ __forceinline__ int32_t div(int32_t n) const {
    const uint32_t u = static_cast<uint32_t>(n);
    return static_cast<int32_t>((__umulhi(u, m) + u) >> s);
  }
  // n / d and n % d.
  __device__ __forceinline__ void divmod(int32_t n, int32_t& q, int32_t& r) const {
    q = div(n);
    r = n - q * static_cast<int32_t>(d);
  }
};

// Coordinates o of flat index `flat` (0 <= flat < 2^31) over ND dimensions
// whose extents 1..ND-1 are the divisors dims[1..ND-1] (dims[0] is not read).
template <int ND, int N>
__device__ __forceinline__ void unravel_fast(int32_t flat, const FastDiv (&dims)[N], int32_t* o) {
  static_assert(ND <= N, "a divisor a dimension");
#pragma unroll
  for (int d = ND - 1; d > 0; --d) dims[d].divmod(flat, flat, o[d]);
  o[0] = flat;
}

// Calls fn(U{}) with the unsigned type of elem_bytes bytes (2, 4 or 8): the
// carrier of kernels that only move data.
template <typename Fn>
cudaError_t with_element_bytes(size_t elem_bytes, Fn&& fn) {
  switch (elem_bytes) {
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    case 8: return fn(uint64_t{});
    default: return cudaErrorInvalidValue;
  }
}

// Makes p opaque to the compiler, so that it stays in a register instead of
// being re-derived from the kernel's arguments at each use (nvcc did that
// with 64-bit multiplies inside a fill loop, ~20 instructions a load).
template <typename T>
__device__ __forceinline__ void keep_in_register(const T*& p) {
#ifdef __CUDA_ARCH__
  asm volatile("" : "+l"(p));
#else
  (void)p;
#endif
}

// f(std::integral_constant<int, i>) for i = 0 .. N-1: a loop whose index is
// a constant expression (store_streaming's immediate offsets).
template <typename F, int... I>
__device__ __forceinline__ void for_each_index_in(std::integer_sequence<int, I...>, F&& f) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, typename F>
__device__ __forceinline__ void for_each_index(F&& f) {
  for_each_index_in(std::make_integer_sequence<int, N>{}, f);
}

// *(W*)((char*)base + OFFSET) = v as a streaming store (st.global.cs:
// evict-first, for data the kernel never reads back), OFFSET an immediate of
// the instruction as a plain store's would be (__stcs takes a computed
// address, which cost the tiled unfold a register an address and spills).
template <int OFFSET, typename W>
__device__ __forceinline__ void store_streaming(W* base, W v) {
#ifdef __CUDA_ARCH__
  const size_t p = __cvta_generic_to_global(base);
  if constexpr (sizeof(W) == 2) {
    asm volatile("st.global.cs.b16 [%0+%2], %1;" ::"l"(p), "h"(*reinterpret_cast<const unsigned short*>(&v)),
                 "n"(OFFSET));
  } else if constexpr (sizeof(W) == 4) {
    asm volatile("st.global.cs.b32 [%0+%2], %1;" ::"l"(p), "r"(*reinterpret_cast<const unsigned*>(&v)), "n"(OFFSET));
  } else if constexpr (sizeof(W) == 8) {
    asm volatile("st.global.cs.b64 [%0+%2], %1;" ::"l"(p), "l"(*reinterpret_cast<const unsigned long long*>(&v)),
                 "n"(OFFSET));
  } else {
    static_assert(sizeof(W) == 16, "2, 4, 8 or 16 bytes");
    const uint4 u = *reinterpret_cast<const uint4*>(&v);
    asm volatile("st.global.cs.v4.b32 [%0+%5], {%1, %2, %3, %4};" ::"l"(p), "r"(u.x), "r"(u.y), "r"(u.z), "r"(u.w),
                 "n"(OFFSET));
  }
#else
  *reinterpret_cast<W*>(reinterpret_cast<char*>(base) + OFFSET) = v;
#endif
}

// store_streaming where STREAM, else a plain store at the same offset.
template <bool STREAM, int OFFSET = 0, typename W>
__device__ __forceinline__ void store_maybe_streaming(W* base, W v) {
  if constexpr (STREAM) {
    store_streaming<OFFSET>(base, v);
  } else {
    *reinterpret_cast<W*>(reinterpret_cast<char*>(base) + OFFSET) = v;
  }
}

inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// cp.async (Ampere and newer): 16 bytes from global to shared memory, or 16
// zero bytes when !valid (the source is then not read).
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// The first `bytes` (0 to 16) of the 16 from src, zeros after them.
__device__ __forceinline__ void copy_async_bytes(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void copy_async(uint32_t dst, const void* src, bool valid) {
  copy_async_bytes(dst, src, valid ? 16 : 0);
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

// The sum over a warp, the same in every lane; a fixed butterfly, so the
// rounding does not depend on timing.
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

inline unsigned blocks_for(int64_t work) {
  const int64_t b = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(b, 1 << 20)));
}

}  // namespace im2col::cuda
