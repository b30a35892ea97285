// The warp-level tensor-core instructions of the mma.sync kernels (the
// implicit GEMM's forward in implicit_gemm.cu and its filter gradient in
// implicit_filter_gradient.cu): ldmatrix, and mma.sync per element type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace im2col::cuda::implicit {

// Four 8 x 8 matrices of 16-bit elements: lane l gives the address of row l % 8
// of matrix l / 8 and receives, of each matrix, row l / 4, elements 2 (l % 4)
// and 2 (l % 4) + 1 (with Transposed, those of the matrix's transpose).
template <bool Transposed = false>
__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], uint32_t address) {
  if constexpr (Transposed)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

// Two 8 x 8 matrices of 16-bit elements: lanes 0-15 give the row addresses
// (lane l row l % 8 of matrix l / 8), and lane l receives, of each matrix,
// row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1.
__device__ __forceinline__ void load_matrix_pair(uint32_t (&r)[2], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(address));
}

// The tensor-core instruction for element type T: d += a * b over one k-step
// of 8 words (8 float32 as TF32, 16 half).
template <typename T>
struct Mma {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "element type");
  __device__ static void prepare(uint32_t&) {}
  __device__ static void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#define IM2COL_MMA_16(TYPE)                                                                    \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE                          \
               ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                  \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
    if constexpr (std::is_same_v<T, __half>)
      IM2COL_MMA_16("f16");
    else
      IM2COL_MMA_16("bf16");
#undef IM2COL_MMA_16
  }
};

template <>
struct Mma<float> {
  // TF32 keeps 10 mantissa bits; round to nearest (cuBLAS and cuDNN round too).
  __device__ static void prepare(uint32_t& r) {
    uint32_t t;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(t) : "f"(__uint_as_float(r)));
    r = t;
  }
  __device__ static void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// Accumulators of MT x NT m16n8 tiles set to zero.
template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.f;
}

// acc[i][j] += af[i] * bf[j] over a warp's MT x NT mma tiles (float32
// operands rounded to TF32 first).
template <typename T, int MT, int NT>
__device__ __forceinline__ void multiply_fragments(float (&acc)[MT][NT][4], uint32_t (&af)[MT][4],
                                                   uint32_t (&bf)[NT][2]) {
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int v = 0; v < 4; ++v) Mma<T>::prepare(af[i][v]);
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int v = 0; v < 2; ++v) Mma<T>::prepare(bf[j][v]);
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j) Mma<T>::run(acc[i][j], af[i], bf[j]);
}

}  // namespace im2col::cuda::implicit
