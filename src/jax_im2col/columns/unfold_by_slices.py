"""unfold written in lax, for XLA to compile: the image padded once (the lhs
dilation as interior padding, negative padding as a crop), one strided slice
per tap, stacked in the columns' order. It moves data only, so it equals the
project's unfold kernels bit for bit in every dtype; it is the plain-JAX peer
that benchmarks/bench.py times as "jax" (columns/unfold_selection.py says
where it runs).
"""

from __future__ import annotations

import itertools

import jax.numpy as jnp
from jax import lax

from ..common.geometry import Window


def unfold_by_slices(x, *, window: Window, channels_last: bool):
  """unfold_p's result for the image x."""
  nd = window.nd
  first = 1 if channels_last else 2
  spatial = x.shape[first:first + nd]
  out = window.output_spatial(spatial)
  config = [(0, 0, 0)] * x.ndim
  for d in range(nd):
    lo, hi = window.padding[d]
    config[first + d] = (lo, hi, window.lhs_dilation[d] - 1)
  padded = lax.pad(x, jnp.zeros((), x.dtype), config)
  taps = []
  for offsets in itertools.product(*(range(k) for k in window.kernel)):
    start, limit, strides = [0] * x.ndim, list(padded.shape), [1] * x.ndim
    for d in range(nd):
      start[first + d] = offsets[d] * window.rhs_dilation[d]
      limit[first + d] = start[first + d] + (out[d] - 1) * window.stride[d] + 1
      strides[first + d] = window.stride[d]
    taps.append(lax.slice(padded, start, limit, strides))
  n = x.shape[0]
  if channels_last:  # (N, *out, K, C) -> (N, L, K * C)
    return jnp.stack(taps, axis=first + nd).reshape((n, -1, window.kernel_size * x.shape[-1]))
  return jnp.stack(taps, axis=2).reshape((n, x.shape[1] * window.kernel_size, -1))  # (N, C, K, *out)
