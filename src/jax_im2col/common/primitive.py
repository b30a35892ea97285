"""What every primitive of the package shares: eager evaluation through its
own jitted lowering, and lowering rules that tolerate empty arrays."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import mlir


def make_primitive(name: str) -> Primitive:
  """A primitive whose eager application compiles and runs its lowering
  (cached per parameter set)."""
  prim = Primitive(name)

  @functools.lru_cache(maxsize=256)
  def compiled(items):
    return jax.jit(functools.partial(prim.bind, **dict(items)))

  prim.def_impl(lambda *args, **params: compiled(tuple(sorted(params.items())))(*args))
  return prim


def empty_safe(rule):
  """A lowering rule that emits a zero fill instead of a custom call when an
  operand or result is empty (XLA may pass null buffers for them, and there
  is nothing to compute)."""
  @functools.wraps(rule)
  def wrapped(ctx, *args, **params):
    if any(a.size == 0 for a in (*ctx.avals_in, *ctx.avals_out)):
      out = ctx.avals_out[0]
      zeros = mlir.lower_fun(lambda *_: jnp.zeros(out.shape, out.dtype), multiple_results=False)
      return zeros(ctx, *args)
    return rule(ctx, *args, **params)
  return wrapped
