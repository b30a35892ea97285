"""conv_general_dilated_patches against jax.lax (float64) and, bit for bit, an
independent numpy reference, over random ranks, strides, dilations, paddings
and dimension numbers."""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from jax import lax

import jax_im2col as ji
from conftest import PLATFORMS, on_platform
from test_unfold_fold import (DTYPES, assert_bits_equal, dilated_extent, output_extents,
                              ref_unfold, window_index_map)

CDN = lax.ConvDimensionNumbers
# Per rank: the default, channels-last lhs/out specs, rhs specs whose spatial
# axes are permuted relative to the lhs (OIWH), lowercase spatial names, and
# ConvDimensionNumbers objects whose rhs spatial axes are out of axis order.
DIMENSION_NUMBERS = {
    1: [None, ("NCH", "OIH", "NCH"), ("NHC", "HIO", "NHC"), ("HCN", "IHO", "CHN"),
        CDN((2, 1, 0), (1, 0, 2), (0, 2, 1))],
    2: [None, ("NHWC", "HWIO", "NHWC"), ("NHWC", "OIHW", "NHWC"), ("NCHW", "HWIO", "NHWC"),
        ("NCHW", "OIWH", "NCHW"), ("NwhC", "OIhw", "CNwh"), ("HNWC", "WIHO", "WCHN"),
        CDN((0, 3, 1, 2), (3, 2, 1, 0), (0, 3, 2, 1))],
    3: [None, ("NDHWC", "DHWIO", "NDHWC"), ("NCDHW", "OIWHD", "NDHWC"),
        ("DNCHW", "HIDOW", "WCNDH"), CDN((0, 1, 4, 2, 3), (4, 3, 2, 0, 1), (1, 0, 3, 4, 2))],
}
ALL_DIMENSION_NUMBERS = [pytest.param(nd, dn, id=f"{nd}d-{dn}")
                         for nd, dns in DIMENSION_NUMBERS.items() for dn in dns]
PADDINGS = ["SAME", "SAME_LOWER", "VALID", "pairs"]


