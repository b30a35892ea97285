"""How much scratch each convolution algorithm needs, and in what chunks it
runs: the mirror of the C++ side's workspace layouts (lib/conv/gemm/
conv_workspace.h, the implicit GEMMs' splits, the direct filter gradient's
slices). Every size is checked again by the handler, which refuses a buffer
that is too small. Pure functions of numbers; selection.py calls them.

Columns for a whole batch can be far larger than the batch itself, so the
im2col + GEMM path processes images in chunks (and, when one image's columns
exceed the cap, output positions in chunks), all inside one FFI call.
"""

from __future__ import annotations

import dataclasses

import numpy as np

# Keep in sync with lib/conv/gemm/conv_workspace.h.
BLAS_WORKSPACE_BYTES = 32 << 20
_ALIGN = 256
# The implicit GEMM's grid z bounds its groups x splits (kernel launch limit).
MAX_GROUPS_IMPLICIT = 65535


@dataclasses.dataclass(frozen=True)
class ChunkPlan:
  images: int
  positions: int
  workspace_bytes: int


def align(n: int) -> int:
  """n rounded up to the workspace alignment (kWorkspaceAlign)."""
  return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def plan_chunks(*, n: int, positions: int, cols_row_bytes: int, extra_row_bytes: int,
                limit: int, needs_columns: bool, groups: int, acc_bytes: int,
                image_bytes: int = 0) -> ChunkPlan:
  """Chunk sizes and the workspace (bytes) for one convolution call.

  cols_row_bytes: columns bytes per output position (C * K * element size);
  extra_row_bytes: other per-position scratch (the transposed output gradient);
  image_bytes: scratch per image of a chunk of whole images (a channels-last
  copy of x); acc_bytes: a fixed float32 accumulator.
  """
  per_position = cols_row_bytes + extra_row_bytes
  per_image = per_position * positions + image_bytes
  if not needs_columns or per_image == 0 or n == 0 or positions == 0:
    images, chunk_positions = max(n, 1), max(positions, 1)
  elif per_image <= limit:
    images, chunk_positions = max(1, min(n, limit // per_image)), positions
  else:
    chunk_positions = max(1, limit // per_position)
    if chunk_positions >= 8:
      chunk_positions -= chunk_positions % 8  # keeps 16-byte column rows
    images = 1
  cols = images * chunk_positions * cols_row_bytes if needs_columns else 0
  extra = images * chunk_positions * extra_row_bytes if needs_columns else 0
  image = images * image_bytes if needs_columns else 0
  total = (align(BLAS_WORKSPACE_BYTES) + align(3 * images * groups * 8) + align(cols)
           + align(extra) + align(image) + align(acc_bytes))
  return ChunkPlan(images, chunk_positions, total)


# Passes of one launch (kMaxPasses in lib/conv/implicit/implicit_gemm.h).
PASSES_PER_LAUNCH = 8


def implicit_splits(*, m, og, o, groups, reduction_bytes, limit, multiprocessors, passes=1):
  """Parts of the implicit GEMM's reduction (ImplicitConv::splits): where even
  its smallest tiles (64 x 64) of the m x og outputs per group and pass leave
  over half the multiprocessors without a block (a batch of one at 7 x 7,
  say) and the reduction spans at least 16 k-tiles of 128 bytes, enough parts
  of its 128 x 64 tiles for two blocks per multiprocessor, each part at least
  8 k-tiles, their float32 partial sums under the workspace cap. (Splitting
  grids of a wave or more measured no faster: docs/optimization-log.md, step 17; nor
  grids of most of one, whose second kernel, the sum, costs more than the
  idle multiprocessors: step 44.) passes: the phases of a strided input
  gradient, up to PASSES_PER_LAUNCH of which share a launch unsplit (a
  split reduction runs them one a launch, each with its own sum)."""
  sms = multiprocessors
  k_tiles = -(-reduction_bytes // 128)
  launch_passes = max(1, min(passes, PASSES_PER_LAUNCH))
  if 2 * launch_passes * -(-m // 64) * -(-og // 64) * groups >= sms or k_tiles < 16:
    return 1
  blocks = -(-m // 128) * -(-og // 64) * groups
  splits = min(8, -(-2 * sms // blocks), k_tiles // 8, MAX_GROUPS_IMPLICIT // groups)
  while splits > 1 and splits * m * o * 4 > limit:
    splits -= 1
  return max(1, splits)


# Channels-first 1-D convolutions (lib/conv/conv1d/conv_1d_cf.cu): tiles of
# CONV_1D_CF_POSITIONS positions. Keep in sync with conv_1d_cf.h.
CONV_1D_CF_POSITIONS = 128


def conv_1d_cf_slices(*, n, out_w, groups, o, kg, limit, multiprocessors):
  """The most parts of the channels-first 1-D filter gradient (the kernel
  writes as many as one wave of its blocks holds, within these): enough for
  four blocks per multiprocessor, at most one per tile of positions, their
  float32 sums (o x kg each) under the workspace cap."""
  tiles = n * -(-out_w // CONV_1D_CF_POSITIONS)
  slices = min(-(-4 * multiprocessors // groups), tiles, limit // max(1, o * kg * 4))
  return max(1, slices)


def images_per_chunk(n, per_image_bytes, limit):
  """Channels-first images an implicit GEMM makes channels-last at once: as
  many of the n as fit the workspace cap, at least one."""
  return max(1, min(n, limit // max(1, per_image_bytes)))


# The implicit filter gradient (lib/conv/implicit/implicit_filter_gradient.cu):
# tiles of 64 or 128 output channels (filter_tile_o) x 128 of the reduction,
# k-tiles of 32 positions.
FILTER_TILE_K, FILTER_POSITIONS = 128, 32


def filter_tile_o(og):
  """Output channels per tile of the implicit filter gradient (launch_for in
  lib/conv/implicit/implicit_filter_gradient.cu)."""
  return 128 if og >= 128 else 64


def implicit_filter_splits(*, m, og, kg, o, groups, limit, multiprocessors):
  """Parts of the implicit filter gradient's positions (m per call): the
  gradient's tiles (og x kg per group) are few (5 for 64 channels and a 3x3
  window), so enough parts for three blocks per multiprocessor, each at least
  8 k-tiles of positions, their float32 sums under the workspace cap."""
  tiles = -(-og // filter_tile_o(og)) * -(-kg // FILTER_TILE_K) * groups
  k_tiles = -(-m // FILTER_POSITIONS)
  splits = min(-(-3 * multiprocessors // tiles), k_tiles // 8, MAX_GROUPS_IMPLICIT // groups)
  while splits > 1 and splits * o * kg * 4 > limit:
    splits -= 1
  return max(1, splits)


# Direct filter gradient: partial sums per slice of output rows of one image
# (FilterSlices in lib/conv/direct/direct_conv.h), by one of three kernels (`kind`):
# - "depthwise_cf" stages about _TILE_POSITIONS (position, channel) pairs of
#   input per block in shared memory (keep in sync with kTileWork in
#   lib/common/tile.cuh); its slices span at most that many positions (one tile
#   band where it fits), so that each thread sums many positions before the
#   reduction. 2-D slices (the strip kernel of lib/conv/depthwise/depthwise_rows.cuh
#   for 3x3 and 5x5 filters at unit stride along rows) span about
#   _STRIP_POSITIONS: a block fills its tile before it computes, so many
#   small blocks keep more loads in flight than a few large ones. Where slices
#   split an image, their rows are whole strips of _STRIP_ROWS.
# - "depthwise_cl" (2-D, channels-last: depthwise_filter_cl_tile_kernel)
#   takes a slice and a few channels per block, in tiles of its rows staged in
#   shared memory: slices of about _DEPTHWISE_CL_POSITIONS positions, rows
#   spread evenly over an image's slices (each slice's last tile is as full
#   as the others).
# - "grouped" (grouped_conv.cu) takes one slice and one group per block:
#   slices of about _GROUPED_POSITIONS positions, fewer where the partial sums
#   would pass _GROUPED_PARTIALS elements.
# - "scalar" (every other direct case) gets about _DIRECT_FILTER_PAIRS
#   (slice, output channel) pairs in all: enough blocks to fill the GPU, few
#   enough partial sums to stay a small part of the traffic.
_DIRECT_FILTER_PAIRS = 1 << 17
_TILE_POSITIONS = 2048
_STRIP_ROWS = 8  # kStripRows in lib/conv/depthwise/depthwise_rows.cuh
_STRIP_POSITIONS = 1024
_DEPTHWISE_CL_POSITIONS = 1024
_GROUPED_POSITIONS = 512
_GROUPED_PARTIALS = 1 << 24


def direct_filter_slices(n, out_spatial, o, kind, taps=1):
  """(output rows per slice, number of slices) of the direct filter gradient;
  `taps`: filter elements per output channel (Cg * K)."""
  out0 = out_spatial[0]
  rest = int(np.prod(out_spatial[1:], dtype=np.int64))
  if kind == "depthwise_cf":
    positions = _STRIP_POSITIONS if len(out_spatial) == 2 else _TILE_POSITIONS
    rows = max(1, min(out0, positions // rest))
    if _STRIP_ROWS < rows < out0:  # whole strips for the strip kernel
      rows -= rows % _STRIP_ROWS
  elif kind == "depthwise_cl":
    rows = max(1, min(out0, _DEPTHWISE_CL_POSITIONS // rest))
    rows = -(-out0 // -(-out0 // rows))
  elif kind == "grouped":
    rows = max(1, min(out0, _GROUPED_POSITIONS // rest))
    per_image_cap = max(1, _GROUPED_PARTIALS // max(1, n * o * taps))
    rows = max(rows, -(-out0 // per_image_cap))
  else:
    per_image = max(1, min(out0, -(-max(1, _DIRECT_FILTER_PAIRS // o) // n)))
    rows = -(-out0 // per_image)
  return rows, n * -(-out0 // rows)
