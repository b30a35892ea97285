// The generic unfold and fold (lib/columns/columns_generic.cuh) compiled as
// host code and run thread by thread (they use no shared memory and no
// barrier), over random 1-D to 3-D geometries (padding, dilation and stride
// drawn), chunks of positions, images and channel groups:
// - unfold of 1- and 16-byte elements, channels-first (runs of 8 and 1
//   positions, vector stores on and off) and channels-last (odd channel
//   counts, groups), against the index map of host_reference.h, bit for bit,
//   with nothing written outside the chunk's columns;
// - fold of every generic sum type (integers of each width with values over
//   their whole range, so sums wrap; bool; both float8 formats; complex64
//   and complex128) in both layouts, with and without accumulation into x,
//   against a scatter computed apart: integers sign-extended and summed in
//   uint64, bools by any, float8 and complex (small integers: exact sums) in
//   double.
// Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

#include "host_cuda.h"
#include "columns/columns_generic.cuh"
#include "host_grid.h"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

constexpr unsigned char kUnwritten = 0xa5;


// A random geometry with at least one output position, or false.
bool draw_fitting(int nd, Geometry* g) {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  *g = draw_geometry(nd, nd == 1 ? 12 : nd == 2 ? 7 : 5, pad_hi);
  if (draw(0, 3) == 0) g->lhs_dilation[draw(0, nd - 1)] = draw(2, 3);  // the conv's transposed windows
  finish_geometry(*g, pad_hi);
  return g->out_size > 0;
}

template <typename U>
U random_element() {
  U v;
  auto* bytes = reinterpret_cast<unsigned char*>(&v);
  for (size_t i = 0; i < sizeof(U); ++i) bytes[i] = static_cast<unsigned char>(draw(0, 255));
  return v;
}

template <typename U>
bool same_bytes(const U& a, const U& b) {
  return std::memcmp(&a, &b, sizeof(U)) == 0;
}

template <typename U>
bool is_zero(const U& a) {
  U z;
  std::memset(&z, 0, sizeof(U));
  return same_bytes(a, z);
}

// ---------------------------------------------------------------- unfold

template <int ND, typename U>
bool unfold_cf_case() {
  Geometry g;
  if (!draw_fitting(ND, &g)) return true;
  constexpr int V = generic_unfold_run<U>();
  const int64_t C = draw(1, 3), N = draw(1, 3), n0 = draw(0, static_cast<int>(N) - 1);
  const int64_t nc = draw(1, static_cast<int>(N - n0)), K = g.kernel_size;
  ColumnsLayout lay;
  draw_chunk(g, &lay);
  lay.row_stride = lay.lc + (draw(0, 2) == 0 ? draw(1, 9) : 0);  // a gap between rows at times
  lay.image_stride = C * K * lay.row_stride;
  std::vector<U> x(N * C * g.in_size);
  for (auto& v : x) v = random_element<U>();
  std::vector<Pack<U, V>> storage((nc * lay.image_stride + V - 1) / V + 1);
  U* cols = reinterpret_cast<U*>(storage.data());
  std::memset(cols, kUnwritten, storage.size() * sizeof(Pack<U, V>));
  const int64_t rows = nc * C, runs = (lay.lc + V - 1) / V;
  const bool vec = lay.row_stride % V == 0 && lay.image_stride % V == 0;
  run_threads(rows * runs, [&] {
    unfold_cf_generic_kernel<ND, U, V>(x.data(), cols, g, C, n0, lay, rows, runs, vec);
  });
  for (int64_t n = 0; n < nc; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t j = 0; j < lay.row_stride; ++j) {
          const U got = cols[n * lay.image_stride + (c * K + k) * lay.row_stride + j];
          U want;
          if (j >= lay.lc) {
            std::memset(&want, kUnwritten, sizeof(U));
          } else {
            const int64_t s = source(g, lay.l0 + j, k);
            if (s >= 0) want = x[((n0 + n) * C + c) * g.in_size + s];
            else std::memset(&want, 0, sizeof(U));
          }
          if (!same_bytes(got, want)) {
            std::printf("FAIL: unfold cf, %zu-byte, nd %d, n %lld c %lld k %lld position %lld\n", sizeof(U), ND,
                        static_cast<long long>(n), static_cast<long long>(c), static_cast<long long>(k),
                        static_cast<long long>(j));
            return false;
          }
        }
  return true;
}

