"""Where XLA's own convolution (cuDNN on the GPU) is the faster choice for an
op: rules drawn from measurements.

benchmarks/routing.py times every op of every distinct convolution of the
model benchmark's five models, and with --suite the benchmark suite's in
both layouts, with the project's kernels and with XLA's, side by side
(BENCHMARKS.md, "Routing"; raw data in benchmarks/results/). The rules speak
of classes of convolutions rather than single shapes, so that they hold
between the measured shapes; an op outside every rule keeps the project's
kernels, which is where XLA is weak: most channels-first ops, dilated,
transposed, grouped and large-window depthwise convolutions, 1-D (but 1x1)
and 3-D. Each rule quotes the geometric mean of own / XLA it rests on (H200,
2026-11-27 and 2026-11-29; f32 is float32 at DEFAULT precision), or the whole
model's train step where that decided it (benchmarks/models.py,
benchmarks/routing_ab.py): a custom call also costs the fusions XLA makes
into its own convolution.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..common.device import DeviceCaps

# Fewest input channels of a dense convolution that is no stem.
_STEM_CHANNELS = 4
# Taps per channel from which a depthwise convolution is compute-bound enough
# for the project's register-blocked kernels (5x5 and up; 3x3 is
# memory-bound, where the rules below decide by dtype, op and map).
_DEPTHWISE_MIN_TAPS = 25
# The half-precision depthwise filter gradients of large windows that run faster on
# XLA's convolution: maps of 14 to 28 a side, windows of at most 7x7 (the measured
# class: ConvNeXt-T's; the 56² and 7² maps' are 0.68x and 0.39x XLA's time on the
# project's tensor-core filter gradient; routing_ab's own_large_filter_14_28 keeps
# these on it).
_LARGE_FILTER_SIDES = (14, 28)
_CUDNN_MAX_TAPS = 49
# The half-precision 3x3 depthwise filter gradients at unit stride that run faster on
# XLA's convolution: maps of more than 14 and at most 28 a side (the measured class:
# MobileNetV2's 28x28x192; its 14² and 56² layers are faster on the project's kernels;
# optimization log, step 128).
_HALF_FILTER_3X3_SIDES = (15, 28)
# Smallest side of a map from which a float32 stride-2 depthwise filter gradient
# runs faster on XLA's convolution.
_LARGE_STRIDED_FILTER_SIDE = 112
# Largest side of a map on which a half-precision dense forward runs faster on
# XLA's convolution.
_SMALLEST_MAP = 7
# Bytes of one tap's channels that the Hopper implicit GEMM's halo and TMA
# kernels copy as a run (kRowBytes in lib/conv/implicit/implicit_tile.cuh):
# narrower runs take the cp.async gather kernel.
_IMPLICIT_RUN_BYTES = 128
# Side of a 3-D map beyond which XLA's convolution of half-precision narrow
# runs is the faster (the U-Net's 64³ maps; on its 32³ maps the project's).
_LARGE_3D_SIDE = 32
# Fewest output channels of a float32 3-D decoder filter gradient on XLA's
# convolution (with 32 the project's kernels are the faster: 0.94x XLA's).
_WIDE_3D_FILTER_O = 64


def _half(p) -> bool:
  return np.dtype(p.dtype).itemsize == 2


def _patchify(w) -> bool:
  """Non-overlapping windows (window = stride, no padding): a reshape and one GEMM."""
  return (tuple(w.kernel) == tuple(w.stride) and w.kernel_size > 1
          and all(lo == 0 and hi == 0 for lo, hi in w.padding))


_POINTWISE_1D = (
    "a 1-D 1x1 convolution is one GEMM either way, and XLA fuses the bias and a residual or "
    "skip sum into cuDNN's convolution as its side input, where beside a custom call it "
    "keeps every summand: WaveNet's bfloat16 train step took 1.12x XLA's peak memory with "
    "its 1x1 layers on the project's kernels")


_SUITE = ("the benchmark suite by device span, H200, 2026-11-29, benchmarks/bench.py --only "
          "fwd,grads with JAX_IM2COL_ALGORITHM=own")


def _dense_undilated(p) -> bool:
  w = p.spec.window
  return (p.spec.groups == 1 and w.kernel_size > 1 and not _patchify(w)
          and all(d == 1 for d in w.rhs_dilation))


def _strided_1d(p) -> Optional[str]:
  """wav2vec's feature encoder: strided 1-D dense windows."""
  w = p.spec.window
  if not (w.nd == 1 and _dense_undilated(p) and any(s != 1 for s in w.stride)):
    return None
  if p.op == "input_gradient":
    return ("a strided 1-D input gradient: own / XLA 1.27 (float32) and 1.55 (bfloat16) "
            f"channels-last, 1.35 and 1.23 channels-first (w2v_1d_k3s2; {_SUITE})")
  if p.op == "filter_gradient" and _half(p):
    return ("a half-precision strided 1-D filter gradient: own / XLA 1.44 channels-last, 1.21 "
            f"channels-first (w2v_1d_k3s2; {_SUITE}); 0.87-1.05 in float32")
  return None


