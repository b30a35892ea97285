// The tensor-core depthwise forward (lib/conv/depthwise/depthwise_mma.cuh)
// on the host: its plan, its staging and write-back phases (the kernel's own
// code, thread by thread), and its warps' phase emulated from the index maps
// the kernel uses (depthwise_mma_plan.h) and the PTX fragment layouts of
// ldmatrix.x4 (lane l gives row l % 8 of matrix l / 8; A's matrices are rows
// 0-7 / 8-15 times k 0-7 / 8-15, in that order) and mma.m16n8k16 (B: lane l
// holds B[2 (l % 4) + 8 r + {0, 1}][l / 4] in register r; C: rows l / 4 and
// + 8, columns 2 (l % 4) + {0, 1}). Random 1-D and 2-D geometries (windows
// 1-9 and some 13 along H, strides and dilations 1-3, paddings from -1 to
// past the window, widths up to 420 for several W tiles and staged rows longer than
// the block's threads), forwards and
// unit-stride input gradients (the flipped filter through the phase's maps),
// bfloat16 and float16, under small shared-memory budgets too (row bands),
// against float64 references; staged tiles are poisoned first, so a read of
// an element nobody staged shows. Small integers keep every sum exact. A
// fifth of the cases hold infinite and NaN inputs, which must reach only the
// outputs whose windows hold them (the kernel's window-by-window path,
// dw_mma_direct, run as the kernel runs it); finite cases never take it.
// Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_cuda.h"
#include "conv/depthwise/depthwise_mma.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

int planned = 0, refused = 0, banded = 0, multi_image = 0, multi_w = 0, multi_k = 0, gradients = 0, long_rows = 0;
int64_t direct_tiles = 0;  // m-tiles recomputed window by window (dw_mma_direct)
int non_finite = 0;        // cases given infinite and NaN inputs

// The warps' phase of one block, lane by lane, as dw_mma_multiply runs it.
template <typename T>
void emulate_multiply(const uint16_t* tile, const uint16_t* taps, uint16_t* outs, const DwGeom& g, const DwMma& m) {
  for (int32_t cl = 0; cl < m.cb; ++cl) {
    const uint16_t* plane = tile + dw_mma_plane_base(cl, m.plane);
    uint16_t* out_plane = outs + dw_mma_plane_base(cl, m.out_plane);
    for (int32_t mt = 0; mt < m.mtiles; ++mt) {
      float acc[kDwMmaMaxNt][16][8] = {};
      for (int32_t f = 0; f < m.frags; ++f) {
        const int32_t kh = f / m.ksteps, s = f % m.ksteps;
        float B[16][8] = {};
        for (int32_t lane = 0; lane < 32; ++lane)
          for (int32_t reg = 0; reg < 2; ++reg)
            for (int32_t e = 0; e < 2; ++e) {
              const int32_t k = dw_mma_b_k(lane, reg) + e, n = dw_mma_b_n(lane);
              B[k][n] = dw_mma_value<T>(taps[dw_mma_b_index(m, g, cl, kh, s, k, n)]);
            }
        for (int32_t j = 0; j < m.nt; ++j) {
          float A[16][16];
          for (int32_t lane = 0; lane < 32; ++lane) {
            const int32_t mat = lane / 8, rr = lane % 8;
            const uint16_t* row = plane + dw_mma_a_row_offset(m, g, mt, lane) + dw_mma_a_step(m, g, kh, s, j);
            for (int32_t e = 0; e < 8; ++e) A[(mat & 1) * 8 + rr][(mat >> 1) * 8 + e] = dw_mma_value<T>(row[e]);
          }
          for (int32_t r = 0; r < 16; ++r)
            for (int32_t n = 0; n < 8; ++n)
              for (int32_t k = 0; k < 16; ++k) acc[j][r][n] += A[r][k] * B[k][n];
        }
      }
      // As the kernel: an m-tile with a non-finite accumulator goes window by window.
      bool finite = true;
      for (int32_t j = 0; j < m.nt; ++j)
        for (int32_t r = 0; r < 16; ++r)
          for (int32_t n = 0; n < 8; ++n) finite = finite && std::isfinite(acc[j][r][n]);
      if (!finite) {
        ++direct_tiles;
        for (int32_t lane = 0; lane < 32; ++lane) dw_mma_direct<T>(tile, taps, outs, g, m, cl, mt, lane);
        continue;
      }
      for (int32_t j = 0; j < m.nt; ++j)
        for (int32_t lane = 0; lane < 32; ++lane)
          for (int32_t half = 0; half < 2; ++half) {
            const int32_t r = lane / 4 + 8 * half, n = 2 * (lane % 4);
            const int32_t at = dw_mma_c_offset(m, mt, j, lane, half);
            out_plane[at] = dw_mma_bits<T>(acc[j][r][n]);
            out_plane[at + 1] = dw_mma_bits<T>(acc[j][r][n + 1]);
          }
    }
  }
}

