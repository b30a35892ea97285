"""The three convolution primitives: conv_forward, conv_backward_data and
conv_backward_filter, with their abstract evaluation and transpose rules
(batching rules: batching.py; lowering: lowering_cuda.py, lowering_cpu.py).

Canonical layouts (channels-first / channels-last), G groups:
  x  (N, C, *in)   / (N, *in, C)
  w  (O, C/G, *K)  / (O, *K, C/G)
  y  (N, O, *out)  / (N, *out, O)
conv_forward(x, w) = y; conv_backward_data(dy, w) = dx;
conv_backward_filter(dy, x) = dw. Each is bilinear, and the transpose of each
with respect to either operand is one of the three, so reverse mode, forward
mode and higher orders never leave this family: each op of every order is
lowered on its own, by the algorithm selection.py chooses for it.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad

from ..columns import primitives as columns
from ..common import jax_internals
from ..common.arguments import HALF_DTYPES
from ..common.geometry import Window
from ..common.primitive import make_primitive
from ..sharding import partitioned

PRECISION_DEFAULT = 0  # float32 may use TF32 tensor cores on the GPU
PRECISION_HIGHEST = 1  # full float32

FORWARD, INPUT_GRADIENT, FILTER_GRADIENT = "forward", "input_gradient", "filter_gradient"


@dataclasses.dataclass(frozen=True)
class ConvSpec:
  """What a convolution primitive carries besides its operands (hashable: a
  primitive param). algorithm: the user's setting at trace time ("auto",
  "own" or a name; common/config.py). batch_groups: 1, or lax's
  batch_group_count, equal to `groups`: then the image operand (x, dx) comes
  unstacked, G*M images of C channels, and the op is the grouped one on the
  stacked (M, G*C) images (stacking.py)."""
  window: Window
  channels_last: bool
  groups: int
  precision: int
  workspace_limit: int
  algorithm: str = "auto"
  batch_groups: int = 1

  def with_groups(self, groups: int) -> "ConvSpec":
    return dataclasses.replace(self, groups=groups)


conv_forward_p = make_primitive("im2col_conv_forward")
conv_backward_data_p = make_primitive("im2col_conv_backward_data")
conv_backward_filter_p = make_primitive("im2col_conv_backward_filter")
# Their per-shard twins, which the platform lowerings (lowering_cuda.py,
# lowering_cpu.py) lower: the outer primitives lower to them directly, or
# once per shard inside a custom_partitioning call where the computation is
# partitioned over a mesh (sharding/partitioned.py, sharding/conv.py).
conv_forward_shard_p = make_primitive("im2col_conv_forward_shard")
conv_backward_data_shard_p = make_primitive("im2col_conv_backward_data_shard")
conv_backward_filter_shard_p = make_primitive("im2col_conv_backward_filter_shard")

OPS = {conv_forward_p: FORWARD, conv_backward_data_p: INPUT_GRADIENT,
       conv_backward_filter_p: FILTER_GRADIENT}
SHARD_OPS = {conv_forward_shard_p: FORWARD, conv_backward_data_shard_p: INPUT_GRADIENT,
             conv_backward_filter_shard_p: FILTER_GRADIENT}


def _native_out(prim, in_dtype, out_dtype):
  """The result dtype the kernels produce for these operands."""
  if prim is conv_forward_p and in_dtype in HALF_DTYPES and out_dtype == np.float32:
    return np.dtype(np.float32)
  return in_dtype


def bind(prim, a, b, *, spec: ConvSpec, out_dtype, in_spatial=None):
  """Binds a conv primitive with operands of one dtype and a result dtype the
  kernels support, casting around it where the caller's dtypes differ."""
  out_dtype = np.dtype(out_dtype)
  common = np.dtype(jnp.promote_types(a.dtype, b.dtype))
  a, b = a.astype(common), b.astype(common)
  native = _native_out(prim, common, out_dtype)
  params = dict(spec=spec, out_dtype=native)
  if prim is conv_backward_data_p:
    params["in_spatial"] = tuple(in_spatial)
  out = bind_varying(prim, a, b, **params)
  return out if native == out_dtype else out.astype(out_dtype)


def bind_varying(prim, *operands, **params):
  """prim.bind with every operand varying over the union of the operands'
  manual axes (inside shard_map), as lax's binds do: the transpose of that
  cast is a psum, so the gradient of a filter replicated over the shards is
  summed over them."""
  axes = [jax_internals.varying_axes(jax.typeof(v)) for v in operands]
  union = frozenset().union(*axes)
  operands = [jax_internals.pvary(v, tuple(sorted(union - a))) for v, a in zip(operands, axes)]
  return prim.bind(*operands, **params)


# --- shapes ------------------------------------------------------------------

