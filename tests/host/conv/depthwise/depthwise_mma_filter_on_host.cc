// The tensor-core depthwise filter gradient
// (lib/conv/depthwise/depthwise_mma_filter.cuh) on the host: its plan, its
// staging, margins, direct sums and write-back (the kernel's own code, thread
// by thread), and its warps' products emulated from the index maps the
// kernel uses (depthwise_mma_filter_plan.h) and the PTX fragment layouts of
// ldmatrix (lane l gives row l % 8 of matrix l / 8; x4: A's matrices are tap
// rows 0-7 / 8-15 times k 0-7 / 8-15, in that order; x2: k 0-7 and 8-15 of
// tap rows 0-7) and mma.m16n8k16 (B: lane l holds B[2 (l % 4) + 8 r + {0, 1}][l / 4]
// in register r; C: rows l / 4 and + 8, columns 2 (l % 4) + {0, 1}). Random
// 1-D and 2-D geometries (windows 1-32 a side, strides along H and dilations
// 1-3, paddings from -1 to past the window, widths up to 200 for several W
// tiles), bfloat16 and float16, small shared-memory budgets (several bands)
// and block targets (several bands a block), the call's slices from one an
// image up (a slice a block, summing its bands of every W tile), against float64 references; shared memory is poisoned first, so
// a read of an element nobody staged or zeroed shows, and so are the partial
// sums, so a slice nobody wrote shows. Small integers keep every sum exact.
// A fifth of the cases hold infinite and NaN inputs or dy, which must reach
// only the taps whose products hold them (the kernel's direct sums, run as
// the kernel runs them); finite cases never take that path.
// Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_cuda.h"
#include "conv/depthwise/depthwise_mma_filter.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

int planned = 0, refused = 0, banded = 0, grouped = 0, multi_w = 0, two_mtiles = 0, pairs = 0, non_finite = 0;
int64_t direct_bands = 0;  // bands summed again output by output (dw_mma_filter_direct)

template <int MT, int NT>
using LaneAcc = float[MT][NT][4];

// One band's products of channel plane (xp, dyp) into the warp's per-lane
// accumulators, as dw_mma_filter_products runs them.
template <typename T, int MROWS, int NT>
void emulate_products(const uint16_t* xp, const uint16_t* dyp, const DwGeom& g, const DwMmaFilter& m, int32_t rows,
                      LaneAcc<dw_mma_filter_mtiles<MROWS>(), NT>* acc) {
  constexpr int MT = dw_mma_filter_mtiles<MROWS>();
  constexpr bool pair = MROWS == 8;
  for (int32_t h = 0; h < rows; ++h)
    for (int32_t s = 0; s < m.ksteps; ++s) {
      float A[MT][16][16] = {};
      for (int32_t mt = 0; mt < MT; ++mt)
        for (int32_t lane = 0; lane < (pair ? 16 : 32); ++lane) {
          const int32_t mat = lane / 8, rr = lane % 8;
          const uint16_t* row = xp + dw_mma_filter_a_offset(m, g, mt, lane, pair) + h * g.stride[1] * m.rp + 16 * s;
          for (int32_t e = 0; e < 8; ++e) {
            if (pair) A[mt][rr][mat * 8 + e] = dw_mma_value<T>(row[e]);
            else A[mt][(mat & 1) * 8 + rr][(mat >> 1) * 8 + e] = dw_mma_value<T>(row[e]);
          }
        }
      float B[NT][16][8];
      for (int32_t nt = 0; nt < NT; ++nt)
        for (int32_t lane = 0; lane < 32; ++lane)
          for (int32_t reg = 0; reg < 2; ++reg)
            for (int32_t e = 0; e < 2; ++e)
              B[nt][2 * (lane % 4) + 8 * reg + e][lane / 4] =
                  dw_mma_value<T>(dyp[h * m.dp + dw_mma_filter_b_offset(m, g, nt, lane, reg) + 16 * s + e]);
      for (int32_t lane = 0; lane < 32; ++lane)
        for (int32_t mt = 0; mt < MT; ++mt)
          for (int32_t nt = 0; nt < NT; ++nt)
            for (int32_t v = 0; v < 4; ++v) {
              const int32_t r = lane / 4 + 8 * (v / 2), n = 2 * (lane % 4) + v % 2;
              float sum = 0.f;
              for (int32_t k = 0; k < 16; ++k) sum += A[mt][r][k] * B[nt][k][n];
              acc[lane][mt][nt][v] += sum;
            }
    }
}

