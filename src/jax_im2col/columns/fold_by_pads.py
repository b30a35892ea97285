"""fold written in lax, for XLA to compile: each tap's columns padded into the
image's frame (the transpose of unfold's strided slice: interior padding for
the stride, low and high padding for the tap's offset, negative where the
window's padding is cropped), summed tap by tap in increasing order in a wide
accumulator and rounded once, then every lhs_dilation-th element kept.

XLA fuses it into one loop kernel. In float32 it is plain JAX's VJP of pad +
strided slices + stack; in half precision that VJP adds in the columns' type,
rounding after every addition, where this sums in float32 and rounds once.
The project's fold kernels make the same sums in the same order, so the two
routes give equal results (columns/fold_selection.py says where each runs).
"""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..common.geometry import Window, dilated

# The real floating types this formulation takes, and the type each sums in.
ACCUMULATORS = {
    np.dtype(jnp.float16): np.dtype(np.float32),
    np.dtype(jnp.bfloat16): np.dtype(np.float32),
    np.dtype(np.float32): np.dtype(np.float32),
    np.dtype(np.float64): np.dtype(np.float64),
}


def fold_by_pads(cols, *, window: Window, channels_last: bool, spatial):
  """fold_p's result for `cols` of a type in ACCUMULATORS."""
  acc = ACCUMULATORS[np.dtype(cols.dtype)]
  nd, k = window.nd, window.kernel_size
  out = window.output_spatial(spatial)
  n = cols.shape[0]
  if channels_last:
    c = cols.shape[2] // k
    taps, tap_axis, first = cols.reshape((n, *out, k, c)), nd + 1, 1
  else:
    c = cols.shape[1] // k
    taps, tap_axis, first = cols.reshape((n, c, k, *out)), 2, 2
  frame = [dilated(s, l) for s, l in zip(spatial, window.lhs_dilation)]
  total = None
  for t, offsets in enumerate(itertools.product(*(range(kk) for kk in window.kernel))):
    tap = lax.index_in_dim(taps, t, tap_axis, keepdims=False).astype(acc)
    config = [(0, 0, 0)] * tap.ndim
    for d in range(nd):
      lo = offsets[d] * window.rhs_dilation[d] - window.padding[d][0]
      span = dilated(out[d], window.stride[d])
      config[first + d] = (lo, frame[d] - lo - span, window.stride[d] - 1)
    placed = lax.pad(tap, jnp.zeros((), acc), config)
    total = placed if total is None else total + placed
  if any(l != 1 for l in window.lhs_dilation):
    strides = [1] * total.ndim
    for d in range(nd):
      strides[first + d] = window.lhs_dilation[d]
    total = lax.slice(total, [0] * total.ndim, total.shape, strides)
  return total.astype(cols.dtype)
