"""Primitives whose eager evaluation runs their own jitted lowering."""

from __future__ import annotations

import functools

import jax
from jax.extend.core import Primitive


def make_primitive(name: str) -> Primitive:
  prim = Primitive(name)

  @functools.lru_cache(maxsize=256)
  def compiled(items):
    return jax.jit(functools.partial(prim.bind, **dict(items)))

  prim.def_impl(lambda *args, **params: compiled(tuple(sorted(params.items())))(*args))
  return prim
