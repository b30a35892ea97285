"""unfold / fold in both layouts against an independent float64 numpy reference,
torch, their own adjoint identity, JAX transformations, and the argument checks.

The reference helpers at the top (index map, unfold, fold, layout reorders,
geometry strategy) are shared with test_patches.py.
"""

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
from jax.test_util import check_grads

import jax_im2col as ji
from conftest import PLATFORMS, on_platform

DTYPES = [
    pytest.param(np.dtype(jnp.float16), id="float16"),
    pytest.param(np.dtype(jnp.bfloat16), id="bfloat16"),
    pytest.param(np.dtype(np.float32), id="float32"),
    pytest.param(np.dtype(np.float64), id="float64"),
]
HALF_DTYPES = DTYPES[:2]
LAYOUTS = ["channels_first", "channels_last"]
UNFOLD = {"channels_first": ji.unfold, "channels_last": ji.unfold_channels_last}
FOLD = {"channels_first": ji.fold, "channels_last": ji.fold_channels_last}
_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits(a) -> np.ndarray:
  """The raw bit patterns of an array (compares -0.0, inf and NaN payloads too)."""
  a = np.asarray(a)
  return a.view(_UINT[a.dtype.itemsize])


def assert_bits_equal(got, want):
  got, want = np.asarray(got), np.asarray(want)
  assert got.dtype == want.dtype, (got.dtype, want.dtype)
  assert got.shape == want.shape, (got.shape, want.shape)
  np.testing.assert_array_equal(bits(got), bits(want))


# --------------------------------------------------------------------------
# Reference: window geometry and an index map built from explicit dilation,
# padding and cropping of an array of input positions.
# --------------------------------------------------------------------------

def dilated_extent(n: int, d: int) -> int:
  return 0 if n <= 0 else (n - 1) * d + 1


