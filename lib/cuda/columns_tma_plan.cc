// The plans of the copy-engine unfold and fold (columns_tma.h): whether they
// apply, their boxes, tensor maps, shared memory and grid. Host code.
#include <algorithm>
#include <cstdint>

#include "columns_tma_plan.h"

namespace im2col::cuda {
namespace {

constexpr int64_t kMaxBox = 256;                   // elements per box dimension
constexpr uint32_t kSmemLimit = 100 * 1024;        // per block (over 48 KB: opted in)
constexpr uint32_t kSmemPerMultiprocessor = 227 * 1024;
constexpr uint32_t kUnfoldBoxTarget = 16 * 1024;   // bytes of input per box
constexpr uint32_t kUnfoldSlots = 2;               // a box serves every tap: double buffering
constexpr int64_t kMaxTaps = 1024;                 // the tap table in shared memory
// A fold box sums into registers: at most 4096 input elements and 16 KB per
// job, 32 (16 for double) sums per consumer thread.
constexpr int64_t kFoldBoxElements = 4096;
constexpr int64_t kFoldBoxBytes = 16 * 1024;
constexpr uint32_t kFoldSlots = 4;
constexpr uint32_t kAlign = 128;                   // slots start 128-byte aligned

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
int64_t mod(int64_t a, int64_t b) { return ((a % b) + b) % b; }

// Rows of dimension 0 per box: at most max_rows (rounded down to a multiple
// of `multiple`), spread evenly over `rows`, a multiple of `multiple`.
bool size_bands(int64_t rows, int64_t max_rows, int64_t multiple, ColumnsTmaPlan* p) {
  max_rows = max_rows / multiple * multiple;
  if (rows < 1 || max_rows < 1) return false;
  const int64_t band = round_up(ceil_div(rows, ceil_div(rows, max_rows)), multiple);
  p->band = static_cast<int32_t>(band);
  p->bands = static_cast<int32_t>(ceil_div(rows, band));
  p->rows = static_cast<int32_t>(rows);
  return true;
}

void copy_window(const Geometry& g, int64_t elem_bytes, ColumnsTmaPlan* p) {
  p->nd = g.nd;
  p->vector = static_cast<int32_t>(16 / elem_bytes);
  p->kernel_size = static_cast<int32_t>(g.kernel_size);
  for (int d = 0; d < g.nd; ++d) {
    p->kernel[d] = static_cast<int32_t>(g.kernel[d]);
    p->dilation[d] = static_cast<int32_t>(g.rhs_dilation[d]);
    p->stride[d] = static_cast<int32_t>(g.stride[d]);
    p->pad[d] = static_cast<int32_t>(g.pad_lo[d]);
  }
}

// The box (spatial order in box_extent, innermost first in box), its bytes,
// and the shared memory: `slots` slots if they fit (at least two), then the
// mbarriers, then the tap table; blocks per multiprocessor that fit beside
// each other, and jobs spread over the grid.
bool size_box_and_grid(int64_t elem_bytes, uint32_t max_slots, int multiprocessors, ColumnsTmaPlan* p) {
  int64_t elements = 1;
  for (int d = 0; d < p->nd; ++d) {
    if (p->box_extent[d] < 1 || p->box_extent[d] > kMaxBox) return false;
    p->box[p->nd - 1 - d] = static_cast<cuuint32_t>(p->box_extent[d]);
    p->element_strides[p->nd - 1 - d] = 1;
    elements *= p->box_extent[d];
  }
  for (int i = p->nd; i < p->rank; ++i) p->box[i] = p->element_strides[i] = 1;
  p->box_bytes = static_cast<uint32_t>(elements * elem_bytes);
  p->slot_bytes = static_cast<uint32_t>(round_up(p->box_bytes, kAlign));
  const uint32_t fixed = kAlign + 2 * max_slots * 8 + static_cast<uint32_t>(p->kernel_size) * 8;
  if (p->kernel_size > kMaxTaps || fixed + 2 * p->slot_bytes > kSmemLimit) return false;
  p->slots = static_cast<int32_t>(std::min<uint32_t>(max_slots, (kSmemLimit - fixed) / p->slot_bytes));
  p->smem = kAlign + p->slots * (p->slot_bytes + 16) + static_cast<uint32_t>(p->kernel_size) * 8;
  const int64_t per_sm = std::max<int64_t>(
      1, std::min<int64_t>(2048 / kTmaThreads, kSmemPerMultiprocessor / (p->smem + 1024)));
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(p->jobs, per_sm * multiprocessors));
  p->jobs_per_block = ceil_div(p->jobs, blocks);
  p->blocks = static_cast<uint32_t>(ceil_div(p->jobs, p->jobs_per_block));
  return true;
}

}  // namespace

