"""The depthwise kernels' applicability and the filter gradient's slice plan
(algorithm 7, lib/conv/depthwise/depthwise_conv.h), in pure Python for the
algorithm selection.

Both functions mirror lib/conv/depthwise/depthwise_plan.h exactly (keep in
sync with depthwise_applies and depthwise_filter_plan there);
tests/test_depthwise_plan.py compares them with the C++ on a grid of inputs.
"""

import math

import ml_dtypes  # noqa: F401  (numpy's bfloat16; a dependency of jax)
import numpy as np

# Keep in sync with lib/conv/depthwise/depthwise_plan.h.
FILL_BLOCKS = 1024  # kDwFillBlocks: blocks the slices aim at
RUN_CHANNELS = 32  # kDwRunChannels: the estimate of channels per block
PARTIALS_SHARE = 4  # kDwPartialsShare: partial sums <= 1/4 of dy's and x's bytes
MIN_PARTIAL_BYTES = 1 << 20  # kDwMinPartialBytes

OPS = ("forward", "input_gradient", "filter_gradient")
DTYPES = ("float16", "bfloat16", "float32", "float64")


def _supported(dtype) -> bool:
  try:
    return np.dtype(dtype).name in DTYPES
  except TypeError:
    return False


def depthwise_applies(*, op: str, nd: int, channels_last: bool, dtype, groups: int, c: int, o: int,
                      lhs_dilation) -> bool:
  """Whether the depthwise kernels take a call: one input and one output
  channel per group (groups == c == o), no lhs dilation, rank 1 to 3, float16,
  bfloat16, float32 or float64; any window, stride, dilation and padding,
  either layout. `op`: "forward", "input_gradient" or "filter_gradient".
  `lhs_dilation`: the window's, one per spatial dimension.
  Mirrors depthwise_applies in lib/conv/depthwise/depthwise_plan.h."""
  del channels_last  # both layouts
  if op not in OPS:
    return False
  if not 1 <= nd <= 3 or not _supported(dtype) or c < 1 or groups != c or o != c:
    return False
  return all(int(d) == 1 for d in tuple(lhs_dilation)[:nd])


def depthwise_filter_plan(*, n: int, out_spatial, c: int, kernel_size: int, dtype, channels_last: bool,
                          workspace_limit: int):
  """(rows_per_slice, slices, workspace_bytes) of the depthwise filter
  gradient: `rows_per_slice` output rows of the first spatial dimension of one
  image a slice (the call's `chunk_positions`), `slices` = n * ceil(out[0] /
  rows), and the bytes of their float32 (float64 for float64) partial sums,
  at least 1 (the call's workspace). `kernel_size`: the window's taps (the
  product of its extents). Enough slices for about FILL_BLOCKS blocks, few
  enough that the partial sums stay under a PARTIALS_SHARE-th of dy's and
  x's bytes (at least MIN_PARTIAL_BYTES) and under workspace_limit; at least
  one slice per image. The same plan for both layouts.
  Mirrors depthwise_filter_plan in lib/conv/depthwise/depthwise_plan.h."""
  del channels_last
  out_spatial = tuple(int(s) for s in out_spatial)
  n, c, kernel_size = int(n), int(c), int(kernel_size)
  d = np.dtype(dtype)
  acc = 8 if d == np.float64 else 4
  out_size = math.prod(out_spatial)
  out0 = out_spatial[0]
  if n < 1 or out0 < 1 or out_size < 1 or c < 1:
    slices = n * out0 if n > 0 and out0 > 0 else 0
    return 1, slices, max(1, slices * c * kernel_size * acc)
  runs = -(-c // RUN_CHANNELS)
  want = -(-FILL_BLOCKS // (n * runs))
  data = 2 * n * out_size * c * d.itemsize
  cap = min(int(workspace_limit), max(MIN_PARTIAL_BYTES, data // PARTIALS_SHARE))
  per_slice = c * kernel_size * acc
  cap_per_image = cap // per_slice // n
  per_image = max(1, min(out0, want, cap_per_image))
  rows = -(-out0 // per_image)
  per_image = -(-out0 // rows)
  slices = n * per_image
  return rows, slices, max(1, slices * per_slice)