def lax_string_padding(mode, spatial, kernel, strides, rhs_dilation):
  """lax's SAME / SAME_LOWER / VALID: on the undilated input and the dilated kernel."""
  if mode == "VALID":
    return ((0, 0),) * len(spatial)
  pads = []
  for n, k, s, r in zip(spatial, kernel, strides, rhs_dilation):
    total = max(0, (-(-n // s) - 1) * s + dilated_extent(k, r) - n)
    small, big = total // 2, total - total // 2
    pads.append((small, big) if mode == "SAME" else (big, small))
  return tuple(pads)


@dataclasses.dataclass(frozen=True)
class PatchCase:
  lhs_shape: tuple[int, ...]
  filter_shape: tuple[int, ...]  # in the rhs array's axis order, as lax takes it
  strides: tuple[int, ...]
  padding: object  # a string or (low, high) pairs
  lhs_dilation: tuple[int, ...] | None
  rhs_dilation: tuple[int, ...] | None
  dimension_numbers: object
  seed: int = 0

  @property
  def nd(self) -> int:
    return len(self.filter_shape)

  @property
  def dnums(self) -> lax.ConvDimensionNumbers:
    return lax.conv_dimension_numbers(self.lhs_shape, (1, 1, *self.filter_shape),
                                      self.dimension_numbers)

  @property
  def spatial(self) -> tuple[int, ...]:
    """Input sizes of the convolution's spatial dimensions, in its order."""
    return tuple(self.lhs_shape[a] for a in self.dnums.lhs_spec[2:])

  @property
  def kernel(self) -> tuple[int, ...]:
    """Kernel sizes in the convolution's spatial order."""
    rhs_axes = sorted(self.dnums.rhs_spec[2:])
    return tuple(self.filter_shape[rhs_axes.index(a)] for a in self.dnums.rhs_spec[2:])

  @property
  def lhs_dil(self):
    return self.lhs_dilation or (1,) * self.nd

  @property
  def rhs_dil(self):
    return self.rhs_dilation or (1,) * self.nd

  @property
  def pads(self):
    if isinstance(self.padding, str):
      return lax_string_padding(self.padding, self.spatial, self.kernel, self.strides, self.rhs_dil)
    return self.padding

  @property
  def lax_accepts(self) -> bool:
    """lax rejects a negative padding larger than the (dilated) input."""
    return all(dilated_extent(n, l) + lo + hi >= 0
               for n, l, (lo, hi) in zip(self.spatial, self.lhs_dil, self.pads))

  def args(self):
    return dict(filter_shape=self.filter_shape, window_strides=self.strides, padding=self.padding,
                lhs_dilation=self.lhs_dilation, rhs_dilation=self.rhs_dilation,
                dimension_numbers=self.dimension_numbers)

  def reference(self, lhs: np.ndarray) -> np.ndarray:
    """Patches by copying: features ordered channel, then the rhs array's
    spatial axes in axis order; laid out as the out spec says."""
    dn = self.dnums
    x = np.transpose(lhs, dn.lhs_spec)  # (N, C, *spatial)
    index = window_index_map(self.spatial, self.kernel, self.strides, self.rhs_dil, self.pads,
                             self.lhs_dil)
    out_spatial = output_extents(self.spatial, self.kernel, self.strides, self.rhs_dil,
                                 self.pads, self.lhs_dil)
    n, c = x.shape[:2]
    cols = ref_unfold(x, index).reshape(n, c, *self.kernel, *out_spatial)
    tap_axes = 2 + np.argsort(dn.rhs_spec[2:])  # conv spatial order -> rhs axis order
    cols = cols.transpose(0, 1, *tap_axes, *range(2 + self.nd, 2 + 2 * self.nd))
    cols = cols.reshape(n, c * math.prod(self.kernel), *out_spatial)
    return np.transpose(cols, np.argsort(dn.out_spec))


@st.composite
def patch_cases(draw, nd=None, dimension_numbers=None, max_n=2):
  nd = draw(st.integers(1, 3)) if nd is None else nd
  def per_dim(lo, hi):
    return tuple(draw(st.lists(st.integers(lo, hi), min_size=nd, max_size=nd)))
  def optional_dilation():
    d = per_dim(1, 3)
    return None if d == (1,) * nd and draw(st.booleans()) else d
  dn = draw(st.sampled_from(DIMENSION_NUMBERS[nd])) if dimension_numbers is None else dimension_numbers
  filter_shape = per_dim(1, 3)
  parsed = lax.conv_dimension_numbers((1,) * (nd + 2), (1, 1, *filter_shape), dn)
  lhs_shape = [0] * (nd + 2)
  lhs_shape[parsed.lhs_spec[0]] = draw(st.integers(0, max_n))
  lhs_shape[parsed.lhs_spec[1]] = draw(st.integers(1, 3))
  for axis in parsed.lhs_spec[2:]:
    lhs_shape[axis] = draw(st.integers(1, 7))
  kind = draw(st.sampled_from(PADDINGS))
  if kind == "pairs":
    padding, lhs_dilation = tuple(zip(per_dim(-2, 3), per_dim(-2, 3))), optional_dilation()
  else:  # lax defines string padding only without lhs dilation
    padding, lhs_dilation = kind, draw(st.sampled_from([None, (1,) * nd]))
  return PatchCase(tuple(lhs_shape), filter_shape, per_dim(1, 3), padding, lhs_dilation,
                   optional_dilation(), dn, seed=draw(st.integers(0, 2**32 - 1)))


def lax_patches(lhs, case: PatchCase, **kw):
  return lax.conv_general_dilated_patches(jnp.asarray(lhs), precision=lax.Precision.HIGHEST,
                                          **case.args(), **kw)


@pytest.mark.parametrize("platform", PLATFORMS)
@settings(max_examples=60, deadline=None)
@given(case=patch_cases())
def test_matches_lax(platform, case):
  assume(case.lax_accepts)
  lhs = np.random.default_rng(case.seed).standard_normal(case.lhs_shape)
  with on_platform(platform):
    got = ji.conv_general_dilated_patches(jnp.asarray(lhs), **case.args())
    want = lax_patches(lhs, case)
  assert got.dtype == want.dtype == np.float64
  assert got.shape == want.shape
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=25, deadline=None)
@given(case=patch_cases())
def test_is_exact_copy(platform, dtype, case):
  """Random normal data: the patches equal the float64 reference cast back,
  bit for bit (lax's conv-based patches round on TF32 / bf16 hardware)."""
  assume(case.lax_accepts)
  lhs = np.random.default_rng(case.seed).standard_normal(case.lhs_shape).astype(dtype)
  with on_platform(platform):
    got = ji.conv_general_dilated_patches(jnp.asarray(lhs), **case.args())
  assert_bits_equal(got, case.reference(lhs.astype(np.float64)).astype(dtype))


def _fixed_case(nd, dimension_numbers, padding, seed=0):
  """An asymmetric geometry: every spatial dimension differs in size, filter,
  stride and dilations, so a swapped axis changes the result."""
  sizes, filters = (7, 6, 5)[:nd], (3, 2, 1)[:nd]
  strides, lhs_dil, rhs_dil = (2, 1, 3)[:nd], (1, 2, 1)[:nd], (2, 1, 1)[:nd]
  if padding != "pairs":  # lax defines string padding only without lhs dilation
    pads, lhs_dil = padding, None
  else:
    pads = ((1, -1), (0, 2), (-1, 0))[:nd]
  parsed = lax.conv_dimension_numbers((1,) * (nd + 2), (1, 1, *filters), dimension_numbers)
  shape = [0] * (nd + 2)
  shape[parsed.lhs_spec[0]], shape[parsed.lhs_spec[1]] = 2, 3
  for axis, size in zip(parsed.lhs_spec[2:], sizes):
    shape[axis] = size
  return PatchCase(tuple(shape), filters, strides, pads, lhs_dil, rhs_dil, dimension_numbers, seed)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("nd, dimension_numbers", ALL_DIMENSION_NUMBERS)
def test_every_dimension_numbers(platform, padding, nd, dimension_numbers):
  case = _fixed_case(nd, dimension_numbers, padding)
  lhs = np.random.default_rng(0).standard_normal(case.lhs_shape)
  with on_platform(platform):
    got = ji.conv_general_dilated_patches(jnp.asarray(lhs), **case.args())
    want = lax_patches(lhs, case)
  assert got.shape == want.shape
  assert got.shape[case.dnums.out_spec[1]] == 3 * math.prod(case.filter_shape)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)
  assert_bits_equal(got, case.reference(lhs))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype, preferred", [
    pytest.param(np.float32, np.float64, id="float32-to-float64"),
    pytest.param(jnp.bfloat16, np.float32, id="bfloat16-to-float32"),
    pytest.param(np.float16, np.float32, id="float16-to-float32"),
    pytest.param(np.float32, np.float32, id="float32-to-float32"),
    pytest.param(np.float64, None, id="float64-none"),
])
def test_preferred_element_type(platform, dtype, preferred):
  case = _fixed_case(2, ("NHWC", "HWIO", "NHWC"), "SAME")
  lhs = np.random.default_rng(1).standard_normal(case.lhs_shape).astype(dtype)
  with on_platform(platform):
    got = ji.conv_general_dilated_patches(jnp.asarray(lhs), **case.args(),
                                          preferred_element_type=preferred)
    want = lax_patches(lhs, case, preferred_element_type=preferred)
  out_dtype = np.dtype(preferred or dtype)
  assert got.dtype == want.dtype == out_dtype
  assert_bits_equal(got, case.reference(lhs.astype(np.float64)).astype(out_dtype))


