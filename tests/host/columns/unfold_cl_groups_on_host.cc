// The 2-D channels-last unfold in groups of positions
// (lib/cuda/unfold_cl_groups.cuh) compiled as host code: over random 2-D
// geometries (kernels 1-4, strides and dilations 1-3, padding -1..3, crops
// included) of 1-8 channels, 2-, 4- and 8-byte elements, 1-3 images and
// chunks of whole output lines, planned by plan_cl_groups as the unfold plans
// it with 1-4 lines a block, each block stages its tile and writes its lines,
// each phase by every thread of the block. The columns must be the reference
// unfold's (the input at source(g, l, k), 0 for padding), every entry written
// once; geometries the kernel does not take must be refused. ResNet's stem
// must read the tile with few bank conflicts.
// Run by tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "host_cuda.h"
#include "columns/unfold_cl_groups.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;

namespace {

int planned = 0, cropped = 0, chunks = 0, several_slots = 0, partial_blocks = 0;

// Runs the kernel's blocks as unfold_cl_groups_kernel does (columns.cu).
template <typename U>
void run_blocks(const U* x, U* cols, const Geometry& g, int64_t C, const ClGroupsPlan& p) {
  std::vector<U> smem(p.smem / sizeof(U) + 1);
  const U marker = static_cast<U>(0xfdfd);
  blockDim.x = cl_groups_threads(p);
  for (int64_t block = 0; block < p.blocks; ++block) {
    blockIdx.x = static_cast<unsigned>(block);
    const int32_t n = static_cast<int32_t>(block / p.row_blocks.d), rb = static_cast<int32_t>(block % p.row_blocks.d);
    const int32_t line0 = p.first_line + rb * p.lines;
    const int32_t lines = std::min(p.lines, p.first_line + p.chunk_lines - line0);
    if (lines < p.lines) ++partial_blocks;
    const U* x_image = x + static_cast<int64_t>(n) * g.in_size * C;
    std::fill(smem.begin(), smem.end(), marker);
    std::vector<ClGroupOffsets<U>> off(blockDim.x);
    for (unsigned t = 0; t < blockDim.x; ++t) {
      threadIdx.x = t;
      const ClGroupsLoads loads = load_cl_groups(x_image, g, p, line0);
      off[t] = cl_group_offsets<U>(g, C, p, static_cast<int32_t>(t) % p.vectors);
      stage_cl_groups(smem.data(), loads, g, C, p, line0);
    }
    U* cols_line = cols + (static_cast<int64_t>(n) * p.chunk_lines + (line0 - p.first_line)) * g.out[1] *
                              g.kernel_size * C;
    for (unsigned t = 0; t < blockDim.x; ++t) {
      threadIdx.x = t;
      write_cl_groups<false>(smem.data(), cols_line, g, C, off[t], p, lines);
    }
  }
}

template <typename U>
bool one_case() {
  constexpr int V = 16 / sizeof(U);
  int64_t pad_hi[kMaxSpatial] = {0, 0, 0};
  Geometry g = draw_geometry(2, 24, pad_hi);
  // Lines of whole vectors, and output lines of whole groups, in most cases.
  if (draw(0, 3) != 0) g.in[1] = 8 * draw(1, 4);
  if (draw(0, 1)) g.stride[1] = 1;
  finish_geometry(g, pad_hi);
  if (g.out_size <= 0) return true;
  const int64_t C = draw(0, 1) ? 2 * draw(1, 4) : draw(1, 8), nc = draw(1, 3), K = g.kernel_size, Ho = g.out[0], Wo = g.out[1];
  // A chunk of whole lines, or all of them.
  const int64_t first = draw(0, 1) ? draw(0, static_cast<int>(Ho - 1)) : 0;
  const int64_t count = first > 0 || draw(0, 1) ? draw(1, static_cast<int>(Ho - first)) : Ho;
  ColumnsLayout lay;
  lay.l0 = first * Wo;
  lay.lc = count * Wo;
  const int64_t x_elements = nc * g.in_size * C, col_elements = nc * lay.lc * K * C;
  std::vector<Pack<U, V>> x_store(x_elements / V + 1), cols_store(col_elements / V + 1);
  U* x = reinterpret_cast<U*>(x_store.data());
  U* cols = reinterpret_cast<U*>(cols_store.data());
  for (int64_t i = 0; i < x_elements; ++i) x[i] = static_cast<U>(i % 60000 + 1);
  const U marker = static_cast<U>(0xfdfd);
  std::fill(cols, cols + col_elements, marker);
  const int32_t lines = draw(1, 4);
  ClGroupsPlan p;
  const bool fits = (K * C) % V != 0 && Wo % (V / std::gcd<int64_t>(K * C, V)) == 0 && (g.in[1] * C) % V == 0;
  if (!plan_cl_groups<U>(g, lay, C, nc, x, cols, lines, &p)) {
    // Refused: only where the geometry does not fit, or the tile is too big
    // (bytes, or loads for the fewest threads a block can have).
    const int64_t tile_lines = (lines - 1) * g.stride[0] + (g.kernel[0] - 1) * g.rhs_dilation[0] + 1;
    const int64_t tile_width = (Wo - 1) * g.stride[1] + (g.kernel[1] - 1) * g.rhs_dilation[1] + 1;
    const int64_t tile = tile_lines * (tile_width * C + 32) * static_cast<int64_t>(sizeof(U));
    const int64_t vectors = K * C / std::gcd<int64_t>(K * C, V), loads = tile_lines * g.in[1] * C / V;
    if (fits && tile <= static_cast<int64_t>(kClGroupsSmem) && vectors <= kClGroupsMaxThreads &&
        loads <= kClGroupsLoads * 32) {
      std::printf("FAIL: refused a fitting geometry (K %lld, C %lld, Wo %lld, %zu-byte)\n",
                  static_cast<long long>(K), static_cast<long long>(C), static_cast<long long>(Wo), sizeof(U));
      return false;
    }
    return true;
  }
  if (!fits) {
    std::printf("FAIL: planned a geometry that does not fit\n");
    return false;
  }
  ++planned;
  if (g.pad_lo[0] < 0 || g.pad_lo[1] < 0 || pad_hi[0] < 0 || pad_hi[1] < 0) ++cropped;
  if (count < Ho) ++chunks;
  if (p.slots > 1) ++several_slots;
  bool ok = p.positions * K * C == static_cast<int64_t>(p.vectors) * V && p.slots * p.vectors <= kClGroupsMaxThreads &&
            p.line_groups % p.slots == 0 && p.smem <= kClGroupsSmem &&
            p.loads <= kClGroupsLoads * cl_groups_threads(p) && p.pitch >= p.tile_width * C;
  if (!ok) {
    std::printf("FAIL: plan: positions %d, vectors %d, slots %d, smem %zu\n", p.positions, p.vectors, p.slots, p.smem);
    return false;
  }
  run_blocks(x, cols, g, C, p);
  for (int64_t n = 0; n < nc; ++n)
    for (int64_t l = 0; l < lay.lc; ++l)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t s = source(g, lay.l0 + l, k);
          const U want = s < 0 ? U(0) : x[(n * g.in_size + s) * C + c];
          const U got = cols[((n * lay.lc + l) * K + k) * C + c];
          if (got != want) {
            std::printf("FAIL: in %lldx%lld, kernel %lldx%lld, stride %lldx%lld, C %lld, lines %d: image %lld "
                        "position %lld tap %lld channel %lld: got %llu, want %llu (%zu-byte)\n",
                        static_cast<long long>(g.in[0]), static_cast<long long>(g.in[1]),
                        static_cast<long long>(g.kernel[0]), static_cast<long long>(g.kernel[1]),
                        static_cast<long long>(g.stride[0]), static_cast<long long>(g.stride[1]),
                        static_cast<long long>(C), lines, static_cast<long long>(n),
                        static_cast<long long>(lay.l0 + l), static_cast<long long>(k), static_cast<long long>(c),
                        static_cast<unsigned long long>(got), static_cast<unsigned long long>(want), sizeof(U));
            return false;
          }
        }
  return true;
}

