"""Where XLA's own convolution (cuDNN on the GPU) is the faster choice for an
op: rules drawn from measurements, each citing them. benchmarks/routing.py
measures every algorithm of the project against XLA per op on a corpus of
model layers and writes the data these rules come from.

The rules speak of classes of convolutions, not single shapes, so that they
hold for the shapes between the measured ones; an op outside every rule keeps
the project's kernels.
"""

from __future__ import annotations

from typing import Optional

from ..common.device import DeviceCaps


def _dense_2d_channels_last(p) -> bool:
  w = p.spec.window
  return (p.spec.channels_last and p.spec.groups == 1 and w.nd == 2
          and all(d == 1 for d in w.rhs_dilation) and all(d == 1 for d in w.lhs_dilation))


def xla_is_faster(p, own_algorithm: str, device: DeviceCaps) -> Optional[str]:
  """Why XLA's convolution should run op p instead of `own_algorithm`, or
  None where the project's kernel is the one to run."""
  if device.platform != "cuda":
    return None
  if _dense_2d_channels_last(p):
    return ("dense 2-D channels-last convolution without dilation: cuDNN's kernels, with "
            "XLA's layout assignment, were faster per layer on ResNet-50 and MobileNetV2 "
            "(shared/models-h200.md, 2026-11-27)")
  return None
