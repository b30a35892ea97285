"""A WaveNet-style stack (van den Oord et al. 2016), channels-last 1-D:
causal dilated convolutions (kernel 2) with gated tanh * sigmoid units,
residual and skip 1x1 convolutions, per-step class scores."""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax.numpy as jnp
from jax import lax

from .layers import conv_layer


class GatedResidual(nn.Module):
  """Causal dilated convolution to filter and gate halves, tanh * sigmoid,
  then 1x1 convolutions to the residual and the skip outputs."""
  dilation: int
  conv: Callable
  dtype: Any

  @nn.compact
  def __call__(self, x):
    conv = conv_layer(self.conv, self.dtype)
    channels = x.shape[-1]
    h = conv(2 * channels, (2,), padding=((self.dilation, 0),), kernel_dilation=self.dilation)(x)
    z = jnp.tanh(h[..., :channels]) * nn.sigmoid(h[..., channels:])
    skip = conv(channels, (1,), padding=0)(z)
    return x + conv(channels, (1,), padding=0)(z), skip


class WaveNet(nn.Module):
  """A causal stem to `channels`, `stacks` stacks of dilations 1, 2, ...,
  2**(layers - 1), summed skips through ReLU, 1x1, ReLU, 1x1 to the classes.
  `train` is accepted for a uniform interface (no BatchNorm, no dropout)."""
  num_classes: int
  channels: int = 128
  stacks: int = 3
  layers: int = 10
  conv: Callable = lax.conv_general_dilated
  dtype: Any = None

  @nn.compact
  def __call__(self, x, train: bool):
    del train
    conv = conv_layer(self.conv, self.dtype)
    x = conv(self.channels, (2,), padding=((1, 0),))(x)
    skips = 0
    for _ in range(self.stacks):
      for layer in range(self.layers):
        x, skip = GatedResidual(2**layer, self.conv, self.dtype)(x)
        skips = skips + skip
    y = nn.relu(conv(self.channels, (1,), padding=0)(nn.relu(skips)))
    return conv(self.num_classes, (1,), padding=0)(y)