// The stem (224 x 224, 3 channels, 7 x 7 taps, stride 2, pad 3): the mean
// over its warps and a vector's entries of the wavefronts a warp's read of
// one entry takes (the most distinct 4-byte words one bank serves).
template <typename U>
double stem_wavefronts() {
  constexpr int V = 16 / sizeof(U);
  Geometry g;
  g.nd = 2;
  for (int d = 0; d < 2; ++d) {
    g.in[d] = 224;
    g.kernel[d] = 7;
    g.stride[d] = 2;
    g.pad_lo[d] = 3;
  }
  const int64_t pad_hi[kMaxSpatial] = {3, 3, 3};
  finish_geometry(g, pad_hi);
  const int64_t C = 3;
  ColumnsLayout lay;
  lay.lc = g.out_size;
  std::vector<Pack<U, V>> store(2);
  ClGroupsPlan p;
  if (!plan_cl_groups<U>(g, lay, C, 1, store.data(), store.data(), 2, &p)) return -1;
  const int32_t warps = (p.slots * p.vectors + 31) / 32;
  int64_t wavefronts = 0;
  for (int32_t w = 0; w < warps; ++w) wavefronts += cl_groups_wavefronts(cl_groups_reads<U>(g, C, p, w), p.pitch);
  return static_cast<double>(wavefronts) / (warps * V);
}

}  // namespace

int main() {
  Tally run;
  for (int i = 0; i < 3000; ++i) {
    run(one_case<uint16_t>());
    run(one_case<uint32_t>());
    run(one_case<uint64_t>());
  }
  const double w2 = stem_wavefronts<uint16_t>(), w4 = stem_wavefronts<uint32_t>();
  std::printf("%d cases planned: %d cropped, %d chunks of lines, %d with several slots, %d partial blocks; stem "
              "wavefronts a read: 2-byte %.2f, 4-byte %.2f\n",
              planned, cropped, chunks, several_slots, partial_blocks, w2, w4);
  run(planned > 500 && cropped > 50 && chunks > 50 && several_slots > 200 && partial_blocks > 100);
  run(w2 > 0 && w4 > 0 && w2 < 2 && w4 < 2);
  return run.report();
}
