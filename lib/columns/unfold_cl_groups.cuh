// The 2-D channels-last unfold of few channels in groups of positions
// (columns.cu, unfold_cl_groups_kernel).
//
// A position's row holds K * C entries; where that is not whole 16-byte
// vectors (ResNet's stem: 7 x 7 taps of 3 channels, 147), G = V / gcd(K * C,
// V) consecutive positions of an output line are T = G * K * C / V whole
// vectors. A block stages the input of R output lines with their padding as
// zeros, so that entry e of a group reads the tile at an offset that is the
// same for every group and line, plus the group's and the line's. Thread i
// works out the offsets of vector i % T once and writes that vector for
// groups i / T, i / T + slots, ... of each line: V shared-memory reads and a
// 16-byte store a vector, whole sectors. The tiled unfold (unfold_cl_write.cuh)
// stores a warp's 128 bytes from rows of 294 (bfloat16 stem): 25.8 bytes of
// each 32-byte sector written on average, with L1 and L2 84% and 81% busy
// (ncu, H200, 2026-11-26).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "common/device_util.cuh"
#include "common/geometry.h"

namespace im2col::cuda {

struct ClGroupsPlan {
  int32_t positions = 0;     // G: positions a group
  int32_t vectors = 0;       // T: vectors a group
  int32_t slots = 0;         // groups a block writes at once: its threads are slots * vectors
  int32_t lines = 0;         // R: output lines a block
  int32_t tile_lines = 0;    // input lines staged: (R - 1) * stride + dilated kernel extent
  int32_t tile_width = 0;    // positions a staged line: (Wo - 1) * stride + dilated kernel extent
  int32_t pitch = 0;         // elements from one staged line to the next (tile_width * C, skewed)
  int32_t line_groups = 0;   // groups an output line: Wo / G
  int32_t first_line = 0;    // the chunk's first output line
  int32_t chunk_lines = 0;   // its output lines
  int32_t row_vectors = 0;   // 16-byte vectors an input line (W * C / V)
  int32_t loads = 0;         // the tile's vector loads
  int64_t blocks = 0;        // images * ceil(chunk_lines / R)
  size_t smem = 0;
  FastDiv row_blocks;        // blocks an image
  FastDiv load_rows;         // row_vectors
};

constexpr int32_t kClGroupsMaxThreads = 512;

// Output lines a block. The stem's bfloat16 columns took 54.7 / 38.7 / 38.1 /
// 38.0-38.4 / 40.3 us at 1 / 2 / 3 / 4 / 6 lines, its float32 ones 69.1-70.2
// / 71.0-71.8 us at 1 / 2 (4: a tile over 32 KB). A block waits for its
// tile before it writes: the blocks a multiprocessor holds (3 at 54
// registers in bfloat16, 5 at 38 in float32) must have about 300 KB of
// columns between them to cover that (docs/optimization-log.md, step 98).
inline int32_t cl_groups_lines(size_t elem_bytes) { return elem_bytes == 2 ? 3 : 1; }
constexpr int kClGroupsLoads = 6;  // tile loads a thread, all in flight at once
constexpr size_t kClGroupsSmem = 32 * 1024;

__host__ __device__ inline int32_t cl_groups_threads(const ClGroupsPlan& p) {
  return (p.slots * p.vectors + 31) / 32 * 32;
}

// The tile offsets of vector vec's V entries within a group of the block's
// first line. Entry e of a group is position e / (K * C) of the
// group, tap (e / C) % K, channel e % C.
template <typename U>
struct ClGroupOffsets {
  int32_t v[16 / sizeof(U)] = {};
};

template <typename U>
__host__ __device__ __forceinline__ ClGroupOffsets<U> cl_group_offsets(const Geometry& g, int64_t C,
                                                                       const ClGroupsPlan& p, int32_t vec) {
  constexpr int V = 16 / sizeof(U);
  ClGroupOffsets<U> off;
  const int32_t c = static_cast<int32_t>(C), KW = static_cast<int32_t>(g.kernel[1]);
  const int32_t KH = static_cast<int32_t>(g.kernel[0]), KC = KH * KW * c;
  const int32_t line_step = static_cast<int32_t>(g.rhs_dilation[0]) * p.pitch;
  const int32_t tap_step = static_cast<int32_t>(g.rhs_dilation[1]) * c;
  const int32_t position_step = static_cast<int32_t>(g.stride[1]) * c;
  // The first entry's coordinates by division, each next one's by a carry.
  const int32_t e = vec * V, q = e / KC, rem = e - q * KC, tap = rem / c;
  int32_t ch = rem - tap * c, kh = tap / KW, kw = tap - kh * KW;
  int32_t at = q * position_step + kh * line_step + kw * tap_step + ch;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    off.v[k] = at;
    if (++ch < c) {
      ++at;
      continue;
    }
    ch = 0;
    if (++kw < KW) {
      at += tap_step - (c - 1);
      continue;
    }
    kw = 0;
    if (++kh < KH) {
      at += line_step - (KW - 1) * tap_step - (c - 1);
      continue;
    }
    kh = 0;  // the next position's first tap
    at += position_step - (KH - 1) * line_step - (KW - 1) * tap_step - (c - 1);
  }
  return off;
}

