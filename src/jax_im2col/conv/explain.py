"""``explain``: which algorithm runs each op of a convolution, and why."""

from __future__ import annotations

from typing import Optional

import jax

from ..common.device import default_platform, device_caps
from .api import conv_general_dilated
from .primitives import FILTER_GRADIENT, FORWARD, INPUT_GRADIENT, OPS
from .selection import Choice, problem_of, select


def _conv_eqns(jaxpr):
  for eqn in jaxpr.eqns:
    if eqn.primitive in OPS:
      yield eqn
    for sub in _sub_jaxprs(eqn.params):
      yield from _conv_eqns(sub)


def _sub_jaxprs(params):
  """The jaxprs a higher-order primitive (jit, custom_jvp, ...) carries."""
  for value in params.values():
    for v in value if isinstance(value, (tuple, list)) else (value,):
      inner = getattr(v, "jaxpr", v)
      if hasattr(inner, "eqns"):
        yield inner


def _choice(closed, platform) -> Choice:
  eqns = list(_conv_eqns(closed.jaxpr))
  if len(eqns) != 1:
    raise AssertionError(f"expected one convolution primitive, found {len(eqns)}")
  eqn = eqns[0]
  problem = problem_of(OPS[eqn.primitive], eqn.params["spec"], [v.aval for v in eqn.invars],
                       eqn.outvars[0].aval)
  return select(problem, device_caps(platform))


def explain(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
            dimension_numbers=None, feature_group_count=1, batch_group_count=1, precision=None,
            preferred_element_type=None, *, platform: Optional[str] = None) -> dict[str, Choice]:
  """The algorithm that runs each op of this convolution, and why.

  Takes the arguments of :func:`conv_general_dilated` (``lhs`` and ``rhs`` may
  be arrays or ``jax.ShapeDtypeStruct``), and ``platform``: "cuda" or "cpu"
  (default: JAX's default backend; "cuda" on a machine without a GPU shows
  the plan a current non-Hopper GPU gets). The settings in force
  (``force_algorithm``, the workspace limit) apply, as they would to a call.

  Returns ``{"forward": Choice, "input_gradient": Choice,
  "filter_gradient": Choice}``; each ``Choice`` has ``algorithm`` ("xla" is
  XLA's own convolution), ``reason``, and the chunk and workspace sizes its
  call carries. Raises what :func:`conv_general_dilated` raises for bad
  arguments, and ValueError where a forced algorithm does not apply.
  """
  platform = platform or default_platform()
  if platform not in ("cuda", "cpu"):
    raise ValueError(f"platform must be 'cuda' or 'cpu', got {platform!r}")
  x = jax.ShapeDtypeStruct(lhs.shape, lhs.dtype)
  w = jax.ShapeDtypeStruct(rhs.shape, rhs.dtype)

  def conv(a, b):
    return conv_general_dilated(a, b, window_strides, padding, lhs_dilation, rhs_dilation,
                                dimension_numbers, feature_group_count, batch_group_count,
                                precision, preferred_element_type)

  y = jax.eval_shape(conv, x, w)
  forward = jax.make_jaxpr(conv)(x, w)
  wrt_x = jax.make_jaxpr(lambda b, ct: jax.linear_transpose(lambda a: conv(a, b), x)(ct))(w, y)
  wrt_w = jax.make_jaxpr(lambda a, ct: jax.linear_transpose(lambda b: conv(a, b), w)(ct))(x, y)
  return {FORWARD: _choice(forward, platform), INPUT_GRADIENT: _choice(wrt_x, platform),
          FILTER_GRADIENT: _choice(wrt_w, platform)}
