// The depthwise kernel family (lib/conv/depthwise/depthwise_kernels.cuh)
// compiled as host code: each block body runs with an executor that runs each
// of its phases for all threads in turn (the kernel's barriers between them),
// against float64 references over random geometries: 1-D to 3-D, windows 1-9
// and 13, 31 (1-D and 2-D) and 63 (1-D), strides and dilations 1-3, paddings
// from negative to past the window, both layouts, float32, bfloat16 (also
// with float32 outputs), float16 and float64. Every op: the forward, the input
// gradient (its phases as forwards), the filter gradient's partial sums and
// their fixed-order sum; the tiles (planned under small shared-memory budgets
// too, so that windows run in stages and slices in several tiles), with and
// without the register rings, the per-element kernels, and the streamed 3x3
// forward and filter gradient with their rows loaded into registers or
// staged in shared-memory rings (their runs, columns and rows narrowed at
// random; the staged filter gradient's slices, column tiles of row tiles,
// checked against float64 sums over their rows and columns). Outputs are
// poisoned before each run and every element is checked. Small integers keep
// every sum exact, so the checks are equalities after one rounding.
// Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
//
// Mutants it kills (30 rounds each, planted then removed): the forward's
// input tile one column short (plan, pw without its + 1): 47 failures
// (forward, input gradient); the input gradient's phases reading the filter
// forwards (no flip): 357; the second pass dropping the last slice: 386; the
// filter ring's slot off by one: 142; the filter gradient ignoring its
// slice's bounds along H and W (sums rows of the next slice): 4, only since
// the filter tiles are also shrunk at random (before that: 0, a gap); the
// staged forward's ring one row step short: 7-25; the staged filter
// gradient's dy ring one slot short: 10, its input ring one row step short: 9.
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <vector>

#include "host_cuda.h"
#include "conv/depthwise/depthwise_cells.cuh"
#include "conv/depthwise/depthwise_kernels.cuh"
#include "conv/depthwise/depthwise_stream.cuh"
#include "conv/depthwise/depthwise_stream_filter.cuh"
#include "conv/depthwise/depthwise_stream_staged.cuh"
#include "conv/depthwise/depthwise_stream_staged_filter.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

int ran_forward = 0, ran_backward = 0, ran_filter = 0, staged = 0, gathered = 0, streamed = 0, streamed_filter = 0,
    streamed_staged = 0, staged_filter = 0, celled = 0;
// How often the plans took each path (the summary shows that the cases reach
// them all): rings, stages of taps, several tiles per filter block, threads
// meeting in shared memory, row segments, groups of taps across blocks.
int decoded32 = 0;
int ringed = 0, unringed = 0, multi_stage = 0, multi_tile = 0, met = 0, segmented = 0, tap_groups = 0;

// Runs each(f) for every thread of the block in turn, each with its state.
template <typename State>
struct HostExec {
  std::vector<State> s;
  explicit HostExec(unsigned threads) : s(threads) {}
  template <typename F>
  void each(F&& f) {
    for (unsigned t = 0; t < s.size(); ++t) {
      threadIdx.x = t;
      f(s[t]);
    }
  }
  void sync() {}
};

const char* type_name(size_t bytes) { return bytes == 2 ? "half" : bytes == 4 ? "f32" : "f64"; }

// A random forward geometry of rank nd: windows mostly 1-9, sometimes 13 or
// 31 (1-D, 2-D) or 63 (1-D); extents small enough for the references.
Geometry random_geometry(int nd, bool stream_domain = false, bool stride_2 = false) {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  for (int attempt = 0;; ++attempt) {
    Geometry g;
    g.nd = nd;
    const int big = draw(0, 9);
    // A third of 2-D geometries in the streaming kernel's domain (3x3, unit
    // dilation, stride 1 or 2 along H, half of them at unit stride).
    const bool streamable = nd == 2 && (stream_domain || draw(0, 2) == 0), unit = draw(0, 1) == 0;
    for (int d = 0; d < nd; ++d) {
      const bool last = d == nd - 1;
      int k = nd == 3 ? draw(1, 5) : draw(1, 9);
      if (nd < 3 && big == 0) k = last ? (nd == 1 ? 63 : 31) : (nd == 2 ? draw(1, 13) : k);
      if (nd < 3 && big == 1) k = 13;
      g.kernel[d] = k;
      g.rhs_dilation[d] = k > 9 ? draw(1, 2) : draw(1, 3);
      g.stride[d] = draw(1, 3);
      if (streamable) {
        g.kernel[d] = k = 3;
        g.rhs_dilation[d] = 1;
        g.stride[d] = stride_2 ? 2 : unit ? 1 : draw(1, last ? 3 : 2);
      }
      const int64_t window = (k - 1) * g.rhs_dilation[d] + 1;
      const int extent_max = nd == 3 ? 9 : nd == 2 ? 20 : 90;
      g.in[d] = draw(1, static_cast<int>(std::min<int64_t>(extent_max, window + 12)));
      if (k > 9) g.in[d] = draw(static_cast<int>(window / 2), static_cast<int>(window + (nd == 1 ? 40 : 8)));
      g.pad_lo[d] = draw(-1, static_cast<int>(std::min<int64_t>(window, 5)));
      pad_hi[d] = draw(-1, static_cast<int>(std::min<int64_t>(window, 5)));
      if (k > 9 && draw(0, 1) == 0) g.pad_lo[d] = pad_hi[d] = (window - 1) / 2;  // SAME
    }
    finish_geometry(g, pad_hi);
    if (g.out_size > 0 || attempt > 20) return g;
  }
}

