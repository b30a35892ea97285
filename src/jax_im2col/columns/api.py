"""Public unfold / fold (torch semantics, N-d, both layouts) and
conv_general_dilated_patches (lax semantics)."""

from __future__ import annotations

import operator

import jax.numpy as jnp
import numpy as np

from ..common.arguments import check_columns_array, conv_dimension_numbers
from ..common.geometry import (MAX_SPATIAL, Window, as_int_tuple, check_index_range,
                               check_lax_padding, padding_pairs, resolve_padding)
from . import primitives

def _spatial_rank(kernel_size) -> int:
  try:
    operator.index(kernel_size)
    return 2  # an int kernel_size means 2-D, as in torch
  except TypeError:
    pass
  try:
    nd = len(kernel_size)
  except TypeError:
    raise TypeError(f"kernel_size must be an int or a tuple of ints, got {kernel_size!r}") from None
  if not 1 <= nd <= MAX_SPATIAL:
    raise ValueError(f"kernel_size must have 1 to {MAX_SPATIAL} entries, got {kernel_size!r}")
  return nd


def _torch_window(kernel_size, dilation, padding, stride) -> Window:
  nd = _spatial_rank(kernel_size)
  return Window(kernel=as_int_tuple(kernel_size, nd, "kernel_size"),
                stride=as_int_tuple(stride, nd, "stride"),
                rhs_dilation=as_int_tuple(dilation, nd, "dilation"),
                lhs_dilation=(1,) * nd,
                padding=padding_pairs(padding, nd, "padding"))


def _check_fits(window: Window, spatial, name: str) -> None:
  if not window.fits(spatial):
    raise ValueError(f"{name}: the dilated kernel {window.kernel} (dilation {window.rhs_dilation}) "
                     f"is larger than the padded input {tuple(spatial)} (padding {window.padding})")
  check_index_range(window, spatial, name)


def _add_batch(x, rank: int, name: str, what: str):
  if x.ndim == rank + 1:
    return x, False
  if x.ndim == rank:
    return x[None], True
  raise ValueError(f"{name} must have rank {rank} ({what}) or {rank + 1} (batched), got shape {x.shape}")


def _unfold_public(x, kernel_size, dilation, padding, stride, channels_last: bool):
  window = _torch_window(kernel_size, dilation, padding, stride)
  x = check_columns_array(x, "x", "unfold_channels_last" if channels_last else "unfold")
  what = "(*spatial, C)" if channels_last else "(C, *spatial)"
  x, unbatched = _add_batch(x, window.nd + 1, "x", what)
  _check_fits(window, primitives.image_spatial(x.shape, channels_last), "unfold")
  out = primitives.unfold(x, window=window, channels_last=channels_last)
  return out[0] if unbatched else out


def _fold_public(cols, output_size, kernel_size, dilation, padding, stride, channels_last: bool):
  window = _torch_window(kernel_size, dilation, padding, stride)
  spatial = as_int_tuple(output_size, window.nd, "output_size")
  cols = check_columns_array(cols, "cols", "fold_channels_last" if channels_last else "fold")
  cols, unbatched = _add_batch(cols, 2, "cols", "(L, K*C)" if channels_last else "(C*K, L)")
  _check_fits(window, spatial, "fold")
  rows = cols.shape[2] if channels_last else cols.shape[1]
  positions = cols.shape[1] if channels_last else cols.shape[2]
  K = window.kernel_size
  if rows % K:
    raise ValueError(f"cols: its {'last' if channels_last else 'second'} dimension ({rows}) must be a "
                     f"multiple of prod(kernel_size) = {K}")
  expected = int(np.prod(window.output_spatial(spatial), dtype=np.int64))
  if positions != expected:
    raise ValueError(f"cols: L = {positions} does not match the {expected} windows that fit in "
                     f"output_size {spatial}")
  out = primitives.fold(cols, window=window, channels_last=channels_last, spatial=spatial)
  return out[0] if unbatched else out


def unfold(x, kernel_size, dilation=1, padding=0, stride=1):
  """Sliding windows of ``x`` as columns: ``torch.nn.functional.unfold`` in 1-3-D.

  ``x`` is ``(N, C, *spatial)`` or ``(C, *spatial)``; an int ``kernel_size``
  means two spatial dimensions. Returns ``(N, C * prod(kernel_size), L)``:
  channel-major, then kernel taps row-major; L runs over output positions
  row-major. ``padding`` is an int, a tuple (symmetric) or (low, high) pairs.

  dtypes: every one of ``jax_im2col.COLUMNS_DTYPES`` (bool, int8-int64,
  uint8-uint64, float8_e4m3fn, float8_e5m2, float16, bfloat16, float32,
  float64, complex64, complex128); others raise TypeError. The result is an
  exact copy of the input's elements, bit for bit, padding zeros (False for
  bool). Differentiable for the float and complex dtypes; for integer and
  bool inputs JAX's rules for integers apply (``jax.grad`` refuses them,
  ``allow_int=True`` and ``jax.jvp`` give float0 tangents).
  """
  return _unfold_public(x, kernel_size, dilation, padding, stride, channels_last=False)


