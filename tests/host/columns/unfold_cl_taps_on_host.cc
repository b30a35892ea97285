// The channels-last vector unfold's tap copy (lib/cuda/unfold_cl_taps.cuh)
// compiled as host code: over random 1-D to 3-D geometries without lhs
// dilation (windows up to 8 taps along the last dimension, so that batches
// and their remainders both run), vector counts and output positions (the
// first and last included), each batch size, one line at a time or several
// (LINES, their remainder lines included), must write, at tap k of the
// window (k * cg_vectors apart), the thread's vector of the input position
// that tap reads, zeros on padding, and nothing else. Run by
// tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_cuda.h"
#include "columns/unfold_cl_taps.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

constexpr uint32_t kUnwritten = 0xdeadbeef;

uint4 element(int64_t position, int64_t vector) {
  return make_uint4(static_cast<uint32_t>(position), static_cast<uint32_t>(vector), 0x5eed, 1);
}

bool same(const uint4& a, const uint4& b) { return a.x == b.x && a.y == b.y && a.z == b.z && a.w == b.w; }

template <int ND, int BATCH, int LINES>
bool check(const Geometry& g, const std::vector<uint4>& x, int64_t c_vectors, int64_t cg_vectors, int64_t l,
           int64_t j) {
  int32_t o[kMaxSpatial], origin[kMaxSpatial];
  int64_t rest = l;
  for (int d = ND - 1; d >= 0; --d) {
    o[d] = static_cast<int32_t>(rest % g.out[d]);
    rest /= g.out[d];
  }
  window_origin<ND>(g, o, origin);
  const int64_t K = g.kernel_size;
  std::vector<uint4> dst(K * cg_vectors + cg_vectors, make_uint4(kUnwritten, kUnwritten, kUnwritten, kUnwritten));
  copy_cl_taps<ND, BATCH, false, uint4, LINES>(x.data() + j, dst.data(), g, origin, c_vectors, cg_vectors);
  bool ok = true;
  for (int64_t i = 0; i < static_cast<int64_t>(dst.size()); ++i) {
    uint4 want = make_uint4(kUnwritten, kUnwritten, kUnwritten, kUnwritten);
    if (i % cg_vectors == 0 && i / cg_vectors < K) {
      const int64_t s = source(g, l, i / cg_vectors);
      want = s >= 0 ? element(s, j) : make_uint4(0, 0, 0, 0);
    }
    ok = ok && same(dst[i], want);
  }
  if (!ok)
    std::printf("FAIL: nd %d, batch %d, lines %d, kernel (%lld %lld %lld), in (%lld %lld %lld), l %lld, vectors %lld / %lld\n",
                ND, BATCH, LINES, static_cast<long long>(g.kernel[0]), static_cast<long long>(g.kernel[1]),
                static_cast<long long>(g.kernel[2]), static_cast<long long>(g.in[0]),
                static_cast<long long>(g.in[1]), static_cast<long long>(g.in[2]), static_cast<long long>(l),
                static_cast<long long>(c_vectors), static_cast<long long>(cg_vectors));
  return ok;
}

template <int ND, int BATCH, int LINES = 1>
bool one_case() {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(ND, ND == 1 ? 40 : ND == 2 ? 16 : 8, pad_hi);
  if (draw(0, 1)) g.kernel[ND - 1] = draw(1, 8);
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  const int64_t c_vectors = draw(1, 4), cg_vectors = draw(1, 3);
  std::vector<uint4> x(g.in_size * c_vectors);
  for (int64_t p = 0; p < g.in_size; ++p)
    for (int64_t v = 0; v < c_vectors; ++v) x[p * c_vectors + v] = element(p, v);
  bool ok = true;
  for (int i = 0; i < 12; ++i) {
    const int64_t l = i == 0 ? 0 : i == 1 ? g.out_size - 1 : draw(0, static_cast<int>(g.out_size - 1));
    ok = check<ND, BATCH, LINES>(g, x, c_vectors, cg_vectors, l, draw(0, static_cast<int>(c_vectors - 1))) && ok;
  }
  return ok;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 300; ++i) {
    run(one_case<1, 1>());
    run(one_case<1, 3>());
    run(one_case<2, 1>());
    run(one_case<2, 2>());
    run(one_case<2, 3>());
    run(one_case<3, 1>());
    run(one_case<3, 3>());
    run(one_case<2, 2, 2>());
    run(one_case<2, 3, 3>());
    run(one_case<3, 3, 2>());
    run(one_case<3, 3, 3>());
  }
  return run.report();
}