template <typename T>
void run_mma(const T* x, const T* w, T* y, const DwGeom& g, const DwMma& m, int64_t N, int64_t C) {
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  std::vector<uint16_t> smem(static_cast<size_t>(m.smem / 2) + 8);
  uint16_t* tile = smem.data();
  uint16_t* taps = tile + m.w_off;
  uint16_t* outs = tile + m.out_off;
  blockDim.x = kDwMmaThreads;
  for (int32_t b = 0; b < m.blocks; ++b) {
    // Poison: a quiet NaN, which the products would carry to the outputs.
    std::fill(smem.begin(), smem.end(), static_cast<uint16_t>(bf16 ? 0x7fc0 : 0x7e00));
    const DwMmaBlock k = dw_mma_block(m, b);
    for (int32_t tid = 0; tid < kDwMmaThreads; ++tid) {
      dw_mma_stage(tile, x, g, m, N, C, k, tid, kDwMmaThreads);
      dw_mma_stage_taps(taps, w, g, m, int64_t{k.run} * m.cb, tid, kDwMmaThreads);
    }
    emulate_multiply<T>(tile, taps, outs, g, m);
    for (int32_t tid = 0; tid < kDwMmaThreads; ++tid) dw_mma_write(y, outs, g, m, N, C, k, tid, kDwMmaThreads);
  }
}

Geometry random_geometry(int nd, bool unit_stride) {
  return draw_depthwise_geometry(nd, 14, 60, 420, [&](int d, bool last, Geometry& g) {
    int k = draw(1, 9);
    if (!last && draw(0, 5) == 0) k = 13;
    g.kernel[d] = k;
    g.rhs_dilation[d] = draw(1, 3);
    g.stride[d] = unit_stride ? 1 : draw(1, 3);
  });
}

template <typename T>
std::vector<T> random_values(int64_t count) {
  std::vector<T> v(count);
  for (auto& e : v) e = from_float<T>(static_cast<float>(draw(-2, 2)));
  return v;
}

void describe(const char* what, const Geometry& g, int64_t N, int64_t C, const DwMma& m, int64_t budget) {
  std::printf("FAIL: %s nd %d N %lld C %lld budget %lld: cb %d nb %d th %d bands %d nt %d tiles_w %d ksteps %d\n",
              what, g.nd, static_cast<long long>(N), static_cast<long long>(C), static_cast<long long>(budget), m.cb,
              m.nb, m.th, m.bands, m.nt, m.tiles_w, m.ksteps);
  print_dimensions(g);
}

int64_t at(int64_t n, int64_t s, int64_t c, int64_t C, int64_t size) { return (n * size + s) * C + c; }

