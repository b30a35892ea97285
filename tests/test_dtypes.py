"""unfold, fold, their channels-last forms and conv_general_dilated_patches in
every dtype they take (jax_im2col.COLUMNS_DTYPES), against numpy references:

- unfold and the patches are exact copies: random bits of every dtype (every
  float, float8 and complex bit pattern, NaNs included; integers over their
  whole range) come back bit for bit;
- fold of integers is numpy's sum in a wide integer cast back (modulo
  2**bits: the values span the type's range, so sums wrap), of bools a
  logical or, of floats and complex numbers the float64 / complex128 sum
  rounded once (small integers, whose float32 sums are exact; complex
  normal values within the summation error);
- differentiation: JVP and transpose for the inexact dtypes, JAX's integer
  rules (float0) for integer and bool inputs.

The geometries cover 1-3 D with stride, dilation and asymmetric and negative
padding, in both layouts, with channel counts that take each CUDA path of the
1- and 16-byte elements (channels-last rows of an odd and an even number of
bytes, wide rows). The reference helpers come from test_unfold_fold.py and
test_patches.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jax_im2col as ji
from conftest import PLATFORMS, on_platform
from test_patches import DIMENSION_NUMBERS, _fixed_case
from test_unfold_fold import (FOLD, LAYOUTS, UNFOLD, Case, cols_from_layout, cols_to_layout,
                              image_from_layout, image_to_layout)

ALL_DTYPES = [pytest.param(np.dtype(d), id=np.dtype(d).name) for d in ji.COLUMNS_DTYPES]
INEXACT = [p for p in ALL_DTYPES if jnp.issubdtype(p.values[0], jnp.inexact)]
NOT_INEXACT = [p for p in ALL_DTYPES if not jnp.issubdtype(p.values[0], jnp.inexact)]

# (geometry, channels): 1-D, 2-D and 3-D windows with stride, dilation and
# asymmetric / negative padding; channel counts odd (3: the CUDA generic
# channels-last unfold of 1-byte elements), even (4, 6: the same bytes as
# wider elements) and wide (64: the vector kernels).
GEOMETRIES = [
    pytest.param(Case.make((11,), (3,), stride=(2,), dilation=(2,), padding=((1, 2),), c=3), id="1d-c3"),
    pytest.param(Case.make((6, 7), (3, 2), stride=(1, 2), dilation=(1, 2), padding=((1, 1), (-1, 2)), c=4),
                 id="2d-c4"),
    pytest.param(Case.make((4, 5, 3), (2, 2, 2), stride=(1, 2, 1), dilation=(2, 1, 1),
                           padding=((1, 0), (0, 1), (1, 1)), n=1, c=6), id="3d-c6"),
    pytest.param(Case.make((9, 16), (3, 3), padding=((1, 1), (1, 1)), n=2, c=64), id="2d-c64"),
]


def random_bits(rng, shape, dtype) -> np.ndarray:
  """Every bit pattern of the dtype (integers over their whole range, floats
  NaNs and infinities included); bools False / True."""
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return rng.integers(0, 2, size=shape).astype(np.bool_)
  raw = rng.integers(0, 256, size=(*shape, dtype.itemsize), dtype=np.uint8)
  return raw.view(dtype).reshape(shape)


def small_values(rng, shape, dtype) -> np.ndarray:
  """Values whose sums over a window's taps are exact in float32 (and in
  complex64): small integers (float8 rounds them to its own), a fifth of
  bools True; integers over their whole range, whose sums wrap."""
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return rng.random(shape) < 0.2
  if jnp.issubdtype(dtype, jnp.integer):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
  if jnp.issubdtype(dtype, jnp.complexfloating):
    return (rng.integers(-1000, 1001, size=shape) + 1j * rng.integers(-1000, 1001, size=shape)).astype(dtype)
  bound = 6 if dtype.itemsize == 1 else 1000
  return rng.integers(-bound, bound + 1, size=shape).astype(np.float64).astype(dtype)


def as_bytes(a) -> np.ndarray:
  a = np.asarray(a)
  return np.ascontiguousarray(a).view(np.uint8).reshape(*a.shape, a.dtype.itemsize)


def assert_same_bits(got, want):
  got, want = np.asarray(got), np.asarray(want)
  assert got.dtype == want.dtype, (got.dtype, want.dtype)
  assert got.shape == want.shape, (got.shape, want.shape)
  np.testing.assert_array_equal(as_bytes(got), as_bytes(want))


def ref_unfold_any(case: Case, x: np.ndarray, layout: str) -> np.ndarray:
  """The reference unfold in x's own dtype (zeros / False on padding)."""
  cf = image_from_layout(x, layout)
  n, c = cf.shape[:2]
  flat = cf.reshape(n, c, -1)
  flat = np.concatenate([flat, np.zeros((n, c, 1), x.dtype)], axis=2)  # index -1 reads it
  k, l = case.index.shape
  return cols_to_layout(flat[:, :, case.index].reshape(n, c * k, l), k, layout)