def fold(cols, output_size, kernel_size, dilation=1, padding=0, stride=1):
  """Sums columns back into an image: ``torch.nn.functional.fold`` in 1-3-D.

  The exact transpose of :func:`unfold`; overlapping windows sum, as a
  deterministic gather (each element's taps in a fixed order). The sum by
  dtype (any of ``jax_im2col.COLUMNS_DTYPES``, as :func:`unfold`):

  - float16, bfloat16, float8_e4m3fn, float8_e5m2: accumulated in float32,
    rounded once to the dtype (round to nearest even; float8_e4m3fn, which
    has no infinity, overflows to NaN, as ``astype`` does); float32 in
    float32, float64 in float64;
  - complex64 / complex128: in their own precision;
  - integers: modulo 2**bits, i.e. numpy's sum in a wide integer cast back
    to the dtype (wrap-around: int8 100 + 100 is -56);
  - bool: logical or, numpy's addition of bools: True where any window
    that covers the element holds True there.
  """
  return _fold_public(cols, output_size, kernel_size, dilation, padding, stride, channels_last=False)


def unfold_channels_last(x, kernel_size, dilation=1, padding=0, stride=1):
  """:func:`unfold` for channels-last images (the same dtypes).

  ``x`` is ``(N, *spatial, C)`` or ``(*spatial, C)``; returns
  ``(N, L, prod(kernel_size) * C)``: one row per output position, kernel taps
  row-major, channels fastest, so that ``cols @ w.reshape(-1, O)`` with ``w``
  of shape ``(*kernel_size, C, O)`` is the convolution.
  """
  return _unfold_public(x, kernel_size, dilation, padding, stride, channels_last=True)


def fold_channels_last(cols, output_size, kernel_size, dilation=1, padding=0, stride=1):
  """The exact transpose of :func:`unfold_channels_last`: ``(N, L, K*C)`` to
  ``(N, *output_size, C)``; dtypes and sums as :func:`fold`."""
  return _fold_public(cols, output_size, kernel_size, dilation, padding, stride, channels_last=True)


def _optional_tuple(value, nd: int, name: str):
  return (1,) * nd if value is None else as_int_tuple(value, nd, name)


def conv_general_dilated_patches(lhs, filter_shape, window_strides, padding, lhs_dilation=None,
                                 rhs_dilation=None, dimension_numbers=None, precision=None,
                                 preferred_element_type=None):
  """``jax.lax.conv_general_dilated_patches`` with the same signature, shape
  and ordering, computed as an exact copy (``precision`` has no effect), for
  every dtype :func:`unfold` takes (lax's, a one-hot convolution, takes no
  integer or bool images on GPUs)."""
  del precision  # data movement is exact at any precision
  lhs = check_columns_array(lhs, "lhs", "conv_general_dilated_patches")
  nd = lhs.ndim - 2
  if not 1 <= nd <= MAX_SPATIAL:
    raise ValueError(f"lhs must have rank 3 to {MAX_SPATIAL + 2}, got shape {lhs.shape}")
  filter_shape = as_int_tuple(filter_shape, nd, "filter_shape")
  strides = as_int_tuple(window_strides, nd, "window_strides")
  lhs_dil = _optional_tuple(lhs_dilation, nd, "lhs_dilation")
  rhs_dil = _optional_tuple(rhs_dilation, nd, "rhs_dilation")
  dnums = conv_dimension_numbers(lhs.shape, (1, 1, *filter_shape), dimension_numbers)
  lhs_spec, rhs_spec, out_spec = dnums
  # As in lax, filter_shape lists the rhs array's spatial axes in axis order,
  # and the patch features are ordered channel, then those axes in that order.
  rhs_axes = [a for a in range(nd + 2) if a not in rhs_spec[:2]]
  rank_of = [rhs_axes.index(a) for a in rhs_spec[2:]]  # spatial dim -> rhs axis rank
  kernel = tuple(filter_shape[r] for r in rank_of)
  x = jnp.transpose(lhs, lhs_spec)  # (N, C, *spatial)
  pads = resolve_padding(padding, x.shape[2:], kernel, strides, rhs_dil, lhs_dil)
  window = Window(kernel, strides, rhs_dil, lhs_dil, pads)
  check_lax_padding(window, x.shape[2:], "padding")
  check_index_range(window, x.shape[2:], "conv_general_dilated_patches")
  out_spatial = window.output_spatial(x.shape[2:])
  n, c = x.shape[:2]
  cols = primitives.unfold(x, window=window, channels_last=False)
  if rank_of != sorted(rank_of):
    cols = cols.reshape((n, c, *kernel, cols.shape[-1]))
    cols = jnp.transpose(cols, (0, 1, *(2 + np.argsort(rank_of)), nd + 2))
  out = cols.reshape((n, c * window.kernel_size, *out_spatial))
  out = jnp.transpose(out, np.argsort(out_spec))
  if preferred_element_type is not None:
    out = out.astype(preferred_element_type)
  return out