def output_extents(spatial, kernel, stride, dilation, padding, lhs_dilation=None):
  """Window positions per dimension; 0 where no window fits."""
  lhs_dilation = lhs_dilation or (1,) * len(spatial)
  out = []
  for n, k, s, r, l, (lo, hi) in zip(spatial, kernel, stride, dilation, lhs_dilation, padding):
    span = dilated_extent(n, l) + lo + hi - dilated_extent(k, r)
    out.append(span // s + 1 if span >= 0 else 0)
  return tuple(out)


def window_index_map(spatial, kernel, stride, dilation, padding, lhs_dilation=None):
  """(prod(kernel), L) int array: the flat input position that each kernel tap
  reads at each output position (both row-major), or -1 where it reads
  padding or a hole of the lhs dilation."""
  nd = len(spatial)
  lhs_dilation = lhs_dilation or (1,) * nd
  out = output_extents(spatial, kernel, stride, dilation, padding, lhs_dilation)
  if 0 in out:
    return np.zeros((math.prod(kernel), 0), np.int64)
  positions = np.arange(math.prod(spatial)).reshape(spatial)
  dilated = np.full([dilated_extent(n, l) for n, l in zip(spatial, lhs_dilation)], -1)
  dilated[tuple(slice(None, None, l) for l in lhs_dilation)] = positions
  padded = np.pad(dilated, [(max(lo, 0), max(hi, 0)) for lo, hi in padding], constant_values=-1)
  padded = padded[tuple(slice(max(-lo, 0), size - max(-hi, 0))
                        for (lo, hi), size in zip(padding, padded.shape))]
  index = []
  for d in range(nd):
    taps = np.arange(kernel[d]) * dilation[d]
    starts = np.arange(out[d]) * stride[d]
    shape = [1] * (2 * nd)
    shape[d], shape[nd + d] = kernel[d], out[d]
    index.append((taps[:, None] + starts[None, :]).reshape(shape))
  return padded[tuple(index)].reshape(math.prod(kernel), math.prod(out))


def ref_unfold(x: np.ndarray, index: np.ndarray) -> np.ndarray:
  """(N, C, *spatial) -> (N, C*K, L) in x's own dtype (a pure copy)."""
  n, c = x.shape[:2]
  flat = x.reshape(n, c, math.prod(x.shape[2:]))
  flat = np.concatenate([flat, np.zeros((n, c, 1), x.dtype)], axis=2)  # index -1 reads 0
  k, l = index.shape
  return flat[:, :, index].reshape(n, c * k, l)


def ref_fold(cols: np.ndarray, index: np.ndarray, spatial) -> np.ndarray:
  """The adjoint of ref_unfold, as a float64 scatter-add: (N, C*K, L) -> (N, C, *spatial)."""
  n = cols.shape[0]
  k, l = index.shape
  c = cols.shape[1] // k
  out = np.zeros((n, c, math.prod(spatial) + 1))
  np.add.at(out, (slice(None), slice(None), index),
            np.asarray(cols, np.float64).reshape(n, c, k, l))
  return out[:, :, :-1].reshape(n, c, *spatial)


def cf_cols_to_cl(cols, k: int):
  """(N, C*K, L) channel-major columns -> (N, L, K*C) channels-fastest rows."""
  n, ck, l = cols.shape
  return cols.reshape(n, ck // k, k, l).transpose(0, 3, 2, 1).reshape(n, l, ck)


def cl_cols_to_cf(cols, k: int):
  n, l, kc = cols.shape
  return cols.reshape(n, l, k, kc // k).transpose(0, 3, 2, 1).reshape(n, kc, l)


def image_to_layout(x: np.ndarray, layout: str) -> np.ndarray:
  return x if layout == "channels_first" else np.moveaxis(x, 1, -1)


def image_from_layout(x: np.ndarray, layout: str) -> np.ndarray:
  return x if layout == "channels_first" else np.moveaxis(x, -1, 1)


def cols_to_layout(cols, k: int, layout: str):
  return cols if layout == "channels_first" else cf_cols_to_cl(cols, k)


def cols_from_layout(cols, k: int, layout: str):
  return cols if layout == "channels_first" else cl_cols_to_cf(cols, k)


# --------------------------------------------------------------------------
# Geometries
# --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
  """An image batch and a window; `args` holds the arguments in the form
  passed to the API (ints, tuples or (low, high) pairs)."""
  n: int
  c: int
  spatial: tuple[int, ...]
  kernel: tuple[int, ...]
  stride: tuple[int, ...]
  dilation: tuple[int, ...]
  padding: tuple[tuple[int, int], ...]
  args: dict = dataclasses.field(compare=False)
  seed: int = 0

  @classmethod
  def make(cls, spatial, kernel, stride=None, dilation=None, padding=None, n=2, c=3, seed=0):
    nd = len(spatial)
    stride = tuple(stride or (1,) * nd)
    dilation = tuple(dilation or (1,) * nd)
    padding = tuple(tuple(p) for p in (padding or ((0, 0),) * nd))
    args = dict(kernel_size=tuple(kernel), dilation=dilation, padding=padding, stride=stride)
    return cls(n, c, tuple(spatial), tuple(kernel), stride, dilation, padding, args, seed)

  @property
  def nd(self) -> int:
    return len(self.spatial)

  @property
  def k(self) -> int:
    return math.prod(self.kernel)

  @property
  def out_spatial(self) -> tuple[int, ...]:
    return output_extents(self.spatial, self.kernel, self.stride, self.dilation, self.padding)

  @property
  def num_windows(self) -> int:
    return math.prod(self.out_spatial)

  @property
  def fits(self) -> bool:
    return 0 not in self.out_spatial

  @functools.cached_property
  def index(self) -> np.ndarray:
    return window_index_map(self.spatial, self.kernel, self.stride, self.dilation, self.padding)

  def rng(self) -> np.random.Generator:
    return np.random.default_rng(self.seed)

  def image_shape(self, layout="channels_first"):
    if layout == "channels_first":
      return (self.n, self.c, *self.spatial)
    return (self.n, *self.spatial, self.c)

  def cols_shape(self, layout="channels_first"):
    rows, l = self.c * self.k, self.num_windows
    return (self.n, rows, l) if layout == "channels_first" else (self.n, l, rows)

  def unfold(self, x, layout="channels_first"):
    return UNFOLD[layout](x, **self.args)

  def fold(self, cols, layout="channels_first"):
    return FOLD[layout](cols, self.spatial, **self.args)

  def ref_unfold(self, x: np.ndarray, layout="channels_first") -> np.ndarray:
    cf = ref_unfold(image_from_layout(x, layout), self.index)
    return cols_to_layout(cf, self.k, layout)

  def ref_fold(self, cols: np.ndarray, layout="channels_first") -> np.ndarray:
    cf = ref_fold(cols_from_layout(cols, self.k, layout), self.index, self.spatial)
    return image_to_layout(cf, layout)


def _api_form(draw, values, int_ok: bool):
  """An int where the API broadcasts one, else a tuple."""
  if int_ok and len(set(values)) == 1 and draw(st.booleans()):
    return values[0]
  return tuple(values)


def _padding_form(draw, pairs):
  """Any accepted spelling of `pairs`: int, tuple of ints, or per-dimension
  ints and (low, high) pairs mixed."""
  symmetric = [lo == hi for lo, hi in pairs]
  if all(symmetric) and len(set(pairs)) == 1 and draw(st.booleans()):
    return pairs[0][0]
  return tuple(lo if sym and draw(st.booleans()) else (lo, hi)
               for (lo, hi), sym in zip(pairs, symmetric))


@st.composite
def cases(draw, nd=None, min_n=0, max_n=3, min_pad=-1, max_pad=2, symmetric=False):
  """Random 1-3-d geometries: kernel 1-4, stride 1-3, dilation 1-3, padding
  min_pad..max_pad per side (asymmetric unless `symmetric`), spatial 1-9,
  N min_n..max_n, C 1-4. The window may not fit: tests `assume` it does, or
  does not."""
  nd = draw(st.integers(1, 3)) if nd is None else nd
  def per_dim(lo, hi):
    return tuple(draw(st.lists(st.integers(lo, hi), min_size=nd, max_size=nd)))
  kernel, stride, dilation = per_dim(1, 4), per_dim(1, 3), per_dim(1, 3)
  low = per_dim(min_pad, max_pad)
  padding = tuple(zip(low, low if symmetric else per_dim(min_pad, max_pad)))
  spatial = per_dim(1, 9)
  n, c = draw(st.integers(min_n, max_n)), draw(st.integers(1, 4))
  args = dict(kernel_size=_api_form(draw, kernel, int_ok=nd == 2),
              dilation=_api_form(draw, dilation, int_ok=True),
              padding=_padding_form(draw, padding),
              stride=_api_form(draw, stride, int_ok=True))
  return Case(n, c, spatial, kernel, stride, dilation, padding, args,
              seed=draw(st.integers(0, 2**32 - 1)))


def assert_within_summation_error(got, exact, abs_sum, terms: int):
  """|got - exact| <= terms * eps * sum|terms|: the worst-case error of a
  float64 sum of `terms` terms, whatever its order."""
  err = np.abs(np.asarray(got) - exact)
  bound = terms * np.finfo(np.float64).eps * abs_sum
  assert np.all(err <= bound), np.max(err - bound)


def random_values(rng, shape, dtype, specials=False) -> np.ndarray:
  x = rng.standard_normal(shape).astype(dtype)
  if specials and x.size:
    flat = x.reshape(-1)
    where = rng.integers(0, flat.size, size=min(4, flat.size))
    flat[where] = np.array([-0.0, np.inf, -np.inf, np.nan][:where.size], dtype)
  return x


def random_integers(rng, shape, dtype, bound) -> np.ndarray:
  """Integers in [-bound, bound], rounded once to dtype."""
  return rng.integers(-bound, bound + 1, size=shape).astype(np.float64).astype(dtype)


# Small fixed geometries for the costlier transformation checks: 1-3-d, with
# stride, dilation, asymmetric and negative padding, overlapping windows.
FIXED_CASES = [
    pytest.param(Case.make((7,), (3,), stride=(2,), padding=((1, 2),)), id="1d"),
    pytest.param(Case.make((5, 6), (2, 3), stride=(1, 2), dilation=(2, 1),
                           padding=((1, 0), (-1, 2))), id="2d"),
    pytest.param(Case.make((3, 4, 3), (2, 1, 2), stride=(1, 1, 2), dilation=(1, 2, 1),
                           padding=((0, 1), (1, 1), (0, 0)), n=1, c=2), id="3d"),
]

# --------------------------------------------------------------------------
# 1. Values against the reference
# --------------------------------------------------------------------------


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=30, deadline=None)
@given(case=cases())
def test_unfold_is_bit_exact_copy(platform, dtype, case):
  assume(case.fits)
  x = random_values(case.rng(), case.image_shape(), dtype, specials=True)
  with on_platform(platform):
    got = case.unfold(jnp.asarray(x))
  assert_bits_equal(got, case.ref_unfold(x))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=30, deadline=None)
@given(case=cases())
def test_fold_matches_reference(platform, dtype, case):
  """Small integers make every float32 sum exact, so the result must be the
  exact sum rounded once to dtype (half types accumulate in float32)."""
  assume(case.fits)
  cols = random_integers(case.rng(), case.cols_shape(), dtype, bound=1000)
  with on_platform(platform):
    got = case.fold(jnp.asarray(cols))
  assert_bits_equal(got, case.ref_fold(cols).astype(dtype))


# Images large enough that the CUDA unfold splits them over several bands of
# output rows (its shared-memory tiles), with a partial last band; few
# channels (the channels-last tiled kernel) and many (the vector kernel).
# Channels-first, the CUDA fold's vector kernel takes lines of output
# positions and of the input that are whole vectors (the "fold-vector" cases,
# 8 elements wide: every shift of the column entries a tap reads against the
# vector, with the asymmetric padding; "fold-half-vector", 12 wide: 8-byte
# vectors of 2-byte types), with planes of over 32 KB of columns in every
# dtype (smaller ones go to the staged fold).
# More large geometries: several bands of the tiled kernels and the vector
# fold's lines (tall images), taps that leave the plane on both sides
# (padding, cropping), a dilated 3-d window, a long 1-d line.
MORE_LARGE_CASES = {
    "2d-tall": Case.make((160, 64), (3, 3), dilation=(2, 1), padding=((2, 2), (1, 1))),
    "2d-crop": Case.make((20, 24), (2, 3), dilation=(3, 1), padding=((-2, 1), (0, 2)), c=2),
    "3d-dilated": Case.make((5, 8, 16), (3, 3, 3), dilation=(1, 1, 2),
                            padding=((1, 1), (1, 1), (2, 2)), n=1, c=2),
    "1d-1000": Case.make((1000,), (3,), padding=((1, 1),)),
}

LARGE_CASES = [
    pytest.param(Case.make((120, 32), (3, 3), stride=(2, 1), dilation=(1, 1),
                           padding=((1, 1), (3, 7)), c=5), id="2d-fold-vector"),
    pytest.param(Case.make((200, 12), (3, 3), padding=((1, 1), (1, 1)), c=3), id="2d-fold-half-vector"),
    pytest.param(Case.make((4096,), (5,), dilation=(3,), padding=((6, 6),), c=4), id="1d-fold-vector"),
    pytest.param(Case.make((4, 60, 16), (2, 3, 3), stride=(1, 2, 1), dilation=(1, 1, 2),
                           padding=((0, 1), (1, 1), (3, 1)), n=1, c=3), id="3d-fold-vector"),
    pytest.param(Case.make((5003,), (5,), stride=(2,), dilation=(2,), padding=((3, 1),)),
                 id="1d-long"),
    pytest.param(Case.make((150, 171), (7, 7), stride=(2, 2), padding=((3, 3), (3, 2))),
                 id="2d-stem"),
    pytest.param(Case.make((9, 40, 37), (3, 3, 3), dilation=(1, 2, 1),
                           padding=((1, 1), (2, 2), (1, 0)), n=1), id="3d"),
    pytest.param(Case.make((61, 45), (3, 3), padding=((1, 1), (1, 1)), n=1, c=16),
                 id="2d-16-channels"),
    # Strided lines: stride 2 along lines of 32 positions (the vector fold at
    # stride 2), and stride 3 with a dilated tap.
    pytest.param(Case.make((20, 64), (7, 7), stride=(2, 2), padding=((3, 3), (3, 3))),
                 id="2d-stem-whole-vectors"),
    pytest.param(Case.make((11, 47), (2, 3), stride=(1, 3), dilation=(1, 2), padding=((0, 1), (2, 1)), c=3),
                 id="2d-stride-3-dilated"),
    # The vector fold at stride 2 along lines (16 positions from 32 columns).
    pytest.param(Case.make((240, 32), (3, 3), stride=(2, 2), padding=((1, 1), (1, 0)), c=4),
                 id="2d-strided-vector-fold"),
    # The channels-first fold staged in shared memory: planes of 7 x 7, 8
    # channels a block, the last block 5; an odd line (the vector fold cannot
    # take it).
    pytest.param(Case.make((7, 7), (3, 3), padding=((1, 1), (1, 1)), c=21), id="2d-small-planes"),
    pytest.param(Case.make((1599,), (3,), stride=(2,), c=4), id="1d-odd-line"),
    # 1-D tiles filled a 16-byte vector at a time, a lead a line (tile.cuh,
    # fill_tile_1d_vectors): odd lines, so that every channel's line starts at
    # another place in its vector; padding on both sides, blocks of several
    # channels, the last one short.
    pytest.param(Case.make((1601,), (5,), stride=(3,), padding=((2, 3),), n=3, c=23), id="1d-odd-lines-leads"),
    # Small maps whose columns the channels-first unfold writes a run of
    # planes at a time (unfold_planes.cuh): on an H100 / H200 several runs a
    # block in every dtype; a 1-D row whose runs span several periods.
    pytest.param(Case.make((14, 14), (3, 3), padding=((1, 1), (1, 1)), n=8, c=256), id="2d-planes-runs"),
    pytest.param(Case.make((50,), (3,), padding=((0, 1),), n=3, c=16), id="1d-planes-periods"),
    # Stride 2 along even output rows (dilated: taps at odd and even
    # offsets; 3-D), and tiles holding their channels' whole input (the
    # channels-first unfold's zeroed tiles; even rows: in pairs for 2-byte
    # columns, unfold_write.cuh).
    pytest.param(Case.make((30, 52), (3, 5), stride=(2, 2), dilation=(1, 2), padding=((1, 1), (4, 4)), c=3),
                 id="2d-strided-even-rows"),
    pytest.param(Case.make((6, 12, 40), (3, 3, 3), stride=(1, 2, 2), padding=((1, 1), (1, 1), (1, 1)), n=1, c=3),
                 id="3d-strided-even-rows"),
    pytest.param(Case.make((6, 10), (3, 3), padding=((1, 1), (1, 1)), c=24), id="2d-whole-tile-pairs"),
    pytest.param(Case.make((8, 8), (3, 3), stride=(2, 2), padding=((1, 1), (1, 1)), c=24),
                 id="2d-whole-tile-strided"),
    # Channels-last rows of few channels written a pair of positions at a
    # time (2- and 4-byte elements, unfold_cl_write.cuh): even output lines,
    # rows of 147 (odd: a pair is a whole number of words), 35 and 54.
    pytest.param(Case.make((60, 92), (7, 7), stride=(2, 2), padding=((3, 3), (3, 3))), id="2d-stem-pairs"),
    pytest.param(Case.make((1203,), (7,), stride=(2,), padding=((3, 3),), c=5), id="1d-cl-pairs"),
    pytest.param(Case.make((6, 10, 20), (3, 3, 3), stride=(1, 1, 2), padding=((1, 1), (1, 1), (1, 1)), n=1, c=2),
                 id="3d-cl-pairs"),
    # Channels-last vector unfolds (unfold_cl_kernel, 16-byte runs of
    # channels) of small maps: 6 and 8 taps, padding on every side.
    pytest.param(Case.make((9, 11), (2, 3), stride=(2, 1), dilation=(1, 2), padding=((1, 0), (2, 1)), c=32),
                 id="2d-cl-small-vector"),
    pytest.param(Case.make((3, 6, 7), (2, 2, 2), padding=((1, 0), (0, 1), (1, 1)), n=1, c=16),
                 id="3d-cl-small-vector"),
    # The channels-first vector unfold (unfold_cf_vectors.cuh) with the last
    # dimension cropped on one side, padded on the other and dilated: vectors
    # shifted by every amount, some wholly outside the line.
    pytest.param(Case.make((12, 40), (3, 3), dilation=(1, 3), padding=((1, 1), (-2, 8)), c=3),
                 id="2d-cf-vectors-crop"),
    # The channels-first vector unfold at stride 2 (unfold_cf_strided.cuh,
    # float32, 5 taps a line): the last dimension cropped on one side and
    # padded on the other (taps of both parities, some vectors outside the
    # line); dilated lines in 3-D.
    pytest.param(Case.make((6, 48), (3, 5), stride=(1, 2), padding=((1, 1), (-1, 4)), c=3),
                 id="2d-cf-strided-crop"),
    pytest.param(Case.make((3, 5, 48), (2, 2, 5), stride=(1, 1, 2), dilation=(1, 2, 1),
                           padding=((0, 1), (1, 0), (2, 2)), n=2, c=2), id="3d-cf-strided-dilated"),
    # The 1-D channels-first unfold at stride 2 written flat
    # (unfold_cf_flat_strided.cuh): rows of 388 positions (vectors cross
    # rows), dilated taps, padding on both sides.
    pytest.param(Case.make((777,), (4,), stride=(2,), dilation=(3,), padding=((5, 2),), n=3, c=5),
                 id="1d-cf-flat-strided"),
    # The channels-last unfold in groups of positions (unfold_cl_groups.cuh):
    # rows of 90 entries (4 positions are whole 16-byte vectors in 2-byte
    # types, 2 in float32), a dilated window cropped above, 3 images.
    pytest.param(Case.make((21, 48), (3, 5), stride=(1, 2), dilation=(2, 1), padding=((2, -1), (1, 2)), n=3, c=6),
                 id="2d-cl-groups"),
] + [pytest.param(case, id=name) for name, case in MORE_LARGE_CASES.items()]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [DTYPES[1], DTYPES[2], DTYPES[3]])
@pytest.mark.parametrize("case", LARGE_CASES)
def test_large_images_against_reference(platform, layout, dtype, case):
  x = random_values(case.rng(), case.image_shape(layout), dtype)
  cols = random_integers(case.rng(), case.cols_shape(layout), dtype, bound=1000)
  with on_platform(platform):
    got_cols = case.unfold(jnp.asarray(x), layout)
    got_x = case.fold(jnp.asarray(cols), layout)
  assert_bits_equal(got_cols, case.ref_unfold(x, layout))
  assert_bits_equal(got_x, case.ref_fold(cols, layout).astype(dtype))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("case", list(MORE_LARGE_CASES.values()), ids=list(MORE_LARGE_CASES))
