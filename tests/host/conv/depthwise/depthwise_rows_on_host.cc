// The CUDA channels-first depthwise strip kernel (lib/cuda/depthwise_rows.cuh)
// compiled as host code: each block's fill runs for all of its threads, then
// its compute (the kernel's barrier between them), against a float64
// depthwise convolution over random 2-D and 3-D geometries: the forward, and
// the input gradient (`flip` on the transposed geometry, against a float64
// scatter through the forward's windows). Run by
// tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_cuda.h"
#include "conv/depthwise/depthwise_rows.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

int ran = 0;  // cases with outputs, for the summary

// A forward geometry the kernel takes: 3, 5 or 7 taps at unit stride and
// dilation along dimension nd - 2; the other dimensions drawn freely.
Geometry random_geometry(int nd, bool unit_stride) {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(nd, 12, pad_hi);
  // Windows no further apart than their extent (else the tile would stage
  // unread input, and the plan refuses).
  for (int d = 0; d < nd; ++d)
    g.stride[d] = unit_stride ? 1 : std::min<int64_t>(g.stride[d], (g.kernel[d] - 1) * g.rhs_dilation[d] + 1);
  const int r = nd - 2;
  g.kernel[r] = 3 + 2 * draw(0, 2);
  g.rhs_dilation[r] = 1;
  g.in[r] = draw(1, 30);
  g.pad_lo[r] = draw(-1, static_cast<int>(g.kernel[r]));
  pad_hi[r] = draw(-1, static_cast<int>(g.kernel[r]));
  if (nd == 2 && draw(0, 3) == 0) g.in[nd - 1] = draw(30, 120);  // threads loop over items
  finish_geometry(g, pad_hi);
  return g;
}