// Warp w's reads at any pitch: entry k of lane t reads tile element
// at[t][k] + lines[t][k] * pitch (offsets are linear in the pitch).
template <typename U>
struct ClGroupsReads {
  int32_t lanes = 0;
  int64_t at[32][16 / sizeof(U)], lines[32][16 / sizeof(U)];
};

template <typename U>
ClGroupsReads<U> cl_groups_reads(const Geometry& g, int64_t C, ClGroupsPlan p, int32_t w) {
  constexpr int V = 16 / sizeof(U);
  const int64_t group_step = p.positions * g.stride[1] * C;
  ClGroupsReads<U> r;
  r.lanes = std::min(32, p.slots * p.vectors - w * 32);
  for (int32_t t = 0; t < r.lanes; ++t) {
    const int32_t i = w * 32 + t;
    p.pitch = 0;
    const ClGroupOffsets<U> at = cl_group_offsets<U>(g, C, p, i % p.vectors);
    p.pitch = 1;
    const ClGroupOffsets<U> next = cl_group_offsets<U>(g, C, p, i % p.vectors);
    for (int k = 0; k < V; ++k) {
      r.at[t][k] = (i / p.vectors) * group_step + at.v[k];
      r.lines[t][k] = next.v[k] - at.v[k];
    }
  }
  return r;
}

// The wavefronts of those reads at `pitch`: for each entry of a vector, the
// most distinct 4-byte words one of the 32 banks serves.
template <typename U>
int64_t cl_groups_wavefronts(const ClGroupsReads<U>& r, int64_t pitch) {
  constexpr int V = 16 / sizeof(U);
  int64_t total = 0;
  for (int k = 0; k < V; ++k) {
    int64_t bank[32][32];
    int32_t in_bank[32] = {}, most = 0;
    for (int32_t t = 0; t < r.lanes; ++t) {
      const int64_t word = (r.at[t][k] + r.lines[t][k] * pitch) * static_cast<int64_t>(sizeof(U)) / 4;
      const int32_t b = static_cast<int32_t>(word % 32);
      if (std::find(bank[b], bank[b] + in_bank[b], word) == bank[b] + in_bank[b]) {
        bank[b][in_bank[b]++] = word;
        most = std::max(most, in_bank[b]);
      }
    }
    total += most;
  }
  return total;
}

// The pitch with the fewest modelled conflicts in the first warp among a
// line's elements rounded to a word plus 0-7 words (the stem's 2-byte
// entries: 1.9 wavefronts a read on 344 words, 3.7 on 351).
template <typename U>
int32_t cl_groups_pitch(const Geometry& g, int64_t C, const ClGroupsPlan& p) {
  constexpr int64_t word = sizeof(U) >= 4 ? 1 : 4 / sizeof(U);
  const int64_t width = static_cast<int64_t>(p.tile_width) * C, base = (width + word - 1) / word * word;
  const ClGroupsReads<U> reads = cl_groups_reads<U>(g, C, p, 0);
  int64_t best = -1, best_pitch = base;
  for (int64_t k = 0; k < 8; ++k) {
    const int64_t w = cl_groups_wavefronts(reads, base + k * word);
    if (best < 0 || w < best) best = w, best_pitch = base + k * word;
  }
  return static_cast<int32_t>(best_pitch);
}

