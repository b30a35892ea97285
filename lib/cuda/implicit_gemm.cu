// The implicit-GEMM convolution kernel (implicit_gemm.h).
//
// A block computes a BM x BN tile of one group's y (BM positions m, BN output
// channels) in k-tiles of 128 bytes of the reduction (kk): 32 float32 or 64
// half elements. Each k-tile of A (the columns, gathered from x) and of B (the
// filter rows) lands in shared memory by cp.async, 16 bytes per copy, in a
// ring of STAGES buffers so that the copies of later k-tiles overlap the
// arithmetic of this one. A 16-byte chunk of kk is one run of channels of one
// tap (the channels per group are a multiple of the vector), so one bounds
// check covers it; padding reads as zeros (cp.async with source size 0).
//
// Shared rows are 8 chunks of 16 bytes, chunk j of row r stored at j ^ (r % 8),
// so that the 8 rows an ldmatrix phase reads hit 8 distinct bank groups.
// Warps hold fragments in the m16n8k8 (TF32) / m16n8k16 (half) mma layouts;
// in 32-bit words both are "16 rows x 8 words" for A and "8 rows x 8 words"
// for B, so one loader and one fragment schedule serve every type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "device_util.cuh"
#include "implicit_gemm.h"

namespace im2col::cuda {
namespace {

constexpr int kRowBytes = 128;
constexpr int kChunks = kRowBytes / 16;

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory, or 16 zero bytes when !valid.
__device__ __forceinline__ void copy_async(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// The tensor-core instruction for element type T: d += a * b over one k-step
// of 8 words.
template <typename T> struct Mma;

template <> struct Mma<float> {
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

template <> struct Mma<__nv_bfloat16> {
  __device__ static void prepare(uint32_t&) {}
  __device__ static void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <> struct Mma<__half> {
  __device__ static void prepare(uint32_t&) {}
  __device__ static void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

template <typename TY>
__device__ __forceinline__ void store_pair(TY* dst, float a, float b) {
  if constexpr (std::is_same_v<TY, float>) {
    *reinterpret_cast<float2*>(dst) = make_float2(a, b);
  } else if constexpr (std::is_same_v<TY, __half>) {
    *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(a, b);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a, b);
  }
}

// Every spatial quantity as 3-D (leading dimensions of extent 1), in 32 bits
// (fits_32_bits holds for every geometry the handlers accept).
struct Params {
  const char* x;
  const char* w;
  void* y;
  int64_t m_total;  // images * L
  int32_t L, in_size;
  int32_t in[3], stride[3], dilation[3], pad[3];
  FastDiv out_w, out_h;       // output position -> coordinates
  FastDiv kernel_w, kernel_h;  // tap -> coordinates
  FastDiv cg_div;             // kk -> (tap, channel)
  int32_t C, Cg, O, Og, Kg;   // Kg = taps * Cg, the reduction length
  bool y_cl, y_pairs;
  int32_t splits;   // parts of the reduction (blockIdx.z = group * splits + part)
  float* partials;  // where the parts go when splits > 1
};

template <int BM, int BN, int STAGES>
constexpr int shared_bytes() {
  return STAGES * (BM + BN) * kRowBytes + BM * (sizeof(int4) + sizeof(int2));
}

// A block of WARPS_M x WARPS_N warps; MIN_BLOCKS per multiprocessor bounds
// the registers.
template <typename T, typename TY, int BM, int BN, int WARPS_M, int WARPS_N, int STAGES,
          int MIN_BLOCKS>
__global__ void __launch_bounds__(32 * WARPS_M * WARPS_N, MIN_BLOCKS)
implicit_conv_kernel(const Params p) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // cp.async, ldmatrix, mma.sync
  constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  constexpr int ROWS_PER_PASS = THREADS / kChunks;  // rows one pass of copies covers
  constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;  // a warp's tile
  constexpr int MT = WTM / 16, NT = WTN / 8;              // its mma tiles
  constexpr int VEC = 16 / sizeof(T);
  constexpr int BKE = kRowBytes / sizeof(T);              // elements per k-tile
  static_assert(NT % 2 == 0 && BM % ROWS_PER_PASS == 0 && BN % ROWS_PER_PASS == 0 &&
                ROWS_PER_PASS % 8 == 0, "tile shape");

  extern __shared__ __align__(128) uint4 smem[];
  uint4* a_tiles = smem;                                 // [STAGES][BM][kChunks]
  uint4* b_tiles = smem + STAGES * BM * kChunks;         // [STAGES][BN][kChunks]
  int4* origins = reinterpret_cast<int4*>(b_tiles + STAGES * BN * kChunks);  // [BM]
  int2* positions = reinterpret_cast<int2*>(origins + BM);                  // [BM]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * BM;
  const int32_t n0 = blockIdx.y * BN, group = blockIdx.z / p.splits, split = blockIdx.z % p.splits;

  // Each row's window origin (o * stride - pad per dimension) and image.
  // Rows past the end repeat the last position: valid reads, never stored.
  for (int r = tid; r < BM; r += THREADS) {
    const int64_t m = m0 + r < p.m_total ? m0 + r : p.m_total - 1;
    const int64_t image = m / p.L;
    const int32_t l = static_cast<int32_t>(m - image * p.L);
    int32_t rest, od, oh, ow;
    p.out_w.divmod(l, rest, ow);
    p.out_h.divmod(rest, od, oh);
    origins[r] = make_int4(od * p.stride[0] - p.pad[0], oh * p.stride[1] - p.pad[1],
                           ow * p.stride[2] - p.pad[2], static_cast<int32_t>(image));
    positions[r] = make_int2(static_cast<int32_t>(image), l);
  }
  __syncthreads();

  // The copies of one thread: chunk `chunk` of rows row0 + ROWS_PER_PASS * i.
  const int chunk = tid % kChunks, row0 = tid / kChunks;
  const int stored_chunk = chunk ^ (row0 % 8);  // the same for every row it copies
  const T* x = reinterpret_cast<const T*>(p.x) + static_cast<int64_t>(group) * p.Cg;
  const T* w = reinterpret_cast<const T*>(p.w) + static_cast<int64_t>(group) * p.Og * p.Kg;
  const int all_tiles = (p.Kg + BKE - 1) / BKE, per_split = (all_tiles + p.splits - 1) / p.splits;
  const int k_begin = split * per_split;
  const int k_tiles = max(0, min(all_tiles, k_begin + per_split) - k_begin);

  auto load_tile = [&](int stage, int kt) {
    const int32_t kk = (k_begin + kt) * BKE + chunk * VEC;
    const bool k_valid = kk < p.Kg;
    int32_t tap, ch, rest, kd, kh, kw;
    p.cg_div.divmod(kk, tap, ch);
    p.kernel_w.divmod(tap, rest, kw);
    p.kernel_h.divmod(rest, kd, kh);
    const int32_t dd = kd * p.dilation[0], dh = kh * p.dilation[1], dw = kw * p.dilation[2];
    uint4* a = a_tiles + stage * BM * kChunks;
#pragma unroll
    for (int i = 0; i < BM / ROWS_PER_PASS; ++i) {
      const int r = row0 + ROWS_PER_PASS * i;
      const int4 o = origins[r];
      const int32_t zd = o.x + dd, zh = o.y + dh, zw = o.z + dw;
      const bool valid = k_valid && static_cast<uint32_t>(zd) < static_cast<uint32_t>(p.in[0]) &&
                         static_cast<uint32_t>(zh) < static_cast<uint32_t>(p.in[1]) &&
                         static_cast<uint32_t>(zw) < static_cast<uint32_t>(p.in[2]);
      const uint32_t spatial =
          (static_cast<uint32_t>(zd) * p.in[1] + static_cast<uint32_t>(zh)) * p.in[2] +
          static_cast<uint32_t>(zw);
      const int64_t pixel = static_cast<int64_t>(o.w) * p.in_size + spatial;
      copy_async(shared_address(a + r * kChunks + stored_chunk),
                 valid ? static_cast<const void*>(x + pixel * p.C + ch) : p.x, valid);
    }
    uint4* b = b_tiles + stage * BN * kChunks;
#pragma unroll
    for (int i = 0; i < BN / ROWS_PER_PASS; ++i) {
      const int r = row0 + ROWS_PER_PASS * i;
      const bool valid = k_valid && n0 + r < p.Og;
      copy_async(shared_address(b + r * kChunks + stored_chunk),
                 valid ? static_cast<const void*>(w + static_cast<int64_t>(n0 + r) * p.Kg + kk) : p.w,
                 valid);
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.f;

  // ldmatrix: lane l gives the address of row l % 8 of matrix l / 8. A's four
  // matrices are (rows 0-7, 8-15) x (words 0-3, 4-7) of a 16-row tile; B's are
  // (words 0-3, 4-7) x (two 8-row tiles).
  const int warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
  const int a_row = warp_m * WTM + (lane & 7) + ((lane >> 3) & 1) * 8;
  const int a_half = lane >> 4;
  const int b_row = warp_n * WTN + (lane & 7) + (lane >> 4) * 8;
  const int b_half = (lane >> 3) & 1;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_tile(s, s);
    commit_copies();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    wait_copies<STAGES - 2>();
    __syncthreads();  // k-tile kt has landed for all; k-tile kt - 1's buffer is free
    const int next = kt + STAGES - 1;
    if (next < k_tiles) load_tile(next % STAGES, next);
    commit_copies();
    const uint4* a = a_tiles + (kt % STAGES) * BM * kChunks;
    const uint4* b = b_tiles + (kt % STAGES) * BN * kChunks;
#pragma unroll
    for (int ks = 0; ks < kChunks / 2; ++ks) {
      uint32_t af[MT][4], bf[NT][2];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const int r = a_row + i * 16, c = 2 * ks + a_half;
        load_matrices(af[i], shared_address(a + r * kChunks + (c ^ (r % 8))));
      }
#pragma unroll
      for (int j = 0; j < NT / 2; ++j) {
        const int r = b_row + j * 16, c = 2 * ks + b_half;
        uint32_t t[4];
        load_matrices(t, shared_address(b + r * kChunks + (c ^ (r % 8))));
        bf[2 * j][0] = t[0];
        bf[2 * j][1] = t[1];
        bf[2 * j + 1][0] = t[2];
        bf[2 * j + 1][1] = t[3];
      }
      if constexpr (std::is_same_v<T, float>) {
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int v = 0; v < 4; ++v) Mma<T>::prepare(af[i][v]);
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int v = 0; v < 2; ++v) Mma<T>::prepare(bf[j][v]);
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) Mma<T>::run(acc[i][j], af[i], bf[j]);
    }
  }
  wait_copies<0>();

  // Accumulator v of tile (i, j): row (lane / 4) + 8 * (v / 2), column
  // 2 * (lane % 4) + v % 2.
  TY* y = static_cast<TY*>(p.y);
  const int32_t channel0 = group * p.Og;
#pragma unroll
  for (int i = 0; i < MT; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp_m * WTM + i * 16 + h * 8 + (lane >> 2);
      if (m0 + r >= p.m_total) continue;
      const int2 at = positions[r];
      if (p.splits > 1) {
        float* row = p.partials + (split * p.m_total + m0 + r) * p.O + channel0;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const int32_t col = n0 + warp_n * WTN + j * 8 + 2 * (lane & 3);
          if (col < p.Og) row[col] = acc[i][j][2 * h];
          if (col + 1 < p.Og) row[col + 1] = acc[i][j][2 * h + 1];
        }
      } else if (p.y_cl) {
        TY* row = y + (m0 + r) * p.O + channel0;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const int32_t col = n0 + warp_n * WTN + j * 8 + 2 * (lane & 3);
          const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
          if (p.y_pairs) {
            if (col < p.Og) store_pair(row + col, v0, v1);
          } else {
            if (col < p.Og) row[col] = store_value<TY>(v0);
            if (col + 1 < p.Og) row[col + 1] = store_value<TY>(v1);
          }
        }
      } else {
        TY* first = y + (static_cast<int64_t>(at.x) * p.O + channel0) * p.L + at.y;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const int32_t col = n0 + warp_n * WTN + j * 8 + 2 * (lane & 3);
          if (col < p.Og) first[static_cast<int64_t>(col) * p.L] = store_value<TY>(acc[i][j][2 * h]);
          if (col + 1 < p.Og)
            first[static_cast<int64_t>(col + 1) * p.L] = store_value<TY>(acc[i][j][2 * h + 1]);
        }
      }
    }
  }