int64_t out0_size(const Geometry& g) { return g.out[0]; }

// x (layout cl or cf) -> element (n, spatial offset s, channel c).
int64_t at(bool cl, int64_t n, int64_t s, int64_t c, int64_t C, int64_t size) {
  return cl ? (n * size + s) * C + c : (n * C + c) * size + s;
}

template <typename T>
std::vector<T> random_values(int64_t count) {
  std::vector<T> v(count);
  for (auto& e : v) e = from_float<T>(static_cast<float>(draw(-2, 2)));
  return v;
}

// Runs every block of a forward launch (phases p, tile t) on the host.
template <bool CL, int S, typename T, typename TY>
void run_tiles(const T* x, const T* w, TY* y, const DwPhases& p, const DwTile& t, int64_t N, int64_t C) {
  using A = typename Acc<T>::type;
  constexpr int V = CL ? (sizeof(T) == 8 ? 2 : 4) : 1;
  std::vector<unsigned char> smem(t.smem + 64, 0xcd);
  HostExec<DwForwardState<A, V>> e(static_cast<unsigned>(t.threads));
  blockDim.x = static_cast<unsigned>(t.threads);
  const int64_t total = p.count * N * t.blocks;
  for (int64_t b = 0; b < total; ++b) dw_forward_block<CL, S, T, TY>(e, smem.data(), x, w, y, p, t, N, C, b);
}

// Half the time, the rows a thread of grid s walks over total_rows drawn at
// random (several row tiles, the last one short).
void narrow_rows(DwColumnGrid& s, int32_t total_rows, int64_t N) {
  if (draw(0, 1) != 0) return;
  s.rows = draw(1, s.rows);
  s.row_tiles = (total_rows + s.rows - 1) / s.rows;
  s.blocks = int64_t{s.col_blocks} * s.row_tiles * N;
  s.by_row_tiles = FastDiv(s.row_tiles);
}

// Runs every thread of a streaming launch on the host (rows narrowed).
template <int SY, typename T, typename TY>
void run_stream(const T* x, const T* w, TY* y, const DwGeom& g, DwStreamPlan s, int64_t N, int64_t C) {
  narrow_rows(s, g.out[1], N);
  for (int64_t b = 0; b < s.blocks; ++b)
    for (int32_t tid = 0; tid < kDwStreamThreads; ++tid) dw_stream_thread<SY, T, TY>(x, w, y, g, s, C, b, tid);
}

// Runs every thread of a stride-2 input gradient by cells (forward geometry g)
// on the host (cell rows narrowed).
template <typename T>
void run_cells(const T* dy, const T* w, T* dx, const DwGeom& g, DwCellsPlan s, int64_t N, int64_t C) {
  narrow_rows(s.grid, s.cells_h, N);
  const auto thread = (g.pad[1] & 1) != 0 ? ((g.pad[2] & 1) != 0 ? dw_cells_thread<1, 1, T> : dw_cells_thread<1, 0, T>)
                                          : ((g.pad[2] & 1) != 0 ? dw_cells_thread<0, 1, T> : dw_cells_thread<0, 0, T>);
  for (int64_t b = 0; b < s.grid.blocks; ++b)
    for (int32_t tid = 0; tid < kDwCellsThreads; ++tid) thread(dy, w, dx, g, s, C, b, tid);
}

// Runs every block of a staged streaming launch on the host, its runs, columns
// and rows a block narrowed at random half the time.
template <int SY, typename T, typename TY>
void run_staged(const T* x, const T* w, TY* y, const DwPhases& p, int64_t N, int64_t C) {
  DwStagedPlan s;
  const bool narrow = draw(0, 1) == 0;
  const int32_t per_granule = sizeof(T) == 2 ? 2 : 1;
  if (!plan_dw_staged(p, N, C, sizeof(T), &s, narrow ? per_granule * draw(1, 3) : kDwStagedMaxRun,
                      narrow ? draw(1, 9) : kDwStagedThreads))
    return;
  if (narrow) {
    s.rows = draw(1, s.rows);
    s.row_tiles = (p.g[0].out[1] + s.rows - 1) / s.rows;
    s.blocks = int64_t{s.runs} * s.col_tiles * s.row_tiles * N;
    s.by_row_tiles = FastDiv(s.row_tiles);
  }
  std::vector<unsigned char> ring(static_cast<size_t>(s.smem), 0xcd);
  HostExec<DwStagedState<typename Acc<T>::type, dw_vector(sizeof(T), true)>> e(kDwStagedThreads);
  for (int64_t b = 0; b < s.blocks; ++b) dw_staged_block<SY, T, TY>(e, ring.data(), x, w, y, p.g[0], s, C, b);
}