// The plan for nc images of C channels into columns of whole output lines,
// R lines a block, or false where the kernel does not apply: not 2-D, lhs
// dilation, groups of features, rows already whole vectors, a chunk of part
// of a line, lines not whole groups, input lines not whole 16-byte vectors or
// x or cols not 16-byte aligned, a tile over kClGroupsSmem or more loads than
// kClGroupsLoads a thread.
template <typename U>
bool plan_cl_groups(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc, const void* x,
                    const void* cols, int32_t lines, ClGroupsPlan* p) {
  constexpr int64_t V = 16 / sizeof(U);
  const int64_t KC = g.kernel_size * C;
  if (g.nd != 2 || g.any_lhs_dilation || lay.groups != 1 || KC % V == 0 || lines < 1) return false;
  const int64_t Wo = g.out[1], G = V / std::gcd(KC, V), T = G * KC / V;
  if (Wo <= 0 || lay.lc <= 0 || lay.l0 % Wo != 0 || lay.lc % Wo != 0 || Wo % G != 0 || T > kClGroupsMaxThreads)
    return false;
  if (!aligned_to(x, 16) || !aligned_to(cols, 16) || (g.in[1] * C) % V != 0) return false;
  const int64_t line_groups = Wo / G;
  // The most slots that divide a line's groups (no block's last round half idle).
  int64_t slots = 1;
  for (int64_t s = kClGroupsMaxThreads / T; s >= 1; --s)
    if (line_groups % s == 0) {
      slots = s;
      break;
    }
  const int64_t tile_lines = (lines - 1) * g.stride[0] + (g.kernel[0] - 1) * g.rhs_dilation[0] + 1;
  const int64_t tile_width = (Wo - 1) * g.stride[1] + (g.kernel[1] - 1) * g.rhs_dilation[1] + 1;
  const int64_t row_vectors = g.in[1] * C / V, loads = tile_lines * row_vectors;
  const int64_t threads = (slots * T + 31) / 32 * 32;
  // Within the smem bound with the widest pitch tried, in 32 bits.
  if ((tile_lines * (tile_width * C + 8 * 4)) * static_cast<int64_t>(sizeof(U)) > static_cast<int64_t>(kClGroupsSmem) ||
      loads > kClGroupsLoads * threads)
    return false;
  const int64_t chunk_lines = lay.lc / Wo, row_blocks = (chunk_lines + lines - 1) / lines;
  p->positions = static_cast<int32_t>(G);
  p->vectors = static_cast<int32_t>(T);
  p->slots = static_cast<int32_t>(slots);
  p->lines = lines;
  p->tile_lines = static_cast<int32_t>(tile_lines);
  p->tile_width = static_cast<int32_t>(tile_width);
  p->line_groups = static_cast<int32_t>(line_groups);
  p->first_line = static_cast<int32_t>(lay.l0 / Wo);
  p->chunk_lines = static_cast<int32_t>(chunk_lines);
  p->row_vectors = static_cast<int32_t>(row_vectors);
  p->loads = static_cast<int32_t>(loads);
  p->blocks = nc * row_blocks;
  p->pitch = cl_groups_pitch<U>(g, C, *p);
  p->smem = static_cast<size_t>(tile_lines) * p->pitch * sizeof(U);
  p->row_blocks = FastDiv(row_blocks);
  p->load_rows = FastDiv(row_vectors);
  return p->blocks < (int64_t{1} << 31);
}

// This thread's tile loads: load i of the block is row i / row_vectors's
// vector i % row_vectors, thread i % blockDim's (i / blockDim)-th. Rows
// outside the input are not loaded (their tile lines are zeros).
struct ClGroupsLoads {
  uint4 v[kClGroupsLoads];
};

__device__ __forceinline__ int32_t cl_groups_input_line(const Geometry& g, const ClGroupsPlan& p, int32_t line0,
                                                        int32_t r) {
  return line0 * static_cast<int32_t>(g.stride[0]) - static_cast<int32_t>(g.pad_lo[0]) + r;
}

