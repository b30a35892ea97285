// The channels-first tiled unfold's write phase (lib/cuda/unfold_write.cuh)
// compiled as host code, an element at a time (write_elements, 2-, 4- and
// 8-byte elements; 4-byte ones also as streaming stores) and in pairs
// (write_pairs, 2-byte): over random 1-D, 2-D and 3-D geometries (for
// pairs, ones that unfold_pairs_fit accepts: stride 1 along the last
// dimension, even widths, even chunks and row strides),
// planned by plan_tile as the unfold plans them, each block's tile is filled
// element-wise (fill_channels_first) or, for half the geometries without lhs
// dilation, a vector at a time (fill_tile_by_vectors, its lines' lead in
// the taps; in 1-D fill_tile_1d_vectors, a lead a line), for pairs its shifted copy written
// (shift_tile_copy), and its columns written, every phase by every thread
// of the block. The columns must be the reference unfold's (the input at
// source(g, l, k), 0 for padding), and entries outside the chunk's rows
// must keep their marker.
// Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_cuda.h"
#include "columns/unfold_write.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

int pair_cases[6] = {};     // blocks written by each of write_pairs' six cases
int element_cases[4] = {};  // and by each of write_elements' four
int vector_cases = 0;  // cases whose tiles were filled a vector at a time
int vector_1d_cases = 0;  // 1-D ones among them

int pairs_case(int32_t pairs) {
  return pairs > 4 * kThreads ? 0 : pairs > 2 * kThreads ? 1 : pairs >= kThreads ? 2 : pairs > 128 ? 3 : pairs > 64 ? 4 : 5;
}

int elements_case(int32_t positions) {
  return positions > 4 * kThreads ? 0 : positions >= kThreads ? 1 : positions > 64 ? 2 : 3;
}

