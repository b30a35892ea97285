// Probe of Hopper's wgmma shared-memory descriptors (128-byte swizzle): does
// an A operand whose rows start at any 128-byte row of a swizzled tile, with
// 8-row groups any whole number of rows apart (the stride byte offset), read
// the rows a TMA box wrote with its swizzle on absolute addresses? And what
// must the descriptor's base-offset field hold for it? The halo kernel of
// implicit_gemm_sm90.cu shifts A's start by each tap's displacement within
// one staged box of positions (BENCHMARKS.md, step 46).
//
//   nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -o probe benchmarks/probe_descriptor.cu && ./probe
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <vector>

constexpr int kRows = 192;  // rows of A staged (128 bytes = 64 bf16 each)

__device__ __host__ inline float a_value(int r, int k) { return float((r * 7 + k * 3) % 9 - 4); }
__device__ __host__ inline float b_value(int n, int k) { return float((n * 5 + k) % 7 - 3); }

__device__ inline uint32_t smem(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ inline uint64_t descriptor(uint32_t address, uint32_t sbo, uint32_t base_offset) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (uint64_t{1} << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (static_cast<uint64_t>(base_offset & 7) << 49) |
         (uint64_t{1} << 62);
}

// D (64 x 8) = A (rows r0 + 8 g * ... ) x B^T for k-step `kstep` (16 elements).
__global__ void probe(int r0, int group_rows, int kstep, int offset_mode, float* out) {
  __shared__ __align__(1024) uint8_t a[kRows * 128];
  __shared__ __align__(1024) uint8_t b[8 * 128];
  // The swizzle a TMA box with CU_TENSOR_MAP_SWIZZLE_128B writes at a
  // 1024-byte aligned base: chunk j of row r at j ^ (r % 8).
  for (int i = threadIdx.x; i < kRows * 64; i += blockDim.x) {
    const int r = i / 64, k = i % 64, chunk = (k / 8) ^ (r % 8);
    reinterpret_cast<__nv_bfloat16*>(a + r * 128 + chunk * 16)[k % 8] = __float2bfloat16(a_value(r, k));
  }
  for (int i = threadIdx.x; i < 8 * 64; i += blockDim.x) {
    const int r = i / 64, k = i % 64, chunk = (k / 8) ^ (r % 8);
    reinterpret_cast<__nv_bfloat16*>(b + r * 128 + chunk * 16)[k % 8] = __float2bfloat16(b_value(r, k));
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const uint32_t start = smem(a) + r0 * 128 + kstep * 32;
  const uint32_t base_offset = offset_mode == 0 ? 0 : (start >> 7) & 7;
  const uint64_t da = descriptor(start, group_rows * 128, base_offset);
  const uint64_t db = descriptor(smem(b) + kstep * 32, 1024, 0);
  float d[4] = {0, 0, 0, 0};
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(da), "l"(db));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int v = 0; v < 4; ++v) {
    const int row = warp * 16 + lane / 4 + 8 * (v / 2), col = 2 * (lane % 4) + v % 2;
    out[row * 8 + col] = d[v];
  }
}

int main() {
  float* out;
  cudaMalloc(&out, 64 * 8 * sizeof(float));
  const int starts[] = {0, 1, 3, 5, 8, 13, 21};
  const int group_rows[] = {8, 9, 10, 16, 18};
  int failures[2] = {0, 0}, total = 0;
  for (int mode = 0; mode < 2; ++mode) {
    for (int r0 : starts)
      for (int g : group_rows) {
        int bad_steps = 0;
        for (int kstep = 0; kstep < 4; ++kstep) {
          probe<<<1, 128>>>(r0, g, kstep, mode, out);
          std::vector<float> h(64 * 8);
          if (cudaMemcpy(h.data(), out, h.size() * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
            printf("cuda error: %s\n", cudaGetErrorString(cudaGetLastError()));
            return 1;
          }
          int wrong = 0;
          for (int m = 0; m < 64; ++m)
            for (int n = 0; n < 8; ++n) {
              const int row = r0 + (m / 8) * g + m % 8;
              float want = 0;
              for (int k = 0; k < 16; ++k) want += a_value(row, kstep * 16 + k) * b_value(n, kstep * 16 + k);
              wrong += h[m * 8 + n] != want;
            }
          bad_steps += wrong > 0;
        }
        ++total;
        failures[mode] += bad_steps > 0;
        printf("base_offset=%s start_row=%2d group_rows=%2d: %s\n", mode ? "(start>>7)&7" : "0",
               r0, g, bad_steps ? "WRONG" : "ok");
      }
  }
  printf("summary: base_offset 0: %d of %d wrong; base_offset (start>>7)&7: %d of %d wrong\n",
         failures[0], total / 2, failures[1], total / 2);
  return 0;
}
