"""``conv_general_dilated``: a drop-in for ``jax.lax.conv_general_dilated``
on the convolution primitives: arguments checked and brought to a canonical
layout, then one primitive per op, each lowered by the algorithm that
selection.py chooses for it."""

from __future__ import annotations

import dataclasses
import inspect
import operator
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from ..common.arguments import HALF_DTYPES, check_float_array, conv_dimension_numbers
from ..common.config import get_algorithm, get_workspace_limit
from ..common.geometry import (MAX_SPATIAL, Window, as_int_tuple, check_index_range,
                               check_lax_padding, resolve_padding, transposed_window)
from . import primitives as P

_HIGHEST_NAMES = {"highest", "float32", "high", "bfloat16_3x"}
_DEFAULT_NAMES = {"default", "fastest", "bfloat16", "tensorfloat32"}


def _precision_level(precision) -> int:
  """XLA's meaning: DEFAULT lets float32 use TF32 on the GPU; HIGH and
  HIGHEST keep full float32 here (cuBLAS has no 3-pass bf16 mode)."""
  if precision is None:
    precision = jax.config.jax_default_matmul_precision
    if precision is None:
      return P.PRECISION_DEFAULT
  if isinstance(precision, (tuple, list)):
    if len(precision) != 2:
      raise ValueError(f"precision must be None, a Precision, a string or a pair of them, got {precision!r}")
    return max(_precision_level(p) for p in precision)
  if isinstance(precision, lax.Precision):
    return P.PRECISION_DEFAULT if precision == lax.Precision.DEFAULT else P.PRECISION_HIGHEST
  if isinstance(precision, str):
    name = precision.lower()
    if name in _HIGHEST_NAMES:
      return P.PRECISION_HIGHEST
    if name in _DEFAULT_NAMES:
      return P.PRECISION_DEFAULT
  raise ValueError(f"precision must be None, a lax.Precision, one of "
                   f"{sorted(_HIGHEST_NAMES | _DEFAULT_NAMES)} or a pair of them, got {precision!r}")


def _positive_int(value, name: str) -> int:
  if isinstance(value, bool):
    raise TypeError(f"{name} must be an int, got {value!r}")
  try:
    v = operator.index(value)
  except TypeError:
    raise TypeError(f"{name} must be an int, got {value!r}") from None
  if v < 1:
    raise ValueError(f"{name} must be >= 1, got {value!r}")
  return v


def _layout_perms(lhs_spec, rhs_spec, out_spec, channels_last: bool):
  """Permutations taking the user's arrays to the canonical layout, and the
  canonical output back to the user's."""
  if channels_last:
    lhs = (lhs_spec[0], *lhs_spec[2:], lhs_spec[1])
    rhs = (rhs_spec[0], *rhs_spec[2:], rhs_spec[1])
    canon_out = (out_spec[0], *out_spec[2:], out_spec[1])
  else:
    lhs, rhs, canon_out = tuple(lhs_spec), tuple(rhs_spec), tuple(out_spec)
  return lhs, rhs, tuple(np.argsort(canon_out))


def _transpose(x, perm):
  return x if tuple(perm) == tuple(range(x.ndim)) else jnp.transpose(x, perm)


def _transposed_filter(w, groups: int, channels_last: bool):
  """A canonical filter (O, Cg, *K) / (O, *K, Cg) as the filter (C, Og, *K) /
  (C, *K, Og) of transposed_window's input gradient: in each group, input and
  output channels swapped and the taps reversed."""
  nd = w.ndim - 2
  og = w.shape[0] // groups
  v = w.reshape((groups, og, *w.shape[1:]))
  if channels_last:  # (G, Og, *K, Cg) -> (G, Cg, *K, Og)
    v = jnp.swapaxes(v, 1, nd + 2)
    return jnp.flip(v.reshape((-1, *v.shape[2:])), tuple(range(1, nd + 1)))
  v = jnp.swapaxes(v, 1, 2)  # (G, Og, Cg, *K) -> (G, Cg, Og, *K)
  return jnp.flip(v.reshape((-1, *v.shape[2:])), tuple(range(2, nd + 2)))