def test_more_large_cases_float16(platform, case):
  """MORE_LARGE_CASES in float16 (LARGE_CASES has the other dtypes)."""
  dtype = np.dtype(np.float16)
  x = random_values(case.rng(), case.image_shape(), dtype)
  cols = random_integers(case.rng(), case.cols_shape(), dtype, bound=500)
  with on_platform(platform):
    got_cols = case.unfold(jnp.asarray(x))
    got_x = case.fold(jnp.asarray(cols))
  assert_bits_equal(got_cols, case.ref_unfold(x))
  assert_bits_equal(got_x, case.ref_fold(cols).astype(dtype))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout, case", [
    ("channels_last", Case.make((11, 10), (3, 2), stride=(2, 1), padding=((1, 1), (0, 1)), n=2, c=5)),
    # Lines of whole vectors: the channels-first fold's vector kernel.
    ("channels_first", Case.make((150, 16), (3, 3), padding=((1, 1), (1, 1)), n=2, c=5)),
], ids=["channels_last", "channels_first"])
def test_compiled_chain_replays_with_fresh_inputs(platform, layout, case):
  """One jitted program of several unfold / fold calls (long enough for XLA:GPU
  to capture it into a CUDA graph, which the CUDA handlers allow), run on
  several inputs in turn: every run must match the reference, not replay the
  first run's buffers."""

  def chain(x):
    y = case.unfold(x, layout)
    z = case.fold(y * 2.0, layout)
    w = case.unfold(z - x, layout)
    return case.fold(w, layout) + case.fold(y, layout)

  def reference(x):
    y = case.ref_unfold(x, layout)
    z = case.ref_fold(y * 2.0, layout)
    w = case.ref_unfold(z - x, layout)
    return case.ref_fold(w, layout) + case.ref_fold(y, layout)

  rng = np.random.default_rng(7)
  with on_platform(platform):
    run = jax.jit(chain)
    for _ in range(3):
      x = random_integers(rng, case.image_shape(layout), np.float32, bound=100)
      np.testing.assert_array_equal(np.asarray(run(jnp.asarray(x))), reference(x))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_fold_of_disjoint_windows_copies_every_value(platform, dtype):
  """Every finite half value, and inf, survives fold's float32 round trip
  (-0.0 becomes +0.0: the sum starts from +0.0, as in the reference).
  bfloat16 subnormals are float32 subnormals, which XLA's CPU runtime flushes
  to zero in any arithmetic (its own adds too), so they are left out."""
  every = np.arange(2**16, dtype=np.uint16).view(dtype)
  wide = np.abs(every.astype(np.float32))
  x = every[~np.isnan(wide) & ((wide == 0) | (wide >= np.finfo(np.float32).tiny))]
  x = x[: x.size // 2 * 2].reshape(1, 1, -1)  # (N, C, W), W even
  cols = x.reshape(-1, 2).T[None]  # kernel 2, stride 2: cols[0, k, l] = x[2l + k]
  want = np.where(x == 0, np.zeros((), dtype), x)
  with on_platform(platform):
    got = ji.fold(jnp.asarray(cols), x.shape[2:], (2,), stride=2)
    back = ji.unfold(jnp.asarray(x), (2,), stride=2)
  assert_bits_equal(got, want)
  assert_bits_equal(back, cols)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_unfold_small_example_by_hand(platform):
  """A hand-checked 2-d example pinning the row and column order."""
  x = np.arange(1.0, 7.0).reshape(1, 1, 2, 3)  # [[1 2 3] [4 5 6]]
  with on_platform(platform):
    got = np.asarray(ji.unfold(jnp.asarray(x), (2, 2), padding=((0, 0), (1, 0))))
  np.testing.assert_array_equal(got[0], [[0, 1, 2],    # tap (0, 0)
                                         [1, 2, 3],    # tap (0, 1)
                                         [0, 4, 5],    # tap (1, 0)
                                         [4, 5, 6]])   # tap (1, 1)


# --------------------------------------------------------------------------
# 2. Agreement with torch (2-d)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
@settings(max_examples=25, deadline=None)
@given(case=cases(nd=2, min_n=1, min_pad=0, symmetric=True))
def test_matches_torch(platform, batched, case):
  torch = pytest.importorskip("torch")
  F = torch.nn.functional
  assume(case.fits)
  rng = case.rng()
  x = rng.standard_normal(case.image_shape())
  cols = random_integers(rng, case.cols_shape(), np.float64, bound=100)
  if not batched:
    x, cols = x[0], cols[0]
  kw = dict(kernel_size=case.kernel, dilation=case.dilation, stride=case.stride,
            padding=tuple(lo for lo, _ in case.padding))
  want_cols = F.unfold(torch.from_numpy(x), **kw).numpy()
  want_image = F.fold(torch.from_numpy(cols), case.spatial, **kw).numpy()
  with on_platform(platform):
    got_cols = case.unfold(jnp.asarray(x))
    got_image = case.fold(jnp.asarray(cols))
  assert_bits_equal(got_cols, want_cols)
  assert_bits_equal(got_image, want_image)


# --------------------------------------------------------------------------
# 3. Channels-last layout and the adjoint identity
# --------------------------------------------------------------------------


@pytest.mark.parametrize("platform", PLATFORMS)
@settings(max_examples=30, deadline=None)
@given(case=cases(), dtype=st.sampled_from([p.values[0] for p in DTYPES]),
       batched=st.booleans())
def test_unfold_channels_last_is_reordered_unfold(platform, case, dtype, batched):
  assume(case.fits and (batched or case.n > 0))
  x = random_values(case.rng(), case.image_shape(), dtype, specials=True)
  with on_platform(platform):
    cf = case.unfold(jnp.asarray(x))
    x_cl = image_to_layout(x, "channels_last")
    cl = case.unfold(jnp.asarray(x_cl if batched else x_cl[0]), "channels_last")
  want = cf_cols_to_cl(np.asarray(cf), case.k)
  assert_bits_equal(cl, want if batched else want[0])


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=20, deadline=None)
@given(case=cases())
def test_fold_channels_last_matches_reference(platform, dtype, case):
  assume(case.fits)
  cols = random_integers(case.rng(), case.cols_shape("channels_last"), dtype, bound=1000)
  with on_platform(platform):
    got = case.fold(jnp.asarray(cols), "channels_last")
  assert_bits_equal(got, case.ref_fold(cols, "channels_last").astype(dtype))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=30, deadline=None)
