// The 1-D channels-first unfold at stride 2 written flat
// (lib/cuda/unfold_cf_flat_strided.cuh) compiled as host code: over random
// 1-D geometries at stride 2 (kernels 1-4, dilation 1-3, padding and
// cropping drawn, lines short and long, odd and even), 2- and 4-byte
// elements and random channels and images, planned by plan_cf_flat_strided
// as the unfold plans it, every thread's vector must hold the reference
// unfold's entries (the input at source(g, l, k), 0 for padding), every
// entry written once, with vectors read whole and vectors assembled an
// entry at a time among them. Columns with gaps, other strides and
// geometries must be refused. Run by tests/test_kernels_on_host.py; prints
// "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_cuda.h"
#include "columns/unfold_cf_flat_strided.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

int planned = 0, odd_lines = 0, padded = 0;

template <typename U>
bool one_case() {
  constexpr int V = 16 / sizeof(U);
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(1, draw(0, 1) ? 40 : 400, pad_hi);
  g.stride[0] = 2;
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  const int64_t K = g.kernel_size, L = g.out_size, nc = draw(1, 3);
  int64_t C = draw(1, 12);
  while ((nc * C * K * L) % V != 0) ++C;  // columns of whole vectors
  ColumnsLayout lay;
  lay.lc = L;
  lay.row_stride = L;
  lay.image_stride = C * K * L;
  const int64_t x_elements = nc * C * g.in_size, entries = nc * C * K * L;
  std::vector<Pack<U, V>> x_store(x_elements / V + 1), cols_store(entries / V + 1);
  U* x = reinterpret_cast<U*>(x_store.data());
  U* cols = reinterpret_cast<U*>(cols_store.data());
  for (int64_t i = 0; i < x_elements; ++i) x[i] = static_cast<U>(i % 60000 + 1);
  const U marker = static_cast<U>(0xfdfd);
  std::fill(cols, cols + entries, marker);
  FlatStridedPlan p;
  if (!plan_cf_flat_strided(g, lay, C, nc, sizeof(U), x, cols, &p)) {
    std::printf("FAIL: refused a fitting geometry\n");
    return false;
  }
  ++planned;
  if (L % V != 0) ++odd_lines;
  if (g.pad_lo[0] > 0 || pad_hi[0] > 0) ++padded;
  for (int64_t t = 0; t < p.vectors; ++t) write_flat_strided_vector<false>(x, cols, g, p, t);
  for (int64_t n = 0; n < nc * C; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t l = 0; l < L; ++l) {
        const int64_t s = source(g, l, k);
        const U want = s < 0 ? U(0) : x[n * g.in_size + s], got = cols[(n * K + k) * L + l];
        if (got != want) {
          std::printf("FAIL: in %lld, K %lld, dilation %lld, pad %lld, L %lld, C %lld: plane %lld tap %lld "
                      "position %lld: got %llu, want %llu (%zu-byte)\n",
                      static_cast<long long>(g.in[0]), static_cast<long long>(K),
                      static_cast<long long>(g.rhs_dilation[0]), static_cast<long long>(g.pad_lo[0]),
                      static_cast<long long>(L), static_cast<long long>(C), static_cast<long long>(n),
                      static_cast<long long>(k), static_cast<long long>(l), static_cast<unsigned long long>(got),
                      static_cast<unsigned long long>(want), sizeof(U));
          return false;
        }
      }
  // Refused: gaps, another stride, 8-byte elements, 2-D.
  ColumnsLayout gaps = lay;
  gaps.row_stride = L + 1;
  Geometry other = g;
  other.stride[0] = 3;
  Geometry two_d = g;
  two_d.nd = 2;
  FlatStridedPlan q;
  if (plan_cf_flat_strided(g, gaps, C, nc, sizeof(U), x, cols, &q) ||
      plan_cf_flat_strided(other, lay, C, nc, sizeof(U), x, cols, &q) ||
      plan_cf_flat_strided(g, lay, C, nc, 8, x, cols, &q) || plan_cf_flat_strided(two_d, lay, C, nc, sizeof(U), x, cols, &q)) {
    std::printf("FAIL: planned columns the kernel does not take\n");
    return false;
  }
  return true;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 1500; ++i) {
    run(one_case<uint16_t>());
    run(one_case<uint32_t>());
  }
  std::printf("%d cases planned: %d with lines not whole vectors, %d padded\n", planned, odd_lines, padded);
  run(planned > 2000 && odd_lines > 1000 && padded > 1000);
  return run.report();
}