// The forward machinery on phases p, as depthwise_conv.cu runs it: 3x3
// channels-last windows streamed (their rows staged where the channels fill
// 16-byte copies, here half the time), else tiles where they fit (budget), else
// the per-element kernel.
template <bool CL, typename T, typename TY>
void run_phases(const T* x, const T* w, TY* y, const DwPhases& p, int64_t N, int64_t C, bool ring, bool narrow,
                int64_t budget, bool force_gather, bool stream) {
  using A = typename Acc<T>::type;
  DwStagedPlan staged_plan;
  if (CL && stream && plan_dw_staged(p, N, C, sizeof(T), &staged_plan) && draw(0, 1) == 0) {
    ++streamed_staged;
    if (p.g[0].stride[1] == 1) run_staged<1, T, TY>(x, w, y, p, N, C);
    else run_staged<2, T, TY>(x, w, y, p, N, C);
    return;
  }
  DwStreamPlan s;
  if (CL && stream && plan_dw_stream(p, N, C, sizeof(T), &s)) {
    ++streamed;
    if (p.g[0].stride[1] == 1) run_stream<1, T, TY>(x, w, y, p.g[0], s, N, C);
    else run_stream<2, T, TY>(x, w, y, p.g[0], s, N, C);
    return;
  }
  DwTile t;
  const DwGeom bound = dw_bound(p);
  if (!force_gather && plan_dw_tile(bound, C, CL, sizeof(T), sizeof(A), sizeof(TY), ring, narrow, N * p.count, &t, budget)) {
    t.vector_io = CL && C % dw_vector(sizeof(T), true) == 0;
    if (draw(0, 3) != 0) dw_tile_launch(t, N, p.count);  // else the 64-bit block decode
    decoded32 += t.decode32;
    ++staged;
    ++(t.ring ? ringed : unringed);
    multi_stage += t.stages_h * t.stages_w > 1;
    if (t.ring) run_tiles<CL, 1, T, TY>(x, w, y, p, t, N, C);
    else run_tiles<CL, 0, T, TY>(x, w, y, p, t, N, C);
    return;
  }
  ++gathered;
  for (int i = 0; i < p.count; ++i) {
    const int64_t total = N * C * p.g[i].out_size();
    for (int64_t j = 0; j < total; ++j) dw_gather_element<T, TY>(x, w, y, p.g[i], C, CL, j);
  }
}

struct Options {
  bool ring, narrow, gather, stream;
  int64_t budget;
};

Options random_options() {
  Options o;
  o.stream = draw(0, 3) != 0;
  o.ring = draw(0, 3) != 0;
  o.narrow = draw(0, 3) != 0;
  o.gather = draw(0, 9) == 0;
  const int b = draw(0, 3);
  o.budget = b == 0 ? 3 * 1024 : b == 1 ? 12 * 1024 : kDwSmemBudget;
  return o;
}

void describe(const char* what, const Geometry& g, int64_t N, int64_t C, bool cl, size_t bytes, const Options& o) {
  std::printf("FAIL: %s nd %d %s %s N %lld C %lld ring %d narrow %d gather %d stream %d budget %lld\n", what,
              g.nd, cl ? "cl" : "cf", type_name(bytes), static_cast<long long>(N), static_cast<long long>(C), o.ring,
              o.narrow, o.gather, o.stream, static_cast<long long>(o.budget));
  print_dimensions(g);
}

template <typename TY>
bool check(const std::vector<TY>& got, const std::vector<double>& want, const char* what, const Geometry& g,
           int64_t N, int64_t C, bool cl, size_t bytes, const Options& o) {
  const int64_t bad = first_mismatch(got, want);
  if (bad < 0) return true;
  describe(what, g, N, C, cl, bytes, o);
  std::printf("  element %lld of %zu: got %g, want %g\n", static_cast<long long>(bad), got.size(),
              to_double(got[bad]), stored<TY>(want[bad]));
  return false;
}

// Channels of a random case: a few, or a multiple of 8 plus a remainder;
// in the streaming kernel's domain mostly whole vectors.
int64_t draw_channels(bool stream_domain = false) {
  if (stream_domain && draw(0, 3) != 0) return 4 * draw(1, 12);
  return draw(0, 3) == 0 ? draw(1, 7) : draw(1, 3) * 8 + draw(0, 1) * draw(1, 5);
}

// f(c, l, s, k) for every channel c, output position l in [l0, l1) and tap k that reads input position s.
template <typename F>
void for_each_tap(const Geometry& g, int64_t C, int64_t l0, int64_t l1, F&& f) {
  for (int64_t c = 0; c < C; ++c)
    for (int64_t l = l0; l < l1; ++l)
      for (int64_t k = 0; k < g.kernel_size; ++k) {
        const int64_t s = source(g, l, k);
        if (s >= 0) f(c, l, s, k);
      }
}