@given(case=cases())
def test_adjoint_identity(platform, layout, case):
  """<unfold(x), y> == <x, fold(y)> up to the rounding of fold's sums (each
  of at most K terms) and of the products: (K + 2) eps sum|terms|, with the
  inner products summed exactly by fsum."""
  assume(case.fits)
  rng = case.rng()
  x = rng.standard_normal(case.image_shape(layout))
  y = rng.standard_normal(case.cols_shape(layout))
  with on_platform(platform):
    ux = np.asarray(case.unfold(jnp.asarray(x), layout))
    fy = np.asarray(case.fold(jnp.asarray(y), layout))
  lhs = math.fsum((ux * y).ravel())
  rhs = math.fsum((x * fy).ravel())
  bound = (case.k + 2) * np.finfo(np.float64).eps * math.fsum(np.abs(ux * y).ravel())
  assert abs(lhs - rhs) <= bound, (lhs, rhs, bound)
  # fold(y) itself matches the reference scatter-add, to the rounding of sums of <= K terms
  assert_within_summation_error(fy, case.ref_fold(y, layout), case.ref_fold(np.abs(y), layout),
                                case.k)


# --------------------------------------------------------------------------
# 4. JAX transformations
# --------------------------------------------------------------------------


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", ["unfold", "fold"])
@pytest.mark.parametrize("case", FIXED_CASES)
def test_check_grads(platform, layout, op, case):
  rng = case.rng()
  if op == "unfold":
    f, arg = functools.partial(case.unfold, layout=layout), rng.standard_normal(case.image_shape(layout))
  else:
    f, arg = functools.partial(case.fold, layout=layout), rng.standard_normal(case.cols_shape(layout))
  with on_platform(platform):
    check_grads(f, (jnp.asarray(arg),), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", FIXED_CASES)
def test_vjp_of_unfold_is_fold(platform, layout, case):
  rng = case.rng()
  x = rng.standard_normal(case.image_shape(layout))
  ct = rng.standard_normal(case.cols_shape(layout))
  with on_platform(platform):
    _, vjp = jax.vjp(functools.partial(case.unfold, layout=layout), jnp.asarray(x))
    (got,) = vjp(jnp.asarray(ct))
    want = case.fold(jnp.asarray(ct), layout)
    (back,) = jax.linear_transpose(functools.partial(case.fold, layout=layout),
                                   jnp.asarray(ct))(jnp.asarray(x))
    unfolded = case.unfold(jnp.asarray(x), layout)
  assert_bits_equal(got, want)
  assert_bits_equal(back, unfolded)


def _stack_along(rng, shape, axis, size=3):
  """`size` random arrays of `shape` and their stack along `axis`."""
  parts = [rng.standard_normal(shape) for _ in range(size)]
  return parts, np.stack(parts, axis=axis)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("op", ["unfold", "fold"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
@pytest.mark.parametrize("case", FIXED_CASES)
def test_vmap_over_every_axis(platform, op, layout, batched, case):
  rng = case.rng()
  operand_shape = case.image_shape(layout) if op == "unfold" else case.cols_shape(layout)
  shape = operand_shape[0 if batched else 1:]
  f = functools.partial(getattr(case, op), layout=layout)
  with on_platform(platform):
    for axis in range(len(shape) + 1):
      parts, stacked = _stack_along(rng, shape, axis)
      got = jax.vmap(f, in_axes=axis)(jnp.asarray(stacked))
      assert_bits_equal(got, np.stack([np.asarray(f(jnp.asarray(p))) for p in parts]))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_nested_vmap(platform, layout):
  case = FIXED_CASES[1].values[0]
  rng = case.rng()
  x = rng.standard_normal((2, *case.image_shape(layout), 3))  # extra axes 0 and -1
  f = functools.partial(case.unfold, layout=layout)
  with on_platform(platform):
    got = jax.vmap(jax.vmap(f, in_axes=-1), in_axes=0)(jnp.asarray(x))
    want = np.stack([np.stack([np.asarray(f(jnp.asarray(x[i, ..., j]))) for j in range(3)])
                     for i in range(2)])
  assert_bits_equal(got, want)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", FIXED_CASES)
def test_vmap_of_grad(platform, layout, case):
  """grad of sum(w * sin(unfold(x))) is fold(w * cos(unfold(x))), per vmapped slice."""
  rng = case.rng()
  w = rng.standard_normal(case.cols_shape(layout))
  shape = case.image_shape(layout)

  def loss(x):
    return jnp.sum(jnp.asarray(w) * jnp.sin(case.unfold(x, layout)))

  with on_platform(platform):
    for axis in range(len(shape) + 1):
      parts, stacked = _stack_along(rng, shape, axis)
      got = np.asarray(jax.vmap(jax.grad(loss), in_axes=axis)(jnp.asarray(stacked)))
      loop = np.stack([np.asarray(jax.grad(loss)(jnp.asarray(p))) for p in parts])
      assert_bits_equal(got, loop)
      want = np.stack([case.ref_fold(w * np.cos(case.ref_unfold(p, layout)), layout)
                       for p in parts])
      np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=15, deadline=None)
@given(case=cases(), dtype=st.sampled_from([p.values[0] for p in DTYPES]))
def test_jit_matches_eager(platform, layout, case, dtype):
  assume(case.fits)
  rng = case.rng()
  x = jnp.asarray(random_values(rng, case.image_shape(layout), dtype))
  y = jnp.asarray(random_values(rng, case.cols_shape(layout), dtype))
  unfold = functools.partial(case.unfold, layout=layout)
  fold = functools.partial(case.fold, layout=layout)
  with on_platform(platform):
    assert_bits_equal(jax.jit(unfold)(x), unfold(x))
    assert_bits_equal(jax.jit(fold)(y), fold(y))
    roundtrip = jax.jit(lambda a: fold(unfold(a)))(x)
    assert_bits_equal(roundtrip, fold(unfold(x)))


# --------------------------------------------------------------------------
# 5. Empty batches
# --------------------------------------------------------------------------


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", FIXED_CASES)
def test_zero_batch(platform, layout, case):
  case = dataclasses.replace(case, n=0)
  x = np.zeros(case.image_shape(layout), np.float32)
  with on_platform(platform):
    cols = case.unfold(jnp.asarray(x), layout)
    image = case.fold(cols, layout)
    grad = jax.grad(lambda a: jnp.sum(case.unfold(a, layout)))(jnp.asarray(x))
    jitted = jax.jit(functools.partial(case.unfold, layout=layout))(jnp.asarray(x))
  assert cols.shape == case.cols_shape(layout) and cols.shape[0] == 0
  assert cols.dtype == np.float32
  assert image.shape == x.shape and image.dtype == np.float32
  assert grad.shape == x.shape
  assert jitted.shape == cols.shape


# --------------------------------------------------------------------------
# 6. Argument errors (raised at trace time, naming the argument)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=25, deadline=None)
@given(case=cases())
def test_window_that_does_not_fit_raises(platform, layout, case):
  assume(not case.fits)
  x = jax.ShapeDtypeStruct(case.image_shape(layout), jnp.float32)
  rows = case.c * case.k  # L = 0: the count of windows that fit, so only the fit check objects
  cols = jax.ShapeDtypeStruct((case.n, rows, 0) if layout == "channels_first" else (case.n, 0, rows),
                              jnp.float32)
  with on_platform(platform):
    with pytest.raises(ValueError, match=r"unfold: the dilated kernel .* larger than the padded input"):
      jax.eval_shape(functools.partial(case.unfold, layout=layout), x)
    with pytest.raises(ValueError, match=r"fold: the dilated kernel .* larger than the padded input"):
      jax.eval_shape(functools.partial(case.fold, layout=layout), cols)


X = np.zeros((2, 3, 5, 6), np.float32)
COLS = np.zeros((2, 3 * 6, 4 * 4), np.float32)  # for kernel (2, 3) over (5, 6)

UNFOLD_ERRORS = [
    pytest.param(dict(kernel_size=(6, 3)), ValueError, "kernel", id="kernel-too-large"),
    pytest.param(dict(kernel_size=(2, 3), dilation=(5, 1)), ValueError, "kernel", id="dilated-too-large"),
    pytest.param(dict(kernel_size=(2, 3), padding=((-2, -2), (0, 0))), ValueError, "kernel",
                 id="negative-padding-too-large"),
    pytest.param(dict(kernel_size=(0, 3)), ValueError, "kernel_size", id="kernel-zero"),
    pytest.param(dict(kernel_size=-1), ValueError, "kernel_size", id="kernel-negative"),
    pytest.param(dict(kernel_size=(1, 1, 1, 1)), ValueError, "kernel_size", id="kernel-4d"),
    pytest.param(dict(kernel_size=2.0), TypeError, "kernel_size", id="kernel-float"),
    pytest.param(dict(kernel_size=(2, 3), stride=0), ValueError, "stride", id="stride-zero"),
    pytest.param(dict(kernel_size=(2, 3), stride=(1, -1)), ValueError, "stride", id="stride-negative"),
    pytest.param(dict(kernel_size=(2, 3), stride=(1, 1, 1)), ValueError, "stride", id="stride-length"),
    pytest.param(dict(kernel_size=(2, 3), stride=True), TypeError, "stride", id="stride-bool"),
    pytest.param(dict(kernel_size=(2, 3), dilation=0), ValueError, "dilation", id="dilation-zero"),
    pytest.param(dict(kernel_size=(2, 3), dilation=(1, -2)), ValueError, "dilation", id="dilation-negative"),
    pytest.param(dict(kernel_size=(2, 3), padding=(1, 1, 1)), ValueError, "padding", id="padding-length"),
    pytest.param(dict(kernel_size=(2, 3), padding="SAME"), ValueError, "padding", id="padding-string"),
    pytest.param(dict(kernel_size=(2, 3), padding=((1, 1, 1), 0)), TypeError, "padding", id="padding-triple"),
    pytest.param(dict(kernel_size=(2, 3), padding=1.5), TypeError, "padding", id="padding-float"),
]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kwargs, error, pattern", UNFOLD_ERRORS)
def test_unfold_argument_errors(platform, layout, kwargs, error, pattern):
  with on_platform(platform):
    x = jnp.asarray(image_to_layout(X, layout))
    with pytest.raises(error, match=pattern):
      UNFOLD[layout](x, **kwargs)
    with pytest.raises(error, match=pattern):  # at trace time too
      jax.jit(lambda a: UNFOLD[layout](a, **kwargs))(x)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kernel_size, shape", [
    pytest.param((2, 3), (5, 6), id="2d-kernel-rank-2"),
    pytest.param((2, 3), (1, 1, 1, 5, 6), id="2d-kernel-rank-5"),
    pytest.param((2,), (2, 1, 3, 5), id="1d-kernel-rank-4"),
    pytest.param((1, 1, 1), (2, 3), id="3d-kernel-rank-2"),
])
def test_wrong_image_rank_raises(platform, layout, kernel_size, shape):
  with on_platform(platform):
    with pytest.raises(ValueError, match=r"^x must have rank"):
      UNFOLD[layout](jnp.zeros(shape), kernel_size)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [jnp.int4, jnp.float8_e4m3fnuz, np.str_, np.object_],
                         ids=["int4", "float8_e4m3fnuz", "str", "object"])
