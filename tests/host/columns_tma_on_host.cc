// The copy-engine unfold and fold (lib/cuda/columns_tma.cuh, the plans of
// columns_tma_plan.cc) run as host code against float64 references: each
// box the producer would copy is built here by the copy engine's rules (its
// coordinates, extents and strides from the plan and columns_tma.cuh; zeros
// outside the tensor; an innermost coordinate on a 16-byte boundary, which
// the hardware requires), then the consumer threads' work on it runs thread
// by thread. Covers 1-3-d geometries with padding, cropping, dilations,
// outer strides (unfold), several bands, chunks of positions in both of the
// convolution's layouts, accumulation, and every element size. Run by
// tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "host_cuda.h"
#include "host_reference.h"
#include "cuda/columns_tma.cuh"

using namespace im2col;
using namespace im2col::cuda;

namespace {

int violations = 0;

// The box of map (p.dims, p.strides) at coordinates c, as the copy engine
// fills shared memory.
template <typename U>
void copy_box(const ColumnsTmaPlan& p, const U* base, const int32_t* c, U* box) {
  if ((static_cast<int64_t>(c[0]) * static_cast<int64_t>(sizeof(U))) % 16 != 0 ||
      (p.box[0] * sizeof(U)) % 16 != 0) {
    std::printf("VIOLATION: innermost coordinate %d or box %u not on 16 bytes\n", c[0], p.box[0]);
    ++violations;
  }
  for (int i = 0; i + 1 < p.rank; ++i)
    if (p.strides[i] % 16 != 0) ++violations;
  int64_t count = 1;
  for (int i = 0; i < p.rank; ++i) {
    if (p.box[i] < 1 || p.box[i] > 256) ++violations;
    count *= p.box[i];
  }
  for (int64_t e = 0; e < count; ++e) {
    int64_t rest = e, offset = 0;
    bool inside = true;
    for (int i = 0; i < p.rank; ++i) {
      const int64_t at = c[i] + rest % p.box[i];
      rest /= p.box[i];
      inside &= at >= 0 && at < static_cast<int64_t>(p.dims[i]);
      offset += at * (i == 0 ? 1 : static_cast<int64_t>(p.strides[i - 1] / sizeof(U)));
    }
    box[e] = inside ? base[offset] : U(0);
  }
}

// A geometry with unit stride and whole vectors along the last dimension
// (most of the time: some draws miss, and the plan must then decline).
Geometry random_geometry(int nd, int V, bool outer_strides) {
  Geometry g;
  g.nd = nd;
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  for (int d = 0; d < nd; ++d) {
    g.kernel[d] = draw(1, 4);
    g.rhs_dilation[d] = draw(1, 3);
    g.stride[d] = outer_strides ? draw(1, 3) : 1;
    g.pad_lo[d] = draw(-2, 4);
    pad_hi[d] = draw(-1, 4);
    g.in[d] = draw(1, 12);
  }
  const int last = nd - 1;
  g.stride[last] = 1;
  g.in[last] = V * draw(1, nd == 1 ? 70 : 9);
  const int64_t window = (g.kernel[last] - 1) * g.rhs_dilation[last] + 1;
  if (draw(0, 5) > 0) pad_hi[last] = V * draw(1, nd == 1 ? 70 : 9) - (g.in[last] + g.pad_lo[last] - window + 1);
  finish_geometry(g, pad_hi);
  return g;
}

// The chunk's layout: the whole batch (torch's), or a chunk of positions in
// the convolution's image-major or row-major layout.
ColumnsLayout random_layout(const Geometry& g, int64_t C, int64_t nc, int64_t unit, bool row_major_ok) {
  ColumnsLayout lay;
  lay.l0 = 0;
  lay.lc = g.out_size;
  const int pick = draw(0, row_major_ok ? 2 : 1);
  if (pick > 0 && g.out_size >= 2 * unit) {
    const int64_t units = g.out_size / unit;
    lay.l0 = unit * draw(0, static_cast<int>(units) - 1);
    lay.lc = std::min<int64_t>(unit * draw(1, static_cast<int>(units)), g.out_size - lay.l0);
  }
  lay.row_stride = pick == 2 ? nc * lay.lc : lay.lc;
  lay.image_stride = pick == 2 ? lay.lc : C * g.kernel_size * lay.lc;
  return lay;
}

// Returns -1 where the plan declined, else whether the columns matched.
template <int ND, typename U>
int unfold_case(bool* declined_aligned) {
  constexpr int V = 16 / sizeof(U);
  const Geometry g = random_geometry(ND, V, true);
  if (g.out_size <= 0) return -1;
  const int64_t C = draw(1, 3), nc = draw(1, 3), K = g.kernel_size;
  const ColumnsLayout lay = random_layout(g, C, nc, V, true);
  ColumnsTmaPlan p;
  if (!plan_unfold_tma(g, lay, C, nc, sizeof(U), 132, &p)) {
    *declined_aligned = g.out[ND - 1] % V == 0 && lay.lc % V == 0 && g.kernel_size <= 64 && g.out[ND - 1] <= 64;
    return -1;
  }
  std::vector<U> x(nc * C * g.in_size);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<U>(i * 2654435761u + 1);
  const int64_t cols_size = (nc - 1) * lay.image_stride + (C * K - 1) * lay.row_stride + lay.lc;
  const U poison = static_cast<U>(0xA5A5A5A5A5A5A5A5ull);
  std::vector<U> cols(cols_size, poison);
  std::vector<Pack<U, V>> box(p.box_bytes / 16 + 1);
  std::vector<int2> taps(K);
  for (int32_t kk = 0; kk < K; ++kk) unfold_tap<ND, V>(p, kk, taps[kk].x, taps[kk].y);
  for (int64_t job = 0; job < p.jobs; ++job) {
    const BoxJob j = box_job(p, job);
    int32_t c[ND + 1];
    unfold_box_start<ND>(p, j, c);
    copy_box(p, x.data(), c, reinterpret_cast<U*>(box.data()));
    for (int32_t t = 0; t < kTmaConsumers; ++t)
      unfold_from_box<ND, U>(p, j, box.data(), taps.data(), cols.data(), t, kTmaConsumers);
  }
  for (int64_t n = 0; n < nc; ++n)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t l = lay.l0; l < lay.l0 + lay.lc; ++l) {
          const int64_t s = source(g, l, k);
          const U want = s >= 0 ? x[(n * C + ch) * g.in_size + s] : U(0);
          const U got = cols[n * lay.image_stride + (ch * K + k) * lay.row_stride + l - lay.l0];
          if (got != want) {
            std::printf("FAIL unfold: nd %d, %zu-byte elements, n %lld c %lld k %lld l %lld\n", ND, sizeof(U),
                        static_cast<long long>(n), static_cast<long long>(ch), static_cast<long long>(k),
                        static_cast<long long>(l));
            return 0;
          }
        }
  return 1;
}

