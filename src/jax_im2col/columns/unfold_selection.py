"""Which unfold runs a call: the project's kernel ("own") or the same copy
written in lax for XLA to compile ("xla", columns/unfold_by_slices.py). A
pure function of the call, as columns/fold_selection.py is for fold.

The project's unfold kernels are faster than the lax formulation on every
suite row on the GPU (BENCHMARKS.md, "Unfold and fold against plain JAX"),
so there the lax route runs only when the setting asks for it. On the CPU
the rule comes from benchmarks/bench.py --quick --unfold-routes: both routes
timed in one run on the suite's rows, both layouts, float32 and bfloat16,
on two x86 cores; a class goes to the lax route where XLA's loop was faster
on its measured rows, and everything unmeasured keeps the kernel. bfloat16
and float8 never take it: XLA does not copy their NaNs bit for bit.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..common.geometry import Window

OWN, XLA = "own", "xla"
_NOT_COPIED = {np.dtype(jnp.bfloat16), np.dtype(jnp.float8_e4m3fn), np.dtype(jnp.float8_e5m2)}
# Channels-last images of at most this many channels (a stem's 3) are faster
# on the CPU's lax route: the kernel copies a few elements a tap.
_FEW_CHANNELS = 4


def unfold_algorithm(window: Window, spatial, channels: int, dtype, channels_last: bool,
                     platform: str, setting: str) -> tuple[str, str]:
  """(algorithm, why) for an unfold of an image of `spatial` extents and
  `channels` channels of `dtype` under the algorithm setting
  (config.get_algorithm(): "auto", "own", "xla" or a convolution algorithm's
  name, which an unfold reads as "own")."""
  if np.dtype(dtype) in _NOT_COPIED:
    return OWN, ("XLA's CPU computes bfloat16 and float8 slices and pads in float32 and quiets NaN "
                 "payloads, so its unfold of them is not a copy: the project's kernels only")
  if setting == XLA:
    return XLA, "the algorithm setting is 'xla'"
  if setting != "auto":
    return OWN, f"the algorithm setting is {setting!r}"
  if platform == "cuda":
    return OWN, ("the project's unfold is faster than the lax formulation on every suite row on an "
                 "H200 (0.40-0.70 of its time in geometric mean)")
  if np.dtype(dtype) != np.float32:
    return OWN, "the CPU's lax route measured in float32 only (bfloat16 keeps the kernel everywhere)"
  if not channels_last:
    return XLA, ("a float32 channels-first unfold on the CPU: own / lax route 1.0-4.0 over the suite's "
                 "rows at --quick sizes (two cores), 3.3-4.0 on the 14² and 7² maps")
  if channels <= _FEW_CHANNELS:
    return XLA, ("a float32 channels-last unfold of at most 4 channels on the CPU: own / lax route 4.7 "
                 "on the stem (two cores)")
  if window.nd == 3:
    return XLA, "a float32 channels-last 3-D unfold on the CPU: own / lax route 1.2-1.5 (two cores)"
  return OWN, ("a float32 channels-last 1-D or 2-D unfold of more channels on the CPU: own / lax route "
               "0.3-1.0 on seven of eight such rows, 1.1-1.3 on r50_3x3_c64 (two cores)")