#endif
}

// y = the sum of the parts in order, written in y's layout and type.
template <typename TY>
__global__ void sum_parts_kernel(const float* partials, TY* y, int64_t m_total, int32_t O,
                                 int32_t L, int32_t splits, bool y_cl) {
  const int64_t total = m_total * O;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    int64_t m, c;
    if (y_cl) {
      m = e / O;
      c = e - m * O;
    } else {
      const int64_t image = e / (static_cast<int64_t>(O) * L);
      const int64_t rest = e - image * O * L;
      c = rest / L;
      m = image * L + (rest - c * L);
    }
    float sum = 0.f;
    for (int32_t s = 0; s < splits; ++s) sum += partials[(s * m_total + m) * O + c];
    y[e] = store_value<TY>(sum);
  }
}

// Tile shapes: BM x BN with the warps' arrangement and the depth of the ring.
template <typename T, typename TY, int BM, int BN, int WARPS_M, int WARPS_N, int STAGES,
          int MIN_BLOCKS>
cudaError_t launch(const Params& p, int64_t groups, cudaStream_t stream) {
  constexpr int bytes = shared_bytes<BM, BN, STAGES>();
  auto kernel = implicit_conv_kernel<T, TY, BM, BN, WARPS_M, WARPS_N, STAGES, MIN_BLOCKS>;
  // Per device and cheap; no stream work, so it is safe under graph capture.
  if (auto e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      e != cudaSuccess)
    return e;
  const dim3 grid(static_cast<unsigned>((p.m_total + BM - 1) / BM),
                  static_cast<unsigned>((p.Og + BN - 1) / BN),
                  static_cast<unsigned>(groups * p.splits));
  kernel<<<grid, 32 * WARPS_M * WARPS_N, bytes, stream>>>(p);
  if (auto e = cudaGetLastError(); e != cudaSuccess || p.splits == 1) return e;
  sum_parts_kernel<TY><<<blocks_for(p.m_total * p.O), kThreads, 0, stream>>>(
      p.partials, static_cast<TY*>(p.y), p.m_total, p.O, p.L, p.splits, p.y_cl);
  return cudaGetLastError();
}

