"""Which fold runs a call: the project's kernel ("own") or the same sums
written in lax for XLA to fuse ("xla", columns/fold_by_pads.py). A pure
function of the call, as conv/selection.py is for the convolution.

The rule comes from benchmarks/bench.py --fold-routes: both routes timed in
one run on the suite's rows, in both layouts, float32 and bfloat16, on an
H200 (BENCHMARKS.md, "Fold: the kernel or the lax route"). A class goes to
the lax route where XLA's fusion of it was faster or level on every measured
row; everything unmeasured keeps the kernel.
"""

from __future__ import annotations

import numpy as np

from ..common.geometry import Window
from .fold_by_pads import ACCUMULATORS

OWN, XLA = "own", "xla"
# The half-precision class where the lax route is faster: 2-D windows of at
# most this many taps at unit stride, on maps at least this large a side.
_FEW_TAPS = 9
_LARGE_MAP = 28


def fold_algorithm(window: Window, spatial, dtype, channels_last: bool, platform: str,
                   setting: str) -> tuple[str, str]:
  """(algorithm, why) for a fold of `window` onto an image of `spatial`
  extents from columns of `dtype`, under the algorithm setting
  (config.get_algorithm(): "auto", "own", "xla" or a convolution
  algorithm's name, which a fold reads as "own")."""
  if np.dtype(dtype) not in ACCUMULATORS:
    return OWN, "integer, bool, float8 and complex folds have only the project's kernels"
  if setting == XLA:
    return XLA, "the algorithm setting is 'xla'"
  if setting != "auto":
    return OWN, f"the algorithm setting is {setting!r}"
  if any(l != 1 for l in window.lhs_dilation):
    return OWN, "an lhs-dilated window (a transposed convolution's): not measured on the lax route"
  strided = any(st != 1 for st in window.stride)
  dtype = np.dtype(dtype)
  if platform != "cuda":
    if channels_last and dtype.itemsize == 2 and window.nd == 3:
      return OWN, ("a half-precision channels-last 3-D fold on the CPU: own / lax route 0.68-1.37 "
                   "(two cores)")
    return XLA, ("on the CPU XLA's vectorised fusion: own / lax route 1.3-45 over the suite's rows "
                 "at --quick sizes, 2.3-23 in channels-first layout (two cores)")
  if channels_last:
    if dtype == np.float32 and not (strided and window.nd > 1):
      return XLA, ("a float32 channels-last fold at unit stride or 1-D: own / lax route 1.00-1.19 on "
                   "an H200 (1.11 on 7x7 maps, 1.19 on the 3-D row)")
    return OWN, ("channels-last: own / lax route 0.47-0.89 on strided 2-D rows (float32), 0.19-1.01 "
                 "on every half-precision row, on an H200")
  if dtype == np.float32:
    if strided:
      return XLA, ("a strided channels-first float32 fold: own / lax route 1.10-1.45 on an H200 "
                   "(3x3 stride 2, the 7x7 stem, the 1-D row)")
    return OWN, "a float32 channels-first fold at unit stride: own / lax route 0.91-1.01 on an H200"
  if dtype.itemsize != 2:
    return OWN, "float64: not measured on the lax route"
  if strided:
    if window.nd == 1:
      return XLA, "a strided 1-D channels-first half-precision fold: own / lax route 1.69 on an H200"
    return OWN, "a strided 2-D or 3-D half-precision fold: own / lax route 0.79-1.03 on an H200"
  if window.nd == 2 and window.kernel_size <= _FEW_TAPS and min(spatial) >= _LARGE_MAP:
    return XLA, ("a half-precision 2-D fold of at most 9 taps at unit stride on a map of 28 or more "
                 "a side: own / lax route 1.08-1.11 on an H200")
  return OWN, ("a half-precision channels-first fold at unit stride on a small map or in 3-D: own / "
               "lax route 0.93-0.95 (maps of 14 and 7), 0.57 (3x3x3) on an H200")