def ref_fold_any(case: Case, cols: np.ndarray, layout: str) -> np.ndarray:
  """The reference fold: numpy's scatter-add in a wide type, then cast back:
  integers in uint64 (two's complement: modulo 2**64, then the cast keeps the
  low bits), bools by logical or, floats in float64, complex in complex128."""
  dtype = cols.dtype
  cf = cols_from_layout(cols, case.k, layout)
  n, k, l = cf.shape[0], *case.index.shape
  c = cf.shape[1] // k
  if dtype == np.bool_:
    wide, add = np.bool_, np.logical_or
  elif jnp.issubdtype(dtype, jnp.integer):
    wide, add = np.uint64, np.add
  elif jnp.issubdtype(dtype, jnp.complexfloating):
    wide, add = np.complex128, np.add
  else:
    wide, add = np.float64, np.add
  out = np.zeros((n, c, int(np.prod(case.spatial)) + 1), wide)  # index -1 adds to the last
  add.at(out, (slice(None), slice(None), case.index), cf.reshape(n, c, k, l).astype(wide))
  out = out[:, :, :-1].reshape(n, c, *case.spatial)
  return image_to_layout(out.astype(dtype), layout)


# --------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("case", GEOMETRIES)
def test_unfold_copies_every_bit(platform, layout, dtype, case):
  x = random_bits(case.rng(), case.image_shape(layout), dtype)
  with on_platform(platform):
    got = case.unfold(jnp.asarray(x), layout)
  assert_same_bits(got, ref_unfold_any(case, x, layout))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("case", GEOMETRIES)
def test_fold_matches_wide_sum_cast_back(platform, layout, dtype, case):
  cols = small_values(case.rng(), case.cols_shape(layout), dtype)
  with on_platform(platform):
    got = case.fold(jnp.asarray(cols), layout)
  assert_same_bits(got, ref_fold_any(case, cols, layout))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["complex64", "complex128"])
def test_complex_fold_of_normal_values_within_summation_error(platform, layout, dtype):
  """Complex sums in their own precision: within the worst-case error of a
  sum of K terms in that precision of the complex128 reference."""
  case = GEOMETRIES[1].values[0]
  rng = case.rng()
  shape = case.cols_shape(layout)
  cols = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
  with on_platform(platform):
    got = np.asarray(case.fold(jnp.asarray(cols), layout)).astype(np.complex128)
  exact = ref_fold_any(case, cols.astype(np.complex128), layout)
  abs_sum = ref_fold_any(case, (np.abs(cols.real) + 1j * np.abs(cols.imag)).astype(np.complex128), layout)
  bound = case.k * np.finfo(dtype).eps
  assert np.all(np.abs(got.real - exact.real) <= bound * abs_sum.real)
  assert np.all(np.abs(got.imag - exact.imag) <= bound * abs_sum.imag)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_fold_by_hand(platform, layout):
  """Two windows of 2 taps over 3 positions, the middle one read by both:
  int8 wraps (100 + 100 = -56, numpy's int64 sum cast back), uint8 too
  (200 + 100 = 44), bool is any, float8_e4m3fn overflows to NaN (448 + 448,
  as astype) and float8_e5m2 to infinity, float16 rounds once."""
  cases = [(np.int8, [[10, 100], [100, 7]], [10, -56, 7]),
           (np.uint8, [[10, 200], [100, 7]], [10, 44, 7]),
           (np.bool_, [[False, True], [True, False]], [False, True, False]),
           (np.bool_, [[False, False], [False, True]], [False, False, True]),
           (jnp.float8_e4m3fn, [[1, 448], [448, 2]], [1, np.nan, 2]),
           (jnp.float8_e5m2, [[1, 57344], [57344, 2]], [1, np.inf, 2]),
           (np.float16, [[1, 2048], [1, 3]], [1, 2048, 3]),
           (np.complex64, [[1j, 2], [3 - 1j, 4]], [1j, 2 + 3 - 1j, 4])]
  for dtype, taps, want in cases:
    cf = np.asarray(taps, dtype)[None]  # (N=1, 2 taps (C=1), 2 positions): x[1] = tap 1 at 0 + tap 0 at 1
    cols = cf if layout == "channels_first" else np.swapaxes(cf, 1, 2)
    with on_platform(platform):
      got = FOLD[layout](jnp.asarray(cols), (3,), (2,))
    want_x = np.asarray(want, dtype).reshape(1, 1, 3)
    assert_same_bits(got, image_to_layout(want_x, layout))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("nd, dimension_numbers", [
    pytest.param(1, None, id="1d"),
    pytest.param(2, ("NHWC", "OIHW", "NHWC"), id="2d-NHWC"),
    pytest.param(3, DIMENSION_NUMBERS[3][3], id="3d-permuted"),
])
def test_patches_copy_every_bit(platform, dtype, nd, dimension_numbers):
  """With lhs dilation, stride, rhs dilation and negative padding; lax's
  patches (a one-hot convolution) take no integer or bool images on GPUs."""
  case = _fixed_case(nd, dimension_numbers, "pairs")
  lhs = random_bits(np.random.default_rng(nd), case.lhs_shape, dtype)
  with on_platform(platform):
    got = ji.conv_general_dilated_patches(jnp.asarray(lhs), **case.args())
  assert_same_bits(got, case.reference(lhs))