struct DeviceInfo {
  int multiprocessors = 0, major = 0;
};

cudaError_t device_info(DeviceInfo* info) {
  int device = 0;
  if (auto e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (auto e = cudaDeviceGetAttribute(&info->multiprocessors, cudaDevAttrMultiProcessorCount, device);
      e != cudaSuccess)
    return e;
  return cudaDeviceGetAttribute(&info->major, cudaDevAttrComputeCapabilityMajor, device);
}

template <typename T, typename TY>
cudaError_t launch_for(const Params& p, int64_t groups, cudaStream_t stream) {
  DeviceInfo info;
  if (auto e = device_info(&info); e != cudaSuccess) return e;
  if (info.major < 8) return cudaErrorNotSupported;  // Python routes these GPUs elsewhere
  // The largest tile that still gives two blocks per multiprocessor.
  const int64_t want = 2 * static_cast<int64_t>(info.multiprocessors);
  auto blocks = [&](int64_t bm, int64_t bn) {
    return (p.m_total + bm - 1) / bm * ((p.Og + bn - 1) / bn) * groups;
  };
  if (p.splits > 1) return launch<T, TY, 128, 64, 2, 2, 3, 3>(p, groups, stream);
  // Warp tiles of 64 x 64 (32 x 32 for the smallest) keep ldmatrix traffic
  // below what the shared memory delivers: 2 mma per 16 bytes read.
  if (p.Og > 64 && blocks(128, 128) >= want)
    return launch<T, TY, 128, 128, 2, 2, 3, 2>(p, groups, stream);
  if (blocks(128, 64) >= want) return launch<T, TY, 128, 64, 2, 2, 3, 3>(p, groups, stream);
  return launch<T, TY, 64, 64, 2, 2, 4, 3>(p, groups, stream);
}

}  // namespace