// One random case; returns whether the kernel matched the reference.
template <int ND, typename T, typename TY>
bool one_case(bool flip) {
  // flip: g0 is the forward whose input gradient the kernel computes on the
  // transposed geometry g (its stride along the row dimension must be 1).
  Geometry g0 = random_geometry(ND, false);
  g0.stride[ND - 2] = 1;
  {
    int64_t pad_hi[kMaxSpatial];
    for (int d = 0; d < ND; ++d)
      pad_hi[d] = (g0.out[d] - 1) * g0.stride[d] + (g0.kernel[d] - 1) * g0.rhs_dilation[d] + 1 - g0.in[d] - g0.pad_lo[d];
    finish_geometry(g0, pad_hi);
  }
  if (g0.out_size <= 0) return true;
  ++ran;
  Geometry g = g0;
  if (flip && !transposed_geometry(g0, &g)) {
    std::printf("FAIL: no transposed geometry\n");
    return false;
  }
  const int64_t C = draw(1, 40), N = draw(1, 2), K = g.kernel_size;
  using A = typename Acc<TY>::type;
  RowsPlan p;
  if (!plan_depthwise_rows(g, C, sizeof(T), sizeof(A), &p)) {
    std::printf("FAIL: the plan refused nd %d\n", ND);
    return false;
  }
  // Small integers: every sum is exact in float, so the check is equality
  // after one rounding to the output type.
  std::vector<T> x(N * C * g.in_size), w(C * K);
  for (auto& v : x) v = small_value<T>();
  for (auto& v : w) v = small_value<T>();
  std::vector<TY> y(N * C * g.out_size, from_float<TY>(99.0f));
  std::vector<double> want(y.size(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const T* xp = x.data() + (n * C + c) * g.in_size;
      double* out = want.data() + (n * C + c) * g.out_size;
      for (int64_t l = 0; l < g0.out_size; ++l)
        for (int64_t k = 0; k < K; ++k) {
          const int64_t s = source(g0, l, k);
          if (s < 0) continue;
          const double wk = to_double(w[c * K + k]);
          if (flip) out[s] += to_double(xp[l]) * wk;  // x holds dy, out dx
          else out[l] += to_double(xp[s]) * wk;
        }
    }
  std::vector<unsigned char> smem(p.tile.smem);
  const int64_t blocks = tile_blocks(p.tile, N);
  gridDim.x = static_cast<unsigned>(blocks);
  blockDim.x = static_cast<unsigned>(p.threads);
  for (int64_t b = 0; b < blocks; ++b) {
    blockIdx.x = static_cast<unsigned>(b);
    const TileBlock tb = rows_block(g, p);
    for (unsigned t = 0; t < blockDim.x; ++t) {
      threadIdx.x = t;
      depthwise_rows_fill<ND, T, A>(smem.data(), x.data(), w.data(), g, p, flip, tb);
    }
    for (unsigned t = 0; t < blockDim.x; ++t) {
      threadIdx.x = t;
      switch (g.kernel[ND - 2]) {
        case 3: depthwise_rows_compute<3, ND, T, TY>(smem.data(), y.data(), g, p, tb); break;
        case 5: depthwise_rows_compute<5, ND, T, TY>(smem.data(), y.data(), g, p, tb); break;
        default: depthwise_rows_compute<7, ND, T, TY>(smem.data(), y.data(), g, p, tb); break;
      }
    }
  }
  const int64_t bad = first_mismatch(y, want);
  if (bad >= 0) {
    std::printf("FAIL: nd %d, flip %d, %zu-byte elements, C %lld, element %lld of %zu: got %g, want %g\n", ND,
                flip, sizeof(T), static_cast<long long>(C), static_cast<long long>(bad), y.size(),
                to_double(y[bad]), stored<TY>(want[bad]));
    return false;
  }
  return true;
}

// The filter gradient's fill and strips (the kernel's reduction, warp
// shuffles, is left to the GPU tests): each slice's sums over its threads
// against a float64 sum over the slice's output rows.
template <typename T>
bool one_filter_case() {
  Geometry g = random_geometry(2, false);
  int64_t pad_hi[kMaxSpatial];
  g.kernel[1] = g.kernel[0];
  g.stride[0] = 1;
  g.stride[1] = std::min<int64_t>(g.stride[1], (g.kernel[1] - 1) * g.rhs_dilation[1] + 1);
  for (int d = 0; d < 2; ++d) pad_hi[d] = draw(-1, 3);
  if (g.kernel[0] == 7) g.kernel[0] = g.kernel[1] = 5;
  // Rows of at least 64 outputs (a window spans at most 13, the stride is at
  // most 3): a whole block of items per band, which the plan must take.
  g.in[1] = draw(220, 300);
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  using A = typename Acc<T>::type;
  const int64_t C = draw(1, 3), N = draw(1, 2), K = g.kernel_size;
  const int64_t slice_rows = draw(1, static_cast<int>(g.out[0]) + 2);
  const int64_t per_image = (g.out[0] + slice_rows - 1) / slice_rows;
  FilterRowsPlan p;
  if (!plan_depthwise_filter_rows(g, slice_rows, per_image, C, sizeof(T), sizeof(A), &p)) {
    std::printf("FAIL: the filter plan refused out (%lld, %lld)\n", static_cast<long long>(g.out[0]),
                static_cast<long long>(g.out[1]));
    return false;
  }
  ++ran;
  std::vector<T> x(N * C * g.in_size), dy(N * C * g.out_size);
  for (auto& v : x) v = small_value<T>();
  for (auto& v : dy) v = small_value<T>();
  std::vector<unsigned char> smem(p.tile.smem);
  blockDim.x = static_cast<unsigned>(p.threads);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t part = 0; part < per_image; ++part)
      for (int64_t c = 0; c < C; ++c) {
        const T* xp = x.data() + (n * C + c) * g.in_size;
        const T* dyp = dy.data() + (n * C + c) * g.out_size;
        const int32_t row_begin = static_cast<int32_t>(part * slice_rows);
        const int32_t row_end = static_cast<int32_t>(std::min(row_begin + slice_rows, g.out[0]));
        std::vector<double> want(K, 0.0), got(K, 0.0);
        for (int64_t l = row_begin * g.out[1]; l < row_end * g.out[1]; ++l)
          for (int64_t k = 0; k < K; ++k) {
            const int64_t src = source(g, l, k);
            if (src >= 0) want[k] += to_double(dyp[l]) * to_double(xp[src]);
          }
        std::vector<std::vector<A>> acc(blockDim.x, std::vector<A>(K, A(0)));
        for (int32_t row0 = row_begin; row0 < row_end; row0 += p.tile.band) {
          for (unsigned t = 0; t < blockDim.x; ++t) {
            threadIdx.x = t;
            fill_tile_by_lines<2>(reinterpret_cast<T*>(smem.data()), xp, 1, row0, g, p.tile);
          }
          for (unsigned t = 0; t < blockDim.x; ++t) {
            threadIdx.x = t;
            auto band = [&](auto kh) {
              constexpr int KH = decltype(kh)::value;
              A a[KH][KH];
              for (int i = 0; i < K; ++i) a[i / KH][i % KH] = acc[t][i];
              depthwise_filter_rows_band<KH>(reinterpret_cast<const T*>(smem.data()), dyp, a, row0, row_end, g, p);
              for (int i = 0; i < K; ++i) acc[t][i] = a[i / KH][i % KH];
            };
            if (g.kernel[0] == 3) band(std::integral_constant<int, 3>{});
            else band(std::integral_constant<int, 5>{});
          }
        }
        for (unsigned t = 0; t < blockDim.x; ++t)
          for (int64_t k = 0; k < K; ++k) got[k] += acc[t][k];
        for (int64_t k = 0; k < K; ++k)
          if (got[k] != want[k]) {
            std::printf("FAIL: filter, %zu-byte elements, out (%lld, %lld), slice rows %lld, tap %lld: got %g, want %g\n",
                        sizeof(T), static_cast<long long>(g.out[0]), static_cast<long long>(g.out[1]),
                        static_cast<long long>(slice_rows), static_cast<long long>(k), got[k], want[k]);
            return false;
          }
      }
  return true;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 60; ++i) {
    for (bool flip : {false, true}) {
      run(one_case<2, float, float>(flip));
      run(one_case<3, float, float>(flip));
      run(one_case<2, __nv_bfloat16, __nv_bfloat16>(flip));
      run(one_case<2, __nv_bfloat16, float>(flip));
      run(one_case<3, __half, __half>(flip));
      run(one_case<2, double, double>(flip));
    }
    run(one_filter_case<float>());
    run(one_filter_case<__nv_bfloat16>());
    run(one_filter_case<double>());
  }
  std::printf("%d cases with outputs\n", ran);
  return run.report();
}