template <int ND, typename TC, typename TX>
int fold_case(bool* declined_aligned) {
  constexpr int V = 16 / sizeof(TC);
  using A = typename Acc<TX>::type;
  constexpr int kVectors = 32 / V < 8 ? 32 / V : 8;
  const Geometry g = random_geometry(ND, V, false);
  if (g.out_size <= 0) return -1;
  const int64_t C = draw(1, 3), nc = draw(1, 3), K = g.kernel_size;
  const int64_t rest_out = g.out_size / g.out[0];
  const ColumnsLayout lay = random_layout(g, C, nc, ND == 1 ? V : rest_out, false);
  ColumnsTmaPlan p;
  if (!plan_fold_tma(g, lay, C, nc, sizeof(TC), 132, &p)) {
    *declined_aligned = g.out[ND - 1] % V == 0 && g.in_size / g.in[0] <= 1024 && g.in[ND - 1] <= 64;
    return -1;
  }
  const bool accumulate = draw(0, 1) == 1;
  std::vector<TC> cols((nc - 1) * lay.image_stride + (C * K - 1) * lay.row_stride + lay.lc);
  std::vector<TX> x(nc * C * g.in_size);
  for (auto& v : cols) v = from_float<TC>(static_cast<float>(draw(-4, 4)));
  for (auto& v : x) v = from_float<TX>(static_cast<float>(draw(-4, 4)));
  std::vector<double> want(x.size());
  for (int64_t n = 0; n < nc; ++n)
    for (int64_t ch = 0; ch < C; ++ch) {
      double* plane = want.data() + (n * C + ch) * g.in_size;
      for (int64_t i = 0; i < g.in_size; ++i) plane[i] = accumulate ? to_double(x[(n * C + ch) * g.in_size + i]) : 0;
      for (int64_t k = 0; k < K; ++k)
        for (int64_t l = lay.l0; l < lay.l0 + lay.lc; ++l) {
          const int64_t s = source(g, l, k);
          if (s >= 0) plane[s] += to_double(cols[n * lay.image_stride + (ch * K + k) * lay.row_stride + l - lay.l0]);
        }
    }
  std::vector<Pack<TC, V>> box(p.box_bytes / 16 + 1);
  for (int64_t job = 0; job < p.jobs; ++job) {
    const BoxJob j = box_job(p, job);
    const int32_t vectors = fold_job_elements(p, j) / V;
    if (vectors > kVectors * kTmaConsumers) ++violations;  // more than the consumers hold
    TX* xb = x.data() + j.plane * p.in_size + j.band * p.band * p.rest;
    for (int32_t t = 0; t < kTmaConsumers; ++t) {
      A acc[kVectors][V];
      for (int u = 0; u < kVectors; ++u)
        for (int v = 0; v < V; ++v) {
          const int32_t vec = t + u * kTmaConsumers;
          acc[u][v] = accumulate && vec < vectors ? static_cast<A>(to_acc(xb[vec * V + v])) : A(0);
        }
      for (int32_t kk = 0; kk < K; ++kk) {
        int32_t c[ND + 2], shift;
        fold_box_start<ND, V>(p, j, kk, c, shift);
        if (shift != fold_tap_shift<ND, V>(p, kk)) ++violations;
        copy_box(p, cols.data(), c, reinterpret_cast<TC*>(box.data()));
        fold_add_box<ND, TC, A, kVectors>(p, box.data(), shift, vectors, t, kTmaConsumers, acc);
      }
      for (int u = 0; u < kVectors; ++u) {
        const int32_t vec = t + u * kTmaConsumers;
        if (vec < vectors)
          for (int v = 0; v < V; ++v) xb[vec * V + v] = store_value<TX>(acc[u][v]);
      }
    }
  }
  for (size_t i = 0; i < x.size(); ++i)
    if (to_double(x[i]) != want[i]) {
      std::printf("FAIL fold: nd %d, %zu/%zu-byte elements, element %zu: got %g, want %g\n", ND, sizeof(TC),
                  sizeof(TX), i, to_double(x[i]), want[i]);
      return 0;
    }
  return 1;
}

}  // namespace

