"""fold's two routes: the project's kernel and the lax formulation XLA fuses
(columns/fold_by_pads.py). Their values against each other and a float64
reference on every platform, the rule that chooses (columns/fold_selection.py),
and that a lowering emits what the rule chose."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_im2col as ji
from conftest import PLATFORMS, on_platform
from jax_im2col.columns import primitives
from jax_im2col.columns.fold_selection import fold_algorithm
from jax_im2col.common.geometry import Window
from test_unfold_fold import (assert_bits_equal, cols_from_layout, image_to_layout, ref_fold,
                              window_index_map)

FLOATS = [jnp.float16, jnp.bfloat16, np.float32, np.float64]


def window(kernel, stride=None, dilation=None, padding=None, lhs=None) -> Window:
  nd = len(kernel)
  return Window(tuple(kernel), tuple(stride or (1,) * nd), tuple(dilation or (1,) * nd),
                tuple(lhs or (1,) * nd), tuple(padding or ((0, 0),) * nd))


def suite_windows():
  """The benchmark suite's window classes: 3x3 at unit stride and stride 2,
  the 7x7 stride-2 stem, the strided 1-D window and 3x3x3."""
  pad1 = lambda nd: ((1, 1),) * nd
  return (window((3, 3), padding=pad1(2)), window((3, 3), (2, 2), padding=pad1(2)),
          window((7, 7), (2, 2), padding=((3, 3),) * 2), window((3,), (2,)), window((3, 3, 3), padding=pad1(3)))


def random_windows(seed: int, count: int):
  """Windows over 1-3 dimensions that fit their input: strides, dilations,
  padding and cropping (negative padding), and some with lhs dilation."""
  rng = np.random.default_rng(seed)
  found = []
  while len(found) < count:
    nd = int(rng.integers(1, 4))
    spatial = tuple(int(v) for v in rng.integers(1, 9, nd))
    lhs = tuple(int(v) for v in rng.integers(1, 3, nd)) if rng.random() < 0.25 else None
    w = window(tuple(int(v) for v in rng.integers(1, 4, nd)), tuple(int(v) for v in rng.integers(1, 4, nd)),
               tuple(int(v) for v in rng.integers(1, 3, nd)),
               tuple((int(a), int(b)) for a, b in rng.integers(-2, 4, (nd, 2))), lhs)
    if w.fits(spatial) and 0 not in w.output_spatial(spatial) and not w.is_identity:
      found.append((w, spatial))
  return found


def columns(rng, w: Window, spatial, channels: int, channels_last: bool, dtype, n: int = 2):
  """Integers below 1000 in magnitude: exact in every float type, and so are
  their sums of up to 27 in float32, so that a fold's one rounding is the
  float64 reference's cast to the type."""
  positions = int(np.prod(w.output_spatial(spatial)))
  shape = (n, positions, w.kernel_size * channels) if channels_last else (n, channels * w.kernel_size, positions)
  return jnp.asarray(rng.integers(-999, 1000, shape).astype(np.float64), dtype)


def reference(cols, w: Window, spatial, channels_last: bool, dtype):
  """A float64 scatter-add (test_unfold_fold's), cast once to `dtype`."""
  index = window_index_map(spatial, w.kernel, w.stride, w.rhs_dilation, w.padding, w.lhs_dilation)
  layout = "channels_last" if channels_last else "channels_first"
  cols = cols_from_layout(np.asarray(cols, np.float64), w.kernel_size, layout)
  return image_to_layout(ref_fold(cols, index, spatial), layout).astype(dtype)


def fold_with(setting: str, cols, w: Window, spatial, channels_last: bool):
  with ji.force_algorithm(setting):
    return jax.jit(lambda c: primitives.fold(c, window=w, channels_last=channels_last, spatial=spatial))(cols)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("channels_last", [False, True], ids=["cf", "cl"])
def test_xla_route_equals_the_kernel(platform, dtype, channels_last):
  """Both routes sum in float32 (float64 for float64) and round once: on
  random windows (strides, dilations, padding, cropping, lhs dilation), each
  bit for bit the float64 reference cast to the type."""
  rng = np.random.default_rng(7)
  with on_platform(platform):
    for w, spatial in random_windows(11 + channels_last, 12):
      cols = columns(rng, w, spatial, 3, channels_last, dtype)
      want = reference(cols, w, spatial, channels_last, dtype)
      for setting in ("own", "xla"):
        assert_bits_equal(fold_with(setting, cols, w, spatial, channels_last), want)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_auto_route_on_suite_windows(platform):
  """The public fold under "auto" on the benchmark's windows, both layouts,
  against the project's kernel."""
  rng = np.random.default_rng(3)
  cases = [((3, 3), (1, 1), (1, 1), (28, 30)), ((3, 3), (1, 1), (1, 1), (7, 7)),
           ((3, 3), (2, 2), (1, 1), (29, 29)), ((7, 7), (2, 2), (3, 3), (30, 28)),
           ((3,), (2,), (0,), (301,)), ((3, 3, 3), (1, 1, 1), (1, 1, 1), (3, 5, 5))]
  with on_platform(platform):
    for (kernel, stride, pad, spatial), dtype, cl in itertools.product(cases, [jnp.bfloat16, np.float32],
                                                                        [False, True]):
      w = window(kernel, stride, None, tuple((p, p) for p in pad))
      cols = columns(rng, w, spatial, 4, cl, dtype)
      f = ji.fold_channels_last if cl else ji.fold
      with ji.force_algorithm("auto"):
        got = jax.jit(lambda c: f(c, spatial, kernel, 1, pad, stride))(cols)
      with ji.force_algorithm("own"):
        want = jax.jit(lambda c: f(c, spatial, kernel, 1, pad, stride))(cols)
      assert_bits_equal(got, want)


