// The channels-last tiled unfold (lib/cuda/unfold_cl_write.cuh) compiled as
// host code: over random 1-D, 2-D and 3-D geometries with few channels
// (groups too), planned by plan_tile as the unfold plans them (a line vector
// where the input's lines allow, for half of them), each block's tables and
// tile staged (stage_cl_block) and its rows written (write_cl_block, by the
// writer with_cl_writer picks, as the unfold does), every
// phase by every thread of the block: in pairs of positions
// (write_row_pairs) where cl_row_pairs_fit accepts the geometry, 2- and
// 4-byte elements, else chunked (rows of 32 or more) or flat. Half the
// geometries are drawn to fit the pairs: even output lines and an even chunk.
// The columns must be the reference unfold's (the input at source(g, l, k),
// 0 for padding), and entries outside the chunk's rows must keep their marker.
// Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "host_cuda.h"
#include "columns/unfold_cl_write.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

int written[3] = {};  // blocks written in pairs, chunked, flat
int vector_cases = 0;

template <int ND, typename U>
bool one_case(bool fit_pairs) {
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(ND, ND == 1 ? 300 : ND == 2 ? 40 : 12, pad_hi);
  const int last = ND - 1;
  if (draw(0, 3) == 0) g.lhs_dilation[0] = draw(2, 3);  // holes in the tile (input gradients)
  if (ND == 1 && draw(0, 3) == 0) g.in[0] = draw(1000, 4000);  // bands cut to fit, some of odd length
  const int64_t groups = draw(1, 3), C = groups * draw(1, ND == 1 ? 12 : 4);
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  if (fit_pairs && g.out[last] % 2 != 0) {
    pad_hi[last] += 1;  // one more output column
    finish_geometry(g, pad_hi);
  }
  if (g.out_size <= 0) return true;
  const int64_t nc = draw(1, 2), K = g.kernel_size, row = K * C;
  ColumnsLayout lay;
  lay.groups = groups;
  lay.l0 = 0;
  lay.lc = g.out_size;
  if (draw(0, 1) == 0) {  // a chunk from the middle
    lay.l0 = draw(0, static_cast<int>(g.out_size) - 1);
    lay.lc = draw(1, static_cast<int>(g.out_size - lay.l0));
  }
  if (fit_pairs) {
    lay.l0 -= lay.l0 % 2;
    lay.lc += lay.lc % 2;
    if (lay.l0 + lay.lc > g.out_size) return true;
  }
  lay.row_stride = lay.lc;
  lay.image_stride = row * lay.lc;
  std::vector<U> x(nc * C * g.in_size);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<U>(i % 4000 + 1);
  const U marker = static_cast<U>(0xfdfd);
  std::vector<U> cols(nc * lay.image_stride + 3, marker);
  // A marker slot or two on each side; the columns aligned to a pair word
  // but for a quarter of the geometries that are not drawn to fit.
  U* cols_chunk = cols.data() + (!fit_pairs && draw(0, 3) == 0 ? 1 : 2);
  // The unfold's plan: the widest line vector whose tile fits, else none.
  int32_t E = 0;
  if (ND > 1 && g.lhs_dilation[0] == 1 && draw(0, 1) == 0) {
    const int64_t line_bytes = g.in[last] * C * static_cast<int64_t>(sizeof(U));
    for (int64_t bytes = 16; bytes >= 2 * static_cast<int64_t>(sizeof(U)) && bytes >= 4 && E == 0; bytes /= 2)
      if (line_bytes % bytes == 0) E = static_cast<int32_t>(bytes / sizeof(U));
  }
  TilePlan t;
  bool planned = false;
  for (int32_t v = E; v >= 2 && !planned; v /= 2) {
    t = TilePlan();
    planned = plan_tile(g, lay, C, true, sizeof(U), &t, 0, 0, 0, v);
  }
  if (!planned) {
    t = TilePlan();
    if (!plan_tile(g, lay, C, true, sizeof(U), &t, 0, 0, 0, 0)) return true;
  }
  if (t.vector > 0) ++vector_cases;
  bool pairs = false;  // with_cl_writer's choice (the same for every block)
  std::vector<unsigned char> smem(t.smem + 16);
  blockDim.x = kThreads;
  for (int64_t block = 0; block < tile_blocks(t, nc); ++block) {
    blockIdx.x = static_cast<unsigned>(block);
    const TileBlock b = tile_block(t, C, lay);
    std::memset(smem.data(), 0xab, smem.size());
    for (unsigned th = 0; th < kThreads; ++th) {
      threadIdx.x = th;
      stage_cl_block<ND>(smem.data(), x.data(), g, C, 0, lay, t, b);
    }
    // The unfold's choice of writer (with_cl_writer), then its write phase.
    with_cl_writer<U>(g, lay, t, C, cols_chunk, [&](auto chunk, auto in_pairs) {
      pairs = decltype(in_pairs)::value;
      for (unsigned th = 0; th < kThreads; ++th) {
        threadIdx.x = th;
        write_cl_block<ND, decltype(chunk)::value, false, decltype(in_pairs)::value>(smem.data(), cols_chunk, g, C,
                                                                                     lay, t, b);
      }
    });
    ++written[pairs ? 0 : row >= 32 ? 1 : 2];
  }
  const int64_t Cg = C / groups;
  for (size_t at = 0; at < cols.size(); ++at) {
    const int64_t e = static_cast<int64_t>(at) - (cols_chunk - cols.data());
    U want = marker;
    if (e >= 0 && e < nc * lay.image_stride) {
      const int64_t n = e / lay.image_stride, p = e / row % lay.lc, r = e % row;
      const int64_t gi = r / (K * Cg), k = r / Cg % K, c = gi * Cg + r % Cg;
      const int64_t s = source(g, lay.l0 + p, k);
      want = s < 0 ? U(0) : x[(n * g.in_size + s) * C + c];
    }
    if (cols[at] != want) {
      std::printf("FAIL: nd %d, C %lld (groups %lld), K %lld, l0 %lld, lc %lld, vector %d: slot %lld: got %llu, "
                  "want %llu (%zu-byte elements, %s)\n", ND, static_cast<long long>(C),
                  static_cast<long long>(groups), static_cast<long long>(K), static_cast<long long>(lay.l0),
                  static_cast<long long>(lay.lc), t.vector, static_cast<long long>(e),
                  static_cast<unsigned long long>(cols[at]), static_cast<unsigned long long>(want), sizeof(U),
                  pairs ? "pairs" : row >= 32 ? "chunked" : "flat");
      return false;
    }
  }
  return true;
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 150; ++i) {
    const bool fit = i % 2 == 0;
    run(one_case<1, uint16_t>(fit));
    run(one_case<1, uint32_t>(fit));
    run(one_case<2, uint16_t>(fit));
    run(one_case<2, uint32_t>(fit));
    run(one_case<3, uint16_t>(fit));
    if (i % 3 == 0) {
      run(one_case<3, uint32_t>(fit));
      run(one_case<2, uint64_t>(fit));
    }
  }
  std::printf("blocks written in pairs %d, chunked %d, flat %d; %d cases filled a vector at a time\n", written[0],
              written[1], written[2], vector_cases);
  for (int v : written) run(v > 100);  // every writer reached
  run(vector_cases > 50);
  return run.report();
}