int main() {
  int passed = 0, failed = 0, declined = 0, declined_aligned = 0;
  auto run = [&](int result, bool aligned) {
    if (result < 0) {
      ++declined;
      declined_aligned += aligned;
    } else {
      result ? ++passed : ++failed;
    }
  };
  for (int i = 0; i < 60; ++i) {
    bool a = false;
    run(unfold_case<1, uint16_t>(&a), a);
    run(unfold_case<2, uint16_t>(&a), a);
    run(unfold_case<3, uint16_t>(&a), a);
    run(unfold_case<1, uint32_t>(&a), a);
    run(unfold_case<2, uint32_t>(&a), a);
    run(unfold_case<3, uint32_t>(&a), a);
    run(unfold_case<2, uint64_t>(&a), a);
    run(unfold_case<3, uint64_t>(&a), a);
    run(fold_case<1, __nv_bfloat16, __nv_bfloat16>(&a), a);
    run(fold_case<2, __nv_bfloat16, __nv_bfloat16>(&a), a);
    run(fold_case<3, __half, __half>(&a), a);
    run(fold_case<1, float, float>(&a), a);
    run(fold_case<2, float, float>(&a), a);
    run(fold_case<3, float, float>(&a), a);
    run(fold_case<2, float, __nv_bfloat16>(&a), a);
    run(fold_case<2, double, double>(&a), a);
    run(fold_case<3, double, double>(&a), a);
  }
  std::printf("declined %d (%d of them aligned and small), violations of the copy engine's rules %d\n", declined,
              declined_aligned, violations);
  if (violations > 0) ++failed;
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
