// The channels-last input gradient of 3 x 3 depthwise windows at stride 2
// and unit dilation (MobileNet's downsampling layers), by cells: a thread
// owns one vector of channels at one cell column, a cell being the 2 x 2
// input positions (2 cy + ry, 2 cx + rx) that one 2 x 2 patch of dy reaches
// with all 9 taps, each tap exactly once. It walks down the cell rows with
// the patch in registers, loading one dy row a step (two vectors) for four
// output vectors, the next step's while it computes this one. The phases of
// the gradient (dw_phase), which the tiles run as four forwards of dy, are
// here the four outputs of a cell: no shared memory, no barrier, every input
// position written once (zeros where no tap reaches it).
//
// Which tap meets which patch row follows from the parity of the low padding
// (PH, PW: compile time) and the patch's first dy row cy + floor((pad - 1) /
// 2) (run time). No XLA headers: the host tests run dw_cells_thread thread
// by thread (tests/host/conv/depthwise/depthwise_conv_on_host.cc).
#pragma once

#include <cstdint>

#include "common/device_util.cuh"
#include "conv/depthwise/depthwise_plan.h"
#include "conv/depthwise/depthwise_stream.cuh"

namespace im2col::cuda {

constexpr int kDwCellsThreads = 256;
constexpr int32_t kDwCellsMinRows = 2;  // cell rows a thread walks, at least (one dy row of warm-up)

// The column grid over cell columns and rows (threads: a channel vector of a
// cell column each).
struct DwCellsPlan {
  DwColumnGrid grid;
  int32_t cells_h = 1;  // cell rows: ceil(in[H] / 2)
};

// Whether the cells take the input gradient of forward geometry g (identity
// maps: dw_lift) with C channels of elem bytes: 2-D 3 x 3 windows at stride
// 2 and unit dilation along both dimensions, whole channel vectors.
inline bool dw_cells_domain(const DwGeom& g, int64_t C, size_t elem) {
  if (g.nd != 2 || g.zero != 0 || g.in[1] < 1 || g.in[2] < 1 || g.out[1] < 1 || g.out[2] < 1) return false;
  for (int d = 1; d < 3; ++d)
    if (g.kernel[d] != kDwStreamK || g.stride[d] != 2 || g.dil[d] != 1) return false;
  if (elem != 2 && elem != 4 && elem != 8) return false;
  return C >= 1 && C % dw_vector(elem, true) == 0;
}

// The plan for n images: cell rows halved from whole columns until the grid
// fills the GPU, as the streamed forward's (plan_dw_columns).
inline bool plan_dw_cells(const DwGeom& g, int64_t n, int64_t C, size_t elem, DwCellsPlan* out) {
  if (n < 1 || !dw_cells_domain(g, C, elem)) return false;
  out->cells_h = (g.in[1] + 1) / 2;
  return plan_dw_columns(C / dw_vector(elem, true), (g.in[2] + 1) / 2, out->cells_h, n, kDwCellsThreads,
                         kDwCellsMinRows, &out->grid);
}

// The patch row (0 or 1) that tap k meets at cell offset r, or -1 where that
// tap reaches no position of offset r; P is the low padding's parity.
template <int P>
constexpr int dw_cell_patch_row(int r, int k) {
  return ((r + P - k) & 1) != 0 ? -1 : (r - k + 2 - P) / 2;
}

// floor(v / 2) for any sign: the patch's first dy row is cy + floor((pad - 1) / 2).
constexpr int32_t dw_floor_half(int32_t v) { return v >= 0 ? v / 2 : -((1 - v) / 2); }

// Thread `tid` of block `block` (blocks: column block fastest, then row tile,
// then image; threads: channel vector fastest, then cell column) of the input
// gradient dx of dy with w over forward geometry g; PH, PW: the parities of
// g.pad[1], g.pad[2].
template <int PH, int PW, typename T>
__device__ __forceinline__ void dw_cells_thread(const T* __restrict__ dy, const T* __restrict__ w,
                                                T* __restrict__ dx, const DwGeom& g, const DwCellsPlan& s, int64_t C,
                                                int64_t block, int32_t tid) {
  using A = typename Acc<T>::type;
  constexpr int K = kDwStreamK, V = dw_vector(sizeof(T), true);
  using Raw = RawWords<T, V>;

  DwColumnPlace at;
  if (!dw_column_place(s.grid, kDwCellsThreads, block, tid, &at)) return;
  const int64_t image = at.image, ch = int64_t{at.vec} * V;
  const int32_t cx = at.col;
  const int32_t IH = g.in[1], IW = g.in[2], OH = g.out[1], OW = g.out[2];
  const int32_t cy0 = at.row_tile * s.grid.rows, cy_end = min(s.cells_h, cy0 + s.grid.rows);

  A wt[K][K][V];
  dw_stream_weights<T, A, V, K>(wt, w, g, ch);

  // The patch's dy columns, and its first dy row at cell row cy: cy + base_h.
  const int32_t base_h = dw_floor_half(g.pad[1] - 1), ox0 = cx + dw_floor_half(g.pad[2] - 1);
  bool col_ok[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) col_ok[i] = static_cast<uint32_t>(ox0 + i) < static_cast<uint32_t>(OW);
  const T* dy_image = dy + image * OH * int64_t{OW} * C + ch;
  const auto load_row = [&](Raw (&dst)[2], int32_t oy) {
    const bool row_ok = static_cast<uint32_t>(oy) < static_cast<uint32_t>(OH);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      Raw r{};
      if (row_ok && col_ok[i]) r = load_raw<T, V>(dy_image + (int64_t{oy} * OW + ox0 + i) * C);
      dst[i] = r;
    }
  };