def test_gradient_of_unfold_takes_the_route():
  """unfold's transpose is a fold under the setting of the trace."""
  w = window((3, 3), padding=((1, 1), (1, 1)))
  x = jax.ShapeDtypeStruct((2, 4, 8, 8), jnp.bfloat16)

  def text(setting):
    with ji.force_algorithm(setting):
      f = jax.grad(lambda v: ji.unfold(v, 3, 1, 1).astype(np.float32).sum())
      return jax.jit(f).trace(x).lower(lowering_platforms=("cuda",)).as_text()
  assert "jax_im2col_fold" in text("own")
  assert "jax_im2col_fold" not in text("xla") and "stablehlo.pad" in text("xla")


@pytest.mark.parametrize("dtype,cl,side,expect", [
    (jnp.bfloat16, False, 28, "xla"), (jnp.float16, False, 28, "xla"), (jnp.bfloat16, False, 14, "own"),
    (np.float32, False, 28, "own"), (np.float32, True, 28, "xla"), (jnp.bfloat16, True, 28, "own"),
    (np.int32, False, 28, "own")])
def test_lowering_emits_the_chosen_route(dtype, cl, side, expect):
  w = window((3, 3), padding=((1, 1), (1, 1)))
  cols = jax.ShapeDtypeStruct((2, side * side, 36) if cl else (2, 36, side * side), dtype)
  with ji.force_algorithm("auto"):
    text = jax.jit(lambda c: primitives.fold(c, window=w, channels_last=cl, spatial=(side, side))).trace(
        cols).lower(lowering_platforms=("cuda",)).as_text()
  assert ("jax_im2col_fold" in text) == (expect == "own")


def test_rule():
  """The measured classes (columns/fold_selection.py), and the settings."""
  bf16, f16, f32 = np.dtype(jnp.bfloat16), np.dtype(jnp.float16), np.dtype(np.float32)
  pad1 = lambda nd: ((1, 1),) * nd
  w3, w3s2, stem, w1d, w3d = suite_windows()
  pick = lambda w, spatial, dtype, cl=False, platform="cuda", setting="auto": fold_algorithm(
      w, spatial, dtype, cl, platform, setting)[0]
  # Half precision, channels-first: 3x3 at unit stride on maps of 28 and more, and the
  # strided 1-D row, on the lax route; small maps, 3-D, strided 2-D on the kernel.
  assert pick(w3, (56, 56), bf16) == pick(w3, (28, 64), f16) == "xla"
  assert pick(w3, (14, 14), bf16) == pick(w3, (28, 7), bf16) == "own"
  assert pick(w3d, (16, 56, 56), bf16) == "own"
  assert pick(w3s2, (56, 56), bf16) == pick(stem, (224, 224), bf16) == "own"
  assert pick(w1d, (3199,), bf16) == "xla"
  assert pick(window((5, 5), padding=pad1(2)), (56, 56), bf16) == "own"  # 25 taps
  # float32, channels-first: strided windows on the lax route, unit stride on the kernel.
  assert pick(w3s2, (56, 56), f32) == pick(stem, (224, 224), f32) == pick(w1d, (3199,), f32) == "xla"
  assert pick(w3, (56, 56), f32) == pick(w3d, (16, 56, 56), f32) == "own"
  # Channels-last: float32 on the lax route but for strided 2-D windows; half precision
  # on the kernel.
  assert pick(w3, (7, 7), f32, cl=True) == pick(w3d, (16, 56, 56), f32, cl=True) == "xla"
  assert pick(w1d, (3199,), f32, cl=True) == "xla"
  assert pick(w3s2, (56, 56), f32, cl=True) == pick(stem, (224, 224), f32, cl=True) == "own"
  assert pick(w3, (56, 56), bf16, cl=True) == pick(w1d, (3199,), f16, cl=True) == "own"
  # float64 on a GPU (not measured), lhs dilation: the kernel.
  assert pick(w3s2, (56, 56), np.dtype(np.float64)) == "own"
  assert pick(window((3, 3), padding=pad1(2), lhs=(2, 2)), (56, 56), bf16) == "own"
  # The CPU: the lax route, but for half-precision channels-last 3-D folds.
  for w, spatial in ((w3, (7, 7)), (w3s2, (56, 56)), (w1d, (3199,)), (w3d, (4, 8, 8))):
    for dtype, cl in itertools.product((bf16, f32, np.dtype(np.float64)), (False, True)):
      want = "own" if (cl and dtype == bf16 and w is w3d) else "xla"
      assert pick(w, spatial, dtype, cl=cl, platform="cpu") == want
  # The settings: "xla" and "own" force a route; a convolution algorithm's name reads as "own".
  assert pick(w3, (7, 7), f32, cl=True, platform="cpu", setting="xla") == "xla"
  assert pick(w3, (56, 56), bf16, setting="own") == pick(w3, (56, 56), bf16, setting="gemm") == "own"
  # Types without the lax formulation keep the kernel under every setting.
  for dtype in (np.int32, np.bool_, np.complex64, jnp.float8_e4m3fn):
    assert pick(w3, (56, 56), np.dtype(dtype), setting="xla") == "own"
