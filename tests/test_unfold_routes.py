"""unfold's two routes: the project's kernel and the strided slices XLA
compiles (columns/unfold_by_slices.py). Both against a numpy reference, bit
for bit, in every dtype and layout on every platform; the rule that chooses
(columns/unfold_selection.py); and that a lowering emits what the rule chose,
the gradient of fold included."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_im2col as ji
from conftest import PLATFORMS, on_platform
from jax_im2col.columns import primitives
from jax_im2col.columns.unfold_selection import unfold_algorithm
from test_dtypes import ALL_DTYPES, assert_same_bits, random_bits
from test_fold_routes import random_windows, suite_windows, window
from test_unfold_fold import cols_to_layout, image_from_layout, ref_unfold, window_index_map


def reference(x: np.ndarray, w, spatial, channels_last: bool) -> np.ndarray:
  """test_unfold_fold's index-map copy, in x's own dtype."""
  index = window_index_map(spatial, w.kernel, w.stride, w.rhs_dilation, w.padding, w.lhs_dilation)
  layout = "channels_last" if channels_last else "channels_first"
  return cols_to_layout(ref_unfold(image_from_layout(x, layout), index), w.kernel_size, layout)


def unfold_with(setting: str, x, w, channels_last: bool):
  with ji.force_algorithm(setting):
    return jax.jit(lambda v: primitives.unfold(v, window=w, channels_last=channels_last))(x)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("channels_last", [False, True], ids=["cf", "cl"])
def test_both_routes_copy_every_bit(platform, dtype, channels_last):
  """Every bit pattern of the dtype (NaNs with payloads, infinities,
  negative zeros), random windows with strides, dilations, padding, cropping
  and lhs dilation: each setting's route the reference copy, bit for bit
  (bfloat16 and float8 the kernel under both)."""
  rng = np.random.default_rng(5 + channels_last)
  with on_platform(platform):
    for w, spatial in random_windows(23 + channels_last, 8):
      shape = (2, *spatial, 3) if channels_last else (2, 3, *spatial)
      x = random_bits(rng, shape, dtype)
      want = reference(x, w, spatial, channels_last)
      for setting in ("own", "xla"):
        assert_same_bits(unfold_with(setting, jnp.asarray(x), w, channels_last), want)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_auto_route_on_suite_windows(platform):
  """The public unfold under "auto" on the benchmark's windows (a stem of 3
  channels, 3x3, strided, 1-D, 3-D), both layouts, against the kernel."""
  rng = np.random.default_rng(4)
  cases = [((3, 3), (1, 1), (1, 1), (14, 15), 8), ((3, 3), (2, 2), (1, 1), (15, 15), 8),
           ((7, 7), (2, 2), (3, 3), (30, 28), 3), ((3,), (2,), (0,), (301,), 8),
           ((3, 3, 3), (1, 1, 1), (1, 1, 1), (3, 5, 5), 8)]
  with on_platform(platform):
    for (kernel, stride, pad, spatial, c), dtype, cl in itertools.product(
        cases, [jnp.bfloat16, np.float32], [False, True]):
      x = jnp.asarray(rng.standard_normal((2, *spatial, c) if cl else (2, c, *spatial)), dtype)
      f = ji.unfold_channels_last if cl else ji.unfold
      with ji.force_algorithm("auto"):
        got = jax.jit(lambda v: f(v, kernel, 1, pad, stride))(x)
      with ji.force_algorithm("own"):
        want = jax.jit(lambda v: f(v, kernel, 1, pad, stride))(x)
      assert_same_bits(got, want)


def lowered(fn, arg, platform: str, setting: str) -> str:
  with ji.force_algorithm(setting):
    return jax.jit(fn).trace(arg).lower(lowering_platforms=(platform,)).as_text()


@pytest.mark.parametrize("platform", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype,cl,c,expect_cpu", [
    (np.float32, False, 8, "xla"), (np.float32, True, 8, "own"), (np.float32, True, 3, "xla"),
    (jnp.float16, False, 8, "own"), (np.int32, False, 8, "own")])
def test_lowering_emits_the_chosen_route(platform, dtype, cl, c, expect_cpu):
  """Under "auto" the rule's route on each platform (the kernel on the GPU);
  "xla" and "own" force theirs."""
  w = window((3, 3), padding=((1, 1), (1, 1)))
  x = jax.ShapeDtypeStruct((2, 9, 9, c) if cl else (2, c, 9, 9), dtype)
  fn = lambda v: primitives.unfold(v, window=w, channels_last=cl)
  expect = expect_cpu if platform == "cpu" else "own"
  assert ("jax_im2col_unfold" in lowered(fn, x, platform, "auto")) == (expect == "own")
  assert "jax_im2col_unfold" in lowered(fn, x, platform, "own")
  text = lowered(fn, x, platform, "xla")
  assert "jax_im2col_unfold" not in text and "stablehlo.slice" in text


def test_gradient_of_fold_takes_the_route():
  """fold's transpose is an unfold under the setting of the trace."""
  cols = jax.ShapeDtypeStruct((2, 36, 64), np.float32)
  grad = jax.grad(lambda c: ji.fold(c, (8, 8), 3, 1, 1).sum())
  assert "jax_im2col_unfold" in lowered(grad, cols, "cuda", "own")
  assert "jax_im2col_unfold" not in lowered(grad, cols, "cuda", "xla")
  assert "jax_im2col_unfold" not in lowered(grad, cols, "cpu", "auto")  # float32 channels-first