# --------------------------------------------------------------------------
# Differentiation
# --------------------------------------------------------------------------

SMALL = Case.make((5, 6), (2, 3), stride=(1, 2), dilation=(2, 1), padding=((1, 0), (-1, 2)))


def _ops(layout):
  unfold = lambda x: SMALL.unfold(x, layout)
  fold = lambda c: SMALL.fold(c, layout)
  return unfold, fold


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", INEXACT)
def test_jvp_and_vjp_of_inexact_dtypes(platform, layout, dtype):
  """unfold and fold are linear: the JVP applies them to the tangent, the
  VJP is the other one (no conjugation for complex: JAX's transposes are
  linear ones), exactly."""
  unfold, fold = _ops(layout)
  rng = SMALL.rng()
  x = small_values(rng, SMALL.image_shape(layout), dtype)
  t = small_values(rng, SMALL.image_shape(layout), dtype)
  ct = small_values(rng, SMALL.cols_shape(layout), dtype)
  with on_platform(platform):
    x, t, ct = jnp.asarray(x), jnp.asarray(t), jnp.asarray(ct)
    y, ty = jax.jvp(unfold, (x,), (t,))
    assert_same_bits(ty, unfold(t))
    _, vjp = jax.vjp(unfold, x)
    assert_same_bits(vjp(ct)[0], fold(ct))
    _, tz = jax.jvp(fold, (ct,), (ct,))
    assert_same_bits(tz, fold(ct))
    _, vjp = jax.vjp(fold, ct)
    assert_same_bits(vjp(t)[0], unfold(t))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_check_grads_complex128(platform, layout):
  unfold, fold = _ops(layout)
  rng = SMALL.rng()
  x = rng.standard_normal(SMALL.image_shape(layout)) + 1j * rng.standard_normal(SMALL.image_shape(layout))
  c = rng.standard_normal(SMALL.cols_shape(layout)) - 1j * rng.standard_normal(SMALL.cols_shape(layout))
  with on_platform(platform):
    check_grads(lambda v: unfold(v) ** 2, (jnp.asarray(x),), order=1, modes=("fwd", "rev"))
    check_grads(lambda v: fold(v) ** 2, (jnp.asarray(c),), order=1, modes=("fwd", "rev"))
    # A holomorphic function's complex gradient.
    g = jax.grad(lambda v: jnp.sum(unfold(v) ** 2), holomorphic=True)(jnp.asarray(x))
    want = fold(2 * unfold(jnp.asarray(x)))
  np.testing.assert_allclose(np.asarray(g), np.asarray(want), rtol=1e-12)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", NOT_INEXACT)
def test_integer_and_bool_inputs_follow_jax_integer_rules(platform, layout, dtype):
  """As for lax's own integer ops: jax.grad refuses the input (allow_int
  gives float0 zeros), jax.jvp and jax.vjp take and give float0 tangents."""
  unfold, fold = _ops(layout)
  rng = SMALL.rng()
  x = jnp.asarray(small_values(rng, SMALL.image_shape(layout), dtype))
  cols = jnp.asarray(small_values(rng, SMALL.cols_shape(layout), dtype))
  to_float = lambda y: jnp.sum(y.astype(jnp.float32))
  with on_platform(platform):
    for f, v in ((unfold, x), (fold, cols)):
      with pytest.raises(TypeError, match="grad requires real- or complex-valued inputs"):
        jax.grad(lambda a: to_float(f(a)))(v)
      g = jax.grad(lambda a: to_float(f(a)), allow_int=True)(v)
      assert g.dtype == jax.dtypes.float0 and g.shape == v.shape
      y, ty = jax.jvp(f, (v,), (np.zeros(v.shape, jax.dtypes.float0),))
      assert y.dtype == v.dtype
      assert ty.dtype == jax.dtypes.float0 and ty.shape == y.shape
      y, vjp = jax.vjp(f, v)
      (ct,) = vjp(np.zeros(y.shape, jax.dtypes.float0))
      assert ct.dtype == jax.dtypes.float0 and ct.shape == v.shape
    # Under a float computation's derivative the integer branch carries none.
    d = jax.grad(lambda s: to_float(unfold(x)) * s + s)(jnp.float32(1.5))
    want = to_float(unfold(x)) + jnp.float32(1)
  assert d.dtype == want.dtype and float(d) == float(want)


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------