def test_unsupported_dtypes_raise_type_error(platform, layout, dtype):
  """Every dtype of ji.COLUMNS_DTYPES is taken (test_dtypes.py); others raise."""
  suffix = "_channels_last" if layout == "channels_last" else ""
  x = image_to_layout(X, layout).astype(dtype)
  cols = cols_to_layout(COLS, 6, layout).astype(dtype)
  if dtype not in (np.str_, np.object_):  # numpy arrays of those: JAX has no such dtype
    x, cols = jnp.asarray(x), jnp.asarray(cols)
  with on_platform(platform):
    with pytest.raises(TypeError, match=rf"^x must have a dtype that unfold{suffix} takes"):
      UNFOLD[layout](x, (2, 3))
    with pytest.raises(TypeError, match=rf"^cols must have a dtype that fold{suffix} takes"):
      FOLD[layout](cols, (5, 6), (2, 3))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_python_ints_are_taken_as_jax_arrays(platform, layout):
  with on_platform(platform):
    got = UNFOLD[layout]([[[1, 2, 3]]], (1,))  # a nested list of Python ints: JAX's default int
  assert got.dtype == jnp.asarray(1).dtype
  assert got.shape == (1, 1, 3)  # (N, C*K, L) = (1, 1, 3); (N, L, K*C) = (1, 1, 3)


