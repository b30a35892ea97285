"""A 3-D U-Net (Cicek et al. 2016), channels-last: per level two 3x3x3
convolutions with BatchNorm and ReLU, 2x max pooling down, transposed
convolutions (kernel 2, stride 2) up, skip connections by concatenation,
a 1x1x1 convolution to per-voxel class scores."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import flax.linen as nn
import jax.numpy as jnp
from jax import lax

from .layers import batch_norm, conv_layer


class DoubleConv(nn.Module):
  """Two (3x3x3 convolution, BatchNorm, ReLU)."""
  features: int
  conv: Callable
  dtype: Any

  @nn.compact
  def __call__(self, x, train: bool):
    for _ in range(2):
      x = conv_layer(self.conv, self.dtype)(self.features, (3, 3, 3), padding=1, use_bias=False)(x)
      x = nn.relu(batch_norm(train, self.dtype)()(x))
    return x


class UNet3D(nn.Module):
  """Levels of `features` (e.g. 32-64-128) and a `bottleneck` level (256).

  The decoder's transposed convolution (kernel 2, stride 2, output twice the
  input) is the convolution of the input dilated by 2 (`input_dilation`, lax's
  lhs dilation) padded by 1 on each side, so it goes through `conv` too."""
  num_classes: int
  features: Sequence[int] = (32, 64, 128)
  bottleneck: int = 256
  conv: Callable = lax.conv_general_dilated
  dtype: Any = None

  @nn.compact
  def __call__(self, x, train: bool):
    conv = conv_layer(self.conv, self.dtype)
    skips = []
    for features in self.features:
      x = DoubleConv(features, self.conv, self.dtype)(x, train)
      skips.append(x)
      x = nn.max_pool(x, (2, 2, 2), (2, 2, 2))
    x = DoubleConv(self.bottleneck, self.conv, self.dtype)(x, train)
    for features, skip in zip(reversed(self.features), reversed(skips)):
      x = conv(features, (2, 2, 2), padding=1, input_dilation=2)(x)
      x = DoubleConv(features, self.conv, self.dtype)(jnp.concatenate([x, skip], axis=-1), train)
    return conv(self.num_classes, (1, 1, 1), padding=0)(x)
