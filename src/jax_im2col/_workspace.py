"""The workspace cap of the convolution and the chunk plan derived from it.

Columns for a whole batch can be far larger than the batch itself, so the
convolution processes images in chunks (and, when one image's columns exceed
the cap, output positions in chunks). The cap is read at trace time and
becomes part of the traced computation, so changing it retraces.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import jax
import numpy as np

DEFAULT_WORKSPACE_LIMIT = 256 << 20
_ENV = "JAX_IM2COL_WORKSPACE_LIMIT"

# Keep in sync with lib/conv_workspace.h.
BLAS_WORKSPACE_BYTES = 32 << 20
_ALIGN = 256

_limit = jax.make_user_context(default_value=None)


def _check(nbytes) -> int:
  if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 1:
    raise ValueError(f"workspace limit must be a positive number of bytes, got {nbytes!r}")
  return int(nbytes)


def get_workspace_limit() -> int:
  """Bytes of columns one convolution call may hold at once."""
  if _limit.value is not None:
    return _limit.value
  env = os.environ.get(_ENV)
  return _check(int(env)) if env else DEFAULT_WORKSPACE_LIMIT


def set_workspace_limit(nbytes: int | None) -> None:
  """Sets the cap for convolutions traced from now on (None: the default)."""
  _limit.set_global(None if nbytes is None else _check(nbytes))


@contextlib.contextmanager
def workspace_limit(nbytes: int):
  """Context manager form of :func:`set_workspace_limit`."""
  with _limit(_check(nbytes)):
    yield


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
