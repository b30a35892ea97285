"""Every distinct convolution of a model, timed alone.

The model is traced once (jax.eval_shape of its training-mode forward) with a
recording convolution, which collects each distinct call (shapes, dtype and
lax's arguments) and how many times the model makes it. Each is then timed
alone, ours and XLA interleaved: the forward jitted, and the VJP (gradients
of both inputs) jitted. Where jax_im2col has `explain`, each row also gets
the algorithm ours picks for the forward, input gradient and filter gradient,
and the input and filter gradients are timed apart, to weigh the share of
ours' convolution time spent in the project's own kernels.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jax_im2col
from model_zoo import ModelSpec

from .problem import COMPUTE_DTYPES, IMPLS
from .timing import calls, interleaved, summarize

EXPLAINED_OPS = {"forward": "fwd", "input_gradient": "dgrad", "filter_gradient": "wgrad"}


@dataclasses.dataclass(frozen=True)
class ConvCall:
  """One distinct convolution: the operands' shapes and dtype and the rest of
  lax.conv_general_dilated's arguments (hashable)."""
  lhs_shape: tuple[int, ...]
  rhs_shape: tuple[int, ...]
  dtype: str
  window_strides: tuple[int, ...]
  padding: Any
  lhs_dilation: Any
  rhs_dilation: Any
  dimension_numbers: Any
  feature_group_count: int
  batch_group_count: int
  precision: Any
  preferred_element_type: Any

  def kwargs(self) -> dict:
    """The arguments after (lhs, rhs), by name."""
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)[3:]}

  def describe(self) -> dict:
    """JSON-ready: tuples as lists, the rest as strings."""
    def plain(v):
      if isinstance(v, (tuple, list)):
        return [plain(e) for e in v]
      return v if v is None or isinstance(v, (int, float, str)) else str(v)
    return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


def _tuple(v):
  return None if v is None else tuple(int(e) for e in v)


class ConvRecorder:
  """A convolution with lax's signature that counts each distinct call it
  gets (`uses`, in order of first use) and computes it with lax."""

  def __init__(self):
    self.uses: dict[ConvCall, int] = {}

  def __call__(self, lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
               dimension_numbers=None, feature_group_count=1, batch_group_count=1,
               precision=None, preferred_element_type=None):
    call = ConvCall(
        tuple(lhs.shape), tuple(rhs.shape), jnp.dtype(lhs.dtype).name, _tuple(window_strides),
        padding if isinstance(padding, str) else tuple(_tuple(p) for p in padding),
        _tuple(lhs_dilation), _tuple(rhs_dilation), dimension_numbers, feature_group_count,
        batch_group_count, precision, preferred_element_type)
    self.uses[call] = self.uses.get(call, 0) + 1
    return lax.conv_general_dilated(lhs, rhs, **call.kwargs())


def record_convs(spec: ModelSpec, preset: str, dtype: str) -> dict[ConvCall, int]:
  """The distinct convolutions of one training-mode forward of the model
  (without compiling or computing anything) and each one's number of uses."""
  p = spec.presets[preset]
  x = jax.ShapeDtypeStruct((p.batch, *p.input_shape), jnp.float32)
  reference = spec.build(preset, IMPLS["xla"], COMPUTE_DTYPES[dtype])
  variables = jax.eval_shape(lambda key, x: reference.init(key, x, train=False),
                             jax.random.key(0, impl="rbg"), x)
  recorder = ConvRecorder()
  module = spec.build(preset, recorder, COMPUTE_DTYPES[dtype])
  state = [k for k in variables if k != "params"]
  jax.eval_shape(lambda v, x: module.apply(v, x, train=True, mutable=state), variables, x)
  return recorder.uses