FOLD_ERRORS = [
    pytest.param(lambda c: c[:, :-1], (5, 6), ValueError, r"cols.*multiple of prod\(kernel_size\)",
                 id="rows-not-multiple-of-K"),
    pytest.param(lambda c: c[:, :, :-1], (5, 6), ValueError, r"cols: L = 15", id="too-few-windows"),
    pytest.param(lambda c: c, (5, 7), ValueError, r"cols: L = 16", id="output-size-mismatch"),
    pytest.param(lambda c: c[None], (5, 6), ValueError, r"\bcols\b.*rank", id="cols-rank-4"),
    pytest.param(lambda c: c[0, 0], (5, 6), ValueError, r"\bcols\b.*rank", id="cols-rank-1"),
    pytest.param(lambda c: c, (5, 6, 7), ValueError, "output_size", id="output-size-length"),
    pytest.param(lambda c: c, (5, 0), ValueError, "output_size", id="output-size-zero"),
    pytest.param(lambda c: c, (1, 6), ValueError, "kernel", id="output-smaller-than-kernel"),
]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("edit, output_size, error, pattern", FOLD_ERRORS)
def test_fold_argument_errors(platform, layout, edit, output_size, error, pattern):
  cols = edit(COLS)  # edits act on (N, rows, L); channels-last columns are (N, L, rows)
  if layout == "channels_last" and cols.ndim >= 2:
    cols = np.swapaxes(cols, -1, -2)
  with on_platform(platform):
    with pytest.raises(error, match=pattern):
      FOLD[layout](jnp.asarray(cols), output_size, (2, 3))
    with pytest.raises(error, match=pattern):
      jax.jit(lambda c: FOLD[layout](c, output_size, (2, 3)))(jnp.asarray(cols))