template <int ND, typename U>
bool unfold_cl_case() {
  Geometry g;
  if (!draw_fitting(ND, &g)) return true;
  const int64_t G = draw(1, 3), Cg = 2 * draw(0, 3) + 1, C = G * Cg;  // odd groups, as launch_unfold sends here
  const int64_t N = draw(1, 3), n0 = draw(0, static_cast<int>(N) - 1), nc = draw(1, static_cast<int>(N - n0));
  const int64_t K = g.kernel_size;
  ColumnsLayout lay;
  draw_chunk(g, &lay);
  lay.groups = G;
  std::vector<U> x(N * g.in_size * C);
  for (auto& v : x) v = random_element<U>();
  std::vector<U> cols(nc * lay.lc * K * C + 1);
  std::memset(cols.data(), kUnwritten, cols.size() * sizeof(U));
  const int64_t items = nc * lay.lc * G * K;
  run_threads(items, [&] { unfold_cl_generic_kernel<ND, U>(x.data(), cols.data(), g, C, n0, lay, items); });
  for (int64_t i = 0; i < static_cast<int64_t>(cols.size()); ++i) {
    U want;
    if (i == static_cast<int64_t>(cols.size()) - 1) {
      std::memset(&want, kUnwritten, sizeof(U));
    } else {
      const int64_t row = i / (K * C), n = row / lay.lc, l = row % lay.lc, e = i % (K * C);
      const int64_t gi = e / (K * Cg), k = e / Cg % K, j = e % Cg;
      const int64_t s = source(g, lay.l0 + l, k);
      if (s >= 0) want = x[((n0 + n) * g.in_size + s) * C + gi * Cg + j];
      else std::memset(&want, 0, sizeof(U));
    }
    if (!same_bytes(cols[i], want)) {
      std::printf("FAIL: unfold cl, %zu-byte, nd %d, element %lld of %zu\n", sizeof(U), ND,
                  static_cast<long long>(i), cols.size());
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------- fold

// The reference's arithmetic for each sum type, apart from the kernel's:
// R the reference accumulator, of(e) an element as R, back(r) R as an
// element, value() a random element.
template <typename S>
struct Ref;

template <typename U>
struct Ref<IntegerSum<U>> {
  using R = uint64_t;
  static R of(U v) { return static_cast<R>(static_cast<int64_t>(static_cast<std::make_signed_t<U>>(v))); }
  static U back(R r) { return static_cast<U>(r); }
  static U value() { return random_element<U>(); }  // the whole range: sums wrap
};

template <>
struct Ref<BoolAny> {
  using R = int;  // 0 or 1; summed by ref_add as "or"
  static R of(uint8_t v) { return v != 0; }
  static uint8_t back(R r) { return r != 0 ? 1 : 0; }
  static uint8_t value() { return draw(0, 3) == 0 ? 1 : 0; }
};

template <typename F>
struct Ref<Float8Sum<F>> {
  using R = double;
  static R of(uint8_t v) { return float8_to_float<F>(v); }
  static uint8_t back(R r) { return float_to_float8<F>(static_cast<float>(r)); }
  static uint8_t value() { return float_to_float8<F>(static_cast<float>(draw(-6, 6))); }  // exact
};

template <typename F>
struct Ref<ComplexSum<F>> {
  using R = std::complex<double>;
  static R of(ComplexOf<F> v) { return R(v.re, v.im); }
  static ComplexOf<F> back(R r) { return {static_cast<F>(r.real()), static_cast<F>(r.imag())}; }
  static ComplexOf<F> value() { return {static_cast<F>(draw(-1000, 1000)), static_cast<F>(draw(-1000, 1000))}; }
};

template <typename S, typename R>
void ref_add(R& a, R b) {
  if constexpr (std::is_same_v<S, BoolAny>) a = a || b; else a += b;
}

// Checks x after a fold against the reference scatter of the chunk's
// columns: entry (n, c, k, l) of the chunk lands on x's element at
// index(n, c, s), s = source(l, k).
template <typename S, typename Index, typename Entry>
bool fold_matches(const std::vector<typename S::Storage>& before, const std::vector<typename S::Storage>& got,
                  const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t n0, int64_t nc, bool accumulate,
                  Index index, Entry entry, const char* what) {
  using Rf = Ref<S>;
  std::vector<typename Rf::R> want(before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    const int64_t n = static_cast<int64_t>(i) / (C * g.in_size);
    const bool in_chunk = n >= n0 && n < n0 + nc;
    want[i] = in_chunk && !accumulate ? typename Rf::R{} : Rf::of(before[i]);
  }
  for (int64_t n = 0; n < nc; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < g.kernel_size; ++k)
        for (int64_t l = lay.l0; l < lay.l0 + lay.lc; ++l) {
          const int64_t s = source(g, l, k);
          if (s >= 0) ref_add<S>(want[index(n0 + n, c, s)], Rf::of(entry(n, c, k, l)));
        }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!same_bytes(got[i], Rf::back(want[i]))) {
      std::printf("FAIL: fold %s, %zu-byte storage, nd %d, element %zu\n", what, sizeof(got[i]), g.nd, i);
      return false;
    }
  }
  return true;
}

template <int ND, typename S>
bool fold_cf_case() {
  using E = typename S::Storage;
  Geometry g;
  if (!draw_fitting(ND, &g)) return true;
  constexpr int V = generic_fold_run<E>();
  const int64_t C = draw(1, 3), N = draw(1, 3), n0 = draw(0, static_cast<int>(N) - 1);
  const int64_t nc = draw(1, static_cast<int>(N - n0)), K = g.kernel_size;
  ColumnsLayout lay;
  draw_chunk(g, &lay);
  lay.row_stride = lay.lc + (draw(0, 2) == 0 ? draw(1, 5) : 0);
  lay.image_stride = C * K * lay.row_stride;
  const bool accumulate = draw(0, 1) == 1;
  std::vector<E> cols(nc * lay.image_stride), x(N * C * g.in_size);
  for (auto& v : cols) v = Ref<S>::value();
  for (auto& v : x) v = Ref<S>::value();
  const std::vector<E> before = x;
  const int64_t width = g.in[ND - 1], lines = nc * C * (g.in_size / width), runs = (width + V - 1) / V;
  const bool vec = width % V == 0;
  run_threads(lines * runs, [&] {
    fold_cf_generic_kernel<ND, S, V>(cols.data(), x.data(), g, C, n0, lay, lines, runs, accumulate, vec);
  });
  return fold_matches<S>(
      before, x, g, lay, C, n0, nc, accumulate, [&](int64_t n, int64_t c, int64_t s) { return (n * C + c) * g.in_size + s; },
      [&](int64_t n, int64_t c, int64_t k, int64_t l) {
        return cols[n * lay.image_stride + (c * K + k) * lay.row_stride + l - lay.l0];
      },
      "cf");
}

template <int ND, typename S, int V>
bool fold_cl_case() {
  using E = typename S::Storage;
  Geometry g;
  if (!draw_fitting(ND, &g)) return true;
  const int64_t G = draw(1, 2), Cg = V * draw(1, 3), C = G * Cg;
  const int64_t N = draw(1, 3), n0 = draw(0, static_cast<int>(N) - 1), nc = draw(1, static_cast<int>(N - n0));
  const int64_t K = g.kernel_size;
  ColumnsLayout lay;
  draw_chunk(g, &lay);
  lay.groups = G;
  const bool accumulate = draw(0, 1) == 1;
  std::vector<Pack<E, V>> cols_storage(nc * lay.lc * K * C / V), x_storage(N * g.in_size * C / V);
  E* cols = reinterpret_cast<E*>(cols_storage.data());
  std::vector<E> x(N * g.in_size * C);
  for (int64_t i = 0; i < nc * lay.lc * K * C; ++i) cols[i] = Ref<S>::value();
  for (auto& v : x) v = Ref<S>::value();
  const std::vector<E> before = x;
  E* xs = reinterpret_cast<E*>(x_storage.data());
  std::memcpy(xs, x.data(), x.size() * sizeof(E));
  const int64_t rows = nc * g.in_size;
  run_threads(rows * (C / V), [&] {
    fold_cl_generic_kernel<ND, S, V>(cols, xs, g, C, n0, lay, rows, C / V, accumulate);
  });
  std::memcpy(x.data(), xs, x.size() * sizeof(E));
  // x (N, *in, C): element (n, c, s) at (n * in_size + s) * C + c, checked
  // through a channels-first view of it.
  std::vector<E> before_cf(x.size()), got_cf(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < g.in_size; ++s)
      for (int64_t c = 0; c < C; ++c) {
        before_cf[(n * C + c) * g.in_size + s] = before[(n * g.in_size + s) * C + c];
        got_cf[(n * C + c) * g.in_size + s] = x[(n * g.in_size + s) * C + c];
      }
  return fold_matches<S>(
      before_cf, got_cf, g, lay, C, n0, nc, accumulate,
      [&](int64_t n, int64_t c, int64_t s) { return (n * C + c) * g.in_size + s; },
      [&](int64_t n, int64_t c, int64_t k, int64_t l) {
        const int64_t gi = c / Cg, j = c % Cg;
        return cols[(n * lay.lc + l - lay.l0) * C * K + (gi * K + k) * Cg + j];
      },
      "cl");
}

template <typename S>
void fold_cases(Tally& run) {
  constexpr int V = static_cast<int>(16 / sizeof(typename S::Storage));
  run(fold_cf_case<1, S>());
  run(fold_cf_case<2, S>());
  run(fold_cf_case<3, S>());
  run(fold_cl_case<1, S, 1>());
  run(fold_cl_case<2, S, V>());
  run(fold_cl_case<3, S, 1>());
  run(fold_cl_case<2, S, 1>());
  run(fold_cl_case<3, S, V>());
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 60; ++i) {
    run(unfold_cf_case<1, uint8_t>());
    run(unfold_cf_case<2, uint8_t>());
    run(unfold_cf_case<3, uint8_t>());
    run(unfold_cf_case<1, Bytes16>());
    run(unfold_cf_case<2, Bytes16>());
    run(unfold_cf_case<3, Bytes16>());
    run(unfold_cl_case<1, uint8_t>());
    run(unfold_cl_case<2, uint8_t>());
    run(unfold_cl_case<3, uint8_t>());
    fold_cases<IntegerSum<uint8_t>>(run);
    fold_cases<IntegerSum<uint16_t>>(run);
    fold_cases<IntegerSum<uint32_t>>(run);
    fold_cases<IntegerSum<uint64_t>>(run);
    fold_cases<BoolAny>(run);
    fold_cases<Float8Sum<Float8E4M3FN>>(run);
    fold_cases<Float8Sum<Float8E5M2>>(run);
    fold_cases<ComplexSum<float>>(run);
    fold_cases<ComplexSum<double>>(run);
  }
  return run.report();
}