_U_NET_SPANS = ("the U-Net's layers by device span, H200, 2026-11-29, benchmarks/routing.py "
                "--routed-own")


def _dense_3d(p) -> Optional[str]:
  """Channels-last 3-D dense convolutions: the U-Net's. Most of their ops run
  0.34-0.80x XLA's time on the project's kernels; these do not."""
  w, op = p.spec.window, p.op
  if p.c <= _STEM_CHANNELS:
    if op == "input_gradient" or np.dtype(p.dtype) == np.float32:
      return ("a 3-D stem (at most 4 input channels): own / XLA 2.49 forward, 1.87 input "
              "gradient, 1.39 filter gradient in float32, 1.32 input gradient in bfloat16 (the "
              "U-Net's first layer; its bfloat16 forward 0.86 and filter gradient 0.56 stay); the "
              "U-Net's float32 train step took 0.263x XLA's time with these on XLA's, 0.271x on "
              "the project's kernels (one process, interleaved)")
    return None
  if any(d != 1 for d in w.rhs_dilation):
    return None  # dilated: XLA's weak spot
  if w.kernel_size == 1:
    # The U-Net's 1x1 head (32 -> 2 channels on 64³): its forward alone took 1.22x (float32)
    # and 1.45x (bfloat16) XLA's time, but the bfloat16 train step 5.81 ms with it on XLA's
    # convolution against 5.73 on the project's kernels (float32 level; routing_ab, one
    # process, interleaved): the project's kernels keep it. Its gradients: 0.28-0.93.
    return None
  runs = (p.o if op == "input_gradient" else p.c) * np.dtype(p.dtype).itemsize
  if (op != "filter_gradient" and _half(p) and runs < _IMPLICIT_RUN_BYTES
          and all(s == 1 for s in w.stride) and max(p.in_spatial) > _LARGE_3D_SIDE):
    return ("a half-precision 3-D forward or input gradient whose contraction runs are under 128 "
            "bytes a tap (32 channels: the implicit GEMM's gather kernel, not its halo kernel) on "
            "a map of more than 32 a side: own / XLA 1.45 forward, 1.31-1.49 input gradients on "
            f"the U-Net's 64³ layers ({_U_NET_SPANS}); 0.62 on its 32³ map. Its bfloat16 train "
            "step took 5.81 ms with these on XLA's convolution, 6.26 on the project's kernels "
            "(one process, interleaved; peak memory 707 against 547 MB, XLA's step 661)")
  if (op == "filter_gradient" and not _half(p) and p.o >= _WIDE_3D_FILTER_O
          and p.c >= 2 * p.o and max(p.in_spatial) > _SMALLEST_MAP):
    return ("a float32 3-D filter gradient of a decoder layer (input channels at least twice the "
            "output channels, at least 64 of them): own / XLA 1.20 (32³, 128 -> 64) and 1.00 "
            f"(16³, 256 -> 128; {_U_NET_SPANS}); 0.94 with 32 output channels on 64³. Its float32 "
            "train step took 9.59 ms with these on XLA's convolution, 9.74 on the project's "
            "kernels (one process, interleaved)")
  return None


def _channels_first(p) -> Optional[str]:
  """The rules for channels-first operands, from the benchmark suite's ops
  (2026-11-29). The project's kernels keep the forwards (own / XLA 0.37-1.09),
  the input gradients at unit stride (0.42-1.08), and the dilated (filter
  gradients 0.11-0.21), grouped (0.82-1.06) and 1x1 ops (0.36-0.42)."""
  spec, w, op = p.spec, p.spec.window, p.op
  if any(d != 1 for d in w.rhs_dilation) or _patchify(w):
    return None
  if spec.groups == p.c == p.o:
    if w.nd == 2 and w.kernel_size < _DEPTHWISE_MIN_TAPS:
      return ("a channels-first 2-D depthwise convolution with few taps: own / XLA 1.24-1.33 in "
              f"float32 and 1.89-2.80 in bfloat16 (mbv2_dw3x3, every op; {_SUITE})")
    return None  # 1-D (jax#13800: 0.21-0.27) and large windows: the project's kernels
  if not _dense_undilated(p):
    return None
  if w.nd == 1:
    return _strided_1d(p)
  if op == "input_gradient" and any(s != 1 for s in w.stride) and p.c > _STEM_CHANNELS:
    return ("a channels-first strided input gradient: own / XLA 1.38 (float32) and 1.19 "
            f"(bfloat16) on r50_3x3s2_c128; 0.44-0.60 on a stem ({_SUITE})")
  if op == "filter_gradient":
    if _half(p):
      return ("a half-precision channels-first dense filter gradient: own / XLA 1.23-1.95 over "
              f"the suite's 2-D, 3-D and strided 1-D windows ({_SUITE})")
    if w.nd >= 2 and max(p.in_spatial) > _SMALLEST_MAP:
      return ("a float32 channels-first dense filter gradient on a map of more than 7 a side: "
              "own / XLA 1.04-1.47 on ResNet-50's 3x3 layers and 1.31 on c3d_3x3x3, 0.99 on its "
              f"stem; 0.82 on 7x7 maps and 0.87 in 1-D ({_SUITE})")
  return None


