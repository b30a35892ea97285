"""Each convolution op computed by XLA's own convolution, on the canonical
operands: the route the selection takes where cuDNN is the faster choice
(and "xla" when forced). The gradients are lax's own transposes of the
forward (jax.linear_transpose), so XLA sees exactly what its autodiff of
lax.conv_general_dilated would give it, and cuDNN runs them with XLA's layout
assignment and autotuning."""

from __future__ import annotations

import jax
from jax import lax

from ..columns.primitives import image_channels, image_shape
from .primitives import PRECISION_HIGHEST, filter_shape


def _dimension_numbers(spec):
  """lax's dimension numbers of the canonical layouts."""
  nd = spec.window.nd
  if spec.channels_last:  # x (N, *S, C), w (O, *K, Cg), y (N, *S, O)
    image = (0, nd + 1, *range(1, nd + 1))
    return lax.ConvDimensionNumbers(image, image, image)
  image = tuple(range(nd + 2))
  return lax.ConvDimensionNumbers(image, image, image)


def forward(x, w, *, spec, out_dtype):
  win = spec.window
  precision = lax.Precision.HIGHEST if spec.precision == PRECISION_HIGHEST else None
  return lax.conv_general_dilated(
      x, w, win.stride, win.padding, lhs_dilation=win.lhs_dilation,
      rhs_dilation=win.rhs_dilation, dimension_numbers=_dimension_numbers(spec),
      feature_group_count=spec.groups, precision=precision,
      preferred_element_type=None if out_dtype == x.dtype else out_dtype)


def input_gradient(dy, w, *, spec, out_dtype, in_spatial):
  cl = spec.channels_last
  c = image_channels(w.shape, cl) * spec.groups  # w (O, *K, Cg) or (O, Cg, *K)
  x = jax.ShapeDtypeStruct(image_shape(dy.shape[0], c, in_spatial, cl), out_dtype)
  return jax.linear_transpose(lambda v: forward(v, w, spec=spec, out_dtype=dy.dtype), x)(dy)[0]


def filter_gradient(dy, x, *, spec, out_dtype):
  cl = spec.channels_last
  w = jax.ShapeDtypeStruct(filter_shape(image_channels(dy.shape, cl),
                                        image_channels(x.shape, cl) // spec.groups, spec),
                           out_dtype)
  return jax.linear_transpose(lambda v: forward(x, v, spec=spec, out_dtype=dy.dtype), w)(dy)[0]
