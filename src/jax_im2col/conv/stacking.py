"""Images stacked into channels: how a mapped axis (batching.py) and batch
groups become feature groups.

A batch-grouped convolution (lax's ``batch_group_count`` G) splits the batch,
group-major, into G groups of M images, and group g's images meet only the
filters of output-feature group g. Stacking the groups into the channels,
(G*M, C, *S) -> (M, G*C, *S), makes it a convolution of G feature groups.
The primitives take the image unstacked (``ConvSpec.batch_groups``), so that
the batch keeps its sharding on a mesh (sharding/batch_groups.py); the
per-shard primitives' lowerings stack what a shard holds just before its
kernel (``stacking_lowering``).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from jax.interpreters import mlir

from .primitives import FILTER_GRADIENT, FORWARD, INPUT_GRADIENT


def images_into_channels(v, cl):
  """(B, N, ...) -> (N, ..., B*C) on the channel axis."""
  b, n = v.shape[:2]
  if cl:
    v = jnp.moveaxis(v, 0, -2)  # (N, *S, B, C)
    return v.reshape((*v.shape[:-2], b * v.shape[-1]))
  v = jnp.moveaxis(v, 0, 1)  # (N, B, C, *S)
  return v.reshape((n, b * v.shape[2], *v.shape[3:]))


def images_from_channels(v, b, cl):
  """(N, ..., B*C) -> (B, N, ..., C)."""
  if cl:
    v = v.reshape((*v.shape[:-1], b, v.shape[-1] // b))
    return jnp.moveaxis(v, -2, 0)
  v = v.reshape((v.shape[0], b, v.shape[1] // b, *v.shape[2:]))
  return jnp.moveaxis(v, 1, 0)


def stack_groups(x, g: int, cl: bool):
  """(G*M, C, *S) -> (M, G*C, *S) (channels-last: channels last)."""
  return images_into_channels(x.reshape((g, x.shape[0] // g, *x.shape[1:])), cl)


def unstack_groups(v, g: int, cl: bool):
  """(M, G*C, *S) -> (G*M, C, *S), the inverse of stack_groups."""
  v = images_from_channels(v, g, cl)
  return v.reshape((v.shape[0] * v.shape[1], *v.shape[2:]))


def bind_stacked(op: str, bind, a, b, *, spec, **params):
  """One op of a batch-grouped convolution on unstacked images, as the
  feature-grouped op on stacked ones: `bind(a, b, spec=..., **params)` with
  spec.batch_groups == 1. Operands in the forward's roles: forward (x, w),
  input gradient (dy, w) -> dx, filter gradient (dy, x)."""
  g, cl = spec.batch_groups, spec.channels_last
  if g == 1:
    return bind(a, b, spec=spec, **params)
  flat = dataclasses.replace(spec, batch_groups=1)
  if op == FORWARD:
    return bind(stack_groups(a, g, cl), b, spec=flat, **params)
  if op == INPUT_GRADIENT:
    return unstack_groups(bind(a, b, spec=flat, **params), g, cl)
  assert op == FILTER_GRADIENT, op
  return bind(a, stack_groups(b, g, cl), spec=flat, **params)


def stacking_lowering(op: str, prim, rule):
  """`rule`, a platform lowering of the per-shard primitive `prim`, for
  batch-grouped calls too: those lower as the grouped op on stacked images."""
  def lowering(ctx, a, b, *, spec, **params):
    if spec.batch_groups == 1:
      return rule(ctx, a, b, spec=spec, **params)
    stacked = lambda u, v: bind_stacked(op, prim.bind, u, v, spec=spec, **params)
    return mlir.lower_fun(stacked, multiple_results=False)(ctx, a, b)
  return lowering
