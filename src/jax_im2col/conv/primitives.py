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
from ..common.arguments import HALF_DTYPES
from ..common.geometry import Window
from ..common.primitive import make_primitive

PRECISION_DEFAULT = 0  # float32 may use TF32 tensor cores on the GPU
PRECISION_HIGHEST = 1  # full float32

FORWARD, INPUT_GRADIENT, FILTER_GRADIENT = "forward", "input_gradient", "filter_gradient"


@dataclasses.dataclass(frozen=True)
class ConvSpec:
  """What a convolution primitive carries besides its operands (hashable: a
  primitive param). algorithm: the user's setting at trace time ("auto",
  "own" or a name; common/config.py)."""
  window: Window
  channels_last: bool
  groups: int
  precision: int
  workspace_limit: int
  algorithm: str = "auto"

  def with_groups(self, groups: int) -> "ConvSpec":
    return dataclasses.replace(self, groups=groups)


conv_forward_p = make_primitive("im2col_conv_forward")
conv_backward_data_p = make_primitive("im2col_conv_backward_data")
conv_backward_filter_p = make_primitive("im2col_conv_backward_filter")

OPS = {conv_forward_p: FORWARD, conv_backward_data_p: INPUT_GRADIENT,
       conv_backward_filter_p: FILTER_GRADIENT}


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
  out = prim.bind(a, b, **params)
  return out if native == out_dtype else out.astype(out_dtype)


# --- shapes ------------------------------------------------------------------

def filter_shape(o, cg, spec):
  k = spec.window.kernel
  return (o, *k, cg) if spec.channels_last else (o, cg, *k)


def _filter_in_channels(w_shape, spec):
  return w_shape[-1] if spec.channels_last else w_shape[1]


def forward_abstract(x, w, *, spec, out_dtype):
  cl = spec.channels_last
  out = spec.window.output_spatial(columns.image_spatial(x.shape, cl))
  return jax.core.ShapedArray(columns.image_shape(x.shape[0], w.shape[0], out, cl), out_dtype)


def backward_data_abstract(dy, w, *, spec, out_dtype, in_spatial):
  c = _filter_in_channels(w.shape, spec) * spec.groups
  return jax.core.ShapedArray(
      columns.image_shape(dy.shape[0], c, in_spatial, spec.channels_last), out_dtype)


def backward_filter_abstract(dy, x, *, spec, out_dtype):
  cl = spec.channels_last
  o = columns.image_channels(dy.shape, cl)
  cg = columns.image_channels(x.shape, cl) // spec.groups
  return jax.core.ShapedArray(filter_shape(o, cg, spec), out_dtype)


conv_forward_p.def_abstract_eval(forward_abstract)
conv_backward_data_p.def_abstract_eval(backward_data_abstract)
conv_backward_filter_p.def_abstract_eval(backward_filter_abstract)


# --- transposes (JVPs follow from bilinearity) ---------------------------------

def _spatial_of(aval, spec):
  return columns.image_spatial(aval.shape, spec.channels_last)


def _forward_t_x(ct, x, w, *, spec, out_dtype):
  return bind(conv_backward_data_p, ct, w, spec=spec, out_dtype=x.aval.dtype,
              in_spatial=_spatial_of(x.aval, spec))


def _forward_t_w(ct, x, w, *, spec, out_dtype):
  return bind(conv_backward_filter_p, ct, x, spec=spec, out_dtype=w.aval.dtype)


def _backward_data_t_dy(ct, dy, w, *, spec, out_dtype, in_spatial):
  return bind(conv_forward_p, ct, w, spec=spec, out_dtype=dy.aval.dtype)


def _backward_data_t_w(ct, dy, w, *, spec, out_dtype, in_spatial):
  return bind(conv_backward_filter_p, dy, ct, spec=spec, out_dtype=w.aval.dtype)


def _backward_filter_t_dy(ct, dy, x, *, spec, out_dtype):
  return bind(conv_forward_p, x, ct, spec=spec, out_dtype=dy.aval.dtype)


def _backward_filter_t_x(ct, dy, x, *, spec, out_dtype):
  return bind(conv_backward_data_p, dy, ct, spec=spec, out_dtype=x.aval.dtype,
              in_spatial=_spatial_of(x.aval, spec))


ad.defbilinear(conv_forward_p, _forward_t_x, _forward_t_w)
ad.defbilinear(conv_backward_data_p, _backward_data_t_dy, _backward_data_t_w)
ad.defbilinear(conv_backward_filter_p, _backward_filter_t_dy, _backward_filter_t_x)
