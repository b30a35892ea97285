"""Halo exchange for a spatial dimension sharded over mesh axes.

A convolution whose spatial dimension is split in p equal blocks computes
each block of its output from the matching block of its input and a few rows
(the halo) of the neighbouring blocks: one collective permute from the
previous shard for the rows before the block, one from the next shard for the
rows after it, each only where it is not empty (XLA's own convolution does
the same). Devices at the ends receive zeros, which are the convolution's
padding there.

The per-shard computation must be the same program on every shard, so the
halo is planned only where every shard's window lines up the same way:
stride x the output extent equal to lhs dilation x the input extent (true of
"SAME" padding at any stride, and of transposed convolutions), both extents
divisible by p, and halos no longer than one block. Elsewhere the dimension
is replicated (its operand gathered), never the whole operand.
"""

from __future__ import annotations

import dataclasses

from jax import lax

from ..common.geometry import dilated


@dataclasses.dataclass(frozen=True)
class Halo:
  """One sharded spatial dimension: `left` rows from the previous shard
  (negative: drop that many of the block's first rows), `right` from the
  next one; `padding`: the per-shard window's padding in that dimension."""
  left: int
  right: int
  padding: tuple[int, int]


def plan_halo(gradient_of_input: bool, kernel: int, stride: int, rhs_dilation: int,
              lhs_dilation: int, padding: tuple[int, int], in_extent: int, out_extent: int,
              parts: int) -> Halo | None:
  """The halo of one spatial dimension split in `parts`, or None where the
  shards' windows do not line up (the dimension is then replicated).

  in_extent / out_extent: the forward's input (x) and output (y) extents. A
  shard's window lines up with its block when stride x its output rows span
  exactly lhs_dilation x its input rows. The forward and the filter gradient
  exchange rows of x, the input gradient rows of dy; each shard's window then
  has its own padding in this dimension."""
  s, l = stride, lhs_dilation
  if parts <= 1 or out_extent * s != in_extent * l:
    return None
  if in_extent % parts or out_extent % parts:
    return None
  s_part, t_part = in_extent // parts, out_extent // parts
  kd = dilated(kernel, rhs_dilation)
  lo, _ = padding
  if not gradient_of_input:
    # Output row r reads dilated input position r s - lo + t rhs_dilation.
    left = lo // l
    right = ((t_part - 1) * s - lo + kd - 1) // l - (s_part - 1)
    rows = s_part + left + right
    lo2 = lo - left * l
    block, pad = s_part, (lo2, (t_part - 1) * s + kd - dilated(rows, l) - lo2)
  else:
    first = -((kd - 1 - lo) // s)            # ceil((lo - kd + 1) / s)
    last = (l * (s_part - 1) + lo) // s
    left, right = -first, last - (t_part - 1)
    lo2 = lo - first * s
    block, pad = t_part, (lo2, (last - first) * s + kd - dilated(s_part, l) - lo2)
  if max(left, right) > block or min(left, right) <= -block or block + left + right <= 0:
    return None
  return Halo(left, right, pad)


def exchange(v, axis: int, axes: tuple, parts: int, halo: Halo):
  """The block of `v` along `axis` extended by its halo from the
  neighbouring shards over mesh axes `axes` (one collective permute per
  non-empty side)."""
  n = v.shape[axis]
  start = max(0, -halo.left)
  stop = n - max(0, -halo.right)
  pieces = []
  if halo.left > 0:
    tail = lax.slice_in_dim(v, n - halo.left, n, axis=axis)
    pieces.append(lax.ppermute(tail, axes, [(j, j + 1) for j in range(parts - 1)]))
  pieces.append(v if (start, stop) == (0, n) else lax.slice_in_dim(v, start, stop, axis=axis))
  if halo.right > 0:
    head = lax.slice_in_dim(v, 0, halo.right, axis=axis)
    pieces.append(lax.ppermute(head, axes, [(j + 1, j) for j in range(parts - 1)]))
  return pieces[0] if len(pieces) == 1 else lax.concatenate(pieces, axis)