// One forward (gradient: the unit-stride input gradient) of a random case;
// true where it passed or the plan refused it.
template <typename T>
bool one_case(bool gradient) {
  const Geometry g = random_geometry(draw(1, 2), gradient);
  if (g.out_size == 0) return true;
  const int64_t N = draw(1, 5), C = 8 * draw(1, 6);
  const int64_t K = g.kernel_size;
  const int b = draw(0, 2);
  const int64_t budget = b == 0 ? kDwMmaSmem : b == 1 ? 16 * 1024 : 6 * 1024;
  DwGeom dg;
  if (gradient) {
    GradientPhase ph;
    if (gradient_phase_count(g) != 1 || !gradient_phase(g, 0, &ph) || !ph.has_positions) return true;
    dg = dw_phase(g, ph);
  } else {
    dg = dw_lift(g);
  }
  DwMma m;
  if (!plan_dw_mma(dg, N, C, &m, budget, draw(0, 1) == 0 ? 1 : kDwMmaMinBlocks)) {
    ++refused;
    // Only where a window's fragments exceed the registers, or nothing fits the budget.
    const int64_t span = dw_mma_span(dg.stride[2], dg.kernel[2], dg.dil[2]);
    DwMma unbounded;
    if (dg.kernel[1] * ((span + 15) / 16) <= kDwMmaMaxB && !plan_dw_mma(dg, N, C, &unbounded, int64_t{1} << 30)) {
      describe("refused", g, N, C, m, budget);
      return false;
    }
    return true;
  }
  ++planned;
  banded += m.bands > 1;
  multi_image += m.nb > 1;
  multi_w += m.tiles_w > 1;
  multi_k += m.ksteps > 1;
  long_rows += m.chunks * 32 > kDwMmaThreads;  // a staged row's items past the block's threads
  gradients += gradient;
  const int64_t in_size = gradient ? g.out_size : g.in_size, out_size = gradient ? g.in_size : g.out_size;
  auto x = random_values<T>(N * C * in_size);
  const auto w = random_values<T>(C * K);
  // A fifth of the cases get a few infinite and NaN inputs: outputs whose
  // windows hold none must stay finite.
  const bool poisoned = draw(0, 4) == 0;
  if (poisoned) {
    ++non_finite;
    const float specials[3] = {INFINITY, -INFINITY, NAN};
    for (int i = 0, count = draw(1, 3); i < count; ++i)
      x[draw(0, static_cast<int>(x.size()) - 1)] = from_float<T>(specials[draw(0, 2)]);
  }
  std::vector<T> y(N * C * out_size, from_float<T>(777.0f));
  std::vector<double> want(y.size(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t l = 0; l < g.out_size; ++l)
        for (int64_t k = 0; k < K; ++k) {
          const int64_t s = source(g, l, k);
          if (s < 0) continue;
          if (gradient) want[at(n, s, c, C, out_size)] += to_double(x[at(n, l, c, C, in_size)]) * to_double(w[c * K + k]);
          else want[at(n, l, c, C, out_size)] += to_double(x[at(n, s, c, C, in_size)]) * to_double(w[c * K + k]);
        }
  const int64_t before = direct_tiles;
  run_mma<T>(x.data(), w.data(), y.data(), dg, m, N, C);
  if (poisoned) {
    int64_t bad = -1;
    for (size_t i = 0; i < y.size() && bad < 0; ++i) {
      const double got = to_double(y[i]), expect = stored<T>(want[i]);
      if (std::isnan(expect) ? !std::isnan(got) : got != expect) bad = static_cast<int64_t>(i);
    }
    if (bad < 0) return true;
    describe("non-finite inputs", g, N, C, m, budget);
    std::printf("  element %lld of %zu: got %g, want %g (%lld m-tiles window by window)\n", static_cast<long long>(bad),
                y.size(), to_double(y[bad]), stored<T>(want[bad]), static_cast<long long>(direct_tiles - before));
    return false;
  }
  if (direct_tiles != before) {
    // Finite inputs never leave the tensor cores (and a poisoned read, which would, shows here).
    describe("finite inputs went window by window", g, N, C, m, budget);
    return false;
  }
  const int64_t bad = first_mismatch(y, want);
  if (bad < 0) return true;
  describe(gradient ? "input gradient" : "forward", g, N, C, m, budget);
  std::printf("  element %lld of %zu: got %g, want %g\n", static_cast<long long>(bad), y.size(), to_double(y[bad]),
              stored<T>(want[bad]));
  return false;
}

}  // namespace

int main() {
  int passed = 0, failed = 0;
  for (int round = 0; round < 400; ++round) {
    const bool gradient = round % 3 == 2;
    const bool ok = round % 2 == 0 ? one_case<__nv_bfloat16>(gradient) : one_case<__half>(gradient);
    ++(ok ? passed : failed);
  }
  std::printf("planned %d (banded %d, several images %d, several W tiles %d, several k-steps %d, gradients %d, "
              "rows past the threads %d, non-finite inputs %d: %lld m-tiles window by window), refused %d\n",
              planned, banded, multi_image, multi_w, multi_k, gradients, long_rows, non_finite,
              static_cast<long long>(direct_tiles), refused);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 && banded > 0 && multi_image > 0 && multi_w > 0 && multi_k > 0 && gradients > 0 && long_rows > 0 &&
                 non_finite > 0 && direct_tiles > 0
             ? 0
             : 1;
}