@pytest.mark.parametrize("platform", PLATFORMS)
def test_precision_and_jit_do_not_change_the_result(platform):
  case = _fixed_case(3, ("NCDHW", "OIWHD", "NDHWC"), "pairs")
  lhs = jnp.asarray(np.random.default_rng(2).standard_normal(case.lhs_shape).astype(np.float32))
  with on_platform(platform):
    eager = ji.conv_general_dilated_patches(lhs, **case.args())
    for precision in (None, lax.Precision.DEFAULT, lax.Precision.HIGHEST):
      f = functools.partial(ji.conv_general_dilated_patches, **case.args(), precision=precision)
      assert_bits_equal(f(lhs), eager)
      assert_bits_equal(jax.jit(f)(lhs), eager)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_empty_batch_with_permuted_rhs_axes(platform):
  dn = CDN((0, 3, 1, 2), (3, 2, 1, 0), (0, 3, 2, 1))
  lhs = jnp.zeros((0, 4, 5, 2))
  with on_platform(platform):
    want = lax.conv_general_dilated_patches(lhs, (2, 3), (1, 1), "VALID", dimension_numbers=dn)
    got = ji.conv_general_dilated_patches(lhs, (2, 3), (1, 1), "VALID", dimension_numbers=dn)
  assert got.shape == want.shape == (0, 4, 2, 12)


