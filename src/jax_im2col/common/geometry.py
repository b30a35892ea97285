"""Window geometry: argument normalisation, padding resolution, output sizes.

The Python mirror of ``lib/geometry.h``: the C++ side recomputes the same
output sizes from the same attributes and checks them against the buffers.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from typing import Sequence

import numpy as np

MAX_SPATIAL = 3
# Index math inside one image runs in 32 bits on the GPU (see geometry.h).
MAX_POSITIONS = 2**31 - 1


def as_int_tuple(value, nd: int, name: str, *, minimum: int | None = 1) -> tuple[int, ...]:
  """An int (broadcast to nd) or a length-nd sequence of ints, as a tuple."""
  if isinstance(value, (bool, np.bool_)):
    raise TypeError(f"{name} must be an int or a sequence of {nd} ints, got {value!r}")
  try:
    items = (operator.index(value),) * nd
  except TypeError:
    try:
      items = tuple(operator.index(v) for v in value)
    except TypeError:
      raise TypeError(f"{name} must be an int or a sequence of {nd} ints, got {value!r}") from None
  if len(items) != nd:
    raise ValueError(f"{name} must have {nd} entries (one per spatial dimension), got {value!r}")
  if minimum is not None and any(v < minimum for v in items):
    raise ValueError(f"{name} must be >= {minimum} in every dimension, got {value!r}")
  return items


def padding_pairs(padding, nd: int, name: str = "padding") -> tuple[tuple[int, int], ...]:
  """An int, a sequence of ints (symmetric), or a sequence of (low, high) pairs."""
  if isinstance(padding, str):
    raise ValueError(f"{name}: string paddings are not accepted here, got {padding!r}")
  try:
    p = operator.index(padding)
    return ((p, p),) * nd
  except TypeError:
    pass
  try:
    items = list(padding)
  except TypeError:
    raise TypeError(f"{name} must be an int, a sequence of ints or of (low, high) pairs, got {padding!r}") from None
  if len(items) != nd:
    raise ValueError(f"{name} must have {nd} entries (one per spatial dimension), got {padding!r}")
  pairs = []
  for item in items:
    try:
      v = operator.index(item)
      pairs.append((v, v))
    except TypeError:
      pairs.append(_pair(item, padding, name))
  return tuple(pairs)


def dilated(n: int, d: int) -> int:
  return 0 if n <= 0 else (n - 1) * d + 1


def resolve_padding(padding, in_spatial: Sequence[int], kernel: Sequence[int],
                    strides: Sequence[int], rhs_dilation: Sequence[int],
                    lhs_dilation: Sequence[int], name: str = "padding") -> tuple[tuple[int, int], ...]:
  """lax's padding forms: 'SAME', 'SAME_LOWER', 'VALID' or (low, high) pairs.

  As in lax, string paddings are computed on the undilated input and the
  dilated kernel.
  """
  nd = len(in_spatial)
  if isinstance(padding, str):
    if any(d != 1 for d in lhs_dilation):
      raise ValueError(f"{name}: string padding is not defined with lhs_dilation (as in lax); "
                       "give (low, high) pairs")
    mode = padding.upper()
    if mode == "VALID":
      return ((0, 0),) * nd
    if mode not in ("SAME", "SAME_LOWER"):
      raise ValueError(f"{name} must be 'SAME', 'SAME_LOWER', 'VALID' or a sequence of (low, high) pairs, got {padding!r}")
    pairs = []
    for n, k, s, r in zip(in_spatial, kernel, strides, rhs_dilation):
      out = -(-n // s)
      total = max(0, (out - 1) * s + dilated(k, r) - n)
      small, big = total // 2, total - total // 2
      pairs.append((small, big) if mode == "SAME" else (big, small))
    return tuple(pairs)
  try:
    items = list(padding)
  except TypeError:
    raise TypeError(f"{name} must be a string or a sequence of (low, high) pairs, got {padding!r}") from None
  if len(items) != nd:
    raise ValueError(f"{name} must have {nd} (low, high) pairs, got {padding!r}")
  return tuple(_pair(item, padding, name) for item in items)


def _pair(item, padding, name: str) -> tuple[int, int]:
  try:
    lo, hi = (operator.index(v) for v in item)
  except (TypeError, ValueError):
    raise TypeError(f"{name}: expected (low, high) pairs of ints, got {padding!r}") from None
  return lo, hi


@dataclasses.dataclass(frozen=True)
class Window:
  """A sliding window over nd spatial dimensions (hashable: a primitive param)."""
  kernel: tuple[int, ...]
  stride: tuple[int, ...]
  rhs_dilation: tuple[int, ...]
  lhs_dilation: tuple[int, ...]
  padding: tuple[tuple[int, int], ...]

  @property
  def nd(self) -> int:
    return len(self.kernel)

  @property
  def kernel_size(self) -> int:
    return int(np.prod(self.kernel, dtype=np.int64))

  def output_spatial(self, in_spatial: Sequence[int]) -> tuple[int, ...]:
    """Window positions per dimension (0 where no window fits), as geometry.h."""
    out = []
    for n, k, s, r, l, (lo, hi) in zip(in_spatial, self.kernel, self.stride, self.rhs_dilation,
                                       self.lhs_dilation, self.padding):
      span = dilated(n, l) + lo + hi - dilated(k, r)
      out.append(0 if span < 0 else span // s + 1)
    return tuple(out)

  def fits(self, in_spatial: Sequence[int]) -> bool:
    """Whether at least one window fits in every dimension."""
    return all(dilated(n, l) + lo + hi >= dilated(k, r)
               for n, k, r, l, (lo, hi) in zip(in_spatial, self.kernel, self.rhs_dilation,
                                               self.lhs_dilation, self.padding))

  @property
  def is_identity(self) -> bool:
    """A 1x1 window, unit stride, no padding or lhs dilation: columns == input."""
    return (all(k == 1 for k in self.kernel) and all(s == 1 for s in self.stride)
            and all(l == 1 for l in self.lhs_dilation)
            and all(p == (0, 0) for p in self.padding))

  def ffi_attributes(self) -> dict:
    return dict(
        kernel=np.array(self.kernel, np.int64),
        stride=np.array(self.stride, np.int64),
        rhs_dilation=np.array(self.rhs_dilation, np.int64),
        lhs_dilation=np.array(self.lhs_dilation, np.int64),
        padding=np.array([v for pair in self.padding for v in pair], np.int64),
    )


def transposed_window(window: Window) -> Window | None:
  """The strided window whose input gradient is this window's convolution, for
  a unit-stride window with lhs dilation (a transposed convolution), else None.

  With lhs dilation d, padding (lo, hi), rhs dilation r and k taps, output t
  takes input i through tap k where d i = t + r k - lo. The input gradient of
  the window with stride d, padding (r (k - 1) - lo, r (k - 1) - hi) and the
  taps reversed relates the same (i, t) pairs, and maps an output of
  output_spatial(n) positions back onto exactly n (n - 1 = ((n - 1) d) // d),
  so the forward becomes that input gradient and never multiplies the zeros
  lhs dilation inserts.
  """
  if any(s != 1 for s in window.stride) or all(l == 1 for l in window.lhs_dilation):
    return None
  pads = tuple((r * (k - 1) - lo, r * (k - 1) - hi)
               for k, r, (lo, hi) in zip(window.kernel, window.rhs_dilation, window.padding))
  return Window(kernel=window.kernel, stride=window.lhs_dilation, rhs_dilation=window.rhs_dilation,
                lhs_dilation=(1,) * window.nd, padding=pads)


def check_lax_padding(window: Window, in_spatial: Sequence[int], name: str) -> None:
  """lax refuses paddings that leave a (dilated) input dimension negative."""
  for n, l, (lo, hi) in zip(in_spatial, window.lhs_dilation, window.padding):
    if dilated(n, l) + lo + hi < 0:
      raise ValueError(f"{name}: negative padding is larger than the input dimension: padding "
                       f"{window.padding} for input spatial shape {tuple(in_spatial)}")


def check_index_range(window: Window, in_spatial: Sequence[int], name: str) -> None:
  """Index math runs in 32 bits on the GPU: the mirror of fits_32_bits() in
  lib/geometry.h."""
  out = window.output_spatial(in_spatial)
  ok = max(int(np.prod(out, dtype=np.int64)), int(np.prod(in_spatial, dtype=np.int64)),
           window.kernel_size) <= MAX_POSITIONS
  for n, o, k, s, r, l, (lo, hi) in zip(in_spatial, out, window.kernel, window.stride,
                                        window.rhs_dilation, window.lhs_dilation, window.padding):
    span, win = dilated(n, l) + abs(lo) + abs(hi), dilated(k, r)
    ok = ok and max(span, win, s, o * s + win) <= MAX_POSITIONS
  if not ok:
    raise ValueError(f"{name}: more than 2**31 - 1 positions, kernel taps or padded extent in "
                     "one image are not supported")


@dataclasses.dataclass(frozen=True)
class GradientPhase:
  """One phase of a strided convolution's input gradient (gradient_phase in
  lib/geometry.h): the input positions first + stride * j, computed as the
  stride-1 convolution `window` of dy with the sub-filter of taps
  tap_first - tap_step * u (per dimension), read backwards."""
  first: tuple[int, ...]
  positions: tuple[int, ...]  # j's extent per dimension
  window: Window | None       # None where no tap reaches the phase
  tap_first: tuple[int, ...]
  tap_step: tuple[int, ...]


def gradient_phases(window: Window, in_spatial: Sequence[int]) -> list[GradientPhase]:
  """The phases of the input gradient of a convolution without lhs dilation,
  row-major over the strides."""
  if any(l != 1 for l in window.lhs_dilation):
    raise ValueError("gradient_phases: the window has lhs dilation")
  out_spatial = window.output_spatial(in_spatial)
  per_dim = []
  for n, out, k, s, rd, (lo, _) in zip(in_spatial, out_spatial, window.kernel, window.stride,
                                       window.rhs_dilation, window.padding):
    g = np.gcd(s, rd)
    tap_step, out_step = s // g, rd // g
    options = []
    for r in range(s):
      positions = -(-(n - r) // s) if r < n else 0
      k0 = next((k for k in range(tap_step) if (k * rd - r - lo) % s == 0), tap_step)
      taps = -(-(k - k0) // tap_step) if k0 < min(tap_step, k) else 0
      span = max(taps - 1, 0) * out_step
      c = (r + lo - k0 * rd) // s
      options.append((r, positions, taps, out_step, span - c,
                      positions - out - (span - c) + span, k0 + tap_step * max(taps - 1, 0),
                      tap_step))
    per_dim.append(options)
  phases = []
  for combo in itertools.product(*per_dim):
    r, positions, taps, out_step, lo, hi, tap_first, tap_step = zip(*combo)
    sub = None
    if all(t > 0 for t in taps):
      sub = Window(kernel=taps, stride=(1,) * len(taps), rhs_dilation=out_step,
                   lhs_dilation=(1,) * len(taps), padding=tuple(zip(lo, hi)))
    phases.append(GradientPhase(first=r, positions=positions, window=sub, tap_first=tap_first,
                                tap_step=tap_step))
  return phases