// STREAM: write_elements with streaming stores (store_streaming's byte
// offsets), as the unfold primitive's 2-D 4-byte columns are written.
template <int ND, typename U, bool STREAM = false>
bool one_case(bool pairs) {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(ND, ND == 1 ? 400 : ND == 2 ? 72 : 20, pad_hi);
  const int last = ND - 1;
  if (pairs) {
    g.stride[last] = 1;
    if ((g.kernel[last] - 1) * g.rhs_dilation[last] % 2 != 0) g.kernel[last] = g.kernel[last] == 4 ? 3 : g.kernel[last] + 1;
  }
  if (draw(0, 3) == 0) g.lhs_dilation[0] = draw(2, 3);  // holes in the tile (input gradients)
  if (draw(0, 5) == 0) {  // output rows of more than 2048 positions: bands of one row, over 1024 pairs
    g.in[0] = draw(1, 3);
    g.in[last] = draw(2100, 4200);
  }
  // Half the plain geometries fill their tiles a vector of E elements at a
  // time (fill_tile_by_vectors: lines start t.lead columns early, which the
  // taps include): input lines of whole vectors. In 1-D (16-byte vectors,
  // fill_tile_1d_vectors) lines of any length, each from its own lead.
  int32_t E = 0;
  if (g.lhs_dilation[0] == 1 && draw(0, 1) == 0) {
    E = ND == 1 ? 16 / static_cast<int>(sizeof(U))
                : (4 << draw(sizeof(U) == 2 ? 0 : sizeof(U) == 4 ? 1 : 2, 2)) / static_cast<int>(sizeof(U));
    if (ND > 1) g.in[last] = (g.in[last] + E - 1) / E * E;
  }
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  if (pairs && g.out[last] % 2 != 0) {
    pad_hi[last] += 1;  // one more output column
    finish_geometry(g, pad_hi);
  }
  if (g.out_size <= 0 || (pairs && g.out[last] % 2 != 0)) return true;
  const int64_t C = draw(1, 20), nc = draw(1, 2), K = g.kernel_size;
  ColumnsLayout lay;
  lay.l0 = 0;
  lay.lc = g.out_size;
  if (pairs && draw(0, 1) == 0) {  // an even chunk from the middle
    lay.l0 = 2 * draw(0, static_cast<int>(g.out_size / 2) - 1);
    lay.lc = 2 * draw(1, static_cast<int>((g.out_size - lay.l0) / 2));
  } else if (!pairs && draw(0, 1) == 0) {  // any chunk
    lay.l0 = draw(0, static_cast<int>(g.out_size) - 1);
    lay.lc = draw(1, static_cast<int>(g.out_size - lay.l0));
  }
  lay.row_stride = lay.lc + (pairs ? 2 : 1) * draw(0, 1);
  lay.image_stride = C * K * lay.row_stride;
  // x starts at a random element of its buffer (1-D leads vary with it).
  std::vector<U> x_buffer(nc * C * g.in_size + 16 / sizeof(U));
  U* x = x_buffer.data() + draw(0, 16 / static_cast<int>(sizeof(U)) - 1);
  for (int64_t i = 0; i < nc * C * g.in_size; ++i) x[i] = static_cast<U>(i % 4000 + 1);
  const U marker = static_cast<U>(0xfdfd);
  std::vector<U> cols(nc * lay.image_stride, marker);
  if (pairs && !unfold_pairs_fit(g, lay, cols.data())) {
    std::printf("FAIL: unfold_pairs_fit refused a geometry drawn to fit\n");
    return false;
  }
  TilePlan t;
  if (!plan_tile(g, lay, C, false, (pairs ? 2 : 1) * sizeof(U), &t, 0, 0, nc, E)) return true;
  if (E > 0) ++vector_cases;
  if (E > 0 && ND == 1) ++vector_1d_cases;
  t.pairs = pairs ? 1 : 0;
  // The block's shared memory past the taps table: the tile, then for pairs its shifted copy.
  std::vector<U> tile(2 * static_cast<size_t>(t.channels) * t.plane);
  std::vector<int32_t> taps(K);
  blockDim.x = kThreads;
  for (int64_t block = 0; block < tile_blocks(t, nc); ++block) {
    blockIdx.x = static_cast<unsigned>(block);
    const TileBlock b = tile_block(t, C, lay);
    for (int32_t kk = 0; kk < K; ++kk) {
      const int32_t tap = t.lead + tap_offset<ND>(g, t, kk);
      taps[kk] = pairs ? pair_tap_offset(tap, t.channels * t.plane) : tap * static_cast<int32_t>(sizeof(U));
    }
    const U* x_block = x + (b.n * C + b.c0) * g.in_size;
    const uint32_t origin = line_origin(x_block, b.row0, g);
    U* image = cols.data() + b.n * lay.image_stride + b.c0 * K * lay.row_stride;
    if (pairs) ++pair_cases[pairs_case((b.p_end - b.p_begin) / 2)];
    else ++element_cases[elements_case(b.p_end - b.p_begin)];
    std::fill(tile.begin(), tile.end(), marker);
    for (unsigned th = 0; th < kThreads; ++th) {
      threadIdx.x = th;
      if (t.vector == 0) {
        fill_channels_first<ND>(tile.data(), x_block, g, t, b);
      } else if constexpr (ND == 1) {
        fill_tile_1d_vectors(tile.data(), x_block, b.channels, b.row0, g, t, origin);
      } else {
        fill_tile_by_vectors<ND>(tile.data(), x_block, b.channels, b.row0, g, t);
      }
    }
    if constexpr (sizeof(U) == 2) {
      if (pairs) {
        for (unsigned th = 0; th < kThreads; ++th) {
          threadIdx.x = th;
          shift_tile_copy(tile.data(), b.channels * t.plane, t.channels * t.plane);
        }
        for (unsigned th = 0; th < kThreads; ++th) {
          threadIdx.x = th;
          write_pairs<ND>(tile.data(), taps.data(), image, g, t, lay, b);
        }
        continue;
      }
    }
    for (unsigned th = 0; th < kThreads; ++th) {
      threadIdx.x = th;
      write_elements<ND, U, STREAM>(tile.data(), taps.data(), image, g, t, lay, b, origin);
    }
  }
  for (int64_t n = 0; n < nc; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t e = 0; e < lay.row_stride; ++e) {
          const size_t at = n * lay.image_stride + (c * K + k) * lay.row_stride + e;
          const int64_t s = e < lay.lc ? source(g, lay.l0 + e, k) : -2;
          const U want = s == -2 ? marker : s < 0 ? U(0) : x[(n * C + c) * g.in_size + s];
          if (cols[at] != want) {
            std::printf("FAIL: nd %d, C %lld, l0 %lld, lc %lld, row_stride %lld: image %lld channel %lld tap %lld "
                        "position %lld: got %llu, want %llu (%zu-byte elements, %s)\n", ND, static_cast<long long>(C),
                        static_cast<long long>(lay.l0), static_cast<long long>(lay.lc),
                        static_cast<long long>(lay.row_stride), static_cast<long long>(n), static_cast<long long>(c),
                        static_cast<long long>(k), static_cast<long long>(e),
                        static_cast<unsigned long long>(cols[at]), static_cast<unsigned long long>(want), sizeof(U),
                        pairs ? "pairs" : "elements");
            return false;
          }
        }
  return true;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 300; ++i) {
    run(one_case<1, uint16_t>(false));
    run(one_case<1, uint32_t>(false));
    run(one_case<1, uint64_t>(false));
    run(one_case<2, uint16_t>(true));
    run(one_case<3, uint16_t>(true));
    if (i % 3 == 0) {
      run(one_case<2, uint16_t>(false));
      run(one_case<3, uint32_t>(false));
      run(one_case<2, uint64_t>(false));
    }
  }
  // After the loop above, so that its draws (and the cases they reach) stay as they were.
  for (int i = 0; i < 200; ++i) {
    run(one_case<2, uint32_t, true>(false));
    run(one_case<2, uint32_t>(false));
  }
  std::printf("blocks by write_pairs case: %d %d %d %d %d %d; by write_elements case: %d %d %d %d\n",
              pair_cases[0], pair_cases[1], pair_cases[2], pair_cases[3], pair_cases[4], pair_cases[5],
              element_cases[0], element_cases[1], element_cases[2], element_cases[3]);
  for (int v : pair_cases) run(v > 20);  // every case of both dispatches reached
  for (int v : element_cases) run(v > 20);
  std::printf("%d cases filled their tiles a vector at a time, %d of them 1-D\n", vector_cases, vector_1d_cases);
  run(vector_cases > 150);
  run(vector_1d_cases > 150);
  return run.report();
}