X = np.zeros((2, 3, 5, 6), np.float32)
PATCH_ERRORS = [
    pytest.param(dict(lhs=X.astype(jnp.int4)), TypeError,
                 r"^lhs must have a dtype that conv_general_dilated_patches takes", id="lhs-int4"),
    pytest.param(dict(lhs=X.astype(jnp.float8_e5m2fnuz)), TypeError,
                 r"^lhs must have a dtype that conv_general_dilated_patches takes", id="lhs-float8-fnuz"),
    pytest.param(dict(lhs=X[0, 0], filter_shape=(2,), window_strides=(1,)), ValueError,
                 r"^lhs must have rank", id="lhs-rank-2"),
    pytest.param(dict(lhs=np.zeros((1,) * 6, np.float32), filter_shape=(1,) * 4,
                      window_strides=(1,) * 4), ValueError, r"^lhs must have rank", id="lhs-rank-6"),
    pytest.param(dict(filter_shape=(2, 2, 2)), ValueError, "filter_shape", id="filter-length"),
    pytest.param(dict(filter_shape=(0, 2)), ValueError, "filter_shape", id="filter-zero"),
    pytest.param(dict(window_strides=(0, 1)), ValueError, "window_strides", id="strides-zero"),
    pytest.param(dict(window_strides=(1,)), ValueError, "window_strides", id="strides-length"),
    pytest.param(dict(padding="FULL"), ValueError, "padding", id="padding-unknown-string"),
    pytest.param(dict(padding=((0, 0),)), ValueError, "padding", id="padding-length"),
    pytest.param(dict(padding=1), TypeError, "padding", id="padding-int"),
    pytest.param(dict(padding=((0, 0, 0), (0, 0))), TypeError, "padding", id="padding-triple"),
    pytest.param(dict(lhs_dilation=(0, 1)), ValueError, "lhs_dilation", id="lhs-dilation-zero"),
    pytest.param(dict(lhs_dilation=(2, 1), padding="SAME"), ValueError, "padding",
                 id="string-padding-with-lhs-dilation"),
    pytest.param(dict(lhs_dilation=(1, 2), padding="VALID"), ValueError, "padding",
                 id="valid-padding-with-lhs-dilation"),
    pytest.param(dict(rhs_dilation=(1, -1)), ValueError, "rhs_dilation", id="rhs-dilation-negative"),
    pytest.param(dict(rhs_dilation=(1, 1, 1)), ValueError, "rhs_dilation", id="rhs-dilation-length"),
    pytest.param(dict(dimension_numbers=("NCHW", "OIHW")), ValueError, "dimension_numbers",
                 id="dnums-two-specs"),
    pytest.param(dict(dimension_numbers=("NCHW", "OIHW", "NCXY")), ValueError, "dimension_numbers",
                 id="dnums-spatial-names"),
    pytest.param(dict(dimension_numbers=("NCHW", "OIHW", "NCH")), ValueError, "dimension_numbers",
                 id="dnums-rank"),
    pytest.param(dict(dimension_numbers=("NCHW", "OHWX", "NCHW")), ValueError, "dimension_numbers",
                 id="dnums-no-I"),
]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("overrides, error, pattern", PATCH_ERRORS)
def test_argument_errors(platform, overrides, error, pattern):
  kwargs = dict(lhs=X, filter_shape=(2, 2), window_strides=(1, 1), padding="VALID")
  kwargs.update(overrides)
  lhs = kwargs.pop("lhs")
  with on_platform(platform):
    with pytest.raises(error, match=pattern):
      ji.conv_general_dilated_patches(jnp.asarray(lhs), **kwargs)
    with pytest.raises(error, match=pattern):  # at trace time
      jax.eval_shape(lambda a: ji.conv_general_dilated_patches(a, **kwargs), jnp.asarray(lhs))
