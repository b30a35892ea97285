"""ResNet-50 (bottleneck blocks, BatchNorm), channels-last.

The layout of flax's ImageNet example and torchvision's ResNet v1.5: the
stride sits on each stage's first 3x3 convolution and its 1x1 projection.
Every BatchNorm scale starts at one (the example zeroes the last one of each
block, which would make the blocks' convolution gradients exactly zero at
initialisation and leave them unchecked by the agreement checks).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import flax.linen as nn
import jax.numpy as jnp
from jax import lax

from .layers import batch_norm, conv_layer


class Bottleneck(nn.Module):
  """1x1 -> 3x3 (strided) -> 1x1 (x4 features), each with BatchNorm, plus a
  projected or identity shortcut."""
  features: int
  strides: int
  conv: Callable
  dtype: Any

  @nn.compact
  def __call__(self, x, train: bool):
    conv = conv_layer(self.conv, self.dtype)
    norm = batch_norm(train, self.dtype)
    y = nn.relu(norm()(conv(self.features, (1, 1), use_bias=False)(x)))
    y = nn.relu(norm()(conv(self.features, (3, 3), self.strides, padding=1, use_bias=False)(y)))
    y = norm()(conv(4 * self.features, (1, 1), use_bias=False)(y))
    if x.shape[-1] != 4 * self.features or self.strides != 1:
      x = norm()(conv(4 * self.features, (1, 1), self.strides, use_bias=False)(x))
    return nn.relu(x + y)


class ResNet(nn.Module):
  """7x7 stride-2 stem, 3x3 max pool, bottleneck stages, global average pool,
  dense classifier. ResNet-50: stage_sizes (3, 4, 6, 3), width 64."""
  num_classes: int
  stage_sizes: Sequence[int] = (3, 4, 6, 3)
  width: int = 64
  conv: Callable = lax.conv_general_dilated
  dtype: Any = None

  @nn.compact
  def __call__(self, x, train: bool):
    conv = conv_layer(self.conv, self.dtype)
    x = conv(self.width, (7, 7), 2, padding=3, use_bias=False)(x)
    x = nn.relu(batch_norm(train, self.dtype)()(x))
    x = nn.max_pool(x, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
    for stage, blocks in enumerate(self.stage_sizes):
      for block in range(blocks):
        strides = 2 if stage > 0 and block == 0 else 1
        x = Bottleneck(self.width * 2**stage, strides, self.conv, self.dtype)(x, train)
    x = jnp.mean(x, axis=(1, 2))
    return nn.Dense(self.num_classes, dtype=self.dtype)(x)
