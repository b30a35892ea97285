// Shared pieces of the host tests' references (tests/host/*.cc): random
// draws, the input offset a window reads, and element conversions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "common/geometry.h"

namespace im2col {

inline std::mt19937 rng(20261123);
inline int draw(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

// A geometry's window and extents drawn per dimension: kernel 1-4, dilation
// 1-3, stride 1-3, padding -1..3 on each side (the high ones into pad_hi, for
// finish_geometry), extents 1..in_max. Callers adjust what their kernel
// needs, then call finish_geometry.
inline Geometry draw_geometry(int nd, int in_max, int64_t* pad_hi) {
  Geometry g;
  g.nd = nd;
  for (int d = 0; d < nd; ++d) {
    g.kernel[d] = draw(1, 4);
    g.rhs_dilation[d] = draw(1, 3);
    g.stride[d] = draw(1, 3);
    g.pad_lo[d] = draw(-1, 3);
    pad_hi[d] = draw(-1, 3);
    g.in[d] = draw(1, in_max);
  }
  return g;
}

// A depthwise test's geometry of nd dimensions: `window(d, last, g)` draws
// dimension d's kernel, dilation and stride into g; then its extent
// 1..window + slack (the last one wide_lo..wide_hi in a quarter of the
// geometries) and paddings -1..min(window, 6). Redrawn (up to 20 times)
// until it has outputs.
template <typename Window>
Geometry draw_depthwise_geometry(int nd, int slack, int wide_lo, int wide_hi, Window window) {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  for (int attempt = 0;; ++attempt) {
    Geometry g;
    g.nd = nd;
    const bool wide = draw(0, 3) == 0;
    for (int d = 0; d < nd; ++d) {
      const bool last = d == nd - 1;
      window(d, last, g);
      const int64_t extent = (g.kernel[d] - 1) * g.rhs_dilation[d] + 1;
      g.in[d] = draw(1, static_cast<int>(extent + slack));
      if (last && wide) g.in[d] = draw(wide_lo, wide_hi);
      g.pad_lo[d] = draw(-1, static_cast<int>(std::min<int64_t>(extent, 6)));
      pad_hi[d] = draw(-1, static_cast<int>(std::min<int64_t>(extent, 6)));
    }
    finish_geometry(g, pad_hi);
    if (g.out_size > 0 || attempt > 20) return g;
  }
}

// A failing case's geometry, a line a dimension.
inline void print_dimensions(const Geometry& g) {
  for (int d = 0; d < g.nd; ++d)
    std::printf("  d%d: in %lld out %lld kernel %lld stride %lld dilation %lld pad_lo %lld\n", d,
                static_cast<long long>(g.in[d]), static_cast<long long>(g.out[d]),
                static_cast<long long>(g.kernel[d]), static_cast<long long>(g.stride[d]),
                static_cast<long long>(g.rhs_dilation[d]), static_cast<long long>(g.pad_lo[d]));
}

// Flat input offset read by output position l and tap k, -1 for padding or
// a hole of the lhs dilation.
inline int64_t source(const Geometry& g, int64_t l, int64_t k) {
  int64_t o[kMaxSpatial], kk[kMaxSpatial];
  for (int d = g.nd - 1; d >= 0; --d) {
    o[d] = l % g.out[d];
    l /= g.out[d];
    kk[d] = k % g.kernel[d];
    k /= g.kernel[d];
  }
  int64_t flat = 0;
  for (int d = 0; d < g.nd; ++d) {
    const int64_t p = o[d] * g.stride[d] + kk[d] * g.rhs_dilation[d] - g.pad_lo[d];
    if (p < 0 || p % g.lhs_dilation[d] != 0 || p / g.lhs_dilation[d] >= g.in[d]) return -1;
    flat = flat * g.in[d] + p / g.lhs_dilation[d];
  }
  return flat;
}

template <typename T>
T from_float(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return static_cast<T>(v);
}

template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return static_cast<double>(v);
}

// A float64 reference value as the kernels store it: rounded to float, then
// to T.
template <typename T>
double stored(double v) {
  return to_double(from_float<T>(static_cast<float>(v)));
}

// The first element of got that differs from want as stored; -1 when none does.
template <typename T>
int64_t first_mismatch(const std::vector<T>& got, const std::vector<double>& want) {
  for (size_t i = 0; i < got.size(); ++i)
    if (to_double(got[i]) != stored<T>(want[i])) return static_cast<int64_t>(i);
  return -1;
}

// A small integer (-4..4), so that the sums the tests form are exact.
template <typename T>
T small_value() {
  return from_float<T>(static_cast<float>(draw(-4, 4)));
}

// Positions [l0, l0 + lc) of the columns: all, or a chunk drawn.
inline void draw_chunk(const Geometry& g, ColumnsLayout* lay) {
  lay->l0 = 0;
  lay->lc = g.out_size;
  if (draw(0, 1) == 0) {
    lay->l0 = draw(0, static_cast<int>(g.out_size) - 1);
    lay->lc = draw(1, static_cast<int>(g.out_size - lay->l0));
  }
}

// The channels-first fold in float64: x (as given, or zero without
// accumulate) plus the scatter of columns (n, c, k, l) at
// n * image_stride + (c * K + k) * row_stride + l - l0 for images
// [n0, n0 + nc); the other images as x holds them.
template <typename TC, typename TX>
std::vector<double> fold_cf_reference(const Geometry& g, const ColumnsLayout& lay, const std::vector<TC>& cols,
                                      const std::vector<TX>& x, int64_t C, int64_t n0, int64_t nc,
                                      bool accumulate) {
  const int64_t K = g.kernel_size;
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = to_double(x[i]);
  for (int64_t n = 0; n < nc; ++n)
    for (int64_t c = 0; c < C; ++c) {
      double* plane = want.data() + ((n0 + n) * C + c) * g.in_size;
      if (!accumulate)
        for (int64_t i = 0; i < g.in_size; ++i) plane[i] = 0;
      for (int64_t k = 0; k < K; ++k)
        for (int64_t l = lay.l0; l < lay.l0 + lay.lc; ++l) {
          const int64_t s = source(g, l, k);
          if (s >= 0) plane[s] += to_double(cols[n * lay.image_stride + (c * K + k) * lay.row_stride + l - lay.l0]);
        }
    }
  return want;
}

// Whether the rows a thread's vector of V positions wrote from l (dst, rows
// row_vectors 16-byte vectors apart, filled with `unwritten` bytes before)
// hold, in row k < K, what tap k reads for those positions (x, 0 for
// padding), and nothing elsewhere: the channels-first vector unfolds'
// tap copies (unfold_cf_vectors.cuh, unfold_cf_strided.cuh).
template <typename T, typename Vector>
bool tap_rows_match(const std::vector<Vector>& dst, int64_t row_vectors, const Geometry& g, int64_t l, const T* x,
                    unsigned char unwritten) {
  constexpr int V = sizeof(Vector) / sizeof(T);
  bool ok = true;
  for (int64_t r = 0; r < static_cast<int64_t>(dst.size()); ++r) {
    const T* got = reinterpret_cast<const T*>(&dst[r]);
    for (int e = 0; e < V; ++e) {
      T want;
      if (r % row_vectors == 0 && r / row_vectors < g.kernel_size) {
        const int64_t s = source(g, l + e, r / row_vectors);
        want = s >= 0 ? x[s] : T(0);
      } else {
        std::memset(&want, unwritten, sizeof(T));
      }
      ok = ok && got[e] == want;
    }
  }
  return ok;
}

// Widens the high padding of the last dimension until the output lines are
// whole runs of V positions (at most `tries` steps); false where they never
// became so.
inline bool grow_to_vector_lines(Geometry& g, int64_t* pad_hi, int64_t V, int tries) {
  const int last = g.nd - 1;
  finish_geometry(g, pad_hi);
  for (int grow = 0; grow < tries && (g.out[last] <= 0 || g.out[last] % V != 0); ++grow) {
    ++pad_hi[last];
    finish_geometry(g, pad_hi);
  }
  return g.out_size > 0 && g.out[last] % V == 0;
}

// A channels-first vector unfold's tap copy, copy(origin, dst), run for 10
// vectors of V positions (the first, the last and 8 drawn) into rows
// row_vectors apart, each checked by tap_rows_match; `what` names the
// kernel in a failure's line.
template <int ND, typename T, typename Copy>
bool tap_copies_match(const Geometry& g, const T* x, int64_t row_vectors, unsigned char unwritten, const char* what,
                      Copy copy) {
  constexpr int V = 16 / sizeof(T);
  const int64_t vectors = g.out_size / V;
  for (int i = 0; i < 10; ++i) {
    const int64_t l = V * (i == 0 ? 0 : i == 1 ? vectors - 1 : draw(0, static_cast<int>(vectors - 1)));
    int32_t o[kMaxSpatial], origin[kMaxSpatial];
    unravel<ND>(l, g.out, o);
    window_origin<ND>(g, o, origin);
    std::vector<uint4> dst(g.kernel_size * row_vectors + 1);
    std::memset(dst.data(), unwritten, dst.size() * sizeof(uint4));
    copy(origin, dst.data());
    if (!tap_rows_match(dst, row_vectors, g, l, x, unwritten)) {
      const int last = ND - 1;
      std::printf("FAIL: %s, %zu-byte, nd %d, kernel (%lld %lld %lld), in (%lld %lld %lld), pad_lo %lld, "
                  "dilation %lld, l %lld\n",
                  what, sizeof(T), ND, static_cast<long long>(g.kernel[0]), static_cast<long long>(g.kernel[1]),
                  static_cast<long long>(g.kernel[2]), static_cast<long long>(g.in[0]),
                  static_cast<long long>(g.in[1]), static_cast<long long>(g.in[2]),
                  static_cast<long long>(g.pad_lo[last]), static_cast<long long>(g.rhs_dilation[last]),
                  static_cast<long long>(l));
      return false;
    }
  }
  return true;
}

// Counts the cases' outcomes and prints the summary line that
// tests/test_kernels_on_host.py reads; report() is main's exit status.
struct Tally {
  int passed = 0, failed = 0;
  void operator()(bool ok) { ok ? ++passed : ++failed; }
  int report() const {
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
  }
};

}  // namespace im2col