# --------------------------------------------------------------------------
# 7. Index math past 2**31 elements (GPU only: too big for CPU CI)
# --------------------------------------------------------------------------

GPU_ONLY = [p for p in PLATFORMS if p.id == "gpu"]


@pytest.mark.gpu
@pytest.mark.parametrize("platform", GPU_ONLY)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n, c, size, k", [(1, 3, 1024, 27), (64, 8, 256, 9)],
                         ids=["one-image", "many-images"])
def test_unfold_and_fold_past_int32_indices(platform, layout, n, c, size, k):
  """float16 columns of more than 2**31 elements (4.6 GB in one image, 5.4 GB
  over 64 images, where the image offsets pass 2**31): sampled columns and
  the last row of the last image against the reference, and the fold back,
  which is x times the number of windows covering each pixel (exact: 11-bit
  values times counts <= k*k are exact float32 sums)."""
  pad = k // 2
  rng = np.random.default_rng(0)
  x = rng.standard_normal((n, c, size, size)).astype(np.float16)
  l_total, rows = size * size, c * k * k
  assert n * l_total * rows > 2**31
  positions = np.concatenate([[0, 1, size, l_total // 2 + 7, l_total - 1],
                              rng.integers(0, l_total, 11)])
  tail = slice(l_total - 4096, l_total)
  with on_platform(platform):
    cols = UNFOLD[layout](jnp.asarray(image_to_layout(x, layout)), k, padding=pad)
    assert cols.shape == ((n, rows, l_total) if layout == "channels_first" else (n, l_total, rows))
    if layout == "channels_first":  # both (len(positions), rows), by numpy's indexing rules
      sampled = np.asarray(cols[-1, :, positions])
      last_row = np.asarray(cols[-1, -1, tail])
    else:
      sampled = np.asarray(cols[-1, positions, :])
      last_row = np.asarray(cols[-1, tail, -1])
    folded = np.asarray(FOLD[layout](cols, (size, size), k, padding=pad))
    del cols
  padded = np.pad(x[-1], ((0, 0), (pad, pad), (pad, pad)))

  def column(l):  # (C, k, k) window at output position l, in the layout's row order
    i, j = divmod(int(l), size)
    win = padded[:, i:i + k, j:j + k]
    return win.reshape(-1) if layout == "channels_first" else win.transpose(1, 2, 0).reshape(-1)

  assert_bits_equal(sampled, np.stack([column(l) for l in positions]))
  assert_bits_equal(last_row, np.stack([column(l)[-1] for l in range(tail.start, tail.stop)]))
  q = np.arange(size)
  cover = np.minimum(q + pad, size - 1) - np.maximum(q - pad, 0) + 1
  want = (x.astype(np.float32) * (cover[:, None] * cover[None, :])).astype(np.float16)
  assert_bits_equal(folded, image_to_layout(want, layout))
