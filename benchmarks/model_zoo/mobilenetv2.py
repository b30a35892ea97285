"""MobileNetV2 (inverted residuals, depthwise 3x3, BatchNorm, ReLU6),
channels-last, torchvision's layout."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import flax.linen as nn
import jax.numpy as jnp
from jax import lax

from .layers import batch_norm, conv_layer

# (expansion t, output channels c, repeats n, first stride s), as in the paper.
SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
            (6, 160, 3, 2), (6, 320, 1, 1))


def _divisible(value: float, divisor: int = 8) -> int:
  """torchvision's _make_divisible: the nearest multiple of 8, at most 10% down."""
  rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
  return rounded + divisor if rounded < 0.9 * value else rounded


class InvertedResidual(nn.Module):
  """1x1 expansion (when t > 1), 3x3 depthwise (strided), 1x1 linear
  projection; a residual when the shape is kept."""
  features: int
  strides: int
  expansion: int
  conv: Callable
  dtype: Any

  @nn.compact
  def __call__(self, x, train: bool):
    conv = conv_layer(self.conv, self.dtype)
    norm = batch_norm(train, self.dtype)
    hidden = x.shape[-1] * self.expansion
    y = x
    if self.expansion != 1:
      y = nn.relu6(norm()(conv(hidden, (1, 1), use_bias=False)(y)))
    y = conv(hidden, (3, 3), self.strides, padding=1, feature_group_count=hidden, use_bias=False)(y)
    y = nn.relu6(norm()(y))
    y = norm()(conv(self.features, (1, 1), use_bias=False)(y))
    return x + y if self.strides == 1 and x.shape[-1] == self.features else y


class MobileNetV2(nn.Module):
  """3x3 stride-2 stem (32 x width), the inverted-residual stages of
  `settings`, a 1x1 convolution to 1280 features, pool, dense classifier."""
  num_classes: int
  width: float = 1.0
  settings: Sequence[tuple[int, int, int, int]] = SETTINGS
  conv: Callable = lax.conv_general_dilated
  dtype: Any = None

  @nn.compact
  def __call__(self, x, train: bool):
    conv = conv_layer(self.conv, self.dtype)
    norm = batch_norm(train, self.dtype)
    x = nn.relu6(norm()(conv(_divisible(32 * self.width), (3, 3), 2, padding=1, use_bias=False)(x)))
    for expansion, channels, repeats, strides in self.settings:
      for i in range(repeats):
        x = InvertedResidual(_divisible(channels * self.width), strides if i == 0 else 1,
                             expansion, self.conv, self.dtype)(x, train)
    last = _divisible(1280 * max(1.0, self.width))
    x = nn.relu6(norm()(conv(last, (1, 1), use_bias=False)(x)))
    x = jnp.mean(x, axis=(1, 2))
    return nn.Dense(self.num_classes, dtype=self.dtype)(x)