bool plan_unfold_tma(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc,
                     size_t elem_bytes, int multiprocessors, ColumnsTmaPlan* p) {
  const int nd = g.nd, last = g.nd - 1;
  const int64_t e = static_cast<int64_t>(elem_bytes), V = 16 / e;
  if (nd < 1 || nd > kMaxSpatial || C < 1 || nc < 1 || lay.lc < 1 || g.out_size < 1) return false;
  if (g.any_lhs_dilation || g.stride[last] != 1) return false;
  // Rows of the input, of the columns and of the box in whole 16 bytes:
  // every stored vector is 16 aligned bytes of one line of the columns.
  if (g.in[last] % V != 0 || lay.l0 % V != 0 || lay.lc % V != 0 || lay.row_stride % V != 0 ||
      lay.image_stride % V != 0 || nc * C >= (int64_t{1} << 31))
    return false;
  if (nd >= 2 && g.out[last] % V != 0) return false;
  *p = ColumnsTmaPlan{};
  copy_window(g, e, p);
  p->rank = nd + 1;
  p->rest = g.out_size / g.out[0];
  p->lead = static_cast<int32_t>(mod(-g.pad_lo[last], V));
  p->first_row = static_cast<int32_t>(lay.l0 / p->rest);
  for (int d = 0; d < nd; ++d) p->extent[d] = static_cast<int32_t>(g.out[d]);
  // The box along a dimension: windows from `count` positions, from `lead`
  // elements before the first one's origin along the last dimension, with
  // one vector to spare there for the shifted reads.
  auto box_extent = [&](int d, int64_t count) {
    const int64_t span = (count - 1) * g.stride[d] + (g.kernel[d] - 1) * g.rhs_dilation[d] + 1;
    return d == last ? round_up(span + p->lead, V) + V : span;
  };
  const int64_t rows = (lay.l0 + lay.lc - 1) / p->rest - p->first_row + 1;
  int64_t row_bytes = e;  // of the box, per row of dimension 0 (band rows alone in 1-d)
  for (int d = 1; d < nd; ++d) row_bytes *= box_extent(d, g.out[d]);
  const int64_t halo = (g.kernel[0] - 1) * g.rhs_dilation[0];
  int64_t max_rows = nd == 1 ? kMaxBox - 2 * V - halo
                             : std::min<int64_t>(kUnfoldBoxTarget / row_bytes, kMaxBox);
  if (nd >= 2) max_rows = std::max<int64_t>((max_rows - halo - 1) / g.stride[0] + 1, 1);
  if (!size_bands(rows, max_rows, nd == 1 ? V : 1, p)) return false;
  for (int d = 0; d < nd; ++d)
    p->box_extent[d] = static_cast<int32_t>(box_extent(d, d == 0 ? p->band : g.out[d]));
  p->channels = C;
  p->in_size = g.in_size;
  p->layout = lay;
  p->jobs = nc * C * p->bands;
  // The chunk's input planes: spatial dimensions innermost first, then planes.
  for (int i = 0; i < nd; ++i) {
    p->dims[i] = static_cast<cuuint64_t>(g.in[last - i]);
    p->strides[i] = (i == 0 ? static_cast<cuuint64_t>(e) : p->strides[i - 1]) * p->dims[i];
  }
  p->dims[nd] = static_cast<cuuint64_t>(nc * C);
  return size_box_and_grid(e, kUnfoldSlots, multiprocessors, p);
}