def test_rule():
  """The measured classes (columns/unfold_selection.py), and the settings."""
  bf16, f32, f64 = np.dtype(jnp.bfloat16), np.dtype(np.float32), np.dtype(np.float64)
  w3, w3s2, stem, w1d, w3d = suite_windows()
  pick = lambda w, spatial, c, dtype, cl=False, platform="cpu", setting="auto": unfold_algorithm(
      w, spatial, c, dtype, cl, platform, setting)[0]
  # The GPU: the kernel under "auto", whatever the call.
  for w, spatial, c in ((w3, (56, 56), 64), (stem, (224, 224), 3), (w1d, (3199,), 512), (w3d, (16, 56, 56), 64)):
    for dtype, cl in itertools.product((bf16, f32, f64), (False, True)):
      assert pick(w, spatial, c, dtype, cl, platform="cuda") == "own"
  # The CPU, float32: channels-first on the lax route; channels-last for a stem's
  # few channels and in 3-D, the kernel otherwise.
  for w, spatial, c in ((w3, (7, 7), 512), (w3s2, (56, 56), 128), (stem, (224, 224), 3), (w1d, (3199,), 512),
                        (w3d, (16, 56, 56), 64)):
    assert pick(w, spatial, c, f32) == "xla"
  assert pick(stem, (224, 224), 3, f32, cl=True) == pick(w3d, (16, 56, 56), 64, f32, cl=True) == "xla"
  assert pick(w3, (56, 56), 64, f32, cl=True) == pick(w3s2, (56, 56), 128, f32, cl=True) == "own"
  assert pick(w1d, (3199,), 512, f32, cl=True) == "own"
  # The CPU, other types: the kernel (bfloat16 measured; float64, integers not).
  for dtype in (bf16, f64, np.dtype(np.int32), np.dtype(np.bool_)):
    for cl in (False, True):
      assert pick(w3, (56, 56), 64, dtype, cl) == pick(stem, (224, 224), 3, dtype, cl) == "own"
  # The settings: "xla" and "own" force a route; a convolution algorithm's name
  # reads as "own". bfloat16 and float8, which XLA does not copy bit for bit,
  # keep the kernel under every setting.
  for dtype in (f32, f64, np.dtype(jnp.float16), np.dtype(np.int8), np.dtype(np.bool_), np.dtype(np.complex64)):
    assert pick(w3, (56, 56), 64, dtype, platform="cuda", setting="xla") == "xla"
  for dtype in (bf16, np.dtype(jnp.float8_e4m3fn), np.dtype(jnp.float8_e5m2)):
    assert pick(w3, (56, 56), 64, dtype, setting="xla") == "own"
  assert pick(w3, (56, 56), 64, f32, setting="own") == pick(w3, (56, 56), 64, f32, setting="gemm") == "own"
