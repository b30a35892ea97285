"""The whole models of the model benchmark, each at three presets.

`full` is the reference size (shared/models-h200.md; the distinct
convolutions of ResNet-50, MobileNetV2 and ConvNeXt-T there are exactly these
models'); `small` shrinks batch, inputs, widths and depths so that a step
takes milliseconds on a 2-core CPU (a run there is compile-bound: some 20
programs a model, 1-2 CPU-minutes a model for f32 and bf16); `tiny` is
smaller still, for the tests.
Every preset keeps each model's kinds of convolution (strides, groups,
dilations, transposed convolutions).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from .convnext import ConvNeXt
from .mobilenetv2 import MobileNetV2
from .resnet import ResNet
from .unet3d import UNet3D
from .wavenet import WaveNet

PRESETS = ("full", "small", "tiny")


@dataclasses.dataclass(frozen=True)
class Preset:
  """One model size: batch, one example's channels-last shape, classes, and
  the module's remaining fields."""
  batch: int
  input_shape: tuple[int, ...]
  num_classes: int
  options: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """A model: its flax module, whether it has a label per position (per voxel,
  per step) or per example, and its presets."""
  name: str
  title: str
  module: type[nn.Module]
  dense_labels: bool
  presets: dict[str, Preset]

  def build(self, preset: str, conv: Callable, dtype: Any) -> nn.Module:
    """The module at `preset`, convolving with `conv`, computing in `dtype`."""
    p = self.presets[preset]
    return self.module(num_classes=p.num_classes, conv=conv, dtype=dtype, **p.options)

  def batch(self, preset: str, seed: int):
    """A random input batch (float32, standard normal) and its int32 labels,
    drawn by numpy (nothing for XLA to compile)."""
    p = self.presets[preset]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((p.batch, *p.input_shape), np.float32)
    label_shape = (p.batch, *p.input_shape[:-1]) if self.dense_labels else (p.batch,)
    return jnp.asarray(x), jnp.asarray(rng.integers(0, p.num_classes, label_shape, np.int32))


_SMALL_MOBILENET = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 1, 2), (6, 64, 1, 2), (6, 96, 1, 1),
                    (6, 160, 1, 2), (6, 320, 1, 1))

MODELS = {spec.name: spec for spec in (
    ModelSpec("resnet50", "ResNet-50 (bottleneck, BN)", ResNet, False, {
        "full": Preset(64, (224, 224, 3), 1000),
        "small": Preset(2, (64, 64, 3), 10, dict(stage_sizes=(1, 1, 1, 1), width=8)),
        "tiny": Preset(2, (16, 16, 3), 5, dict(stage_sizes=(1, 1), width=4)),
    }),
    ModelSpec("mobilenetv2", "MobileNetV2 (BN, ReLU6, depthwise)", MobileNetV2, False, {
        "full": Preset(64, (224, 224, 3), 1000),
        "small": Preset(2, (64, 64, 3), 10, dict(width=0.25, settings=_SMALL_MOBILENET)),
        "tiny": Preset(2, (16, 16, 3), 5, dict(width=0.25, settings=_SMALL_MOBILENET[:2])),
    }),
    ModelSpec("convnext_t", "ConvNeXt-T (LayerNorm, 7x7 depthwise)", ConvNeXt, False, {
        "full": Preset(32, (224, 224, 3), 1000),
        "small": Preset(2, (64, 64, 3), 10, dict(depths=(1, 1, 1, 1), dims=(16, 32, 64, 128))),
        "tiny": Preset(2, (16, 16, 3), 5, dict(depths=(1, 1), dims=(8, 16))),
    }),
    ModelSpec("unet3d", "3-D U-Net (BN, transposed-conv decoder)", UNet3D, True, {
        "full": Preset(2, (64, 64, 64, 1), 2),
        "small": Preset(1, (16, 16, 16, 1), 2, dict(features=(4, 8, 16), bottleneck=32)),
        "tiny": Preset(1, (4, 4, 4, 1), 2, dict(features=(2,), bottleneck=4)),
    }),
    ModelSpec("wavenet", "WaveNet (gated, causal dilated 1-D)", WaveNet, True, {
        "full": Preset(8, (16000, 1), 256),
        "small": Preset(2, (1024, 1), 32, dict(channels=16, stacks=2, layers=5)),
        "tiny": Preset(2, (16, 1), 8, dict(channels=4, stacks=1, layers=2)),
    }),
)}