def _ops(conv: Callable, call: ConvCall) -> dict[str, Callable]:
  kwargs = call.kwargs()

  def f(lhs, rhs):
    return conv(lhs, rhs, **kwargs)
  return {"fwd": jax.jit(f),
          "bwd": jax.jit(lambda lhs, rhs, g: jax.vjp(f, lhs, rhs)[1](g)),
          "dgrad": jax.jit(lambda lhs, rhs, g: jax.vjp(lambda l: f(l, rhs), lhs)[1](g)),
          "wgrad": jax.jit(lambda lhs, rhs, g: jax.vjp(lambda r: f(lhs, r), rhs)[1](g))}


def explain(call: ConvCall) -> dict | None:
  """jax_im2col.explain's algorithm and reason per op, None without it."""
  if not hasattr(jax_im2col, "explain"):
    return None
  lhs, rhs = jnp.zeros(call.lhs_shape, call.dtype), jnp.zeros(call.rhs_shape, call.dtype)
  kwargs = call.kwargs()
  info = jax_im2col.explain(lhs, rhs, kwargs.pop("window_strides"), kwargs.pop("padding"), **kwargs)
  return {op: {"algorithm": info[op].algorithm, "reason": info[op].reason} for op in EXPLAINED_OPS}


def time_conv(call: ConvCall, steps: int, repeats: int, split_gradients: bool) -> dict:
  """ms per call (summarize's fields) of ours and XLA for "fwd" and "bwd",
  and with `split_gradients` also "dgrad" and "wgrad" (each gradient alone)."""
  rng = np.random.default_rng(0)

  def normal(shape):
    return jnp.asarray(rng.standard_normal(shape, np.float32), call.dtype)
  lhs, rhs = normal(call.lhs_shape), normal(call.rhs_shape)
  ops = {impl: _ops(conv, call) for impl, conv in IMPLS.items()}
  g = normal(jax.eval_shape(ops["xla"]["fwd"], lhs, rhs).shape)
  names = ("fwd", "bwd", "dgrad", "wgrad") if split_gradients else ("fwd", "bwd")
  out = {}
  for name in names:
    args = (lhs, rhs) if name == "fwd" else (lhs, rhs, g)
    out[name] = summarize(interleaved({impl: calls(ops[impl][name], *args) for impl in ops},
                                      steps, repeats))
  return out


def own_kernel_share(rows: list[dict]) -> float | None:
  """Of ours' convolution time (each op's time x the layer's uses, summed),
  the share in ops whose algorithm is not "xla"; None without `explain`
  columns or with a failed row."""
  own = total = 0.0
  for row in rows:
    if row.get("explain") is None or "dgrad" not in row.get("times", {}):
      return None
    for op, name in EXPLAINED_OPS.items():
      t = row["uses"] * row["times"][name]["ours_ms"]
      total += t
      own += t if row["explain"][op]["algorithm"] != "xla" else 0.0
  return own / total if total else None


def per_layer(spec: ModelSpec, preset: str, dtype: str, steps: int, repeats: int,
              log: Callable[[str], None]) -> dict:
  """Rows (call, uses, times, explain; or error) for every distinct
  convolution of the model, and ours' share in its own kernels."""
  uses = record_convs(spec, preset, dtype)
  log(f"{spec.name} {dtype} per-layer: {len(uses)} distinct convolutions, "
      f"{sum(uses.values())} uses")
  rows = []
  for i, (call, n) in enumerate(uses.items()):
    row = {"call": call.describe(), "uses": n}
    try:
      row["explain"] = explain(call)
      row["times"] = time_conv(call, steps, repeats, split_gradients=row["explain"] is not None)
      t = row["times"]
      log(f"  [{i + 1}/{len(uses)}] x{call.lhs_shape} w{call.rhs_shape}: ours/XLA fwd "
          f"{t['fwd']['ratio']:.2f}, bwd {t['bwd']['ratio']:.2f}")
    except Exception as e:  # one layer's failure must not lose the others
      row["error"] = f"{type(e).__name__}: {e}"
      log(f"  [{i + 1}/{len(uses)}] x{call.lhs_shape} w{call.rhs_shape}: {row['error']}")
    rows.append(row)
  return {"convs": rows, "own_kernel_share": own_kernel_share(rows)}
