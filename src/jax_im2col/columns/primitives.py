"""The unfold (im2col) and fold (col2im) primitives.

Layouts (channels-first / channels-last):
  image    (N, C, *spatial)      / (N, *spatial, C)
  columns  (N, C * K, L)         / (N, L, K * C)
Channels-first columns are torch's: channel-major, then kernel taps
row-major; L runs over output positions row-major. Channels-last columns are
kernel taps row-major, then channels. fold is the exact transpose of unfold.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching, mlir

from ..common import ffi as _ffi
from ..common.config import get_algorithm
from ..common.geometry import Window
from ..common.primitive import empty_safe, make_primitive
from ..sharding import partitioned
from .fold_by_pads import fold_by_pads
from .fold_selection import XLA, fold_algorithm
from .unfold_by_slices import unfold_by_slices
from .unfold_selection import unfold_algorithm

unfold_p = make_primitive("im2col_unfold")
fold_p = make_primitive("im2col_fold")
# Their per-shard twins: what unfold_p and fold_p lower to, once per shard
# where the computation is partitioned (sharding/partitioned.py).
unfold_shard_p = make_primitive("im2col_unfold_shard")
fold_shard_p = make_primitive("im2col_fold_shard")


def image_spatial(shape, channels_last: bool) -> tuple[int, ...]:
  return tuple(shape[1:-1]) if channels_last else tuple(shape[2:])


def image_channels(shape, channels_last: bool) -> int:
  return shape[-1] if channels_last else shape[1]


def columns_shape(n: int, channels: int, window: Window, in_spatial, channels_last: bool):
  rows = channels * window.kernel_size
  positions = int(np.prod(window.output_spatial(in_spatial), dtype=np.int64))
  return (n, positions, rows) if channels_last else (n, rows, positions)


def image_shape(n: int, channels: int, spatial, channels_last: bool):
  return (n, *spatial, channels) if channels_last else (n, channels, *spatial)


def unfold(x, *, window: Window, channels_last: bool, algorithm: str | None = None):
  """unfold_p, with an algorithm setting (by default the trace's,
  config.get_algorithm) as a parameter: columns/unfold_selection.py reads it
  at lowering."""
  return unfold_p.bind(x, window=window, channels_last=channels_last,
                       algorithm=get_algorithm() if algorithm is None else algorithm)


def fold(cols, *, window: Window, channels_last: bool, spatial: tuple[int, ...],
         algorithm: str | None = None):
  """fold_p, with an algorithm setting (by default the trace's,
  config.get_algorithm) as a parameter: columns/fold_selection.py reads it
  at lowering."""
  return fold_p.bind(cols, window=window, channels_last=channels_last, spatial=spatial,
                     algorithm=get_algorithm() if algorithm is None else algorithm)


def _unfold_abstract(prim, x, *, window, channels_last, algorithm):
  shape = columns_shape(x.shape[0], image_channels(x.shape, channels_last), window,
                        image_spatial(x.shape, channels_last), channels_last)
  return partitioned.result_type(
      prim.name, dict(window=window, channels_last=channels_last, algorithm=algorithm), [x], shape,
      x.dtype)


def _fold_abstract(prim, cols, *, window, channels_last, spatial, algorithm):
  rows = cols.shape[2] if channels_last else cols.shape[1]
  shape = image_shape(cols.shape[0], rows // window.kernel_size, spatial, channels_last)
  return partitioned.result_type(
      prim.name, dict(window=window, channels_last=channels_last, spatial=spatial,
                      algorithm=algorithm), [cols], shape, cols.dtype)


for _prim in (unfold_p, unfold_shard_p):
  _prim.def_abstract_eval(functools.partial(_unfold_abstract, _prim))
for _prim in (fold_p, fold_shard_p):
  _prim.def_abstract_eval(functools.partial(_fold_abstract, _prim))


def _reshape_lowering(ctx, operand):
  """A 1x1 window with unit stride and no padding or dilation: columns and
  image hold the same elements in the same order, so either way is a reshape."""
  shape = ctx.avals_out[0].shape
  return mlir.lower_fun(lambda v: v.reshape(shape), multiple_results=False)(ctx, operand)


@empty_safe
def _unfold_lowering(ctx, x, *, window, channels_last, algorithm, platform):
  if window.is_identity:
    return _reshape_lowering(ctx, x)
  aval = ctx.avals_in[0]
  route, _ = unfold_algorithm(window, image_spatial(aval.shape, channels_last),
                              image_channels(aval.shape, channels_last), aval.dtype, channels_last,
                              platform, algorithm)
  if route == XLA:
    return mlir.lower_fun(functools.partial(unfold_by_slices, window=window, channels_last=channels_last),
                          multiple_results=False)(ctx, x)
  return jax.ffi.ffi_lowering(_ffi.UNFOLD)(ctx, x, channels_last=channels_last,
                                           **window.ffi_attributes())


@empty_safe
def _fold_lowering(ctx, cols, *, window, channels_last, spatial, algorithm, platform):
  if window.is_identity:
    return _reshape_lowering(ctx, cols)
  route, _ = fold_algorithm(window, spatial, ctx.avals_in[0].dtype, channels_last, platform,
                            algorithm)
  if route == XLA:
    return mlir.lower_fun(
        functools.partial(fold_by_pads, window=window, channels_last=channels_last,
                          spatial=spatial), multiple_results=False)(ctx, cols)
  return jax.ffi.ffi_lowering(_ffi.FOLD)(ctx, cols, channels_last=channels_last,
                                         **window.ffi_attributes())


def _identity_or(partitioned_rule):
  """A 1x1 identity window is a reshape, which XLA partitions itself."""
  def rule(ctx, operand, *, window, **params):
    if window.is_identity:
      return _reshape_lowering(ctx, operand)
    return partitioned_rule(ctx, operand, window=window, **params)
  return rule


def _register():
  from ..sharding.columns import ColumnsRules
  unfold_rule = partitioned.partitioned_lowering(unfold_p, unfold_shard_p,
                                                 ColumnsRules(unfold_shard_p, unfold=True))
  fold_rule = partitioned.partitioned_lowering(fold_p, fold_shard_p,
                                               ColumnsRules(fold_shard_p, unfold=False))
  for platform in ("cpu", "cuda"):
    mlir.register_lowering(unfold_shard_p, functools.partial(_unfold_lowering, platform=platform),
                           platform=platform)
    mlir.register_lowering(fold_shard_p, functools.partial(_fold_lowering, platform=platform),
                           platform=platform)
    mlir.register_lowering(unfold_p, _identity_or(unfold_rule), platform=platform)
    mlir.register_lowering(fold_p, _identity_or(fold_rule), platform=platform)


_register()


def _unfold_transpose(ct, x, *, window, channels_last, algorithm):
  assert ad.is_undefined_primal(x)
  if type(ct) is ad.Zero:
    return [ad.Zero(x.aval)]
  return [partitioned.like_primal(
      fold(ct, window=window, channels_last=channels_last,
           spatial=image_spatial(x.aval.shape, channels_last), algorithm=algorithm), x.aval)]


def _fold_transpose(ct, cols, *, window, channels_last, spatial, algorithm):
  assert ad.is_undefined_primal(cols)
  if type(ct) is ad.Zero:
    return [ad.Zero(cols.aval)]
  return [partitioned.like_primal(
      unfold(ct, window=window, channels_last=channels_last, algorithm=algorithm), cols.aval)]


def _linear_jvp(prim):
  """The JVP of a linear primitive for the inexact (float, complex) dtypes:
  the primitive applied to the tangent. An integer or bool operand follows
  JAX's rule for integers: its tangent is float0, and so is the output's,
  a symbolic zero (the primitive is never bound on a tangent of float0)."""
  def jvp(primals, tangents, **params):
    (x,), (t,) = primals, tangents
    y = prim.bind(x, **params)
    if type(t) is ad.Zero or not jnp.issubdtype(x.dtype, jnp.inexact):
      return y, ad.Zero(jax.core.ShapedArray(y.shape, y.dtype).to_tangent_aval())
    return y, prim.bind(t, **params)
  return jvp


# Transposes exist for the inexact dtypes only: JAX transposes no integer
# computation (an integer input's cotangent is float0 without one).
ad.deflinear2(unfold_p, _unfold_transpose)
ad.deflinear2(fold_p, _fold_transpose)
ad.primitive_jvps[unfold_p] = _linear_jvp(unfold_p)
ad.primitive_jvps[fold_p] = _linear_jvp(fold_p)


def _merge_into_batch(prim):
  """vmap by folding the mapped axis into the leading N axis: one call."""
  def rule(args, dims, **params):
    (x,), (d,) = args, dims
    x = jax.numpy.moveaxis(x, d, 0)
    b, n = x.shape[:2]
    out = prim.bind(x.reshape((b * n, *x.shape[2:])), **params)
    return out.reshape((b, n, *out.shape[1:])), 0
  return rule


batching.primitive_batchers[unfold_p] = _merge_into_batch(unfold_p)
batching.primitive_batchers[fold_p] = _merge_into_batch(fold_p)