bool plan_fold_tma(const Geometry& g, const ColumnsLayout& lay, int64_t C, int64_t nc,
                   size_t cols_bytes, int multiprocessors, ColumnsTmaPlan* p) {
  const int nd = g.nd, last = g.nd - 1;
  const int64_t e = static_cast<int64_t>(cols_bytes), V = 16 / e;
  if (nd < 1 || nd > kMaxSpatial || C < 1 || nc < 1 || lay.lc < 1 || g.out_size < 1 || g.in_size < 1)
    return false;
  if (g.any_lhs_dilation) return false;
  for (int d = 0; d < nd; ++d)
    if (g.stride[d] != 1) return false;
  const int64_t rest_out = g.out_size / g.out[0], rest_in = g.in_size / g.in[0];
  // Whole rows of dimension 0 in the chunk (the map's extent there, 16-byte
  // aligned in 1-d); strides of the columns' map in whole 16 bytes and
  // increasing; whole vectors of the input per thread.
  if (lay.l0 % rest_out != 0 || lay.lc % rest_out != 0 || (nd == 1 && lay.l0 % V != 0) ||
      lay.row_stride % V != 0 || lay.image_stride % V != 0 ||
      lay.image_stride < C * g.kernel_size * lay.row_stride || g.in[last] % V != 0 ||
      C * g.kernel_size >= (int64_t{1} << 31) || nc >= (int64_t{1} << 31))
    return false;
  if (nd >= 2 && g.out[last] % V != 0) return false;
  const int64_t max_elements = std::min<int64_t>(kFoldBoxElements, kFoldBoxBytes / e);
  if (rest_in > max_elements) return false;
  *p = ColumnsTmaPlan{};
  copy_window(g, e, p);
  p->rank = nd + 2;
  p->rest = rest_in;
  p->first_row = static_cast<int32_t>(lay.l0 / rest_out);
  for (int d = 0; d < nd; ++d) p->extent[d] = static_cast<int32_t>(g.in[d]);
  const int64_t max_rows = nd == 1 ? kMaxBox - V : std::min(kMaxBox, max_elements / rest_in);
  if (!size_bands(g.in[0], max_rows, nd == 1 ? V : 1, p)) return false;
  // The box: the input's positions, one vector to spare along the last
  // dimension (the shifted reads).
  for (int d = 0; d < nd; ++d)
    p->box_extent[d] = static_cast<int32_t>((d == 0 ? p->band : g.in[d]) + (d == last ? V : 0));
  p->channels = C;
  p->in_size = g.in_size;
  p->layout = lay;
  p->jobs = nc * C * p->bands;
  // The chunk's columns: output positions innermost first (dimension 0 cut
  // to the chunk's rows), then rows (channel, tap), then images.
  cuuint64_t stride = static_cast<cuuint64_t>(e);  // of dimension i
  for (int i = 0; i < nd; ++i) {
    const int d = last - i;
    p->dims[i] = static_cast<cuuint64_t>(d == 0 ? lay.lc / rest_out : g.out[d]);
    if (i > 0) p->strides[i - 1] = stride;
    stride *= p->dims[i];
  }
  p->dims[nd] = static_cast<cuuint64_t>(C * g.kernel_size);
  p->dims[nd + 1] = static_cast<cuuint64_t>(nc);
  p->strides[nd - 1] = static_cast<cuuint64_t>(lay.row_stride * e);
  p->strides[nd] = static_cast<cuuint64_t>(lay.image_stride * e);
  return size_box_and_grid(e, kFoldSlots, multiprocessors, p);
}

}  // namespace im2col::cuda
