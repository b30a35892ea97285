"""The phases of a strided convolution's input gradient (gradient_phases in
src/jax_im2col/common/geometry.py, the mirror of gradient_phase in lib/common/geometry.h),
which the GPU's implicit GEMM runs one by one: each phase's stride-1
convolution of dy with its sub-filter, placed stride apart and with zeros
where no phase has taps, rebuilds lax's input gradient exactly (float64)."""

import hypothesis.strategies as st
import jax
import numpy as np
from hypothesis import assume, given, settings
from jax import lax

from conftest import on_platform
from jax_im2col.common.geometry import Window, gradient_phases


def rebuilt_input_gradient(window, in_spatial, dy, w):
  """dx from the phases: dy (N, O, *out), w (O, C, *K), channels-first."""
  nd = len(in_spatial)
  dx = np.zeros((dy.shape[0], w.shape[1], *in_spatial))
  covered = np.zeros(in_spatial, bool)
  for ph in gradient_phases(window, in_spatial):
    at = tuple(slice(f, None, s) for f, s in zip(ph.first, window.stride))
    assert covered[at].shape == ph.positions
    assert not covered[at].any()  # the phases partition the input
    covered[at] = True
    if ph.window is None or 0 in ph.positions:
      continue  # no tap reaches the phase: its gradient stays zero
    assert ph.window.stride == (1,) * nd and ph.window.lhs_dilation == (1,) * nd
    taps = [f - s * np.arange(t) for f, s, t in zip(ph.tap_first, ph.tap_step, ph.window.kernel)]
    sub = w[np.ix_(range(w.shape[0]), range(w.shape[1]), *taps)]
    part = lax.conv_general_dilated(dy, np.swapaxes(sub, 0, 1), (1,) * nd, ph.window.padding,
                                    rhs_dilation=ph.window.rhs_dilation,
                                    precision=lax.Precision.HIGHEST)
    assert part.shape[2:] == ph.positions
    dx[(slice(None), slice(None), *at)] = part
  assert covered.all()
  return dx


def dims(nd, lo, hi):
  return st.lists(st.integers(lo, hi), min_size=nd, max_size=nd).map(tuple)


@st.composite
def geometries(draw):
  nd = draw(st.integers(1, 3))
  pads = draw(st.lists(st.tuples(st.integers(-1, 5), st.integers(-1, 5)), min_size=nd,
                       max_size=nd))
  window = Window(kernel=draw(dims(nd, 1, 4)), stride=draw(dims(nd, 1, 4)),
                  rhs_dilation=draw(dims(nd, 1, 3)), lhs_dilation=(1,) * nd,
                  padding=tuple(pads))
  return window, draw(dims(nd, 1, 9 if nd < 3 else 6))


@settings(max_examples=60, deadline=None)
@given(geometries(), st.integers(0, 2**31 - 1))
def test_phases_rebuild_the_input_gradient(geometry, seed):
  window, in_spatial = geometry
  assume(window.fits(in_spatial) and 0 not in window.output_spatial(in_spatial))
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((2, 3, *in_spatial))
  w = rng.standard_normal((4, 3, *window.kernel))
  with on_platform("cpu"), jax.enable_x64(True):
    y, vjp = jax.vjp(lambda x: lax.conv_general_dilated(
        x, w, window.stride, window.padding, rhs_dilation=window.rhs_dilation,
        precision=lax.Precision.HIGHEST), x)
    dy = rng.standard_normal(y.shape)
    expected = np.asarray(vjp(dy)[0])
    np.testing.assert_allclose(rebuilt_input_gradient(window, in_spatial, dy, w), expected,
                               rtol=1e-12, atol=1e-12)


def test_unit_stride_is_one_phase_the_flipped_filter():
  """With unit strides the one phase is the transposed convolution the GPU
  ran before phases existed (transposed_geometry in lib/common/geometry.h)."""
  window = Window(kernel=(3, 2), stride=(1, 1), rhs_dilation=(2, 1), lhs_dilation=(1, 1),
                  padding=((1, 2), (0, 1)))
  (ph,) = gradient_phases(window, (7, 5))
  assert ph.first == (0, 0) and ph.positions == (7, 5)
  assert ph.window.kernel == (3, 2) and ph.window.rhs_dilation == (2, 1)
  # Low padding window - 1 - pad_lo; the high one makes the output the input.
  assert ph.window.padding == ((3, 2), (1, 0))
  assert ph.tap_first == (2, 1) and ph.tap_step == (1, 1)


def test_phases_without_taps():
  """A 1x1 window with stride 2: only the even positions get a gradient; a
  dilation sharing a factor with the stride leaves whole phases without taps."""
  one = Window(kernel=(1,), stride=(2,), rhs_dilation=(1,), lhs_dilation=(1,), padding=((0, 0),))
  assert [(ph.first, ph.positions, ph.window is not None)
          for ph in gradient_phases(one, (9,))] == [((0,), (5,), True), ((1,), (4,), False)]
  shared = Window(kernel=(3,), stride=(2,), rhs_dilation=(2,), lhs_dilation=(1,),
                  padding=((1, 1),))
  assert [ph.window is not None for ph in gradient_phases(shared, (10,))] == [False, True]
