"""ConvNeXt (7x7 depthwise, LayerNorm, inverted MLP, layer scale),
channels-last, the paper's layout without stochastic depth. ConvNeXt-T:
depths (3, 3, 9, 3), dims (96, 192, 384, 768)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import flax.linen as nn
import jax.numpy as jnp
from jax import lax

from .layers import conv_layer


class ConvNeXtBlock(nn.Module):
  """7x7 depthwise convolution, LayerNorm, dense 4x, GELU, dense back,
  layer scale (initially 1e-6), residual."""
  conv: Callable
  dtype: Any

  @nn.compact
  def __call__(self, x):
    dim = x.shape[-1]
    y = conv_layer(self.conv, self.dtype)(dim, (7, 7), padding=3, feature_group_count=dim)(x)
    y = nn.LayerNorm(epsilon=1e-6, dtype=self.dtype)(y)
    y = nn.gelu(nn.Dense(4 * dim, dtype=self.dtype)(y), approximate=False)
    y = nn.Dense(dim, dtype=self.dtype)(y)
    scale = self.param("layer_scale", nn.initializers.constant(1e-6), (dim,))
    return x + y * scale.astype(y.dtype)


class ConvNeXt(nn.Module):
  """4x4 stride-4 stem + LayerNorm; stages separated by LayerNorm + 2x2
  stride-2 convolutions; global average pool, LayerNorm, dense classifier.
  `train` is accepted for a uniform interface (no BatchNorm, no dropout)."""
  num_classes: int
  depths: Sequence[int] = (3, 3, 9, 3)
  dims: Sequence[int] = (96, 192, 384, 768)
  conv: Callable = lax.conv_general_dilated
  dtype: Any = None

  @nn.compact
  def __call__(self, x, train: bool):
    del train
    conv = conv_layer(self.conv, self.dtype)
    x = conv(self.dims[0], (4, 4), 4, padding=0)(x)
    x = nn.LayerNorm(epsilon=1e-6, dtype=self.dtype)(x)
    for stage, (depth, dim) in enumerate(zip(self.depths, self.dims)):
      if stage > 0:
        x = nn.LayerNorm(epsilon=1e-6, dtype=self.dtype)(x)
        x = conv(dim, (2, 2), 2, padding=0)(x)
      for _ in range(depth):
        x = ConvNeXtBlock(self.conv, self.dtype)(x)
    x = nn.LayerNorm(epsilon=1e-6, dtype=self.dtype)(jnp.mean(x, axis=(1, 2)))
    return nn.Dense(self.num_classes, dtype=self.dtype)(x)