template <typename T, int MROWS, int NT>
void run_filter(const T* dy, const T* x, float* partials, const DwGeom& g, const DwMmaFilter& m, int64_t C) {
  constexpr int MT = dw_mma_filter_mtiles<MROWS>();
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  std::vector<uint16_t> smem(static_cast<size_t>(m.smem / 2) + 8);
  uint16_t* xs = smem.data();
  uint16_t* ds = xs + m.dy_off;
  std::vector<LaneAcc<MT, NT>> acc(kDwMmaFilterWarps * 32), before(acc.size());
  for (int32_t b = 0; b < m.blocks; ++b) {
    // Poison: a quiet NaN, which the products would carry to the taps.
    std::fill(smem.begin(), smem.end(), static_cast<uint16_t>(bf16 ? 0x7fc0 : 0x7e00));
    const int32_t group = b / m.runs, run = b % m.runs;
    const int64_t ch0 = int64_t{run} * kDwMmaFilterChannels;
    for (int32_t tid = 0; tid < kDwMmaFilterThreads; ++tid)
      dw_mma_filter_zero_margins(xs, ds, m, tid, kDwMmaFilterThreads);
    for (auto& a : acc) std::fill(&a[0][0][0], &a[0][0][0] + MT * NT * 4, 0.f);
    const int32_t first = group * m.per_group, last = std::min(m.units, first + m.per_group);
    for (int32_t u = first; u < last; ++u) {
      const DwMmaFilterUnit k = dw_mma_filter_unit(m, u);
      const int32_t oh0 = k.band * m.th, ow0 = k.wt * m.tw;
      for (int32_t tid = 0; tid < kDwMmaFilterThreads; ++tid) {
        DwMmaFilterLoads<kDwMmaFilterAhead> ahead;
        dw_mma_filter_load(ahead, x, dy, g, m, C, ch0, k, 0, tid, kDwMmaFilterThreads);
        dw_mma_filter_stage(xs, ahead, x, dy, g, m, C, ch0, k, tid, kDwMmaFilterThreads);
      }
      const int32_t rows = std::min(m.th, g.out[1] - oh0), cols = std::min(m.tw, g.out[2] - ow0);
      for (int32_t warp = 0; warp < kDwMmaFilterWarps; ++warp) {
        const uint16_t* xp = xs + warp * m.x_plane;
        const uint16_t* dyp = ds + warp * m.dy_plane;
        LaneAcc<MT, NT>* lanes = &acc[warp * 32];
        for (int32_t lane = 0; lane < 32; ++lane) std::copy(&lanes[lane][0][0][0], &lanes[lane][0][0][0] + MT * NT * 4,
                                                            &before[warp * 32 + lane][0][0][0]);
        emulate_products<T, MROWS, NT>(xp, dyp, g, m, rows, lanes);
        bool finite = true;
        for (int32_t lane = 0; lane < 32; ++lane)
          for (int32_t i = 0; i < MT * NT * 4; ++i) finite = finite && std::isfinite((&lanes[lane][0][0][0])[i]);
        if (finite) continue;
        ++direct_bands;
        for (int32_t lane = 0; lane < 32; ++lane) {
          std::copy(&before[warp * 32 + lane][0][0][0], &before[warp * 32 + lane][0][0][0] + MT * NT * 4,
                    &lanes[lane][0][0][0]);
          dw_mma_filter_direct<T>(xp, dyp, g, m, rows, cols, lane, lanes[lane]);
        }
      }
    }
    for (int32_t warp = 0; warp < kDwMmaFilterWarps; ++warp)
      for (int32_t lane = 0; lane < 32; ++lane)
        dw_mma_filter_write(partials, acc[warp * 32 + lane], g, group, C, ch0 + warp, lane);
  }
}

Geometry random_geometry(int nd) {
  return draw_depthwise_geometry(nd, 20, 60, 200, [](int d, bool last, Geometry& g) {
    const int shape = draw(0, 5);
    g.kernel[d] = shape == 0 ? draw(17, 32) : shape == 1 ? draw(9, 16) : draw(1, 8);
    g.rhs_dilation[d] = draw(0, 2) == 0 ? draw(2, 3) : 1;
    g.stride[d] = last ? (draw(0, 9) == 0 ? 2 : 1) : draw(1, 3);
  });
}

template <typename T>
std::vector<T> random_values(int64_t count) {
  std::vector<T> v(count);
  for (auto& e : v) e = from_float<T>(static_cast<float>(draw(-2, 2)));
  return v;
}

void describe(const char* what, const Geometry& g, int64_t N, int64_t C, const DwMmaFilter& m) {
  std::printf("FAIL: %s nd %d N %lld C %lld: th %d bands %d tw %d tiles_w %d ksteps %d groups %d per_group %d\n", what,
              g.nd, static_cast<long long>(N), static_cast<long long>(C), m.th, m.bands, m.tw, m.tiles_w, m.ksteps,
              m.groups, m.per_group);
  print_dimensions(g);
}

template <typename T>
void dispatch(const T* dy, const T* x, float* partials, const DwGeom& g, const DwMmaFilter& m, int64_t C) {
  // The launcher's choice (depthwise_mma_filter.cu).
  if (g.kernel[1] <= 8 && g.kernel[2] <= 8) {
    ++pairs;
    run_filter<T, 8, 1>(dy, x, partials, g, m, C);
  } else if (g.kernel[1] <= 16 && g.kernel[2] <= 16) {
    run_filter<T, 16, 2>(dy, x, partials, g, m, C);
  } else {
    two_mtiles += g.kernel[1] > 16;
    run_filter<T, 32, 4>(dy, x, partials, g, m, C);
  }
}