UNSUPPORTED = [pytest.param(getattr(jnp, name), id=name)
               for name in ("int4", "uint4", "float8_e4m3fnuz", "float8_e5m2fnuz", "float4_e2m1fn")
               if hasattr(jnp, name)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", UNSUPPORTED)
def test_unsupported_dtypes_raise_naming_the_function(layout, dtype):
  x = jnp.zeros(SMALL.image_shape(layout), dtype)
  cols = jnp.zeros(SMALL.cols_shape(layout), dtype)
  suffix = "_channels_last" if layout == "channels_last" else ""
  with pytest.raises(TypeError, match=rf"^x must have a dtype that unfold{suffix} takes \(bool, int8, .*complex128\), got"):
    UNFOLD[layout](x, **SMALL.args)
  with pytest.raises(TypeError, match=rf"^cols must have a dtype that fold{suffix} takes \(bool, .*\), got"):
    FOLD[layout](cols, SMALL.spatial, **SMALL.args)
  with pytest.raises(TypeError, match=r"^lhs must have a dtype that conv_general_dilated_patches takes"):
    ji.conv_general_dilated_patches(jnp.zeros((1, 2, 5, 6), dtype), (2, 2), (1, 1), "VALID")


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, np.complex64, jnp.float8_e4m3fn],
                         ids=["int32", "uint8", "bool", "complex64", "float8_e4m3fn"])
def test_convolution_keeps_its_floating_dtypes(dtype):
  """The shared argument check gives the convolution its own message."""
  x, w = jnp.zeros((1, 2, 5, 6), dtype), jnp.zeros((3, 2, 2, 2), dtype)
  with pytest.raises(TypeError, match=r"^lhs must have a floating dtype \(float16, bfloat16, float32 or float64\)"):
    ji.conv_general_dilated(x, w, (1, 1), "VALID")
  with pytest.raises(TypeError, match=r"^rhs must have a floating dtype"):
    ji.conv_general_dilated(jnp.zeros((1, 2, 5, 6)), w, (1, 1), "VALID")


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", [jnp.float8_e4m3fn, jnp.float8_e5m2], ids=["e4m3fn", "e5m2"])
def test_float8_rounding_matches_astype(platform, dtype):
  """The fold's float8 conversions (lib/common/float8.h) are ml_dtypes'
  (astype): every code through a fold of one tap an element, and every sum
  of two codes (ties and overflows included) through two windows that
  overlap on one element, against the float32 sum from zero cast by astype.
  NaNs compare as NaNs (a GPU's NaN results carry no sign)."""
  codes = np.arange(256, dtype=np.uint8).view(dtype)
  a, b = (v.reshape(-1) for v in np.meshgrid(codes, codes, indexing="ij"))
  one = np.stack([a, b], axis=1)[:, :, None]  # (65536, 2 taps, 1 position): kernel 2, stride 2 over 2
  two = np.zeros((a.size, 2, 2), dtype)  # kernel 2, stride 1 over 3: x[1] = tap 1 at 0 + tap 0 at 1
  two[:, 1, 0], two[:, 0, 1] = a, b
  with on_platform(platform):
    copied = np.asarray(ji.fold(jnp.asarray(one), (2,), (2,), stride=2))
    summed = np.asarray(ji.fold(jnp.asarray(two), (3,), (2,)))[:, 0, 1]
  # A fold's sums start from +0 (numpy's scatter-add into zeros does too),
  # so -0 comes back as +0.
  for got, terms in ((copied[:, 0, :], [np.stack([a, b], axis=1)]), (summed, [a, b])):
    with np.errstate(invalid="ignore"):  # inf + -inf
      want = sum((t.astype(np.float32) for t in terms), np.float32(0)).astype(dtype)
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    assert_same_bits(got[~nan], want[~nan])
