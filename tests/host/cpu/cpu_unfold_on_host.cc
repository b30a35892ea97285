// The CPU unfold (lib/cpu/kernels.h, unfold_chunk): over random 1-D to 3-D
// geometries (strides, dilations, negative and positive padding, lhs
// dilation in some), chunks of positions that start and end inside output
// lines, padded rows and images apart, channels-first (each output line a
// run of zeros, a copied run, zeros) and channels-last. The columns must be
// the reference unfold's (the input at source(g, l, k), 0 for padding), and
// entries outside the chunk's rows must keep their marker.
// Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_cuda.h"
#include "cpu/kernels.h"
#include "host_reference.h"

using namespace im2col;

namespace {

int partial_lines = 0;  // channels-first chunks that start or end inside a line

template <int ND>
bool one_case(bool channels_last) {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(ND, ND == 1 ? 60 : ND == 2 ? 14 : 6, pad_hi);
  if (draw(0, 4) == 0) g.lhs_dilation[draw(0, ND - 1)] = draw(2, 3);
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  const int64_t C = draw(1, 5), N = draw(1, 3), n0 = draw(0, static_cast<int>(N) - 1);
  const int64_t nc = draw(1, static_cast<int>(N - n0)), K = g.kernel_size;
  ColumnsLayout lay;
  draw_chunk(g, &lay);
  lay.row_stride = lay.lc + draw(0, 2);
  lay.image_stride = C * K * lay.row_stride + draw(0, 3);
  const int64_t width = g.out[ND - 1];
  if (!channels_last && (lay.l0 % width != 0 || (lay.l0 + lay.lc) % width != 0)) ++partial_lines;
  std::vector<float> x(N * C * g.in_size);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
  const float marker = -7.0f;
  const size_t size = channels_last ? static_cast<size_t>(nc * lay.lc * C * K) : static_cast<size_t>(nc * lay.image_stride);
  std::vector<float> cols(size, marker);
  cpu::unfold_chunk(x.data(), cols.data(), g, C, n0, nc, lay, channels_last);
  for (int64_t n = 0; n < nc; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t e = 0; e < (channels_last ? lay.lc : lay.row_stride); ++e) {
          const size_t at = channels_last ? static_cast<size_t>(((n * lay.lc + e) * K + k) * C + c)
                                          : static_cast<size_t>(n * lay.image_stride + (c * K + k) * lay.row_stride + e);
          const int64_t s = e < lay.lc ? source(g, lay.l0 + e, k) : -2;
          const int64_t from = channels_last ? ((n0 + n) * g.in_size + s) * C + c : ((n0 + n) * C + c) * g.in_size + s;
          const float want = s == -2 ? marker : s < 0 ? 0.0f : x[from];
          const float got = cols[at];
          if (got != want) {
            std::printf("FAIL: nd %d %s, C %lld, l0 %lld, lc %lld: image %lld channel %lld tap %lld position %lld: "
                        "got %g, want %g\n", ND, channels_last ? "channels-last" : "channels-first",
                        static_cast<long long>(C), static_cast<long long>(lay.l0), static_cast<long long>(lay.lc),
                        static_cast<long long>(n), static_cast<long long>(c), static_cast<long long>(k),
                        static_cast<long long>(e), got, want);
            return false;
          }
        }
  return true;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 400; ++i) {
    run(one_case<1>(false));
    run(one_case<2>(false));
    run(one_case<3>(false));
    if (i % 4 == 0) {
      run(one_case<1>(true));
      run(one_case<2>(true));
      run(one_case<3>(true));
    }
  }
  std::printf("%d channels-first chunks start or end inside an output line\n", partial_lines);
  run(partial_lines > 200);
  return run.report();
}