// One filter gradient of a random case; true where it passed or the plan refused it.
template <typename T>
bool one_case() {
  const Geometry g = random_geometry(draw(1, 2));
  if (g.out_size == 0) return true;
  const int64_t N = draw(1, 4), C = 8 * draw(1, 4);
  const int64_t K = g.kernel_size;
  const FilterSlices call = filter_slices(N, g.out[0], draw(0, 1) == 0 ? g.out[0] : draw(1, 3));
  const int b = draw(0, 2);
  const int64_t budget = b == 0 ? kDwMmaFilterSmem : b == 1 ? 12 * 1024 : 6 * 1024;
  const int64_t target = draw(0, 1) == 0 ? kDwMmaFilterBlocks : draw(1, 8);
  const DwGeom dg = dw_lift(g);
  DwMmaFilter m;
  if (!plan_dw_mma_filter(dg, call, N, C, &m, budget, target)) {
    ++refused;
    // Only a stride along W, windows past 32 taps, W tiles past the columns, or nothing that fits the budget.
    DwMmaFilter unbounded;
    if (dg.stride[2] == 1 && dg.kernel[1] <= kDwMmaFilterMaxTaps && dg.kernel[2] <= kDwMmaFilterMaxTaps &&
        !plan_dw_mma_filter(dg, call, N, C, &unbounded, int64_t{1} << 30, target)) {
      describe("refused", g, N, C, m);
      return false;
    }
    return true;
  }
  ++planned;
  banded += m.bands > 1;
  grouped += m.per_group > m.tiles_w;
  multi_w += m.tiles_w > 1;
  if (m.groups > call.count) {
    describe("more slices than the call's workspace", g, N, C, m);
    return false;
  }
  auto x = random_values<T>(N * C * g.in_size);
  auto dy = random_values<T>(N * C * g.out_size);
  // A fifth of the cases get a few infinite and NaN inputs or dy values:
  // taps whose products hold none must stay finite.
  const bool poisoned = draw(0, 4) == 0;
  if (poisoned) {
    ++non_finite;
    const float specials[3] = {INFINITY, -INFINITY, NAN};
    for (int i = 0, count = draw(1, 3); i < count; ++i) {
      auto& v = draw(0, 1) == 0 ? x : dy;
      v[draw(0, static_cast<int>(v.size()) - 1)] = from_float<T>(specials[draw(0, 2)]);
    }
  }
  // lax's filter gradient: every output's products with its window over the
  // padded input (a padding tap multiplies a zero).
  std::vector<double> want(C * K, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t l = 0; l < g.out_size; ++l)
        for (int64_t k = 0; k < K; ++k) {
          const int64_t s = source(g, l, k);
          const double xv = s < 0 ? 0.0 : to_double(x[(n * g.in_size + s) * C + c]);
          want[c * K + k] += xv * to_double(dy[(n * g.out_size + l) * C + c]);
        }
  std::vector<float> partials(call.count * K * C, NAN);
  const int64_t before = direct_bands;
  dispatch<T>(dy.data(), x.data(), partials.data(), dg, m, C);
  if (!poisoned && direct_bands != before) {
    describe("finite inputs summed output by output", g, N, C, m);
    return false;
  }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k < K; ++k) {
      float sum = 0.f;  // the second pass's order: slice by slice
      for (int64_t s = 0; s < m.groups; ++s) sum += partials[(s * K + k) * C + c];
      const double expect = want[c * K + k];
      const bool same = std::isnan(expect) ? std::isnan(sum) : static_cast<double>(sum) == expect;
      if (!same) {
        describe(poisoned ? "non-finite inputs" : "filter gradient", g, N, C, m);
        std::printf("  channel %lld tap %lld: got %g, want %g (%lld bands output by output)\n",
                    static_cast<long long>(c), static_cast<long long>(k), static_cast<double>(sum), expect,
                    static_cast<long long>(direct_bands - before));
        return false;
      }
    }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 300;
  int passed = 0, failed = 0;
  for (int round = 0; round < rounds; ++round) {
    const bool ok = round % 2 == 0 ? one_case<__nv_bfloat16>() : one_case<__half>();
    ++(ok ? passed : failed);
  }
  std::printf("planned %d (several bands %d, several bands a block %d, several W tiles %d, two m-tiles %d, "
              "ldmatrix pairs %d, non-finite inputs %d: %lld bands output by output), refused %d\n",
              planned, banded, grouped, multi_w, two_mtiles, pairs, non_finite, static_cast<long long>(direct_bands),
              refused);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 && banded > 0 && grouped > 0 && multi_w > 0 && two_mtiles > 0 && pairs > 0 && non_finite > 0 &&
                 direct_bands > 0
             ? 0
             : 1;
}