  A patch[2][2][V];  // [patch row][patch column][channel]
  Raw next[2];
  {
    Raw first[2];
    load_row(first, cy0 + base_h);
    dw_stream_convert<T, A, V, 2>(patch[0], first);
  }
  load_row(next, cy0 + base_h + 1);

  const int64_t dx_row = int64_t{IW} * C;
  T* dxp = dx + (image * IH + 2 * int64_t{cy0}) * dx_row + 2 * int64_t{cx} * C + ch;
  const bool second_col = 2 * cx + 1 < IW;
  for (int32_t cy = cy0; cy < cy_end; ++cy, dxp += 2 * dx_row) {
    dw_stream_convert<T, A, V, 2>(patch[1], next);
    if (cy + 1 < cy_end) load_row(next, cy + 1 + base_h + 1);
#pragma unroll
    for (int ry = 0; ry < 2; ++ry) {
      if (ry == 1 && 2 * cy + 1 >= IH) break;
#pragma unroll
      for (int rx = 0; rx < 2; ++rx) {
        if (rx == 1 && !second_col) break;
        A acc[V];
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] = A(0);
#pragma unroll
        for (int ky = 0; ky < K; ++ky) {
          const int j = dw_cell_patch_row<PH>(ry, ky);
          if (j < 0) continue;
#pragma unroll
          for (int kx = 0; kx < K; ++kx) {
            const int i = dw_cell_patch_row<PW>(rx, kx);
            if (i < 0) continue;
#pragma unroll
            for (int e = 0; e < V; ++e) acc[e] += wt[ky][kx][e] * patch[j][i][e];
          }
        }
        Pack<T, V> o;
#pragma unroll
        for (int e = 0; e < V; ++e) o.v[e] = store_value<T>(acc[e]);
        dw_store_vector<T, V>(dxp + ry * dx_row + rx * C, o);
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int e = 0; e < V; ++e) patch[0][i][e] = patch[1][i][e];
  }
}

template <int PH, int PW, typename T>
__global__ void __launch_bounds__(kDwCellsThreads, 2)
dw_cells_kernel(const T* __restrict__ dy, const T* __restrict__ w, T* __restrict__ dx, const DwGeom g,
                const DwCellsPlan s, int64_t C) {
  dw_cells_thread<PH, PW, T>(dy, w, dx, g, s, C, blockIdx.x, static_cast<int32_t>(threadIdx.x));
}

}  // namespace im2col::cuda