def _convolve(x, w, spec, out_dtype, in_spatial):
  """The forward on canonical operands. A transposed convolution (lhs
  dilation, unit stride) runs as the input gradient of the strided window
  (transposed_window), so that neither it nor its gradients multiply the
  zeros lhs dilation inserts; except where the result is wider than the
  operands (half types to float32), which only the forward produces
  natively, and for batch groups (the input gradient's image is its result,
  not its operand)."""
  strided = transposed_window(spec.window)
  out_spatial = spec.window.output_spatial(in_spatial)
  if (strided is None or out_dtype != x.dtype or x.size == 0 or w.size == 0
      or not all(out_spatial) or spec.batch_groups > 1):
    return P.bind(P.conv_forward_p, x, w, spec=spec, out_dtype=out_dtype)
  return P.bind(P.conv_backward_data_p, x, _transposed_filter(w, spec.groups, spec.channels_last),
                spec=dataclasses.replace(spec, window=strided), out_dtype=out_dtype,
                in_spatial=out_spatial)


def conv_general_dilated(lhs: ArrayLike, rhs: ArrayLike, window_strides: Sequence[int],
                         padding: str | Sequence[tuple[int, int]],
                         lhs_dilation: Sequence[int] | None = None,
                         rhs_dilation: Sequence[int] | None = None, dimension_numbers=None,
                         feature_group_count: int = 1, batch_group_count: int = 1, precision=None,
                         preferred_element_type=None, out_sharding=None) -> jax.Array:
  """A drop-in for :func:`jax.lax.conv_general_dilated`: the same arguments,
  result shape and dtype, computed by the project's kernels or XLA's,
  whichever the measured rules choose for each op (see :func:`explain`).

  Args:
    lhs: the input, rank 3 to 5 (1 to 3 spatial dimensions), laid out as
      ``dimension_numbers`` says (default ``NC...``).
    rhs: the filter, same rank (default ``OI...``), ``I`` = input features /
      ``feature_group_count``.
    window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
    feature_group_count, batch_group_count: as in lax. ``padding`` is
      ``"SAME"``, ``"SAME_LOWER"``, ``"VALID"`` or ``(low, high)`` pairs
      (negative allowed); ``lhs_dilation`` makes a transposed convolution,
      which runs as the input gradient of the strided window.
    precision: as in lax: float32 at ``DEFAULT`` may use TF32 tensor cores on
      the GPU, ``HIGH`` / ``HIGHEST`` keep full float32; None follows
      ``jax.default_matmul_precision``.
    preferred_element_type: the result's dtype, no narrower than the inputs'
      (float32 for half inputs gives the float32 accumulation).
    out_sharding: as in lax (where the installed jax has it).

  Returns:
    The convolution, shaped and typed as lax's.

  Channels-first (``NC...``) and channels-last (``N...C``) operands run
  natively; other layouts are transposed to the nearer one. dtypes: float16,
  bfloat16, float32, float64 (``lhs`` and ``rhs`` alike).

  Raises:
    TypeError: a non-float dtype, mismatched dtypes, or a narrower
      ``preferred_element_type``.
    ValueError: inconsistent ranks, features, groups, strides, dilations,
      padding or dimension numbers (the message names the argument); an
      algorithm forced by :func:`force_algorithm` that does not apply.
  """
  lhs = check_float_array(lhs, "lhs")
  rhs = check_float_array(rhs, "rhs")
  if lhs.dtype != rhs.dtype:
    raise TypeError(f"lhs and rhs must have the same dtype, got {lhs.dtype} and {rhs.dtype}")
  if lhs.ndim != rhs.ndim:
    raise ValueError(f"lhs and rhs must have the same rank, got shapes {lhs.shape} and {rhs.shape}")
  nd = lhs.ndim - 2
  if not 1 <= nd <= MAX_SPATIAL:
    raise ValueError(f"lhs must have rank 3 to {MAX_SPATIAL + 2}, got shape {lhs.shape}")
  strides = as_int_tuple(window_strides, nd, "window_strides")
  lhs_dil = (1,) * nd if lhs_dilation is None else as_int_tuple(lhs_dilation, nd, "lhs_dilation")
  rhs_dil = (1,) * nd if rhs_dilation is None else as_int_tuple(rhs_dilation, nd, "rhs_dilation")
  groups = _positive_int(feature_group_count, "feature_group_count")
  batch_groups = _positive_int(batch_group_count, "batch_group_count")
  if groups > 1 and batch_groups > 1:
    raise ValueError("at most one of feature_group_count and batch_group_count may exceed 1")
  level = _precision_level(precision)
  dnums = conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
  lhs_spec, rhs_spec, out_spec = dnums

  n, c = lhs.shape[lhs_spec[0]], lhs.shape[lhs_spec[1]]
  o, i = rhs.shape[rhs_spec[0]], rhs.shape[rhs_spec[1]]
  if c % groups or c // groups != i:
    raise ValueError(f"feature_group_count: lhs has {c} input features, which must equal "
                     f"feature_group_count ({groups}) x rhs input features ({i})")
  if o % groups:
    raise ValueError(f"feature_group_count: rhs output features ({o}) must be a multiple of "
                     f"feature_group_count ({groups})")
  if batch_groups > 1:
    if n % batch_groups or o % batch_groups:
      raise ValueError(f"batch_group_count: lhs batch ({n}) and rhs output features ({o}) must "
                       f"be multiples of batch_group_count ({batch_groups})")
    if c != i:
      raise ValueError(f"batch_group_count: lhs features ({c}) must equal rhs input features ({i})")

  in_spatial = tuple(lhs.shape[d] for d in lhs_spec[2:])
  kernel = tuple(rhs.shape[d] for d in rhs_spec[2:])
  pads = resolve_padding(padding, in_spatial, kernel, strides, rhs_dil, lhs_dil)
  window = Window(kernel, strides, rhs_dil, lhs_dil, pads)
  check_lax_padding(window, in_spatial, "padding")
  check_index_range(window, in_spatial, "conv_general_dilated")

  # Channels-last when the input's features are its last axis.
  channels_last = lhs_spec[1] == lhs.ndim - 1
  lhs_perm, rhs_perm, out_perm = _layout_perms(lhs_spec, rhs_spec, out_spec, channels_last)
  x = _transpose(lhs, lhs_perm)
  w = _transpose(rhs, rhs_perm)
  if batch_groups > 1:  # feature groups of stacked images (conv/stacking.py)
    groups = batch_groups

  out_dtype = np.dtype(lhs.dtype if preferred_element_type is None
                       else jax.dtypes.canonicalize_dtype(preferred_element_type))
  if out_dtype not in (np.float16, np.float32, np.float64, jnp.bfloat16):
    raise TypeError(f"preferred_element_type must be a floating dtype, got {preferred_element_type!r}")
  if out_dtype.itemsize < np.dtype(x.dtype).itemsize:
    raise TypeError(f"preferred_element_type must not be narrower than the inputs' {x.dtype}, "
                    f"got {out_dtype}")
  if out_dtype.itemsize > np.dtype(x.dtype).itemsize and not (
      np.dtype(x.dtype) in HALF_DTYPES and out_dtype == np.float32):
    x, w = x.astype(out_dtype), w.astype(out_dtype)  # e.g. float32 -> float64

  spec = P.ConvSpec(window=window, channels_last=channels_last, groups=groups, precision=level,
                    workspace_limit=get_workspace_limit(), algorithm=get_algorithm(),
                    batch_groups=batch_groups)
  y = _convolve(x, w, spec, out_dtype, in_spatial)
  y = _transpose(y, out_perm)
  if out_sharding is not None:
    y = jax.sharding.reshard(y, out_sharding)
  return y


if "out_sharding" not in inspect.signature(lax.conv_general_dilated).parameters:
  # Match the installed jax's signature exactly where it has no out_sharding.
  _full = conv_general_dilated

  def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None,  # noqa: F811
                           rhs_dilation=None, dimension_numbers=None, feature_group_count=1,
                           batch_group_count=1, precision=None, preferred_element_type=None):
    return _full(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                 dimension_numbers, feature_group_count, batch_group_count, precision,
                 preferred_element_type)

  conv_general_dilated.__doc__ = _full.__doc__