template <typename U>
__device__ __forceinline__ ClGroupsLoads load_cl_groups(const U* x_image, const Geometry& g, const ClGroupsPlan& p,
                                                        int32_t line0) {
  ClGroupsLoads r;
#pragma unroll
  for (int j = 0; j < kClGroupsLoads; ++j) {
    const int32_t i = threadIdx.x + j * blockDim.x;
    if (i < p.loads) {
      int32_t row, at;
      p.load_rows.divmod(i, row, at);
      const int32_t h = cl_groups_input_line(g, p, line0, row);
      if (static_cast<uint32_t>(h) < static_cast<uint32_t>(g.in[0]))
        r.v[j] = __ldg(reinterpret_cast<const uint4*>(x_image) + static_cast<int64_t>(h) * p.row_vectors + at);
    }
  }
  return r;
}

// The tile: staged line r is input line line0 * stride - pad + r, its
// position j input position j - pad_lo; zeros where either is outside the
// input. The loads land element by element (a line starts pad_lo * C
// elements in, at any alignment); the zeros are the elements no load covers.
template <typename U>
__device__ __forceinline__ void stage_cl_groups(U* tile, const ClGroupsLoads& r, const Geometry& g, int64_t C,
                                                const ClGroupsPlan& p, int32_t line0) {
  constexpr int V = 16 / sizeof(U);
  const int32_t width = p.tile_width * static_cast<int32_t>(C);
  const int32_t lead = static_cast<int32_t>(g.pad_lo[1] * C), in_width = static_cast<int32_t>(g.in[1] * C);
  const int32_t right = lead + in_width < 0 ? 0 : lead + in_width > width ? width : lead + in_width;
  for (int32_t row = 0; row < p.tile_lines; ++row) {
    U* line = tile + row * p.pitch;
    const int32_t h = cl_groups_input_line(g, p, line0, row);
    if (static_cast<uint32_t>(h) >= static_cast<uint32_t>(g.in[0])) {
      for (int32_t e = threadIdx.x; e < width; e += blockDim.x) line[e] = U(0);
    } else {
      const int32_t left = lead < 0 ? 0 : lead > width ? width : lead, zeros = left + width - right;
      for (int32_t e = threadIdx.x; e < zeros; e += blockDim.x) line[e < left ? e : right + e - left] = U(0);
    }
  }
#pragma unroll
  for (int j = 0; j < kClGroupsLoads; ++j) {
    const int32_t i = threadIdx.x + j * blockDim.x;
    if (i < p.loads) {
      int32_t row, at;
      p.load_rows.divmod(i, row, at);
      const int32_t h = cl_groups_input_line(g, p, line0, row);
      if (static_cast<uint32_t>(h) >= static_cast<uint32_t>(g.in[0])) continue;
      const Pack<U, V> v = *reinterpret_cast<const Pack<U, V>*>(&r.v[j]);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int32_t e = lead + at * V + k;
        if (static_cast<uint32_t>(e) < static_cast<uint32_t>(width)) tile[row * p.pitch + e] = v.v[k];
      }
    }
  }
}

// Writes the block's lines: this thread's vector of groups slot, slot +
// slots, ... of each (cols_line: the block's first line's first entry).
template <bool STREAM, typename U>
__device__ __forceinline__ void write_cl_groups(const U* tile, U* cols_line, const Geometry& g, int64_t C,
                                                const ClGroupOffsets<U>& off, const ClGroupsPlan& p,
                                                int32_t lines) {
  constexpr int V = 16 / sizeof(U);
  const int32_t slot = static_cast<int32_t>(threadIdx.x) / p.vectors;
  if (slot >= p.slots) return;
  const int32_t vec = static_cast<int32_t>(threadIdx.x) - slot * p.vectors;
  const int32_t group_step = p.positions * static_cast<int32_t>(g.stride[1] * C);
  const int32_t line_step = static_cast<int32_t>(g.stride[0]) * p.pitch;
  const int64_t line_vectors = static_cast<int64_t>(p.line_groups) * p.vectors;
  Pack<U, V>* line_dst = reinterpret_cast<Pack<U, V>*>(cols_line) + vec;
  for (int32_t l = 0; l < lines; ++l, tile += line_step, line_dst += line_vectors) {
    for (int32_t q = slot; q < p.line_groups; q += p.slots) {
      const U* src = tile + q * group_step;
      Pack<U, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) out.v[k] = src[off.v[k]];
      store_maybe_streaming<STREAM>(line_dst + static_cast<int64_t>(q) * p.vectors, out);
    }
  }
}

}  // namespace im2col::cuda
