// The channels-first vector unfold's tap copy (lib/cuda/unfold_cf_vectors.cuh)
// compiled as host code: over random 1-D to 3-D geometries with stride 1
// along the last dimension and lines of whole 16-byte vectors (2-, 4- and
// 8-byte elements; windows up to 8 taps along the last dimension, padding
// and dilation drawn, so that every shift of a vector and both batches and
// their remainders run), a thread's vector of V positions must write, in row
// k of the columns (k * row_vectors apart), the elements that tap k reads
// for those positions, zeros on padding, and nothing else. Run by
// tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "host_cuda.h"
#include "columns/unfold_cf_vectors.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

constexpr unsigned char kUnwritten = 0xa5;
int cases = 0;  // drawn geometries that ran

template <typename T, int ND, int BATCH, int LINES = 1>
bool one_case() {
  constexpr int V = 16 / sizeof(T);
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(ND, ND == 1 ? 40 : ND == 2 ? 12 : 6, pad_hi);
  const int last = ND - 1;
  g.stride[last] = 1;
  if (draw(0, 1)) g.kernel[last] = draw(1, 8);
  g.in[last] = V * draw(1, 5);
  if (!grow_to_vector_lines(g, pad_hi, V, 2 * V)) return true;
  ++cases;
  std::vector<uint4> xv((g.in_size * sizeof(T) + 15) / 16);
  T* x = reinterpret_cast<T*>(xv.data());
  for (int64_t p = 0; p < g.in_size; ++p) x[p] = static_cast<T>(p + 1);
  const int64_t row_vectors = draw(1, 3);
  char what[40];
  std::snprintf(what, sizeof(what), "batch %d, lines %d", BATCH, LINES);
  return tap_copies_match<ND>(g, x, row_vectors, kUnwritten, what, [&](const int32_t* origin, uint4* dst) {
    copy_cf_taps<ND, BATCH, false, V, LINES>(xv.data(), dst, g, origin, row_vectors);
  });
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 200; ++i) {
    run(one_case<uint16_t, 1, 1>());
    run(one_case<uint16_t, 2, 3>());
    run(one_case<uint16_t, 3, 3>());
    run(one_case<uint32_t, 1, 3>());
    run(one_case<uint32_t, 2, 2>());
    run(one_case<uint32_t, 3, 3>());
    run(one_case<uint64_t, 2, 3>());
    run(one_case<uint64_t, 3, 1>());
    run(one_case<uint16_t, 2, 3, 2>());
    run(one_case<uint32_t, 3, 3, 2>());
    run(one_case<uint32_t, 2, 2, 3>());
    run(one_case<uint16_t, 3, 3, 3>());
  }
  std::printf("%d geometries ran\n", cases);
  return run.report();
}