def filter_shape(o, cg, spec):
  k = spec.window.kernel
  return (o, *k, cg) if spec.channels_last else (o, cg, *k)


def _filter_in_channels(w_shape, spec):
  return w_shape[-1] if spec.channels_last else w_shape[1]


def forward_shape(x_shape, w_shape, spec):
  cl = spec.channels_last
  out = spec.window.output_spatial(columns.image_spatial(x_shape, cl))
  return columns.image_shape(x_shape[0] // spec.batch_groups, w_shape[0], out, cl)


def backward_data_shape(dy_shape, w_shape, spec, in_spatial):
  bg = spec.batch_groups
  c = _filter_in_channels(w_shape, spec) * (spec.groups // bg)
  return columns.image_shape(dy_shape[0] * bg, c, in_spatial, spec.channels_last)


def backward_filter_shape(dy_shape, x_shape, spec):
  cl = spec.channels_last
  o = columns.image_channels(dy_shape, cl)
  cg = columns.image_channels(x_shape, cl) * spec.batch_groups // spec.groups
  return filter_shape(o, cg, spec)


def _abstract(prim, shape_fn):
  def rule(a, b, *, spec, out_dtype, **extra):
    shape = shape_fn(a.shape, b.shape, spec, *extra.values())
    return partitioned.result_type(prim.name, dict(spec=spec, out_dtype=out_dtype, **extra),
                                   [a, b], shape, out_dtype)
  return rule


def forward_abstract(x, w, *, spec, out_dtype):
  return jax.core.ShapedArray(forward_shape(x.shape, w.shape, spec), out_dtype)


def backward_data_abstract(dy, w, *, spec, out_dtype, in_spatial):
  return jax.core.ShapedArray(backward_data_shape(dy.shape, w.shape, spec, in_spatial), out_dtype)


def backward_filter_abstract(dy, x, *, spec, out_dtype):
  return jax.core.ShapedArray(backward_filter_shape(dy.shape, x.shape, spec), out_dtype)


for _prims, _shape_fn in (((conv_forward_p, conv_forward_shard_p), forward_shape),
                          ((conv_backward_data_p, conv_backward_data_shard_p),
                           backward_data_shape),
                          ((conv_backward_filter_p, conv_backward_filter_shard_p),
                           backward_filter_shape)):
  for _prim in _prims:
    _prim.def_abstract_eval(_abstract(_prim, _shape_fn))


# --- transposes (JVPs follow from bilinearity) ---------------------------------

def _spatial_of(aval, spec):
  return columns.image_spatial(aval.shape, spec.channels_last)


def _like(out, primal):
  return partitioned.like_primal(out, primal.aval)


def _forward_t_x(ct, x, w, *, spec, out_dtype):
  return _like(bind(conv_backward_data_p, ct, w, spec=spec, out_dtype=x.aval.dtype,
                    in_spatial=_spatial_of(x.aval, spec)), x)


def _forward_t_w(ct, x, w, *, spec, out_dtype):
  return _like(bind(conv_backward_filter_p, ct, x, spec=spec, out_dtype=w.aval.dtype), w)


def _backward_data_t_dy(ct, dy, w, *, spec, out_dtype, in_spatial):
  return _like(bind(conv_forward_p, ct, w, spec=spec, out_dtype=dy.aval.dtype), dy)


def _backward_data_t_w(ct, dy, w, *, spec, out_dtype, in_spatial):
  return _like(bind(conv_backward_filter_p, dy, ct, spec=spec, out_dtype=w.aval.dtype), w)


def _backward_filter_t_dy(ct, dy, x, *, spec, out_dtype):
  return _like(bind(conv_forward_p, x, ct, spec=spec, out_dtype=dy.aval.dtype), dy)


def _backward_filter_t_x(ct, dy, x, *, spec, out_dtype):
  return _like(bind(conv_backward_data_p, dy, ct, spec=spec, out_dtype=x.aval.dtype,
                    in_spatial=_spatial_of(x.aval, spec)), x)


ad.defbilinear(conv_forward_p, _forward_t_x, _forward_t_w)
ad.defbilinear(conv_backward_data_p, _backward_data_t_dy, _backward_data_t_w)
ad.defbilinear(conv_backward_filter_p, _backward_filter_t_dy, _backward_filter_t_x)


def _register_partitioning():
  from jax.interpreters import mlir

  from ..sharding.conv import ConvRules
  inner = {conv_forward_p.name: conv_forward_shard_p,
           conv_backward_data_p.name: conv_backward_data_shard_p,
           conv_backward_filter_p.name: conv_backward_filter_shard_p}
  rules = ConvRules(inner)
  for outer in OPS:
    rule = partitioned.partitioned_lowering(outer, inner[outer.name], rules)
    for platform in ("cpu", "cuda"):
      mlir.register_lowering(outer, rule, platform=platform)


_register_partitioning()