template <bool CL, typename T, typename TY>
bool forward_case(int nd, bool stream_domain = false) {
  const Geometry g = random_geometry(nd, stream_domain);
  if (g.out_size == 0) return true;
  const int64_t N = draw(1, 2), C = draw_channels(stream_domain);
  const int64_t K = g.kernel_size;
  const Options o = random_options();
  const auto x = random_values<T>(N * C * g.in_size);
  const auto w = random_values<T>(C * K);
  std::vector<TY> y(N * C * g.out_size, from_float<TY>(777.0f));
  std::vector<double> want(y.size(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for_each_tap(g, C, 0, g.out_size, [&](int64_t c, int64_t l, int64_t s, int64_t k) {
      want[at(CL, n, l, c, C, g.out_size)] += to_double(x[at(CL, n, s, c, C, g.in_size)]) * to_double(w[c * K + k]);
    });
  DwPhases p;
  p.count = 1;
  p.g[0] = dw_lift(g);
  run_phases<CL, T, TY>(x.data(), w.data(), y.data(), p, N, C, o.ring, o.narrow, o.budget, o.gather,
                         o.stream);
  ++ran_forward;
  return check(y, want, "forward", g, N, C, CL, sizeof(T), o);
}

template <bool CL, typename T>
bool backward_case(int nd, bool stream_domain = false, bool stride_2 = false) {
  const Geometry g = random_geometry(nd, stream_domain, stride_2);
  if (g.out_size == 0) return true;
  const int64_t N = draw(1, 2), C = draw_channels(stream_domain);
  const int64_t K = g.kernel_size;
  const Options o = random_options();
  const auto dy = random_values<T>(N * C * g.out_size);
  const auto w = random_values<T>(C * K);
  std::vector<T> dx(N * C * g.in_size, from_float<T>(777.0f));
  std::vector<double> want(dx.size(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for_each_tap(g, C, 0, g.out_size, [&](int64_t c, int64_t l, int64_t s, int64_t k) {
      want[at(CL, n, s, c, C, g.in_size)] += to_double(dy[at(CL, n, l, c, C, g.out_size)]) * to_double(w[c * K + k]);
    });
  // Channels-last 3x3 windows at stride 2 by cells, as depthwise_conv.cu runs
  // them (here half the time; else their phases).
  DwCellsPlan cells;
  if (CL && o.stream && plan_dw_cells(dw_lift(g), N, C, sizeof(T), &cells) && draw(0, 1) == 0) {
    run_cells<T>(dy.data(), w.data(), dx.data(), dw_lift(g), cells, N, C);
    ++celled;
    ++ran_backward;
    return check(dx, want, "input gradient by cells", g, N, C, CL, sizeof(T), o);
  }
  const int64_t phases = gradient_phase_count(g);
  for (int64_t i0 = 0; i0 < phases; i0 += kDwMaxPhases) {
    DwPhases p;
    for (int64_t i = i0; i < std::min<int64_t>(phases, i0 + kDwMaxPhases); ++i) {
      GradientPhase ph;
      if (!gradient_phase(g, i, &ph)) {
        describe("no gradient phase", g, N, C, CL, sizeof(T), o);
        return false;
      }
      if (ph.has_positions) p.g[p.count++] = dw_phase(g, ph);
    }
    if (p.count > 0)
      run_phases<CL, T, T>(dy.data(), w.data(), dx.data(), p, N, C, o.ring, o.narrow, o.budget, o.gather, o.stream);
  }
  ++ran_backward;
  return check(dx, want, "input gradient", g, N, C, CL, sizeof(T), o);
}

template <bool CL, int S, int KC, typename T>
void run_filter_tiles(const T* dy, const T* x, typename Acc<T>::type* partials, const DwGeom& g, const DwFilterTile& t,
                      const FilterSlices& f, int64_t C) {
  using A = typename Acc<T>::type;
  constexpr int V = CL ? (sizeof(T) == 8 ? 2 : 4) : 1;
  std::vector<unsigned char> smem(t.smem + 64, 0xcd);
  HostExec<DwFilterState<A, V, KC>> e(static_cast<unsigned>(t.threads));
  blockDim.x = static_cast<unsigned>(t.threads);
  for (int64_t b = 0; b < t.blocks; ++b) dw_filter_block<CL, S, KC, T>(e, smem.data(), dy, x, partials, g, t, f, C, b);
}

template <bool CL, int KC, typename T>
void run_filter_kc(const T* dy, const T* x, typename Acc<T>::type* partials, const DwGeom& g, const DwFilterTile& t,
                   const FilterSlices& f, int64_t C) {
  if (t.ring) run_filter_tiles<CL, 1, KC, T>(dy, x, partials, g, t, f, C);
  else run_filter_tiles<CL, 0, KC, T>(dy, x, partials, g, t, f, C);
}

// Runs every thread of a streamed filter-gradient launch on the host, then
// each thread's share of the block's partial sums; half the time with
// narrower channel runs, fewer column lanes and more slices than planned
// (so runs end short, lanes walk several columns, slices end short).
template <int SY, typename T>
void run_stream_filter(const T* dy, const T* x, std::vector<typename Acc<T>::type>& partials, const DwGeom& g,
                       DwStreamFilterPlan& s, int64_t N, int64_t C) {
  using A = typename Acc<T>::type;
  if (draw(0, 1) == 0) {
    s.nvb = draw(1, s.nvb);
    s.runs = (s.vectors + s.nvb - 1) / s.nvb;
    s.lanes = draw(1, std::min(g.out[2], kDwStreamThreads / s.nvb));
    s.threads = s.nvb * s.lanes;
    s.f = filter_slices(N, g.out[1], draw(1, static_cast<int>(s.f.rows)));
    s.blocks = s.runs * s.f.count;
    s.by_nvb = FastDiv(s.nvb);
    s.by_runs = FastDiv(s.runs);
    s.by_per_image = FastDiv(s.f.per_image);
    partials.assign(s.f.count * kDwStreamK * kDwStreamK * C, A(-999));
  }
  constexpr int P = dw_stream_filter_pitch<T>();
  std::vector<A> sums(static_cast<size_t>(s.threads) * P, A(-555));
  for (int64_t b = 0; b < s.blocks; ++b) {
    for (int32_t tid = 0; tid < s.threads; ++tid)
      dw_stream_filter_thread<SY, T>(dy, x, g, s, C, b, tid, sums.data() + static_cast<size_t>(tid) * P);
    for (int32_t tid = 0; tid < s.threads; ++tid) dw_stream_filter_write<T>(sums.data(), partials.data(), s, C, b, tid);
  }
}

// Runs every block of a staged filter-gradient launch on the host (the plan
// for the call's slices f); half the time with its runs, columns and rows
// narrowed at random. Its slices (a column tile of tile_w columns and a row
// tile of one image each) replace f. False where it does not plan.
template <int SY, typename T>
bool run_staged_filter(const T* dy, const T* x, std::vector<typename Acc<T>::type>& partials, const DwGeom& g,
                       FilterSlices* f, int64_t* tile_w, int64_t N, int64_t C) {
  using A = typename Acc<T>::type;
  DwStagedFilterPlan sf;
  const bool narrow = draw(0, 1) == 0;
  const int32_t per_granule = sizeof(T) == 2 ? 2 : 1;
  if (!plan_dw_staged_filter(g, *f, N, C, sizeof(T), &sf, narrow ? per_granule * draw(1, 3) : kDwStagedMaxRun,
                             narrow ? draw(1, 9) : kDwStagedThreads))
    return false;
  if (narrow) {
    DwStagedPlan& s = sf.s;
    s.rows = draw(1, s.rows);
    s.row_tiles = (g.out[1] + s.rows - 1) / s.rows;
    s.blocks = int64_t{s.runs} * s.col_tiles * s.row_tiles * N;
    s.by_row_tiles = FastDiv(s.row_tiles);
    sf.f.rows = s.rows;
    sf.f.per_image = int64_t{s.col_tiles} * s.row_tiles;
    sf.f.count = N * sf.f.per_image;
  }
  *f = sf.f;
  *tile_w = sf.s.tw;
  partials.assign(f->count * kDwStreamK * kDwStreamK * C, A(-999));
  std::vector<unsigned char> ring(static_cast<size_t>(sf.smem), 0xcd);
  HostExec<DwStagedFilterState<A, dw_vector(sizeof(T), true)>> e(kDwStagedThreads);
  for (int64_t b = 0; b < sf.s.blocks; ++b) dw_staged_filter_block<SY, T>(e, ring.data(), dy, x, partials.data(), g, sf, C, b);
  return true;
}

template <bool CL, typename T>
bool filter_case(int nd, bool stream_domain = false) {
  using A = typename Acc<T>::type;
  const Geometry g = random_geometry(nd, stream_domain);
  if (g.out_size == 0) return true;
  const int64_t N = draw(1, 2), C = draw_channels(stream_domain);
  const int64_t K = g.kernel_size;
  const Options o = random_options();
  const auto x = random_values<T>(N * C * g.in_size);
  const auto dy = random_values<T>(N * C * g.out_size);
  // Slices: the plan's (mirrored in Python), or rows drawn.
  int64_t rows;
  if (draw(0, 1) == 0) {
    const DwFilterPlan plan = depthwise_filter_plan(N, g.nd, g.out, C, K, sizeof(T), sizeof(T) == 8, CL,
                                                    int64_t{1} << 30);
    rows = plan.rows;
    const FilterSlices fs = filter_slices(N, g.out[0], rows);
    if (plan.slices != fs.count ||
        plan.workspace_bytes != std::max<int64_t>(1, static_cast<int64_t>(filter_partials_bytes(fs, C * K, sizeof(T) == 8)))) {
      describe("filter plan disagrees with its slices", g, N, C, CL, sizeof(T), o);
      return false;
    }
  } else {
    rows = draw(0, 1) == 0 ? draw(1, static_cast<int>(g.out[0]) + 1) : g.out[0];
  }
  FilterSlices f = filter_slices(N, g.out[0], rows);
  std::vector<A> partials(f.count * K * C, A(-999));
  const DwGeom dg = dw_lift(g);
  DwFilterTile t;
  DwStreamFilterPlan sp;
  DwStagedFilterPlan staged_plan;
  const bool try_staged = CL && o.stream && !o.gather && draw(0, 1) == 0 &&
                          plan_dw_staged_filter(dg, f, N, C, sizeof(T), &staged_plan);
  if (try_staged && (staged_plan.f.per_image > f.per_image || staged_plan.smem > kDwStagedSmem)) {
    describe("staged filter slices past the workspace or shared memory", g, N, C, CL, sizeof(T), o);
    return false;
  }
  int64_t tile_w = 0;  // a slice's columns where it is a column tile (the staged kernel), else 0: whole rows
  if (try_staged && (dg.stride[1] == 1 ? run_staged_filter<1, T>(dy.data(), x.data(), partials, dg, &f, &tile_w, N, C)
                                       : run_staged_filter<2, T>(dy.data(), x.data(), partials, dg, &f, &tile_w, N, C))) {
    ++staged_filter;
  } else if (CL && o.stream && !o.gather && plan_dw_stream_filter(dg, f, N, C, sizeof(T), &sp)) {
    // The stream's slices: no more an image than the call's.
    if (sp.f.per_image > f.per_image) {
      describe("stream slices past the workspace", g, N, C, CL, sizeof(T), o);
      return false;
    }
    ++streamed_filter;
    if (dg.stride[1] == 1) run_stream_filter<1, T>(dy.data(), x.data(), partials, dg, sp, N, C);
    else run_stream_filter<2, T>(dy.data(), x.data(), partials, dg, sp, N, C);
    f = sp.f;
    partials.resize(f.count * K * C);
  } else if (!o.gather && plan_dw_filter_tile(dg, f, C, CL, sizeof(T), sizeof(A), o.ring, o.narrow, &t, o.budget)) {
    t.vector_io = CL && C % dw_vector(sizeof(T), true) == 0;
    if (draw(0, 1) == 0) {
      // Tiles smaller than planned, in rows and columns: a slice's last tile
      // then ends inside the slice (and its rows may run past it).
      t.tr = draw(1, t.tr);
      t.tw = draw(1, t.tw);
      dw_filter_split(t, t.nv * t.khb * t.chb, t.kc);
      t.smem = dw_filter_tile_bytes(dg, t, sizeof(T), sizeof(A));
      t.by_pw = FastDiv(t.pw);
      t.by_ph = FastDiv(t.ph);
      t.by_tw = FastDiv(t.tw);
      t.by_tr = FastDiv(t.tr);
      t.by_segs = FastDiv(t.segs);
    }
    ++staged;
    ++(t.ring ? ringed : unringed);
    int32_t region_h, region_w;
    dw_slice_extent(dg, f.rows, &region_h, &region_w);
    multi_tile += region_h > t.tr || region_w > t.tw;
    met += t.p > 1;
    segmented += t.segs > 1;
    tap_groups += t.kh_groups * t.ch_groups > 1;
    switch (t.kc) {
      case 3: run_filter_kc<CL, 3>(dy.data(), x.data(), partials.data(), dg, t, f, C); break;
      case 5: run_filter_kc<CL, 5>(dy.data(), x.data(), partials.data(), dg, t, f, C); break;
      case 7: run_filter_kc<CL, 7>(dy.data(), x.data(), partials.data(), dg, t, f, C); break;
      default: run_filter_kc<CL, 8>(dy.data(), x.data(), partials.data(), dg, t, f, C); break;
    }
  } else {
    ++gathered;
    for (int64_t i = 0; i < f.count * K * C; ++i) dw_filter_element<T>(dy.data(), x.data(), partials.data(), dg, f, C, CL, i);
  }
  // Each slice's partial sums against a float64 sum over its rows (and its
  // columns, where slices are column tiles too).
  const int64_t rest = g.out_size / g.out[0];
  const int64_t col_tiles = tile_w > 0 ? (g.out[1] + tile_w - 1) / tile_w : 1;
  std::vector<double> want(partials.size(), 0.0);
  for (int64_t slice = 0; slice < f.count; ++slice) {
    const int64_t n = slice / f.per_image, part = slice % f.per_image;
    const int64_t rt = part / col_tiles, ct = part % col_tiles;
    const int64_t l0 = rt * f.rows * rest, l1 = std::min(g.out[0], (rt + 1) * f.rows) * rest;
    for_each_tap(g, C, l0, l1, [&](int64_t c, int64_t l, int64_t s, int64_t k) {
      if (tile_w > 0 && (l % g.out[1]) / tile_w != ct) return;
      want[(slice * K + k) * C + c] +=
          to_double(dy[at(CL, n, l, c, C, g.out_size)]) * to_double(x[at(CL, n, s, c, C, g.in_size)]);
    });
  }
  ++ran_filter;
  if (!check(partials, want, "filter partial sums", g, N, C, CL, sizeof(T), o)) {
    std::printf("  tile: nv %d kc %d khb %d chb %d p %d tr %d tw %d segs %d q %d ring %d\n", t.nv, t.kc, t.khb, t.chb,
                t.p, t.tr, t.tw, t.segs, t.q, t.ring);
    return false;
  }
  // The second pass: each element's lanes, then the kernel's pairwise tree.
  std::vector<T> dw(C * K, from_float<T>(777.0f));
  std::vector<double> dw_want(C * K, 0.0);
  const int64_t elements = C * K;
  for (int64_t i = 0; i < elements; ++i) {
    A lanes[kDwReduceLanes];
    for (int32_t l = 0; l < kDwReduceLanes; ++l) lanes[l] = dw_reduce_lane(partials.data(), elements, f.count, i, l);
    for (int32_t half = kDwReduceLanes / 2; half > 0; half /= 2)
      for (int32_t l = 0; l < half; ++l) lanes[l] += lanes[l + half];
    const int64_t k = i / C, c = i % C;
    dw[c * K + k] = store_value<T>(lanes[0]);
    for (int64_t s = 0; s < f.count; ++s) dw_want[c * K + k] += want[(s * K + k) * C + c];
  }
  return check(dw, dw_want, "filter gradient", g, N, C, CL, sizeof(T), o);
}

template <bool CL>
void layout_cases(Tally& run, int nd) {
  run(forward_case<CL, float, float>(nd));
  run(forward_case<CL, __nv_bfloat16, __nv_bfloat16>(nd));
  run(forward_case<CL, __half, float>(nd));
  run(backward_case<CL, float>(nd));
  run(backward_case<CL, __half>(nd));
  run(filter_case<CL, float>(nd));
  run(filter_case<CL, __nv_bfloat16>(nd));
  if (draw(0, 2) == 0) {
    run(forward_case<CL, double, double>(nd));
    run(backward_case<CL, double>(nd));
    run(filter_case<CL, double>(nd));
  }
  if (CL && nd == 2) {  // the streaming kernels' domain
    run(filter_case<CL, float>(nd, true));
    run(filter_case<CL, __nv_bfloat16>(nd, true));
    run(filter_case<CL, __half>(nd, true));
    run(filter_case<CL, double>(nd, true));
    run(forward_case<CL, float, float>(nd, true));
    run(forward_case<CL, __nv_bfloat16, __nv_bfloat16>(nd, true));
    run(forward_case<CL, __half, float>(nd, true));
    run(forward_case<CL, double, double>(nd, true));
    run(backward_case<CL, float>(nd, true));
    run(backward_case<CL, __nv_bfloat16>(nd, true));
    run(backward_case<CL, double>(nd, true));
    run(backward_case<CL, float>(nd, true, true));  // the cells' domain
    run(backward_case<CL, __nv_bfloat16>(nd, true, true));
    run(backward_case<CL, __half>(nd, true, true));
    run(backward_case<CL, double>(nd, true, true));
  }
}

// A 2-D 3x3 window over size x size maps at `stride`, padded by one on each
// side (MobileNetV2's depthwise layers), and the one phase of it.
Geometry padded_3x3(int64_t size, int64_t stride) {
  Geometry g;
  g.nd = 2;
  const int64_t pad_hi[kMaxSpatial] = {1, 1, 0};
  for (int d = 0; d < 2; ++d) {
    g.in[d] = size;
    g.kernel[d] = 3;
    g.stride[d] = stride;
    g.pad_lo[d] = 1;
  }
  finish_geometry(g, pad_hi);
  return g;
}
DwPhases one_phase(const Geometry& g) {
  DwPhases p;
  p.count = 1;
  p.g[0] = dw_lift(g);
  return p;
}

// Where depthwise_conv.cu streams MobileNetV2's bfloat16 3x3 layers (batch
// 64, SAME): the forwards whose threads walk enough rows (dw_stream_pays), as
// measured, and never the tiles' remaining cases; the filter gradients at
// stride 2 and on the larger maps at stride 1 (dw_stream_filter_pays); the
// input gradients at stride 2 by cells.
void stream_choices(Tally& run) {
  struct Layer {
    int64_t size, c, stride;
    bool streamed, filter_streamed;
  };
  for (const Layer& l : {Layer{112, 32, 1, true, true}, Layer{112, 96, 2, true, true},
                         Layer{56, 144, 1, true, true}, Layer{56, 144, 2, true, true},
                         Layer{28, 192, 1, false, false}, Layer{28, 192, 2, true, true},
                         Layer{14, 384, 1, false, false}, Layer{14, 576, 2, true, true},
                         Layer{7, 960, 1, false, false}}) {
    const Geometry g = padded_3x3(l.size, l.stride);
    const DwPhases p = one_phase(g);
    // The staged rows take every layer whose plan pays (all but the 7x7 map's 7 rows),
    // its ring within the shared-memory budget.
    DwStagedPlan staged_plan;
    const bool staged_planned = plan_dw_staged(p, 64, l.c, 2, &staged_plan);
    const bool staged_ok = l.size == 7 ? !(staged_planned && dw_staged_pays(p.g[0], staged_plan))
                                       : staged_planned && staged_plan.smem <= kDwStagedSmem &&
                                             dw_staged_pays(p.g[0], staged_plan);
    if (!staged_ok)
      std::printf("FAIL: staged plan for %lldx%lldx%lld stride %lld: planned %d, rows %d, smem %d\n",
                  static_cast<long long>(l.size), static_cast<long long>(l.size), static_cast<long long>(l.c),
                  static_cast<long long>(l.stride), staged_planned, staged_plan.rows, staged_plan.smem);
    run(staged_ok);
    DwStreamPlan s;
    const bool planned = plan_dw_stream(p, 64, l.c, 2, &s);
    const bool streamed = planned && dw_stream_pays(p.g[0], s);
    if (!planned || streamed != l.streamed)
      std::printf("FAIL: stream choice for %lldx%lldx%lld stride %lld: planned %d, streamed %d (rows %d)\n",
                  static_cast<long long>(l.size), static_cast<long long>(l.size), static_cast<long long>(l.c),
                  static_cast<long long>(l.stride), planned, streamed, s.rows);
    run(planned && streamed == l.streamed);
    const DwFilterPlan fp = depthwise_filter_plan(64, 2, g.out, l.c, 9, 2, false, true, int64_t{1} << 30);
    DwStreamFilterPlan sf;
    const bool filter_planned = plan_dw_stream_filter(p.g[0], filter_slices(64, g.out[0], fp.rows), 64, l.c, 2, &sf);
    const bool filter_streamed = filter_planned && dw_stream_filter_pays(p.g[0], sf, true);
    if (!filter_planned || filter_streamed != l.filter_streamed)
      std::printf("FAIL: filter stream choice for %lldx%lldx%lld stride %lld: planned %d, streamed %d (rows %lld)\n",
                  static_cast<long long>(l.size), static_cast<long long>(l.size), static_cast<long long>(l.c),
                  static_cast<long long>(l.stride), filter_planned, filter_streamed,
                  static_cast<long long>(sf.f.rows));
    // The staged filter gradient takes every layer whose rows pay (all but
    // the 7x7 map's at stride 1), within the call's slices and 48 KB.
    DwStagedFilterPlan sg;
    const FilterSlices call = filter_slices(64, g.out[0], fp.rows);
    const bool sg_planned = plan_dw_staged_filter(p.g[0], call, 64, l.c, 2, &sg);
    const bool sg_ok = l.size == 7 && l.stride == 1
                           ? !(sg_planned && dw_staged_filter_pays(p.g[0], sg))
                           : sg_planned && sg.smem <= kDwStagedSmem && sg.f.per_image <= call.per_image &&
                                 dw_staged_filter_pays(p.g[0], sg);
    if (!sg_ok)
      std::printf("FAIL: staged filter plan for %lldx%lldx%lld stride %lld: planned %d, rows %d, smem %d, "
                  "slices an image %lld of %lld\n", static_cast<long long>(l.size), static_cast<long long>(l.size),
                  static_cast<long long>(l.c), static_cast<long long>(l.stride), sg_planned, sg.s.rows, sg.smem,
                  static_cast<long long>(sg.f.per_image), static_cast<long long>(call.per_image));
    run(sg_ok);
    // The stride-2 layers' input gradients run by cells, the unit-stride ones as their one phase.
    DwCellsPlan cells;
    const bool celled = plan_dw_cells(dw_lift(g), 64, l.c, 2, &cells);
    if (celled != (l.stride == 2))
      std::printf("FAIL: cells plan for %lldx%lldx%lld stride %lld: %d\n", static_cast<long long>(l.size),
                  static_cast<long long>(l.size), static_cast<long long>(l.c), static_cast<long long>(l.stride), celled);
    run(celled == (l.stride == 2));
    if (std::getenv("DW_PLANS"))
      std::printf("%lldx%lld s%lld: call rows %lld; stream rows %lld, runs %d of %d vectors, lanes %d, threads %d, "
                  "blocks %lld; staged: run %d, tw %d x %d tiles, rows %d x %d tiles, blocks %lld, smem %d; "
                  "staged forward: run %d, tw %d x %d tiles, rows %d x %d tiles, blocks %lld\n",
                  static_cast<long long>(l.size), static_cast<long long>(l.c), static_cast<long long>(l.stride),
                  static_cast<long long>(fp.rows), static_cast<long long>(sf.f.rows), sf.runs, sf.nvb, sf.lanes,
                  sf.threads, static_cast<long long>(sf.blocks), sg.s.run, sg.s.tw, sg.s.col_tiles, sg.s.rows,
                  sg.s.row_tiles, static_cast<long long>(sg.s.blocks), sg.smem, staged_plan.run, staged_plan.tw,
                  staged_plan.col_tiles, staged_plan.rows, staged_plan.row_tiles,
                  static_cast<long long>(staged_plan.blocks));
    run(filter_planned && filter_streamed == l.filter_streamed);
  }
}

// The staged plans count waves of resident blocks: MobileNetV2's 14x14x576
// layer (bfloat16, batch 64, unit stride) fits in two waves as 512 blocks of
// 18-vector runs over all 14 columns; run widths halved from 32 gave 576 or
// 640 blocks, three waves. One slice an image, as the call plans it there.
void staged_wave_choices(Tally& run) {
  const DwPhases p = one_phase(padded_3x3(14, 1));
  DwStagedPlan s;
  DwStagedFilterPlan f;
  const bool ok = plan_dw_staged(p, 64, 576, 2, &s) &&
                  plan_dw_staged_filter(p.g[0], filter_slices(64, 14, 14), 64, 576, 2, &f);
  for (const DwStagedPlan* q : {&s, &f.s}) {
    const bool two_waves = ok && q->blocks == 512 && q->run == 18 && q->col_tiles == 1 && q->row_tiles == 1;
    if (!two_waves)
      std::printf("FAIL: staged plan at 14x14x576: %lld blocks, runs of %d, %d x %d tiles\n",
                  static_cast<long long>(q->blocks), q->run, q->col_tiles, q->row_tiles);
    run(two_waves);
  }
}

// Sector pricing (kDwSectorCost): ConvNeXt-T's first 7x7 layer (56x56x96,
// bfloat16) runs whole 32-byte sectors of channels a pixel; the flat factor
// picked 8-byte runs, a quarter of each sector fetched.
void sector_choices(Tally& run) {
  DwGeom d;
  d.nd = 2;
  for (int j = 1; j < 3; ++j) {
    d.in[j] = d.out[j] = d.yk[j] = 56;
    d.kernel[j] = d.wk[j] = 7;
    d.pad[j] = 3;
  }
  DwTile priced, flat;
  const bool ok = plan_dw_tile(d, 96, true, 2, 4, 2, true, true, 32, &priced, kDwSmemBudget, true) &&
                  plan_dw_tile(d, 96, true, 2, 4, 2, true, true, 32, &flat, kDwSmemBudget, false);
  const int32_t priced_bytes = priced.cbp * 2, flat_bytes = flat.cbp * 2;
  if (!ok || priced_bytes < 32 || flat_bytes >= 32)
    std::printf("FAIL: sector pricing at 56x56x96 bf16: runs of %d bytes priced, %d flat\n", priced_bytes, flat_bytes);
  run(ok && priced_bytes >= 32 && flat_bytes < 32);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 100;
  Tally run;
  stream_choices(run);
  staged_wave_choices(run);
  sector_choices(run);
  for (int i = 0; i < rounds; ++i) {
    kDwOffsets32 = i % 2 ? 0x7fffffff : 0;  // every other round the staging's 64-bit offsets
    for (int nd = 1; nd <= 3; ++nd) {
      layout_cases<true>(run, nd);
      layout_cases<false>(run, nd);
    }
  }
  std::printf("%d forward, %d input-gradient, %d filter-gradient cases; %d tiled runs, %d per-element runs, "
              "%d streamed runs (%d with staged rows), %d streamed filter gradients (%d with staged rows)\n", ran_forward,
              ran_backward, ran_filter, staged, gathered, streamed + streamed_staged, streamed_staged,
              streamed_filter + staged_filter, staged_filter);
  std::printf("forward tiles: %d with 32-bit block indices; %d stride-2 input gradients by cells\n", decoded32,
              celled);
  std::printf("tiles: %d with rings, %d without; forward: %d in stages; filter: %d several tiles a block, %d "
              "threads meeting, %d segmented rows, %d tap groups\n",
              ringed, unringed, multi_stage, multi_tile, met, segmented, tap_groups);
  return run.report();
}
