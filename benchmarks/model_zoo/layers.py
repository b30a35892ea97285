"""The layers every model of the zoo builds its convolutions and norms with.

A model takes `conv` (a function with `jax.lax.conv_general_dilated`'s
signature: lax's own, or `jax_im2col.conv_general_dilated`) and `dtype` (the
compute dtype; None: that of the inputs and parameters) and makes its layers
through `conv_layer` and `batch_norm`, so that every convolution, transposed
ones included, goes through `conv`.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax.numpy as jnp
from jax import lax

# flax's nn.Conv has taken the convolution as a field for years, marked
# deprecated; LaxConv stands in wherever a flax release has dropped it.
FLAX_CONV_TAKES_FUNCTION = "conv_general_dilated" in nn.Conv.__dataclass_fields__


def conv_layer(conv: Callable, dtype: Any) -> Callable[..., nn.Module]:
  """A constructor of channels-last convolution layers (nn.Conv's fields;
  padding an int or explicit pairs) that convolve with `conv` in `dtype`."""
  cls = nn.Conv if FLAX_CONV_TAKES_FUNCTION else LaxConv
  return functools.partial(cls, conv_general_dilated=conv, dtype=dtype)


def batch_norm(train: bool, dtype: Any) -> Callable[..., nn.Module]:
  """BatchNorm as the reference models use it (momentum 0.9, eps 1e-5): batch
  statistics in training, the running averages in evaluation."""
  return functools.partial(nn.BatchNorm, use_running_average=not train, momentum=0.9,
                           epsilon=1e-5, dtype=dtype)


def _spatial(value, nd: int) -> tuple[int, ...]:
  return (value,) * nd if isinstance(value, int) else tuple(value)


class LaxConv(nn.Module):
  """nn.Conv's convolution (the same parameters, initialisers, layout and
  dtype promotion) calling `conv_general_dilated` with lax's signature; one
  batch dimension, padding an int or explicit (low, high) pairs."""
  features: int
  kernel_size: Sequence[int]
  strides: int | Sequence[int] = 1
  padding: int | Sequence[tuple[int, int]] = 0
  input_dilation: int | Sequence[int] = 1
  kernel_dilation: int | Sequence[int] = 1
  feature_group_count: int = 1
  use_bias: bool = True
  dtype: Any = None
  param_dtype: Any = jnp.float32
  precision: Any = None
  conv_general_dilated: Callable = lax.conv_general_dilated

  @nn.compact
  def __call__(self, x):
    nd = len(self.kernel_size)
    kernel_shape = (*self.kernel_size, x.shape[-1] // self.feature_group_count, self.features)
    kernel = self.param("kernel", nn.initializers.lecun_normal(), kernel_shape, self.param_dtype)
    bias = (self.param("bias", nn.initializers.zeros_init(), (self.features,), self.param_dtype)
            if self.use_bias else None)
    x, kernel, bias = nn.dtypes.promote_dtype(x, kernel, bias, dtype=self.dtype)
    padding = ([(self.padding, self.padding)] * nd if isinstance(self.padding, int)
               else [tuple(p) for p in self.padding])
    channels_last = (0, nd + 1, *range(1, nd + 1))
    y = self.conv_general_dilated(
        x, kernel, _spatial(self.strides, nd), padding,
        lhs_dilation=_spatial(self.input_dilation, nd),
        rhs_dilation=_spatial(self.kernel_dilation, nd),
        dimension_numbers=lax.ConvDimensionNumbers(channels_last, (nd + 1, nd, *range(nd)),
                                                   channels_last),
        feature_group_count=self.feature_group_count, precision=self.precision)
    return y if bias is None else y + bias