def xla_is_faster(p, own_algorithm: str, device: DeviceCaps) -> Optional[str]:
  """Why XLA's convolution should run op p instead of `own_algorithm`, or
  None where the project's kernel is the one to run."""
  spec, w = p.spec, p.spec.window
  if device.platform != "cuda" or any(d != 1 for d in w.lhs_dilation):
    return None  # transposed: the project's kernels
  if not spec.channels_last:
    return _channels_first(p)
  taps, op = w.kernel_size, p.op
  if w.nd == 1 and taps == 1 and spec.groups == 1:
    return _POINTWISE_1D
  if reason := _strided_1d(p):
    return reason
  if (w.nd == 2 and op == "input_gradient" and _half(p) and spec.groups == 1
          and any(d != 1 for d in w.rhs_dilation)):
    return ("a half-precision dilated input gradient: own / XLA 1.27 (deeplab_dil2, 3x3 at "
            f"dilation 2; {_SUITE}); 0.99 channels-first, 1.03 in float32; XLA's dilated filter "
            "gradients stay off (own / XLA 0.09-0.21)")
  if w.nd == 3 and spec.groups == 1:
    if reason := _dense_3d(p):
      return reason
  if w.nd != 2 or any(d != 1 for d in w.rhs_dilation):
    return None  # 1-D, 3-D, dilated: the project's kernels
  strided = any(s != 1 for s in w.stride)
  if spec.groups == p.c == p.o:
    if taps >= _DEPTHWISE_MIN_TAPS:
      side = max(p.in_spatial)
      if (_half(p) and op == "filter_gradient" and not strided and taps <= _CUDNN_MAX_TAPS
              and _LARGE_FILTER_SIDES[0] <= side <= _LARGE_FILTER_SIDES[1]):
        return ("a half-precision depthwise filter gradient of a window up to 7x7 at unit stride on "
                "a map of 14 to 28 a side: own / XLA 1.1-1.4 in device time on the tensor cores "
                "(ConvNeXt-T's 7x7 layers, H200, 2026-11-29; 1.29-1.33 on the tiles); ConvNeXt-T's "
                "bfloat16 train step took 0.886x XLA's time with these on XLA's, 0.907x on the "
                "project's kernels (one process, interleaved)")
      # Otherwise own / XLA 0.13-0.64 (7x7 f32), 0.84-0.95 (bf16 forward and input gradient),
      # 0.68 and 0.39 (the bf16 filter gradients on ConvNeXt-T's 56² and 7² maps, tensor
      # cores), and far below 1 for the 13x13 to 31x31 windows, where cuDNN has no kernel
      # of its own for the window.
      return None
    if _half(p) and op == "filter_gradient" and not strided and tuple(w.kernel) == (3, 3):
      side = max(p.in_spatial)
      if _HALF_FILTER_3X3_SIDES[0] <= side <= _HALF_FILTER_3X3_SIDES[1]:
        return ("a half-precision 3x3 depthwise filter gradient at unit stride on a map of more "
                "than 14 and at most 28 a side: own / XLA 1.03-1.20 in device time (MobileNetV2's "
                "28x28x192 layer, H200; cuDNN's time moved by 15% between compilations, the staged "
                "kernel's by under 1%); its bfloat16 train step took 8.740 ms with these on XLA's, "
                "8.760 on the project's kernels (one process, interleaved: level)")
      # On 7x7 maps (MobileNetV2's 7x7x960 layer) the project's kernel took 1.68x XLA's time
      # alone (31 against 18.5 us), but the bfloat16 train step 8.40 ms with it against 8.62
      # with it on XLA's convolution (routing_ab, one process, interleaved): it stays.
    if _half(p):
      # Every other map and stride: the streamed kernels, their input rows staged in shared
      # memory (H200, 2026-11-29). MobileNetV2's bfloat16 train step took 0.916x XLA's
      # time with all of its 3x3 depthwise ops on them, 0.982x with those at unit
      # stride on maps of 28 or less on XLA's (the rule before the staged rows; one
      # process, interleaved).
      return None
    if op != "forward" and strided:
      if op == "filter_gradient" and min(p.in_spatial) >= _LARGE_STRIDED_FILTER_SIDE:
        return ("a float32 stride-2 depthwise filter gradient on a map of 112 or more a side: own "
                "/ XLA 1.55 (MobileNetV2's 112² layer; 0.53-0.82 on its smaller maps); its float32 "
                "train step took 0.980x XLA's time with it on XLA's, 0.981x on the project's "
                "kernels (one process, interleaved: level)")
      return None  # 3x3 stride 2, f32: input gradient 0.71-0.95, filter gradient 0.53-0.82
    return ("a float32 depthwise convolution with few taps, at unit stride or a strided forward: "
            "alone own / XLA 0.85-0.89 for the unit-stride forwards and input gradients with the "
            "staged kernels, 1.74 for the 112² filter gradient (MobileNetV2's 3x3 layers, H200), but "
            "its float32 train step took 10.82 ms with these on XLA's, 10.92-11.04 with the "
            "unit-stride ones on the project's kernels (one process, interleaved); its inference "
            "took 1.25x XLA's time with all of them on the project's earlier kernels, 1.03x on XLA's")
  if spec.groups > 1:
    if op == "filter_gradient" and not _half(p):
      return ("a float32 grouped filter gradient: own / XLA 1.23 (resnext_g32, 32 groups of 8 "
              f"channels; {_SUITE}); its forward and input gradient 1.11-1.13, bfloat16 1.02-1.07")
    return None  # grouped: XLA's grouped convolutions are its weak spot
  if taps == 1:
    return ("a 1x1 convolution is one GEMM either way, and XLA fuses its layout changes into "
            "neighbours: own / XLA 0.94-1.19 over 34 layers")
  if p.c <= _STEM_CHANNELS:
    if op == "input_gradient":
      return None  # 0.55-0.84 (unused in training: the stem's input is data)
    if op == "forward" and (_half(p) or _patchify(w)):
      return None  # 4x4 stride 4: 0.73-0.78; 7x7 bf16 0.76; 3x3 bf16 0.98
    if op == "filter_gradient" and _patchify(w):
      return None  # a patchify stem (stride = window, 4x4): 0.65-0.73
    return ("the stem's filter gradient, or a float32 stem with overlapping windows: own / "
            "XLA 1.02-1.62 (ResNet-50's 7x7 stride 2, MobileNetV2's 3x3 stride 2)")
  if op == "forward":
    if _half(p) and max(p.in_spatial) <= _SMALLEST_MAP and not _patchify(w):
      return ("a half-precision dense forward on a map of at most 7 a side: own / XLA 1.30 "
              "(ResNet-50's 3x3 layers on 7x7 maps); its bfloat16 train step took 0.995x XLA's "
              "time with these on XLA's, 0.992x on the project's kernels (one process, "
              "interleaved: level)")
    if _half(p) or _patchify(w):
      return None  # bf16 3x3: 0.70-1.05 on maps of 14-56; 2x2 stride 2: 0.85 (f32), 0.90 (bf16)
    return ("a float32 dense forward: XLA keeps a float32 model's convolutions in NCHW, so "
            "a channels-last custom call among them costs a transpose each way. Alone own / XLA "
            "0.79-1.29 over ResNet-50's 3x3 layers, but ResNet-50's float32 inference took 1.03x "
            "XLA's time with its 3x3 forwards on the project's kernels, 1.00x on XLA's")
  if op == "input_gradient":
    if _patchify(w):
      return None  # 2x2 stride 2 (ConvNeXt-T's downsampling): 0.88-0.97
    if strided:
      return ("a strided input gradient of overlapping windows: own / XLA 1.06-1.16 (f32) and "
              "1.00-1.44 (bf16) over ResNet-50's three 3x3 stride-2 layers; its bfloat16 train step "
              "took 0.999x XLA's time with these on XLA's, 1.002x on the project's kernels (one "
              "process, interleaved)")
    return "a unit-stride input gradient: own / XLA 1.04 (f32), 1.10 (bf16) over 3x3 layers"
  return ("the filter gradient of a dense convolution: own / XLA 1.00-1.42 (3x3 and 2x2 "
          "layers), cuDNN's split reductions win")
