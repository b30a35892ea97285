"""Which fold runs a call: the project's kernel ("own") or the same sums
written in lax for XLA to fuse ("xla", columns/fold_by_pads.py). A pure
function of the call, as conv/selection.py is for the convolution.

The rule comes from benchmarks/bench.py's fold rows, both routes timed in one
run against plain JAX's fused VJP (BENCHMARKS.md, "Fold: the project's kernel
or XLA's fusion"). Fold is read-bound, K reads a write; XLA's loop fusion
reads at that ceiling where the per-element work is small, and the project's
kernels win where XLA's fusion tests positions that no tap reads (strided
windows) or re-derives each tap's index (long windows).
"""

from __future__ import annotations

import numpy as np

from ..common.geometry import Window
from .fold_by_pads import ACCUMULATORS

OWN, XLA = "own", "xla"


def fold_algorithm(window: Window, dtype, channels_last: bool, platform: str,
                   setting: str) -> tuple[str, str]:
  """(algorithm, why) for a fold of `window` on columns of `dtype`, under
  the algorithm setting (config.get_algorithm(): "auto", "own", "xla" or a
  convolution algorithm's name, which folds read as "own")."""
  if np.dtype(dtype) not in ACCUMULATORS:
    return OWN, "integer, bool, float8 and complex folds have only the project's kernels"
  if setting == XLA:
    return XLA, "the algorithm setting is 'xla'"
  if setting != "auto":
    return OWN, f"the algorithm setting is {setting!r}"
  if platform != "cuda":
    return OWN, "on the CPU the project's fold is one pass over the columns"
  strided = any(s != 1 for s in window.stride)
  if any(l != 1 for l in window.lhs_dilation):
    return OWN, "an lhs-dilated window: XLA's fusion would sum the holes too"
  half = np.dtype(dtype).itemsize == 2
  if not channels_last:
    if strided and window.kernel_size > 9:
      return OWN, "a large strided window (a stem): own / fused VJP 0.74-0.77 (bfloat16)"
    if half:
      return XLA, ("a half-precision channels-first fold: own / fused VJP 1.11-1.36 on an H200, "
                   "the kernel bound by instructions at two bytes a read")
    if window.nd == 1 and strided:
      return XLA, "a strided 1-D channels-first fold: own / fused VJP 1.17-1.18"
    return OWN, "float32 channels-first: own / fused VJP 0.99-1.02"
  if strided:
    return OWN, "a strided channels-last fold: own / fused VJP 0.45-0.52 on 2-D rows"
  return OWN, "a channels-last fold at unit stride: at the read ceiling on 56 and 28 maps"
