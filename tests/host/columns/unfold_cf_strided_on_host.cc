// The channels-first vector unfold's tap copy at stride 2
// (lib/cuda/unfold_cf_strided.cuh) compiled as host code: over random 1-D to
// 3-D geometries of 4-byte elements with stride 2 along the last dimension,
// lines of whole 16-byte vectors and 5-7 taps along it (padding, cropping
// and dilation drawn, so that every parity and shift of a tap's elements
// runs), a thread's vector of 4 positions must write, in row k of the
// columns (k * row_vectors apart), the elements that tap k reads for those
// positions, zeros on padding, and nothing else. Geometries outside the
// kernel's reach (fewer taps, a longer reach, 2-byte elements) must be
// refused. Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "host_cuda.h"
#include "columns/unfold_cf_strided.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

constexpr unsigned char kUnwritten = 0xa5;
int cases = 0, refused = 0;  // drawn geometries that ran, and that the fit refused

template <typename T, int ND>
bool one_case() {
  constexpr int V = 16 / sizeof(T);
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(ND, ND == 1 ? 40 : ND == 2 ? 12 : 6, pad_hi);
  const int last = ND - 1;
  g.stride[last] = 2;
  if (draw(0, 3) != 0) g.kernel[last] = draw(4, 8);
  if (draw(0, 1)) g.kernel[last] = draw(5, 7);
  if (draw(0, 1)) g.rhs_dilation[last] = 1;
  g.in[last] = V * draw(1, 6);
  if (!grow_to_vector_lines(g, pad_hi, V, 4 * V)) return true;
  const int64_t row_vectors = draw(1, 3);
  std::vector<uint4> xv((g.in_size * sizeof(T) + 15) / 16);
  T* x = reinterpret_cast<T*>(xv.data());
  ColumnsLayout lay;
  lay.lc = g.out_size;
  lay.row_stride = row_vectors * V;
  lay.image_stride = g.kernel_size * lay.row_stride;
  const bool reach = sizeof(T) == 4 && g.kernel[last] >= 5 && (g.kernel[last] - 1) * g.rhs_dilation[last] <= V + 2;
  if (cf_strided_unfold_fits(g, lay, sizeof(T), xv.data(), xv.data()) != reach) {
    std::printf("FAIL: fit %d for %zu-byte elements, a window of %lld x dilation %lld\n", !reach, sizeof(T),
                static_cast<long long>(g.kernel[last]), static_cast<long long>(g.rhs_dilation[last]));
    return false;
  }
  if (!reach) {
    ++refused;
    return true;
  }
  if constexpr (sizeof(T) == 4) {  // the kernel's only type
    ++cases;
    for (int64_t p = 0; p < g.in_size; ++p) x[p] = static_cast<T>(p + 1);
    return tap_copies_match<ND>(g, x, row_vectors, kUnwritten, "strided", [&](const int32_t* origin, uint4* dst) {
      copy_cf_taps_strided<ND, false>(xv.data(), dst, g, origin, row_vectors);
    });
  }
  return true;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 1000; ++i) {
    run(one_case<uint32_t, 1>());
    run(one_case<uint32_t, 2>());
    run(one_case<uint32_t, 3>());
    if (i % 4 == 0) run(one_case<uint16_t, 2>());
  }
  std::printf("%d geometries ran, %d refused\n", cases, refused);
  run(cases > 600 && refused > 300);
  return run.report();
}