bool implicit_applies(xla::ffi::DataType in, bool tf32, const Geometry& g, int64_t cg,
                      int64_t groups) {
  using xla::ffi::DataType;
  const bool half = in == DataType::F16 || in == DataType::BF16;
  if (!(half || (in == DataType::F32 && tf32))) return false;
  const int64_t vec = half ? 8 : 4;
  constexpr int64_t k32 = int64_t{1} << 31;
  return !g.any_lhs_dilation && cg > 0 && cg % vec == 0 && groups >= 1 && groups <= 65535 &&
         g.nd >= 1 && g.nd <= 3 && cg * g.kernel_size < k32 && cg * groups < k32;
}

cudaError_t implicit_conv(const ImplicitConv& c, const Geometry& g, xla::ffi::DataType in,
                          xla::ffi::DataType out, cudaStream_t stream) {
  using xla::ffi::DataType;
  const int64_t cg = c.c / c.groups, og = c.o / c.groups;
  const int64_t m_total = c.n * g.out_size;
  if (m_total == 0 || og == 0) return cudaSuccess;
  if (c.o >= (int64_t{1} << 31) || c.c >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  Params p;
  p.x = static_cast<const char*>(c.x);
  p.w = static_cast<const char*>(c.w);
  p.y = c.y;
  p.m_total = m_total;
  p.L = static_cast<int32_t>(g.out_size);
  p.in_size = static_cast<int32_t>(g.in_size);
  const int lead = 3 - g.nd;  // 3-D view: leading dimensions of extent 1
  int64_t kernel[3] = {1, 1, 1}, extent[3] = {1, 1, 1};
  for (int d = 0; d < 3; ++d) {
    const int s = d - lead;
    const bool real = s >= 0;
    p.in[d] = static_cast<int32_t>(real ? g.in[s] : 1);
    p.stride[d] = static_cast<int32_t>(real ? g.stride[s] : 1);
    p.dilation[d] = static_cast<int32_t>(real ? g.rhs_dilation[s] : 1);
    p.pad[d] = static_cast<int32_t>(real ? g.pad_lo[s] : 0);
    kernel[d] = real ? g.kernel[s] : 1;
    extent[d] = real ? g.out[s] : 1;
  }
  p.out_w = FastDiv(extent[2]);
  p.out_h = FastDiv(extent[1]);
  p.kernel_w = FastDiv(kernel[2]);
  p.kernel_h = FastDiv(kernel[1]);
  p.cg_div = FastDiv(cg);
  p.C = static_cast<int32_t>(c.c);
  p.Cg = static_cast<int32_t>(cg);
  p.O = static_cast<int32_t>(c.o);
  p.Og = static_cast<int32_t>(og);
  p.Kg = static_cast<int32_t>(cg * g.kernel_size);
  p.y_cl = c.y_channels_last;
  p.y_pairs = c.o % 2 == 0 && og % 2 == 0;
  p.splits = static_cast<int32_t>(c.splits);
  p.partials = c.partials;
  if (c.splits < 1 || c.groups * c.splits > 65535 || (c.splits > 1 && c.partials == nullptr))
    return cudaErrorInvalidValue;
  switch (in) {
    case DataType::F32: return launch_for<float, float>(p, c.groups, stream);
    case DataType::BF16:
      return out == DataType::F32 ? launch_for<__nv_bfloat16, float>(p, c.groups, stream)
                                  : launch_for<__nv_bfloat16, __nv_bfloat16>(p, c.groups, stream);
    case DataType::F16:
      return out == DataType::F32 ? launch_for<__half, float>(p, c.groups, stream)
                                  : launch_for<__half, __half>(p, c.groups, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace im2col::cuda
