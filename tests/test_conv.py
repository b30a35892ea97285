"""Forward checks of jax_im2col.conv_general_dilated against jax.lax.

The oracle is always ``jax.lax.conv_general_dilated`` called with the same
arguments (half types: lax in float32 on the same rounded inputs).
"""

import contextlib
import dataclasses
import math
import types

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from jax import lax

import jax_im2col
from conftest import GPU_DEVICES, PLATFORMS, on_platform
from jax_im2col.common import geometry as _geometry
from jax_im2col.common.device import DeviceCaps, device_caps
from jax_im2col.conv import applicability, lowering_cuda, primitives, workspace

# Plans for CUDA GPUs of each kind (H100: 132 multiprocessors).
HOPPER = DeviceCaps("cuda", (9, 0), 132, True)
AMPERE = DeviceCaps("cuda", (8, 0), 132, False)

conv = jax_im2col.conv_general_dilated
HIGHEST = lax.Precision.HIGHEST

# --- helpers -------------------------------------------------------------------

SPATIAL_LETTERS = {1: "W", 2: "HW", 3: "DHW"}
LAYOUTS = ("default", "cf", "cl", "mixed", "mixed2", "weird", "random")


def layout_specs(kind, nd, draw=None):
  """dimension_numbers for `kind` and `nd` spatial dimensions."""
  sp = SPATIAL_LETTERS[nd]
  if kind == "default":
    return None
  if kind == "cf":
    return ("NC" + sp, "OI" + sp, "NC" + sp)
  if kind == "cl":
    return ("N" + sp + "C", sp + "IO", "N" + sp + "C")
  if kind == "mixed":
    return ("N" + sp + "C", "OI" + sp, "NC" + sp)
  if kind == "mixed2":
    return ("NC" + sp, sp + "IO", "N" + sp + "C")
  if kind == "weird":  # 2-D: ('CHWN', 'IOWH', 'HNCW')
    return ("C" + sp + "N", "IO" + sp[::-1], sp[0] + "NC" + sp[1:])
  assert kind == "random"
  perm = lambda letters: "".join(draw(st.permutations(letters)))
  return (perm("NC" + sp), perm("OI" + sp), perm("NC" + sp))


def place(axes, canonical):
  """The shape whose axis axes[i] has size canonical[i]."""
  shape = [0] * len(canonical)
  for axis, size in zip(axes, canonical):
    shape[axis] = size
  return tuple(shape)


def dilated(n, d):
  return 0 if n <= 0 else (n - 1) * d + 1


def rel_err(actual, expected):
  a = np.asarray(actual).astype(np.float64)
  b = np.asarray(expected).astype(np.float64)
  num, den = np.linalg.norm(a - b), np.linalg.norm(b)
  if den == 0:
    return 0.0 if num == 0 else math.inf
  return num / den


def assert_close(actual, expected, tol, dtype=None):
  assert actual.shape == expected.shape, (actual.shape, expected.shape)
  assert actual.dtype == (expected.dtype if dtype is None else dtype), (actual.dtype, expected.dtype)
  assert np.all(np.isfinite(np.asarray(actual).astype(np.float64)))
  err = rel_err(actual, expected)
  assert err <= tol, f"relative error {err:.3g} > {tol:.3g}"


TOL = {np.dtype(np.float64): 1e-10, np.dtype(np.float32): 1e-5,
       np.dtype(jnp.bfloat16): 2e-2, np.dtype(np.float16): 2e-2}


@st.composite
def conv_configs(draw, ranks=(1, 2, 3), groups=("none", "feature", "depthwise", "batch"),
                 layouts=LAYOUTS, transposed=False):
  """A random lax-valid convolution: keyword arguments and operand shapes.
  transposed: unit strides and lhs dilation of at least 2 in some dimension
  (what lax.conv_transpose builds)."""
  nd = draw(st.sampled_from(ranks))
  specs = layout_specs(draw(st.sampled_from(layouts)), nd, draw)
  kind = draw(st.sampled_from(groups))
  fgc = bgc = 1
  if kind == "none":
    c = cg = draw(st.integers(1, 4))
    o = draw(st.integers(1, 4))
  elif kind == "feature":
    fgc, cg = draw(st.integers(2, 3)), draw(st.integers(1, 2))
    c, o = fgc * cg, fgc * draw(st.integers(1, 2))
  elif kind == "depthwise":  # groups == C, with a channel multiplier
    c = fgc = draw(st.integers(1, 6))
    cg, o = 1, c * draw(st.integers(1, 2))
  else:
    bgc = draw(st.integers(2, 3))
    c = cg = draw(st.integers(1, 3))
    o = bgc * draw(st.integers(1, 2))
  n = bgc * draw(st.integers(1, 2)) if bgc > 1 else draw(st.integers(1, 3))
  max_size, max_k = (8, 4) if nd < 3 else (5, 3)
  spatial = draw(st.tuples(*[st.integers(1, max_size)] * nd))
  kernel = draw(st.tuples(*[st.integers(1, max_k)] * nd))
  small = st.tuples(*[st.integers(1, 3)] * nd)
  strides, lhs_dil, rhs_dil = draw(small), draw(small), draw(small)
  pairs = st.tuples(*[st.tuples(st.integers(-2, 3), st.integers(-2, 3))] * nd)
  if transposed:
    strides = (1,) * nd
    dim = draw(st.integers(0, nd - 1))
    lhs_dil = tuple(max(l, 2) if i == dim else l for i, l in enumerate(lhs_dil))
    # Paddings past the dilated kernel's extent make the strided window's
    # padding negative.
    pairs = st.tuples(*[st.tuples(st.integers(-2, 5), st.integers(-2, 5))] * nd)
  padding = draw(pairs if transposed else
                 st.one_of(st.sampled_from(["SAME", "SAME_LOWER", "VALID"]), pairs))
  if isinstance(padding, str):  # lax defines string padding only without lhs dilation
    lhs_dil = (1,) * nd
  else:  # lax rejects a padded size below zero
    padding = tuple((lo, max(hi, -dilated(s, l) - lo))
                    for (lo, hi), s, l in zip(padding, spatial, lhs_dil))
  dn = lax.conv_dimension_numbers((1,) * (nd + 2), (1,) * (nd + 2), specs)
  return dict(
      lhs_shape=place(dn.lhs_spec, (n, c, *spatial)),
      rhs_shape=place(dn.rhs_spec, (o, cg, *kernel)),
      kwargs=dict(window_strides=strides, padding=padding, lhs_dilation=lhs_dil,
                  rhs_dilation=rhs_dil, dimension_numbers=specs,
                  feature_group_count=fgc, batch_group_count=bgc))


def operands(cfg, seed, dtype=np.float64):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(cfg["lhs_shape"]).astype(np.float32)
  w = rng.standard_normal(cfg["rhs_shape"]).astype(np.float32)
  return jnp.asarray(x, dtype), jnp.asarray(w, dtype)


def on_cpu(fn, *args):
  """fn(*args) computed by XLA on the CPU: the oracle for every platform. (On
  the GPU, lax hands some float64 convolutions with lhs dilation to cuDNN,
  which rejects them: CUDNN_STATUS_BAD_PARAM.)"""
  args = [np.asarray(a) for a in args]
  with jax.default_device(jax.devices("cpu")[0]):
    return jax.tree.map(np.asarray, fn(*args))


def check_against_lax(cfg, seed, dtype, precision=None):
  x, w = operands(cfg, seed, dtype)
  ours = conv(x, w, precision=precision, **cfg["kwargs"])
  if np.dtype(dtype) in (np.dtype(jnp.bfloat16), np.dtype(np.float16)):
    ref = on_cpu(lambda x, w: lax.conv_general_dilated(x, w, precision=HIGHEST, **cfg["kwargs"]),
                 x.astype(np.float32), w.astype(np.float32))
    assert_close(ours, ref, TOL[np.dtype(dtype)], dtype=np.dtype(dtype))
  else:
    ref = on_cpu(lambda x, w: lax.conv_general_dilated(x, w, precision=precision, **cfg["kwargs"]), x, w)
    assert_close(ours, ref, TOL[np.dtype(dtype)])


# --- 1. random configurations ----------------------------------------------------

@pytest.mark.parametrize("platform", PLATFORMS)
@settings(max_examples=80, deadline=None)
@given(cfg=conv_configs(), seed=st.integers(0, 2**31 - 1))
def test_random_configs_float64(platform, cfg, seed):
  with on_platform(platform):
    check_against_lax(cfg, seed, np.float64)


@pytest.mark.parametrize("platform", PLATFORMS)
@settings(max_examples=15, deadline=None)
@given(cfg=conv_configs(), seed=st.integers(0, 2**31 - 1))
def test_random_configs_float32_highest(platform, cfg, seed):
  with on_platform(platform):
    check_against_lax(cfg, seed, np.float32, precision=HIGHEST)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16], ids=["bfloat16", "float16"])
@settings(max_examples=8, deadline=None)
@given(cfg=conv_configs(ranks=(1, 2)), seed=st.integers(0, 2**31 - 1))
def test_random_configs_half(platform, dtype, cfg, seed):
  with on_platform(platform):
    check_against_lax(cfg, seed, dtype)


@pytest.mark.parametrize("platform", PLATFORMS)
@settings(max_examples=40, deadline=None)
@given(cfg=conv_configs(transposed=True), seed=st.integers(0, 2**31 - 1))
def test_random_transposed_float64(platform, cfg, seed):
  """Transposed convolutions (lhs dilation, unit strides), which run as the
  input gradient of a strided window."""
  with on_platform(platform):
    check_against_lax(cfg, seed, np.float64)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype,precision", [(np.float32, HIGHEST), (jnp.bfloat16, None)],
                         ids=["float32-highest", "bfloat16"])
@settings(max_examples=8, deadline=None)
@given(cfg=conv_configs(ranks=(1, 2), transposed=True), seed=st.integers(0, 2**31 - 1))
def test_random_transposed_low_precision(platform, dtype, precision, cfg, seed):
  with on_platform(platform):
    check_against_lax(cfg, seed, dtype, precision=precision)


def _primitive_windows(jaxpr):
  """(primitive name, spec.window) of every conv primitive in a jaxpr, nested
  jaxprs included."""
  found = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name.startswith("im2col_conv_"):
      found.append((eqn.primitive.name, eqn.params["spec"].window))
    for v in eqn.params.values():
      sub = getattr(v, "jaxpr", v)  # a ClosedJaxpr's jaxpr, or a Jaxpr
      if hasattr(sub, "eqns"):
        found += _primitive_windows(sub)
  return found


def test_transposed_phases_share_one_launch():
  """A 3-D transposed conv (one image of 8 x 8 x 16 x 64 channels to
  16 x 16 x 32) is its strided window's input gradient of 8 phases, each of
  1024 output rows: 16 tiles of 64 x 64 alone would split the reduction (one
  launch and one sum a phase), but the 8 phases share one launch of 128
  tiles, which leaves few of 132 multiprocessors idle, so the reduction stays
  whole."""
  x = jax.ShapeDtypeStruct((1, 64, 8, 8, 16), jnp.float32)
  w = jax.ShapeDtypeStruct((64, 64, 3, 3, 3), jnp.float32)
  f = lambda x, w: conv(x, w, (1, 1, 1), ((1, 2),) * 3, lhs_dilation=(2, 2, 2))
  assert _chunk_attrs(_cuda_text(f, x, w), "jax_im2col_conv_backward_data") == (1, 1)
  splits = lambda m, passes: workspace.implicit_splits(
      m=m, og=64, o=64, groups=1, reduction_bytes=64 * 8 * 4, limit=1 << 28, multiprocessors=132,
      passes=passes)
  assert splits(1024, 1) == 2 and splits(1024, 8) == 1  # 16 k-tiles: 2 parts of 8
  assert splits(64 * 66, 1) == 1 and splits(64 * 65, 1) == 2  # half the multiprocessors


def test_transposed_runs_as_strided_input_gradient():
  """A transposed convolution binds the input gradient of the strided window,
  and neither it nor its first and second derivatives bind a primitive with
  lhs dilation (whose kernels would multiply the inserted zeros); where the
  result is wider than the operands (bfloat16 to float32), the forward keeps
  the lhs-dilated window, which produces it natively."""
  x, w = jnp.ones((2, 3, 5, 6)), jnp.ones((4, 3, 3, 2))
  kw = dict(window_strides=(1, 1), padding=((1, 2), (0, 1)), lhs_dilation=(2, 3), rhs_dilation=(2, 1))
  f = lambda x, w: conv(x, w, **kw)
  (name, window), = _primitive_windows(jax.make_jaxpr(f)(x, w).jaxpr)
  assert name == "im2col_conv_backward_data"
  assert window.stride == (2, 3) and window.lhs_dilation == (1, 1)
  assert window.padding == ((3, 2), (1, 0))  # (r (k - 1) - lo, r (k - 1) - hi)
  loss = lambda x, w: jnp.sum(jnp.sin(f(x, w)))
  hvp = lambda x, w: jax.jvp(jax.grad(loss, (0, 1)), (x, w), (x, w))
  found = _primitive_windows(jax.make_jaxpr(hvp)(x, w).jaxpr)
  assert {n for n, _ in found} == {"im2col_conv_forward", "im2col_conv_backward_data",
                                   "im2col_conv_backward_filter"}
  assert all(win.lhs_dilation == (1, 1) for _, win in found)
  wide = jax.make_jaxpr(lambda x, w: conv(x, w, preferred_element_type=jnp.float32, **kw))(
      x.astype(jnp.bfloat16), w.astype(jnp.bfloat16))
  (name, window), = _primitive_windows(wide.jaxpr)
  assert name == "im2col_conv_forward" and window.lhs_dilation == (2, 3)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("layout", LAYOUTS[:-1])
def test_every_layout_every_rank(platform, nd, layout):
  """Each fixed layout at each rank, with groups, strides, dilations and padding."""
  specs = layout_specs(layout, nd)
  dn = lax.conv_dimension_numbers((1,) * (nd + 2), (1,) * (nd + 2), specs)
  spatial, kernel = (7, 6, 5)[:nd], (3, 2, 2)[:nd]
  cfg = dict(lhs_shape=place(dn.lhs_spec, (2, 4, *spatial)),
             rhs_shape=place(dn.rhs_spec, (6, 2, *kernel)),
             kwargs=dict(window_strides=(2, 1, 1)[:nd], padding=((1, 2), (0, 1), (-1, 1))[:nd],
                         lhs_dilation=(1, 2, 1)[:nd], rhs_dilation=(2, 1, 1)[:nd],
                         dimension_numbers=specs, feature_group_count=2))
  with on_platform(platform):
    check_against_lax(cfg, 0, np.float64)


# Depthwise convolutions large enough to span several shared-memory tiles and
# bands (channels-first) or several tiles and channel slices (channels-last),
# and small enough to use the warp-sized bands: the depthwise CUDA kernels.
DEPTHWISE_CASES = {
    "2d-56-s1": dict(nd=2, c=16, spatial=(56, 56), kernel=(3, 3), strides=(1, 1),
                     padding=((1, 1), (1, 1)), rhs_dilation=(1, 1)),
    "2d-7-s1": dict(nd=2, c=40, spatial=(7, 7), kernel=(3, 3), strides=(1, 1),
                    padding="SAME", rhs_dilation=(1, 1)),
    "2d-s2-dil2": dict(nd=2, c=8, spatial=(33, 30), kernel=(3, 5), strides=(2, 1),
                       padding=((2, 0), (3, 4)), rhs_dilation=(2, 2)),
    "1d-long": dict(nd=1, c=12, spatial=(3001,), kernel=(7,), strides=(1,),
                    padding=((3, 3),), rhs_dilation=(1,)),
    "3d": dict(nd=3, c=8, spatial=(6, 20, 17), kernel=(3, 3, 3), strides=(1, 2, 1),
               padding="SAME", rhs_dilation=(1, 1, 1)),
    # Several channel slices of the channels-last tiles, partial tiles on
    # both edges, a stride and a dilation on different dimensions.
    "2d-48ch-s12-dil21": dict(nd=2, c=48, spatial=(19, 70), kernel=(3, 5), strides=(1, 2),
                              padding=((2, 1), (0, 3)), rhs_dilation=(2, 1)),
    # Unit strides in 3-D: the tiled kernel for the forward and the input
    # gradient, looping over depth taps (some in the padding).
    "3d-s1": dict(nd=3, c=16, spatial=(5, 9, 11), kernel=(3, 3, 3), strides=(1, 1, 1),
                  padding="SAME", rhs_dilation=(1, 2, 1)),
    # The channels-first strip kernels (lib/cuda/depthwise_rows.cuh): 5 taps
    # along rows with a stride and a dilation along the last dimension,
    # slices of whole strips plus a partial strip; 7 taps (the forward and
    # the input gradient); a strided forward, whose input gradient is the
    # strip kernel on a geometry with holes; 3-D with 5 taps along rows.
    "2d-5x5-s12": dict(nd=2, c=6, spatial=(37, 80), kernel=(5, 5), strides=(1, 2),
                       padding=((2, 1), (3, 0)), rhs_dilation=(1, 2)),
    "2d-7x7": dict(nd=2, c=10, spatial=(30, 28), kernel=(7, 7), strides=(1, 1),
                   padding="SAME", rhs_dilation=(1, 1)),
    "2d-3x3-s2": dict(nd=2, c=12, spatial=(29, 64), kernel=(3, 3), strides=(2, 2),
                      padding=((1, 1), (1, 0)), rhs_dilation=(1, 1)),
    "3d-rows5": dict(nd=3, c=5, spatial=(4, 19, 13), kernel=(2, 5, 3), strides=(2, 1, 1),
                     padding=((1, 0), (2, 2), (0, 1)), rhs_dilation=(1, 1, 2)),
    # Strides past the window (no tile): the channels-last per-position
    # kernel with an odd number of taps, whose displacements nvcc reads two at
    # a time (memcheck found the read past the last one, direct_conv.cu).
    "1d-s3-k1": dict(nd=1, c=6, spatial=(40,), kernel=(1,), strides=(3,),
                     padding=((-1, -1),), rhs_dilation=(2,)),
    "1d-s4-k3": dict(nd=1, c=4, spatial=(50,), kernel=(3,), strides=(4,),
                     padding=((1, 1),), rhs_dilation=(1,)),
}


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", ["cf", "cl"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, jnp.bfloat16],
                         ids=["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("name", list(DEPTHWISE_CASES))
def test_depthwise_against_lax(platform, layout, dtype, name):
  """Output, input gradient and filter gradient."""
  cfg = depthwise_config(name, layout)
  with on_platform(platform):
    check_vjp_against_lax(cfg, 1, dtype)


def depthwise_config(name, layout):
  case = DEPTHWISE_CASES[name]
  nd, c = case["nd"], case["c"]
  specs = layout_specs(layout, nd)
  dn = lax.conv_dimension_numbers((1,) * (nd + 2), (1,) * (nd + 2), specs)
  return dict(lhs_shape=place(dn.lhs_spec, (2, c, *case["spatial"])),
              rhs_shape=place(dn.rhs_spec, (c, 1, *case["kernel"])),
              kwargs=dict(window_strides=case["strides"], padding=case["padding"],
                          rhs_dilation=case["rhs_dilation"], dimension_numbers=specs,
                          feature_group_count=c))


def check_vjp_against_lax(cfg, seed, dtype):
  """The output and both cotangents at HIGHEST against lax's (half types: lax
  in float32 on the same rounded operands and cotangent)."""
  x, w = operands(cfg, seed, dtype)
  ours, vjp = jax.vjp(lambda x, w: conv(x, w, precision=HIGHEST, **cfg["kwargs"]), x, w)
  ct = jnp.asarray(np.random.default_rng(seed + 1).standard_normal(ours.shape), dtype)
  ref_type = np.float32 if np.dtype(dtype) in (np.dtype(jnp.bfloat16), np.dtype(np.float16)) else dtype
  def reference(x, w, ct):
    ref, vjp_ref = jax.vjp(lambda x, w: lax.conv_general_dilated(x, w, precision=HIGHEST, **cfg["kwargs"]), x, w)
    return (ref, *vjp_ref(ct))
  refs = on_cpu(reference, x.astype(ref_type), w.astype(ref_type), ct.astype(ref_type))
  for a, b in zip((ours, *vjp(ct)), refs):
    assert_close(a, b, TOL[np.dtype(dtype)], dtype=np.dtype(dtype))


# How the direct filter gradient slices the output positions (FilterSlices):
# attribute values of jax_im2col.conv.workspace.
SLICINGS = {
    # One slice per image: several bands per slice, whole-block reductions.
    "whole-image": dict(_TILE_POSITIONS=1 << 40, _STRIP_POSITIONS=1 << 40, _DEPTHWISE_CL_POSITIONS=1 << 40,
                        _DIRECT_FILTER_PAIRS=1),
    # One output row per slice: warp-sized reductions, many partial sums.
    "one-row": dict(_TILE_POSITIONS=1, _STRIP_POSITIONS=1, _DEPTHWISE_CL_POSITIONS=1, _DIRECT_FILTER_PAIRS=1 << 40),
}


@pytest.mark.gpu
@pytest.mark.skipif(not GPU_DEVICES, reason="no CUDA device visible to JAX")
@pytest.mark.parametrize("slicing", list(SLICINGS))
@pytest.mark.parametrize("layout", ["cf", "cl"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", ["2d-56-s1", "2d-s2-dil2", "1d-long", "3d", "2d-5x5-s12"])
def test_depthwise_filter_gradient_slicings(monkeypatch, slicing, layout, dtype, name):
  """The depthwise filter gradient at the extremes of its slicing (the
  default lies between): the CUDA kernels' reductions and loops over bands."""
  for attr, value in SLICINGS[slicing].items():
    monkeypatch.setattr(workspace, attr, value)
  rows = {"whole-image": 56, "one-row": 1}[slicing]
  for kind in ("depthwise_cf", "depthwise_cl", "scalar"):
    assert workspace.direct_filter_slices(2, (56, 56), 16, kind) == (rows, 2 * 56 // rows)
  check_vjp_on_gpu_afresh(depthwise_config(name, layout), 2, dtype)


def check_vjp_on_gpu_afresh(cfg, seed, dtype):
  """check_vjp_against_lax on the GPU with nothing compiled before (the
  slicing attributes are read when lowering)."""
  jax.clear_caches()
  try:
    with on_platform("gpu"):
      check_vjp_against_lax(cfg, seed, dtype)
  finally:
    jax.clear_caches()


# Grouped convolutions with a few to 16 channels per group:
# the CUDA grouped kernels (grouped_conv.cu), from channel counts that leave
# most of a thread's output channels unused to the most the kernels are given,
# bands of several passes, channel chunks (float64, 16 channels, wide tiles),
# filter gradients staged in several rounds (rows wider than a stage), and
# lhs dilation (whose input gradient takes the scalar kernel); one case past
# the limit (the GEMM path).
GROUPED_CASES = {
    "1d-g4-c16": dict(nd=1, n=2, c=64, o=64, groups=4, spatial=(300,), kernel=(3,), strides=(1,),
                      padding=((1, 1),), rhs_dilation=(1,)),
    "1d-c16-long": dict(nd=1, n=2, c=32, o=32, groups=2, spatial=(1100,), kernel=(5,), strides=(1,),
                        padding=((2, 2),), rhs_dilation=(1,)),
    "2d-resnext": dict(nd=2, n=2, c=32, o=32, groups=4, spatial=(14, 14), kernel=(3, 3), strides=(1, 1),
                       padding=((1, 1), (1, 1)), rhs_dilation=(1, 1)),
    "2d-s2-dil2-odd": dict(nd=2, n=2, c=9, o=15, groups=3, spatial=(17, 19), kernel=(3, 2), strides=(2, 1),
                           padding=((2, 0), (1, 3)), rhs_dilation=(2, 3)),
    "2d-wide": dict(nd=2, n=1, c=4, o=6, groups=2, spatial=(3, 1500), kernel=(2, 3), strides=(1, 1),
                    padding="SAME", rhs_dilation=(1, 1)),
    "2d-c16-chunks": dict(nd=2, n=1, c=32, o=24, groups=2, spatial=(40, 40), kernel=(3, 3), strides=(1, 1),
                          padding="SAME", rhs_dilation=(1, 1)),
    "2d-c32-gemm": dict(nd=2, n=1, c=64, o=48, groups=2, spatial=(12, 11), kernel=(3, 3), strides=(1, 2),
                        padding="SAME", rhs_dilation=(1, 1)),
    "3d": dict(nd=3, n=2, c=8, o=24, groups=2, spatial=(6, 7, 5), kernel=(3, 2, 3), strides=(1, 1, 2),
               padding="SAME", rhs_dilation=(1, 1, 1)),
    "2d-lhs-dil": dict(nd=2, n=2, c=12, o=12, groups=3, spatial=(8, 9), kernel=(3, 3), strides=(1, 1),
                       padding=((2, 2), (1, 1)), rhs_dilation=(1, 1), lhs_dilation=(2, 1)),
}


def grouped_config(name, layout):
  case = GROUPED_CASES[name]
  nd, groups = case["nd"], case["groups"]
  specs = layout_specs(layout, nd)
  dn = lax.conv_dimension_numbers((1,) * (nd + 2), (1,) * (nd + 2), specs)
  kwargs = dict(window_strides=case["strides"], padding=case["padding"], rhs_dilation=case["rhs_dilation"],
                dimension_numbers=specs, feature_group_count=groups)
  if "lhs_dilation" in case:
    kwargs["lhs_dilation"] = case["lhs_dilation"]
  return dict(lhs_shape=place(dn.lhs_spec, (case["n"], case["c"], *case["spatial"])),
              rhs_shape=place(dn.rhs_spec, (case["o"], case["c"] // groups, *case["kernel"])), kwargs=kwargs)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", ["cf", "cl"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, jnp.bfloat16],
                         ids=["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("name", list(GROUPED_CASES))
def test_grouped_against_lax(platform, layout, dtype, name):
  """Output, input gradient and filter gradient."""
  with on_platform(platform):
    check_vjp_against_lax(grouped_config(name, layout), 3, dtype)


def test_grouped_algorithm_choice():
  """Which convolutions the CUDA lowering sends to the grouped kernels: the
  direct algorithm, and the grouped slicing of the filter gradient."""
  def spec(groups, channels_last=False, nd=2):  # the fields the choice reads, a 3x3 kernel
    return types.SimpleNamespace(groups=groups, channels_last=channels_last,
                                 window=types.SimpleNamespace(kernel_size=9, nd=nd, lhs_dilation=(1,) * nd))
  direct = applicability.direct_applies
  assert direct(spec(4), 64, 64)          # 16 channels per group
  assert not direct(spec(4), 64, 68)      # 17 output channels per group
  assert not direct(spec(2), 64, 64)      # 32 channels per group
  assert not direct(spec(1), 64, 64)
  assert direct(spec(8, True), 64, 64)
  assert not direct(spec(2, True), 64, 64)
  kind = lambda spec, c, dtype=np.float32: applicability.direct_filter_kind(spec, c, c, dtype)
  assert kind(spec(8), 64) == "grouped"
  assert kind(spec(8, True), 64) == "grouped"
  assert kind(spec(64), 64) == "depthwise_cf"
  assert kind(spec(64, True), 64) == "depthwise_cl"
  # Where the channels-last tiles do not apply, the per-position kernel's
  # finer slicing: 1-D and 3-D, lhs dilation, channels not in whole vectors
  # (12 bfloat16 channels; 12 float32 ones are three vectors).
  assert kind(spec(64, True, nd=1), 64) == "scalar"
  assert kind(spec(64, True, nd=3), 64) == "scalar"
  dilated = spec(64, True)
  dilated.window.lhs_dilation = (2, 1)
  assert kind(dilated, 64) == "scalar"
  assert kind(spec(12, True), 12, jnp.bfloat16) == "scalar"
  assert kind(spec(12, True), 12, np.float32) == "depthwise_cl"
  # The channels-last depthwise slices: about _DEPTHWISE_CL_POSITIONS
  # positions, an image's rows spread evenly (56 rows: 4 slices of 14, not
  # 18, 18, 18, 2).
  assert workspace.direct_filter_slices(32, (56, 56), 144, "depthwise_cl") == (14, 32 * 4)
  # Channels-first 2-D slices span about 1024 positions in whole strips of 8
  # rows (1024 // 56 = 18 rows, cut to 16); a whole image stays whole; 1-D
  # and 3-D slices span about 2048.
  assert workspace.direct_filter_slices(32, (56, 56), 144, "depthwise_cf") == (16, 32 * 4)
  assert workspace.direct_filter_slices(4, (30, 28), 8, "depthwise_cf") == (30, 4)
  assert workspace.direct_filter_slices(4, (5, 1000), 8, "depthwise_cf") == (1, 4 * 5)
  assert workspace.direct_filter_slices(4, (9, 16, 16), 8, "depthwise_cf") == (8, 4 * 2)
  assert workspace.direct_filter_slices(2, (3, 1000), 144, "depthwise_cl") == (1, 2 * 3)
  # A grouped 1-D convolution (jax#13800's with 8 channels per group),
  # lowered for CUDA: every call direct, the filter gradient in slices of
  # _GROUPED_POSITIONS rows.
  x = jax.ShapeDtypeStruct((8, 512, 4000), jnp.float32)
  w = jax.ShapeDtypeStruct((512, 8, 3), jnp.float32)
  loss = lambda x, w: jnp.sum(conv(x, w, window_strides=(1,), padding=((1, 1),), feature_group_count=64) ** 2)
  text = _cuda_text(jax.value_and_grad(loss, (0, 1)), x, w)
  for target in ("forward", "backward_data", "backward_filter"):
    calls = [l for l in text.splitlines() if f"custom_call @jax_im2col_conv_{target}(" in l]
    assert len(calls) == 1 and "algorithm = 1 : i64" in calls[0], calls
  assert _chunk_attrs(text, "jax_im2col_conv_backward_filter") == (8, 512)


# How the grouped filter gradient slices the output positions.
GROUPED_SLICINGS = {"whole-image": 1 << 40, "one-row": 1}


@pytest.mark.gpu
@pytest.mark.skipif(not GPU_DEVICES, reason="no CUDA device visible to JAX")
@pytest.mark.parametrize("slicing", list(GROUPED_SLICINGS))
@pytest.mark.parametrize("layout", ["cf", "cl"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", ["1d-c16-long", "2d-resnext", "2d-wide", "3d"])
def test_grouped_filter_gradient_slicings(monkeypatch, slicing, layout, dtype, name):
  """The grouped filter gradient with one slice per image (several bands and
  stages per block) and one output row per slice (many partial sums)."""
  monkeypatch.setattr(workspace, "_GROUPED_POSITIONS", GROUPED_SLICINGS[slicing])
  rows = {"whole-image": 56, "one-row": 1}[slicing]
  assert workspace.direct_filter_slices(2, (56, 56), 64, "grouped", 72) == (rows, 2 * 56 // rows)
  check_vjp_on_gpu_afresh(grouped_config(name, layout), 4, dtype)


# Convolutions the implicit GEMM takes on the GPU (channels per group in whole
# 16-byte vectors): on a 132-multiprocessor GPU each of its three tile shapes
# (the two 190 x 190 cases take 128 x 128 and 128 x 64, the rest 64 x 64) and
# split reductions, partial tiles in both dimensions, reductions of one to 72
# k-tiles, an odd channel count (scalar stores, and an input gradient that
# takes im2col + GEMM), groups, 1-D to 3-D, strides and dilations. Strided
# input gradients run one implicit GEMM per phase (gradient_phases): 2 to 8
# phases, phases without taps (zeroed: the 1x1 stride 2, a kernel shorter than
# the stride, a dilation sharing a factor with the stride), negative low
# padding of a phase (padding wider than the kernel) and a phase's split
# reduction (2d-s2-split: its parts summed into strided positions). On Hopper,
# cases whose channels per group fill whole 128-byte k-tiles (32 float32, 64
# half: 2d-s2-dil in float32, 2d-grouped, 2d-split-k and the *-tma cases) take
# the TMA kernel, with asymmetric padding, strides and dilations in 1-D to 3-D
# (the im2col box's corners and the taps' displacements per dimension).
# Unit-stride cases of such channels whose 8 x 8 output tiles (lines of 64 in
# 1-D) waste at most 15% of their positions take the halo kernel
# (implicit_halo_sm90.cu; halo_rule below): 3d-tma and the *-halo cases, with
# partial and odd counts of tiles, several runs of channels, dilated and
# asymmetric windows, cropping, groups, 128 and 256 output channels per block,
# and a strided input gradient's phases.
IMPLICIT_CASES = {
    "2d-3x3": dict(n=2, c=16, o=24, groups=1, spatial=(11, 13), kernel=(3, 3), strides=(1, 1),
                   padding="SAME", rhs_dilation=(1, 1)),
    "2d-s2-dil": dict(n=2, c=32, o=40, groups=1, spatial=(17, 15), kernel=(3, 2), strides=(2, 1),
                      padding=((2, 0), (1, 3)), rhs_dilation=(2, 1)),
    "1d-odd-o": dict(n=3, c=8, o=137, groups=1, spatial=(300,), kernel=(5,), strides=(1,),
                     padding=((2, 2),), rhs_dilation=(1,)),
    "3d": dict(n=1, c=16, o=16, groups=1, spatial=(5, 9, 7), kernel=(3, 3, 3), strides=(1, 1, 1),
               padding="SAME", rhs_dilation=(1, 1, 1)),
    "2d-grouped": dict(n=2, c=128, o=48, groups=2, spatial=(12, 11), kernel=(3, 3), strides=(1, 1),
                       padding="SAME", rhs_dilation=(1, 1)),
    "2d-tile-128x128": dict(n=1, c=8, o=72, groups=1, spatial=(190, 190), kernel=(3, 3),
                            strides=(1, 1), padding="SAME", rhs_dilation=(1, 1)),
    "2d-tile-128x64": dict(n=1, c=8, o=40, groups=1, spatial=(190, 190), kernel=(3, 3),
                           strides=(1, 1), padding="SAME", rhs_dilation=(1, 1)),
    # Few outputs, a long reduction: split into parts (4 in float32, 2 in half
    # types; the float32 input gradient into 2).
    "2d-split-k": dict(n=2, c=128, o=72, groups=1, spatial=(7, 7), kernel=(3, 3), strides=(1, 1),
                       padding="SAME", rhs_dilation=(1, 1)),
    "1d-tma": dict(n=3, c=64, o=48, groups=1, spatial=(300,), kernel=(3,), strides=(2,),
                   padding=((2, 1),), rhs_dilation=(2,)),
    "3d-tma": dict(n=2, c=64, o=40, groups=1, spatial=(6, 9, 8), kernel=(3, 2, 3),
                   strides=(1, 1, 1), padding=((1, 1), (0, 1), (2, 0)), rhs_dilation=(1, 2, 1)),
    "2d-s2-phases": dict(n=2, c=64, o=32, groups=1, spatial=(15, 12), kernel=(3, 3),
                         strides=(2, 2), padding=((1, 1), (1, 1)), rhs_dilation=(1, 1)),
    "2d-1x1-s2": dict(n=2, c=32, o=64, groups=1, spatial=(9, 10), kernel=(1, 1), strides=(2, 2),
                      padding="VALID", rhs_dilation=(1, 1)),
    "3d-s2": dict(n=1, c=32, o=64, groups=1, spatial=(5, 7, 6), kernel=(3, 3, 3),
                  strides=(2, 2, 2), padding="SAME", rhs_dilation=(1, 1, 1)),
    "1d-s3-k2-pad": dict(n=2, c=40, o=16, groups=1, spatial=(50,), kernel=(2,), strides=(3,),
                         padding=((4, 5),), rhs_dilation=(1,)),
    "2d-s2-split": dict(n=1, c=64, o=128, groups=1, spatial=(8, 8), kernel=(5, 5), strides=(2, 2),
                        padding=((2, 2), (2, 2)), rhs_dilation=(1, 1)),
    "2d-halo": dict(n=3, c=64, o=72, groups=1, spatial=(16, 24), kernel=(3, 3), strides=(1, 1),
                    padding="SAME", rhs_dilation=(1, 1)),
    "2d-halo-edge": dict(n=1, c=128, o=64, groups=1, spatial=(15, 35), kernel=(3, 5),
                         strides=(1, 1), padding=((1, 1), (2, 2)), rhs_dilation=(1, 2)),
    "2d-halo-crop-odd": dict(n=1, c=64, o=40, groups=1, spatial=(10, 26), kernel=(3, 3),
                             strides=(1, 1), padding=((0, 0), (-1, 1)), rhs_dilation=(1, 1)),
    "2d-halo-grouped": dict(n=2, c=256, o=128, groups=2, spatial=(8, 16), kernel=(3, 3),
                            strides=(1, 1), padding="SAME", rhs_dilation=(1, 1)),
    "2d-halo-wide": dict(n=2, c=64, o=160, groups=1, spatial=(96, 88), kernel=(3, 3),
                         strides=(1, 1), padding="SAME", rhs_dilation=(1, 1)),
    "3d-halo": dict(n=2, c=64, o=32, groups=1, spatial=(4, 8, 16), kernel=(3, 3, 3),
                    strides=(1, 1, 1), padding="SAME", rhs_dilation=(1, 1, 1)),
    "1d-halo": dict(n=2, c=64, o=48, groups=1, spatial=(200,), kernel=(5,), strides=(1,),
                    padding=((3, 1),), rhs_dilation=(3,)),
    "2d-s2-halo-phases": dict(n=2, c=64, o=64, groups=1, spatial=(32, 32), kernel=(3, 3),
                              strides=(2, 2), padding=((1, 1), (1, 1)), rhs_dilation=(1, 1)),
}


def halo_rule(out_spatial, channels_per_group, dtype):
  """Whether a unit-stride implicit GEMM (its output extents, its input's
  channels per group) takes the halo kernel on Hopper: whole 128-byte runs of
  channels, tiles of 8 x 8 output positions (lines of 64 in 1-D) at most 15%
  past the output's edges (halo_applies in lib/cuda/implicit_halo_sm90.cu)."""
  run = 128 // np.dtype(dtype).itemsize
  plane = tuple(out_spatial[-2:]) if len(out_spatial) > 1 else (1, out_spatial[0])
  tile = (8, 8) if len(out_spatial) > 1 else (1, 64)
  covered = np.prod([-(-e // t) * t for e, t in zip(plane, tile)])
  return channels_per_group % run == 0 and 100 * np.prod(plane) >= 85 * covered


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
@pytest.mark.parametrize("name", [n for n in IMPLICIT_CASES if "halo" in n])
def test_halo_cases_take_the_halo_kernel(name, dtype):
  """The *-halo cases' forwards (and the phases' input gradient) meet the halo
  kernel's rule, so that test_implicit_gemm_against_float64 checks it; the
  rule's edge: 7 x 7 and 14 x 14 outputs waste 23% and stay off it."""
  case = IMPLICIT_CASES[name]
  cg = case["c"] // case["groups"]
  out = lax.conv_general_dilated(
      jnp.zeros((1, 1, *case["spatial"])), jnp.zeros((1, 1, *case["kernel"])), case["strides"],
      case["padding"], rhs_dilation=case["rhs_dilation"]).shape[2:]
  if name == "2d-s2-halo-phases":  # dx's phases: 16 x 16 each, dy's 64 channels
    assert halo_rule(tuple(s // 2 for s in case["spatial"]), case["o"], dtype)
  else:
    assert halo_rule(out, cg, dtype)
  assert not halo_rule((7, 7), 64, dtype) and not halo_rule((14, 14), 64, dtype)
  assert halo_rule((56, 56), 64, dtype) and halo_rule((15, 31), 64, dtype)


def case_window(case):
  """The Window that conv_general_dilated builds for a case (no lhs dilation)."""
  nd = len(case["kernel"])
  pads = _geometry.resolve_padding(case["padding"], case["spatial"], case["kernel"], case["strides"],
                                   case["rhs_dilation"], (1,) * nd)
  return _geometry.Window(tuple(case["kernel"]), tuple(case["strides"]), tuple(case["rhs_dilation"]),
                          (1,) * nd, pads)


def tap_sum_reference(x, w, case):
  """A grouped convolution without lhs dilation, channels-first ((N, C,
  *spatial) and (O, C / groups, *kernel)), in float64 as a sum over the taps
  of batched matrix products: an oracle for cases with hundreds of groups,
  where XLA's float64 convolution on the CPU takes minutes."""
  x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
  window, g = case_window(case), case["groups"]
  assert all(lo >= 0 and hi >= 0 for lo, hi in window.padding), "crops are not implemented here"
  out = window.output_spatial(case["spatial"])
  xp = np.pad(x, [(0, 0), (0, 0), *window.padding])
  n, c, o = x.shape[0], x.shape[1], w.shape[0]
  y = np.zeros((n, g, o // g, int(np.prod(out))))
  for tap in np.ndindex(*window.kernel):
    taken = tuple(slice(k * d, k * d + (e - 1) * st + 1, st)
                  for k, d, e, st in zip(tap, window.rhs_dilation, out, window.stride))
    x_tap = xp[(slice(None), slice(None), *taken)].reshape(n, g, c // g, -1)
    y += w[(slice(None), slice(None), *tap)].reshape(g, o // g, c // g) @ x_tap
  return y.reshape(n, o, *out)


def test_tap_sum_reference_matches_lax():
  """The oracle above against XLA's float64 convolution on a small case with
  groups, strides, dilation and asymmetric padding."""
  case = dict(groups=3, kernel=(3, 2), strides=(2, 1), rhs_dilation=(1, 2), padding=((2, 1), (0, 3)),
              spatial=(9, 7))
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((2, 6, 9, 7)), rng.standard_normal((12, 2, 3, 2))
  ref = on_cpu(lambda x, w: lax.conv_general_dilated(
      x, w, case["strides"], case["padding"], rhs_dilation=case["rhs_dilation"],
      feature_group_count=3), x, w)
  np.testing.assert_allclose(tap_sum_reference(x, w, case), ref, rtol=1e-12, atol=1e-12)


# 264 groups of 64 input and 8 output channels on 8 x 31 images: one block per
# (tile of output channels, group) fills an H100's or H200's 132
# multiprocessors twice, so the halo kernel's persistent blocks take every
# pair of 8 x 8 output tiles in turn, the pair reaching past the right edge
# after the pair left of it. A store past the edge (onto the next row's first
# positions) would then land after the true one: this case catches the
# kernel's edge mask missing (docs/optimization-log.md, H100, 2026-11-23),
# which the cases above do not.
HALO_IN_TURN = dict(n=1, c=264 * 64, o=264 * 8, groups=264, spatial=(8, 31), kernel=(3, 3),
                    strides=(1, 1), padding="SAME", rhs_dilation=(1, 1))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", ["cf", "cl"])
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
def test_halo_stores_stay_inside_the_output(platform, layout, dtype):
  """HALO_IN_TURN's forward, on the halo kernel on Hopper, against the tap-sum
  oracle in float64 on the operands the multiplier sees."""
  case, dtype = HALO_IN_TURN, np.dtype(dtype)
  assert halo_rule(case["spatial"], case["c"] // case["groups"], dtype)
  cfg = implicit_config("in-turn", layout, {"in-turn": case})
  x, w = operands(cfg, 11, dtype)
  with on_platform(platform):
    y = conv(x, w, preferred_element_type=np.float32, **cfg["kwargs"])
  seen = implicit_operands_seen(platform, dtype)
  lhs, rhs, out = layout_specs(layout, 2)
  first = lambda a, spec, outer: np.moveaxis(np.asarray(a), [spec.index(d) for d in outer], [0, 1])
  ref = tap_sum_reference(first(seen(x), lhs, "NC"), first(seen(w), rhs, "OI"), case)
  assert_close(first(y, out, "NC"), ref.astype(np.float32), 1e-5, dtype=np.dtype(np.float32))


def implicit_config(name, layout, cases=IMPLICIT_CASES):
  case = cases[name]
  nd, groups = len(case["spatial"]), case["groups"]
  specs = layout_specs(layout, nd)
  dn = lax.conv_dimension_numbers((1,) * (nd + 2), (1,) * (nd + 2), specs)
  return dict(lhs_shape=place(dn.lhs_spec, (case["n"], case["c"], *case["spatial"])),
              rhs_shape=place(dn.rhs_spec, (case["o"], case["c"] // groups, *case["kernel"])),
              kwargs=dict(window_strides=case["strides"], padding=case["padding"],
                          rhs_dilation=case["rhs_dilation"], dimension_numbers=specs,
                          feature_group_count=groups))


def round_to_tf32(a):
  """float32 to TF32 (10 mantissa bits), ties away from zero: cvt.rna.tf32.f32."""
  bits = np.asarray(a, np.float32).view(np.uint32)
  return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def truncate_to_tf32(a):
  """float32 to TF32 toward zero: what a tensor core reads of float32 bits."""
  bits = np.asarray(a, np.float32).view(np.uint32)
  return (bits & np.uint32(0xFFFFE000)).view(np.float32)


def implicit_operands_seen(platform, dtype):
  """What the implicit GEMM's multiplier sees of float operands, as float32:
  float32 as TF32 on the GPU (truncated by Hopper's wgmma kernels, rounded to
  nearest by mma.sync), other types as they are."""
  if platform == "gpu" and np.dtype(dtype) == np.float32:
    return truncate_to_tf32 if applicability.implicit_truncates_tf32(device_caps("cuda")) else round_to_tf32
  return lambda a: np.asarray(a, np.float32)


def test_tf32_roundings():
  a = np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -12, -(1 + 3 * 2.0 ** -12), 1 + 2.0 ** -10],
               np.float32)
  np.testing.assert_array_equal(round_to_tf32(a), [1 + 2.0 ** -10, 1 + 2.0 ** -10,
                                                   -(1 + 2.0 ** -10), 1 + 2.0 ** -10])
  np.testing.assert_array_equal(truncate_to_tf32(a), [1, 1, -1, 1 + 2.0 ** -10])


def _implicit_spec(case, layout, groups=None):
  """The ConvSpec that conv_general_dilated builds for a case (the routing
  rules read it: a real one, so that it cannot drift from them)."""
  return primitives.ConvSpec(
      window=case_window(case), channels_last=layout == "cl",
      groups=case["groups"] if groups is None else groups,
      precision=primitives.PRECISION_DEFAULT, workspace_limit=jax_im2col.get_workspace_limit())


def forward_and_gradients(platform, cfg, dtype, seed):
  """On `platform`: the operands, a random cotangent, y at float32
  (preferred_element_type), y, and the input and filter gradients for the
  cotangent."""
  kw = cfg["kwargs"]
  x, w = operands(cfg, seed, dtype)
  with on_platform(platform):
    y32 = conv(x, w, preferred_element_type=np.float32, **kw)
    y, vjp = jax.vjp(lambda x, w: conv(x, w, **kw), x, w)
    ct = jnp.asarray(np.random.default_rng(seed + 1).standard_normal(y.shape), dtype)
    dx, dw = vjp(ct)
  return x, w, ct, y32, y, dx, dw


# The rounding of a half-type output.
UNIT_ROUNDOFF = {np.dtype(jnp.bfloat16): 2.0 ** -8, np.dtype(np.float16): 2.0 ** -11}


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", ["cf", "cl"])
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.float16],
                         ids=["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("name", list(IMPLICIT_CASES))
def test_implicit_gemm_against_float64(platform, layout, dtype, name):
  """The forward and the input and filter gradients at DEFAULT precision
  against float64 on the operands the multiplier sees: float32 as TF32 on the
  GPU (rounded to nearest by the mma.sync kernels, among them the filter
  gradient's; truncated by Hopper's wgmma kernels; exact float32 on the CPU),
  half types as they are. What is left is float32 accumulation, plus the
  output's rounding for half outputs."""
  case, cfg = IMPLICIT_CASES[name], implicit_config(name, layout)
  dtype = np.dtype(dtype)
  spec = _implicit_spec(case, layout)
  out_positions = int(np.prod(lax.conv_general_dilated(
      jnp.zeros((1, 1, *case["spatial"])), jnp.zeros((1, 1, *case["kernel"])), case["strides"],
      case["padding"], rhs_dilation=case["rhs_dilation"]).shape[2:]))
  assert applicability.use_implicit(spec, dtype, case["c"], case["o"], out_positions, device_caps("cuda"))
  implicit_dx = applicability.use_implicit(spec, dtype, case["c"], case["o"],
                                       int(np.prod(case["spatial"])), device_caps("cuda"),
                                       input_gradient=True)
  implicit_dw = applicability.use_implicit_filter(spec, dtype, case["c"], case["o"],
                                              device_caps("cuda"), positions=out_positions,
                                              images=case["n"])
  # Every case but the odd output channels has whole vectors of them, and
  # every strided one at least _PHASE_MIN_CHANNELS input channels. (The halo
  # cases are there for their forwards: 2d-halo-wide's 160 output channels
  # take other routes for the gradients.)
  if "halo" not in name:
    assert implicit_dw == (name != "1d-odd-o")
    assert implicit_dx == (name != "1d-odd-o")
  kw = cfg["kwargs"]
  x, w, ct, y32, y, dx, dw = forward_and_gradients(platform, cfg, dtype, 5)
  tf32 = platform == "gpu" and dtype == np.float32
  seen = implicit_operands_seen(platform, dtype)

  def reference(x, w, ct):
    ref, vjp_ref = jax.vjp(lambda x, w: lax.conv_general_dilated(x, w, **kw), x, w)
    return (ref, *vjp_ref(ct))

  ref_y, ref_dx, _ = on_cpu(reference, *(seen(a).astype(np.float64) for a in (x, w, ct)))
  dw_seen = round_to_tf32 if tf32 else seen  # the filter gradient's kernel is mma.sync
  ref_dw = on_cpu(reference, *(dw_seen(a).astype(np.float64) for a in (x, w, ct)))[2]
  assert_close(y32, ref_y.astype(np.float32), 1e-5, dtype=np.dtype(np.float32))
  if dtype in UNIT_ROUNDOFF:
    assert_close(y, ref_y.astype(np.float32), UNIT_ROUNDOFF[dtype], dtype=dtype)
  if implicit_dx or not tf32:
    tol = UNIT_ROUNDOFF.get(dtype, 1e-5)
    assert_close(dx, ref_dx.astype(np.float32), tol, dtype=dtype)
  else:
    # im2col + cuBLAS computes this float32 input gradient in TF32 with its own
    # rounding of the operands (to nearest or toward zero): against exact
    # operands, each product is then off by at most 2 * 2**-10.
    exact_dx = on_cpu(lambda x, w, ct: reference(x, w, ct)[1],
                      *(np.asarray(a, np.float64) for a in (x, w, ct)))
    assert_close(dx, exact_dx.astype(np.float32), 2.0 ** -9, dtype=dtype)
  if implicit_dw or not tf32:
    assert_close(dw, ref_dw.astype(np.float32), UNIT_ROUNDOFF.get(dtype, 1e-5), dtype=dtype)
  else:  # im2col + cuBLAS in TF32, as for the input gradient above
    exact_dw = on_cpu(lambda x, w, ct: reference(x, w, ct)[2],
                      *(np.asarray(a, np.float64) for a in (x, w, ct)))
    assert_close(dw, exact_dw.astype(np.float32), 2.0 ** -9, dtype=dtype)


# Channels-first 1-D convolutions for the kernels of lib/cuda/conv_1d_cf.cu
# (float32, stride 1, channels per group multiples of 16 up to 64): jax#13800's
# 32 channels per group, 16 input and 48 output channels with an asymmetric
# dilated window (the input gradient's tile is 48 channels wide), a dense 1000
# positions cropped at the end (tiles of 128 with a partial last one), a
# one-tap window with padding, nine images shorter than a tile, and odd output
# positions (the forward's scalar stores; dy's rows are not whole vectors, so
# both gradients take other kernels). "routes": whether the forward, the input
# gradient and the filter gradient take the kernels.
CONV_1D_CF_CASES = {
    "jax13800": dict(n=3, c=64, o=64, groups=2, spatial=(300,), kernel=(3,), strides=(1,),
                     padding=((1, 1),), rhs_dilation=(1,), routes=(True, True, True)),
    "c16-o48-dilated": dict(n=2, c=32, o=96, groups=2, spatial=(260,), kernel=(5,), strides=(1,),
                            padding=((9, 3),), rhs_dilation=(3,), routes=(True, True, True)),
    "dense-cropped": dict(n=2, c=32, o=32, groups=1, spatial=(1000,), kernel=(3,), strides=(1,),
                          padding=((1, -7),), rhs_dilation=(1,), routes=(True, True, True)),
    "one-tap-padded": dict(n=2, c=32, o=32, groups=1, spatial=(64,), kernel=(1,), strides=(1,),
                           padding=((2, 2),), rhs_dilation=(1,), routes=(True, True, True)),
    "short-images": dict(n=9, c=32, o=32, groups=1, spatial=(12,), kernel=(3,), strides=(1,),
                         padding=((1, 1),), rhs_dilation=(1,), routes=(True, True, True)),
    "odd-output": dict(n=2, c=64, o=32, groups=2, spatial=(300,), kernel=(3,), strides=(1,),
                       padding=((1, 0),), rhs_dilation=(1,), routes=(True, False, False)),
}
CONV_1D_CF_OPS = ("forward", "input_gradient", "filter_gradient")


def conv_1d_cf_routes(case, dtype=np.float32, **spec_changes):
  """Whether each op of a channels-first 1-D case takes the kernels."""
  spec = _implicit_spec(case, "cf")
  spec = dataclasses.replace(spec, **spec_changes) if spec_changes else spec
  in_w = case["spatial"][0]
  out_w = spec.window.output_spatial((in_w,))[0]
  return tuple(applicability.conv_1d_cf_applies(spec, dtype, case["c"], case["o"], device_caps("cuda"),
                                            in_w=in_w, out_w=out_w, op=op)
               for op in CONV_1D_CF_OPS)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", list(CONV_1D_CF_CASES))
def test_conv_1d_cf_against_float64(platform, name):
  """The forward and both gradients in float32 at DEFAULT precision against
  float64: on the GPU, where the kernels take an op, on the operands as TF32
  truncated (their mma.sync reads float32 bits as they are), leaving float32
  accumulation; where another path takes it, against exact operands with
  TF32's own error."""
  case = CONV_1D_CF_CASES[name]
  assert conv_1d_cf_routes(case) == case["routes"]
  cfg = implicit_config(name, "cf", CONV_1D_CF_CASES)
  kw = cfg["kwargs"]
  x, w, ct, y32, y, dx, dw = forward_and_gradients(platform, cfg, np.float32, 7)

  def reference(seen):
    def fn(x, w, ct):
      ref, vjp_ref = jax.vjp(lambda x, w: lax.conv_general_dilated(x, w, **kw), x, w)
      return (ref, *vjp_ref(ct))
    return on_cpu(fn, *(seen(a).astype(np.float64) for a in (x, w, ct)))

  exact = reference(lambda a: np.asarray(a, np.float32))
  seen = reference(truncate_to_tf32) if platform == "gpu" else exact
  assert_close(y32, seen[0].astype(np.float32), 1e-5)
  for ours, routed, i in ((y, case["routes"][0], 0), (dx, case["routes"][1], 1),
                          (dw, case["routes"][2], 2)):
    if routed or platform == "cpu":
      assert_close(ours, seen[i].astype(np.float32), 1e-5)
    else:
      assert_close(ours, exact[i].astype(np.float32), 2.0 ** -9)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_conv_1d_cf_ignores_unread_positions(platform):
  """A window cropped at the end reads none of x's last positions: NaNs there
  reach neither y nor dw (the filter gradient's tiles span them, against
  dy's zeros past its end), and their input gradient is zero."""
  case = CONV_1D_CF_CASES["dense-cropped"]
  cfg = implicit_config("dense-cropped", "cf", CONV_1D_CF_CASES)
  x, w = operands(cfg, 11, np.float32)
  unread = 993  # the last window ends at position 992
  x_nan = x.at[:, :, unread:].set(jnp.nan)
  with on_platform(platform):
    y, vjp = jax.vjp(lambda x, w: conv(x, w, **cfg["kwargs"]), x_nan, w)
    dx, dw = vjp(jnp.ones_like(y))
  with on_platform(platform):
    y_ref, vjp_ref = jax.vjp(lambda x, w: conv(x, w, **cfg["kwargs"]), x, w)
    _, dw_ref = vjp_ref(jnp.ones_like(y_ref))
  assert conv_1d_cf_routes(case) == (True, True, True)
  np.testing.assert_array_equal(np.asarray(y), np.asarray(y_ref))
  np.testing.assert_array_equal(np.asarray(dw), np.asarray(dw_ref))
  assert not np.any(np.asarray(dx)[:, :, unread:])


def test_conv_1d_cf_routing():
  """What the channels-first 1-D kernels take (lowered for CUDA without a
  GPU): jax#13800's grouped convolution, every op; not half types, HIGHEST,
  strides, channels-last, the grouped kernels' groups of at most 16 channels,
  channel counts off the multiples of 16, rows out of whole vectors, or tiles
  over the shared-memory budget (64 channels in and out)."""
  base = CONV_1D_CF_CASES["jax13800"]
  assert conv_1d_cf_routes(base) == (True, True, True)
  assert conv_1d_cf_routes(base, jnp.bfloat16) == (False, False, False)
  assert conv_1d_cf_routes(base, precision=primitives.PRECISION_HIGHEST) == (False,) * 3
  assert conv_1d_cf_routes(base, channels_last=True) == (False, False, False)
  assert conv_1d_cf_routes(dict(base, strides=(2,))) == (False, False, False)
  assert conv_1d_cf_routes(dict(base, groups=4)) == (False, False, False)  # 16: grouped kernels
  assert conv_1d_cf_routes(dict(base, c=48, o=48, groups=2)) == (False, False, False)  # 24
  assert conv_1d_cf_routes(dict(base, spatial=(302,))) == (False, False, False)
  assert conv_1d_cf_routes(dict(base, padding=((1, 0),))) == (True, False, False)
  assert conv_1d_cf_routes(dict(base, groups=1)) == (False, False, False)  # 64 x 64
  assert conv_1d_cf_routes(dict(base, groups=1, c=32, o=48)) == (True, True, True)
  x = jax.ShapeDtypeStruct((8, 512, 4000), jnp.float32)
  w = jax.ShapeDtypeStruct((512, 32, 3), jnp.float32)
  loss = lambda x, w: jnp.sum(conv(x, w, window_strides=(1,), padding=((1, 1),),
                                   feature_group_count=16) ** 2)
  text = _cuda_text(jax.value_and_grad(loss, (0, 1)), x, w)
  for target in ("forward", "backward_data", "backward_filter"):
    calls = [l for l in text.splitlines() if f"custom_call @jax_im2col_conv_{target}(" in l]
    assert len(calls) == 1 and "algorithm = 6 : i64" in calls[0], calls
  slices = workspace.conv_1d_cf_slices(n=8, out_w=4000, groups=16, o=512, kg=96,
                                       limit=jax_im2col.get_workspace_limit(),
                                       multiprocessors=device_caps("cuda").multiprocessors)
  assert _chunk_attrs(text, "jax_im2col_conv_backward_filter") == (1, slices)
  assert slices == -(-4 * device_caps("cuda").multiprocessors // 16)


# Grouped convolutions whose groups pack into 64-channel groups on Hopper
# (_packed, packed_groups in lib/cuda/conv.cu): ResNeXt's 8 channels per group
# (8 groups packed into one), 32 per group in 1-D with a stride (its 24 output
# channels per group do not pack: the input gradient takes the unpacked
# implicit GEMM's phases), and 16 in / 8 out per group in 3-D (4
# groups packed for the forward, 8 for the input gradient).
PACKED_CASES = {
    "2d-resnext": dict(n=2, c=64, o=64, groups=8, spatial=(10, 9), kernel=(3, 3), strides=(1, 1),
                       padding="SAME", rhs_dilation=(1, 1)),
    "1d-g2-s2": dict(n=3, c=64, o=48, groups=2, spatial=(40,), kernel=(5,), strides=(2,),
                     padding=((2, 1),), rhs_dilation=(1,)),
    "3d-g16": dict(n=1, c=256, o=128, groups=16, spatial=(4, 5, 6), kernel=(3, 3, 3),
                   strides=(1, 1, 1), padding="SAME", rhs_dilation=(1, 2, 1)),
}


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("layout", ["cf", "cl"])
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(PACKED_CASES))
def test_packed_groups_against_float64(platform, layout, dtype, name):
  """Grouped convolutions at DEFAULT precision, forward and both gradients,
  against float64. Where the GPU packs the groups (Hopper), on the operands
  the multiplier sees (float32 truncated to TF32; the zeros between packed
  groups add nothing) within float32 accumulation; float32 on other GPU paths
  (direct kernels, cuBLAS or mma.sync in TF32) against exact operands within
  TF32's error; half types as they are, within the output's rounding (their
  filter gradient packed too on Hopper)."""
  case, cfg = PACKED_CASES[name], implicit_config(name, layout, PACKED_CASES)
  dtype = np.dtype(dtype)
  spec = _implicit_spec(case, layout)
  on_gpu = platform == "gpu"
  device = device_caps("cuda")
  packed = on_gpu and applicability.packed_factor(spec, dtype, case["c"], case["o"], device) > 0
  packed_dx = on_gpu and applicability.packed_factor(spec, dtype, case["c"], case["o"], device,
                                                 input_gradient=True) > 0
  if on_gpu and device.hopper_kernels:
    # 1d-g2-s2's 24 output channels per group do not divide 64.
    assert packed and packed_dx == (name != "1d-g2-s2")
  kw = cfg["kwargs"]
  x, w, ct, y32, y, dx, dw = forward_and_gradients(platform, cfg, dtype, 7)
  if on_gpu and device.hopper_kernels:
    out_positions = int(np.prod(ct.shape[2:] if layout == "cf" else ct.shape[1:-1]))
    packed_dw = applicability.packed_filter_factor(spec, dtype, case["c"], case["o"], device,
                                               positions=out_positions, images=case["n"])
    # Half types, where the grouped direct kernel would take it (16 channels
    # per group at most: not 1d-g2-s2's 32).
    assert (packed_dw > 0) == (dtype in UNIT_ROUNDOFF and name != "1d-g2-s2")

  def reference(x, w, ct):
    ref, vjp_ref = jax.vjp(lambda x, w: lax.conv_general_dilated(x, w, **kw), x, w)
    return (ref, *vjp_ref(ct))

  exact = on_cpu(reference, *(np.asarray(a, np.float64) for a in (x, w, ct)))
  if dtype in UNIT_ROUNDOFF:
    assert_close(y32, exact[0].astype(np.float32), 1e-5, dtype=np.dtype(np.float32))
    assert_close(y, exact[0].astype(np.float32), UNIT_ROUNDOFF[dtype], dtype=dtype)
    assert_close(dx, exact[1].astype(np.float32), UNIT_ROUNDOFF[dtype], dtype=dtype)
    assert_close(dw, exact[2].astype(np.float32), UNIT_ROUNDOFF[dtype], dtype=dtype)
    return
  # float32's filter gradient is not packed (direct kernels, or TF32 on
  # tensor cores rounded to nearest or by cuBLAS): exact operands, TF32's error.
  assert_close(dw, exact[2].astype(np.float32), 1e-5 if not on_gpu else 2.0 ** -9, dtype=dtype)
  truncated = on_cpu(reference, *(truncate_to_tf32(a).astype(np.float64) for a in (x, w, ct)))
  for actual, ref_exact, ref_truncated, was_packed in ((y32, exact[0], truncated[0], packed),
                                                       (y, exact[0], truncated[0], packed),
                                                       (dx, exact[1], truncated[1], packed_dx)):
    if was_packed:
      assert_close(actual, ref_truncated.astype(np.float32), 1e-5, dtype=dtype)
    else:
      assert_close(actual, ref_exact.astype(np.float32), 1e-5 if not on_gpu else 2.0 ** -9,
                   dtype=dtype)


def _gradient_algorithms(loss, xs, ws):
  """The algorithm attribute of the forward, input-gradient and
  filter-gradient CUDA calls of value_and_grad(loss)."""
  text = _cuda_text(jax.value_and_grad(loss, (0, 1)), xs, ws)
  found = []
  for target in ("forward", "backward_data", "backward_filter"):
    calls = [l for l in text.splitlines() if f"custom_call @jax_im2col_conv_{target}(" in l]
    assert len(calls) == 1, calls
    found.append(int(calls[0].split("algorithm = ")[1].split(" ")[0]))
  return tuple(found)


def test_packed_groups_plan(monkeypatch):
  """The CUDA lowering on Hopper packs small groups (algorithm 3) for the
  forward and the input gradient (one pass per phase when strided), with pack
  times the filter in its workspace, and for the filter gradient of half
  types where groups are small enough for the grouped direct kernel, with
  pack times its float32 parts; never beyond 8 groups a pack or at HIGHEST."""
  monkeypatch.setattr(lowering_cuda, "device_caps", lambda platform: HOPPER)

  def plan(groups, c=64, o=64, precision=None, strides=(1, 1), dtype=jnp.float32):
    xs = jax.ShapeDtypeStruct((4, c, 12, 12), dtype)
    ws = jax.ShapeDtypeStruct((o, c // groups, 3, 3), dtype)
    loss = lambda x, w: jnp.sum(conv(x, w, window_strides=strides, padding="SAME",
                                     feature_group_count=groups, precision=precision) ** 2)
    return _gradient_algorithms(loss, xs, ws)

  assert plan(8) == (3, 3, 1)                          # 8 x 8 channels: one pack
  assert plan(8, dtype=jnp.bfloat16) == (3, 3, 3)      # half types: the filter gradient too
  assert plan(2, c=64, o=32) == (3, 2, 2)              # 32 in (2 a pack), 16 out (4: 2 groups)
  assert plan(2, c=64, o=32, dtype=jnp.bfloat16) == (3, 2, 2)  # 32 per group: not packed
  assert plan(4, c=64, o=32, dtype=jnp.bfloat16) == (3, 1, 3)  # 16 in (4 a pack), 8 out (8: 4 groups)
  assert plan(16, dtype=jnp.bfloat16) == (1, 1, 1)     # 16 a pack: direct kernels
  assert plan(8, strides=(2, 2)) == (3, 3, 1)          # the input gradient's 4 phases, packed
  assert plan(8, precision=HIGHEST) == (1, 1, 1)       # full float32: direct kernels
  assert plan(16) == (1, 1, 1)                         # 4 channels per group: 16 a pack
  assert plan(6, c=48, o=48) == (1, 1, 1)              # 8 x 6 groups: 6 is no multiple of 8
  assert plan(1) == (2, 2, 2)                          # no groups: the implicit GEMM
  x = jax.ShapeDtypeStruct((4, 64, 12, 12), jnp.float32)
  w = jax.ShapeDtypeStruct((64, 8, 3, 3), jnp.float32)
  text = _cuda_text(lambda x, w: conv(x, w, (1, 1), "SAME", feature_group_count=8), x, w)
  call = [l for l in text.splitlines() if "custom_call @jax_im2col_conv_forward(" in l][0]
  workspace = int(call.split("tensor<")[-1].split("xui8>")[0])
  # The block-diagonal filter (8 times 64 x 8 x 9), the four images made
  # channels-last, and float32 partial sums of a reduction split in 2 (the
  # packed group's 576 x 64 outputs fill 9 of 132 multiprocessors).
  filter_bytes, image_bytes, partial_bytes = 8 * 64 * 8 * 9 * 4, 4 * 64 * 144 * 4, 2 * 576 * 64 * 4
  assert "chunk_positions = 2 " in call
  assert workspace == filter_bytes + image_bytes + partial_bytes
  # The packed filter gradient's workspace: x and dy made channels-last, and
  # each part's whole 64 x (9 x 64) block, 8 times the filter's 64 x 8 x 9.
  x, w = (jax.ShapeDtypeStruct(a.shape, jnp.bfloat16) for a in (x, w))
  text = _cuda_text(jax.grad(lambda w, x: jnp.sum(conv(x, w, (1, 1), "SAME", feature_group_count=8)
                                                  .astype(jnp.float32))), w, x)
  call = [l for l in text.splitlines() if "custom_call @jax_im2col_conv_backward_filter(" in l][0]
  workspace = int(call.split("tensor<")[-1].split("xui8>")[0])
  splits = int(call.split("chunk_positions = ")[1].split(" ")[0])
  assert "algorithm = 3 " in call and splits > 1
  assert workspace == 2 * (4 * 64 * 144 * 2) + splits * 64 * 9 * 64 * 4


def test_hopper_routing():
  """On Hopper the implicit GEMM takes every convolution it applies to except
  channels-last ones over 256 channels per group whose 128 x 64 output tiles
  do not fill the GPU once (r50_3x3_c512: 1568 positions x 512 channels, 104
  tiles on 132 multiprocessors); the Ampere rule stops at 128 channels."""
  def implicit(layout, channels, images, hopper):
    device = HOPPER if hopper else AMPERE
    case = dict(groups=1, spatial=(7, 7), kernel=(3, 3), strides=(1, 1), padding="SAME",
                rhs_dilation=(1, 1))
    spec = _implicit_spec(case, layout)
    return applicability.use_implicit(spec, np.float32, channels, channels, 49, device, images=images)

  assert not implicit("cl", 512, 32, hopper=True)   # 104 tiles
  assert implicit("cl", 512, 64, hopper=True)       # 200 tiles
  assert implicit("cf", 512, 32, hopper=True)       # cuBLAS's GEMM is slow channels-first
  assert implicit("cl", 256, 32, hopper=True)
  assert not implicit("cl", 256, 64, hopper=False)  # the mma.sync kernel: up to 128
  assert implicit("cl", 128, 64, hopper=False)
  # A strided input gradient launches every phase's tiles at once: ConvNeXt-T's last 2x2
  # stride-2 downsampling (768 -> 384 channels onto 14x14) has 4 phases of 7x7 positions,
  # 312 tiles for 32 images (78 a phase). Its implicit GEMM took 50.2 us against cuBLAS's
  # 83.0 (XLA's 56.1) in float32, 49.2 against 62.1 (55.4) in bfloat16 (H200, 2026-11-29,
  # benchmarks/routing.py --algorithms gemm,implicit).
  case = dict(groups=1, spatial=(14, 14), kernel=(2, 2), strides=(2, 2), padding="VALID",
              rhs_dilation=(1, 1))
  spec = _implicit_spec(case, "cl")
  positions, _, passes = applicability.implicit_pass_extent(spec, (14, 14), input_gradient=True)
  assert (positions, passes) == (49, 4)
  for dtype in (np.float32, jnp.bfloat16):
    assert applicability.use_implicit(spec, dtype, 384, 768, positions, HOPPER, input_gradient=True,
                                      images=32, passes=passes)
    assert not applicability.use_implicit(spec, dtype, 384, 768, positions, HOPPER,
                                          input_gradient=True, images=8, passes=passes)


def test_implicit_filter_positions_per_call(monkeypatch):
  """The implicit filter gradient's kernel takes at most _FILTER_MAX_POSITIONS
  positions per call: channels-last operands go in one call (past the limit,
  im2col + GEMM), channels-first ones in chunks of images that fit it."""
  monkeypatch.setattr(applicability, "FILTER_MAX_POSITIONS", 1000)

  def filter_call(layout):
    cl = layout == "cl"
    specs = ("NHWC", "HWIO", "NHWC") if cl else ("NCHW", "OIHW", "NCHW")
    xs = jax.ShapeDtypeStruct((4, 20, 20, 64) if cl else (4, 64, 20, 20), jnp.bfloat16)
    ws = jax.ShapeDtypeStruct((3, 3, 64, 32) if cl else (32, 64, 3, 3), jnp.bfloat16)
    grad = jax.grad(lambda w, x: jnp.sum(conv(x, w, (1, 1), "SAME", dimension_numbers=specs)))
    text = _cuda_text(grad, ws, xs)
    call = [l for l in text.splitlines() if "custom_call @jax_im2col_conv_backward_filter(" in l][0]
    return int(call.split("algorithm = ")[1].split(" ")[0]), _chunk_attrs(text, "jax_im2col_conv_backward_filter")[0]

  assert filter_call("cl") == (0, 4)  # 4 x 400 positions in one call: over 1000, im2col + GEMM
  assert filter_call("cf") == (2, 2)  # 2 images of 400 positions a call


# Channels-first filter gradients past the implicit filter gradient's 128
# output channels: im2col + cuBLAS on channels-last copies (algorithm 4).
WIDE_FILTER_CASES = {
    "2d": dict(n=3, c=64, spatial=(9, 10), o=136, kernel=(3, 3), strides=(1, 1),
               padding=((1, 1), (1, 1)), rhs_dilation=(1, 1), groups=1),
    "1d-dilated": dict(n=2, c=32, spatial=(50,), o=144, kernel=(5,), strides=(1,),
                       padding=((4, 3),), rhs_dilation=(2,), groups=1),
    "3d-strided-groups": dict(n=2, c=32, spatial=(5, 7, 6), o=272, kernel=(3, 3, 3),
                              strides=(1, 2, 1), padding=((1, 1), (0, 2), (1, 0)),
                              rhs_dilation=(1, 1, 1), groups=2),
    # 125 taps: dw reordered in tiles of 64 taps.
    "3d-125-taps": dict(n=2, c=16, spatial=(6, 5, 6), o=136, kernel=(5, 5, 5), strides=(1, 1, 1),
                        padding=((2, 2),) * 3, rhs_dilation=(1, 1, 1), groups=1),
}


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("limit", [None, 1], ids=["default-cap", "one-image-a-chunk"])
@pytest.mark.parametrize("name", list(WIDE_FILTER_CASES))
def test_wide_filter_gradient_against_float64(platform, dtype, limit, name):
  """The filter gradient of channels-first calls that take algorithm 4 on the
  GPU, in one chunk and one image a chunk, against float64, within the
  output's rounding."""
  cfg = implicit_config(name, "cf", WIDE_FILTER_CASES)
  dtype = np.dtype(dtype)
  case = WIDE_FILTER_CASES[name]
  item = dtype.itemsize
  # One image's copies and columns fit; two do not.
  out = [len(range(0, n + lo + hi - r * (k - 1), s)) for n, k, s, r, (lo, hi) in zip(
      case["spatial"], case["kernel"], case["strides"], case["rhs_dilation"], case["padding"])]
  one_image = item * (int(np.prod(out)) * (case["c"] * int(np.prod(case["kernel"])) + case["o"])
                      + case["c"] * int(np.prod(case["spatial"])))
  cap = jax_im2col.workspace_limit(one_image) if limit else contextlib.nullcontext()
  kw = cfg["kwargs"]
  x, w = operands(cfg, 11, dtype)
  ct_shape = jax.eval_shape(lambda x, w: lax.conv_general_dilated(x, w, **kw), x, w).shape
  ct = jnp.asarray(np.random.default_rng(12).standard_normal(ct_shape), dtype)
  with cap:
    grad = lambda x, w, ct: jax.vjp(lambda w: conv(x, w, **kw), w)[1](ct)[0]
    text = _cuda_text(grad, x, w, ct)
    with on_platform(platform):
      dw = jax.jit(grad)(x, w, ct)
  line = [l for l in text.splitlines() if "custom_call @jax_im2col_conv_backward_filter(" in l][0]
  assert "algorithm = 4 " in line
  assert (f"chunk_images = {1 if limit else case['n']} ") in line
  exact = on_cpu(lambda x, w, ct: jax.vjp(lambda w: lax.conv_general_dilated(x, w, **kw), w)[1](ct)[0],
                 *(np.asarray(a, np.float64) for a in (x, w, ct)))
  assert_close(dw, exact.astype(np.float32), UNIT_ROUNDOFF[dtype], dtype=dtype)


# Channels-first 1x1 filter gradients: one GEMM per image (algorithm 5).
PER_IMAGE_CASES = {
    "1x1": dict(n=5, c=64, spatial=(32, 33), o=48, kernel=(1, 1), strides=(1, 1),
                padding=((0, 0), (0, 0)), rhs_dilation=(1, 1), groups=1),
    "1x1-groups-1d": dict(n=3, c=32, spatial=(1500,), o=64, kernel=(1,), strides=(1,),
                          padding=((0, 0),), rhs_dilation=(1,), groups=2),
    "1x1-3d": dict(n=2, c=24, spatial=(8, 12, 11), o=40, kernel=(1, 1, 1), strides=(1, 1, 1),
                   padding=((0, 0),) * 3, rhs_dilation=(2, 1, 1), groups=1),
}


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype,precision", [(np.float32, HIGHEST), (np.float32, None),
                                             (jnp.bfloat16, None), (np.float16, None)],
                         ids=["float32-highest", "float32", "bfloat16", "float16"])
@pytest.mark.parametrize("limit", [None, 2], ids=["default-cap", "two-slots"])
@pytest.mark.parametrize("name", list(PER_IMAGE_CASES))
def test_per_image_filter_gradient_against_float64(platform, dtype, precision, limit, name):
  """The filter gradient of channels-first 1x1 windows, one GEMM per image
  into float32 slots summed in order (algorithm 5 on the GPU), with a slot
  per image and with two slots for 3 or 5 images, against float64: float32
  within float32's error at HIGHEST and TF32's at DEFAULT on the GPU, half
  types within their output's rounding."""
  cfg = implicit_config(name, "cf", PER_IMAGE_CASES)
  case = PER_IMAGE_CASES[name]
  dtype = np.dtype(dtype)
  kw = dict(cfg["kwargs"], precision=precision)
  per_slot = case["o"] * case["c"] // case["groups"] * 4
  cap = jax_im2col.workspace_limit(2 * per_slot) if limit else contextlib.nullcontext()
  x, w = operands(cfg, 21, dtype)
  ct_shape = jax.eval_shape(lambda x, w: lax.conv_general_dilated(x, w, **cfg["kwargs"]), x, w).shape
  ct = jnp.asarray(np.random.default_rng(22).standard_normal(ct_shape), dtype)
  grad = lambda x, w, ct: jax.vjp(lambda w: conv(x, w, **kw), w)[1](ct)[0]
  with cap:
    text = _cuda_text(grad, x, w, ct)
    with on_platform(platform):
      dw = jax.jit(grad)(x, w, ct)
  line = [l for l in text.splitlines() if "custom_call @jax_im2col_conv_backward_filter(" in l][0]
  assert "algorithm = 5 " in line and f"chunk_images = {2 if limit else case['n']} " in line
  exact = on_cpu(lambda x, w, ct: jax.vjp(lambda w: lax.conv_general_dilated(x, w, **cfg["kwargs"]),
                                           w)[1](ct)[0],
                 *(np.asarray(a, np.float64) for a in (x, w, ct)))
  if dtype == np.float32:
    tf32 = platform == "gpu" and precision is None
    assert_close(dw, exact.astype(np.float32), 2.0 ** -9 if tf32 else 1e-5)
  else:
    assert_close(dw, exact.astype(np.float32), UNIT_ROUNDOFF[dtype], dtype=dtype)


def test_per_image_filter_gradient_plan():
  """Which filter gradients take algorithm 5 (channels-first 1x1 windows of
  float32 or half types with at least 1024 positions per image), with how
  many slots, and its workspace: cuBLAS's, its pointers, the slots."""

  def call(x, w, specs=None, dtype=jnp.float32, limit=1 << 28, groups=1):
    xs, ws = jax.ShapeDtypeStruct(x, dtype), jax.ShapeDtypeStruct(w, dtype)
    strides = (1,) * (len(x) - 2)
    grad = jax.grad(lambda w, x: jnp.sum(conv(x, w, strides, "VALID", dimension_numbers=specs,
                                              feature_group_count=groups).astype(jnp.float32)))
    with jax_im2col.workspace_limit(limit):
      text = _cuda_text(grad, ws, xs)
    line = [l for l in text.splitlines() if "custom_call @jax_im2col_conv_backward_filter(" in l][0]
    get = lambda key: int(line.split(f"{key} = ")[1].split(" ")[0])
    return get("algorithm"), get("chunk_images"), int(line.split("tensor<")[-1].split("xui8>")[0])

  align = lambda n: -(-n // 256) * 256
  slots_bytes = lambda slots, groups, o, cg: (align(32 << 20) + align(3 * slots * groups * 8)
                                              + align(slots * o * cg * 4))
  assert call((6, 256, 32, 32), (64, 256, 1, 1)) == (5, 6, slots_bytes(6, 1, 64, 256))
  assert call((6, 256, 32, 32), (64, 256, 1, 1), dtype=jnp.bfloat16)[:2] == (5, 6)
  assert call((6, 256, 32, 32), (64, 32, 1, 1), groups=8) == (5, 6, slots_bytes(6, 8, 64, 32))
  assert call((6, 256, 32, 32), (64, 256, 1, 1), limit=3 * 64 * 256 * 4)[:2] == (5, 3)
  assert call((6, 256, 32, 32), (64, 256, 1, 1), limit=1)[:2] == (5, 1)  # one slot at least
  assert call((6, 256, 31, 32), (64, 256, 1, 1))[0] == 0          # 992 positions: rows
  assert call((6, 256, 32, 32), (64, 256, 1, 1), dtype=jnp.float64)[0] == 0
  cl = ("NHWC", "HWIO", "NHWC")
  assert call((6, 32, 32, 256), (1, 1, 256, 64), specs=cl)[0] == 0  # one GEMM already


def test_channels_last_filter_gradient_plan():
  """The channels-first filter gradient of half types on im2col + cuBLAS
  runs on channels-last copies of x and dy (algorithm 4) where its columns
  are at least 3 times x, in chunks of whole images whose copies are in its
  workspace; float32, 1x1 windows, strided windows with few taps,
  channels-last calls and images whose copies and columns exceed the cap keep
  algorithm 0."""

  def call(x, w, strides=(1, 1), specs=None, dtype=jnp.bfloat16, limit=1 << 28):
    xs, ws = jax.ShapeDtypeStruct(x, dtype), jax.ShapeDtypeStruct(w, dtype)
    grad = jax.grad(lambda w, x: jnp.sum(conv(x, w, strides, "SAME", dimension_numbers=specs)
                                         .astype(jnp.float32)))
    with jax_im2col.workspace_limit(limit):
      text = _cuda_text(grad, ws, xs)
    line = [l for l in text.splitlines() if "custom_call @jax_im2col_conv_backward_filter(" in l][0]
    get = lambda key: int(line.split(f"{key} = ")[1].split(" ")[0])
    return (get("algorithm"), get("chunk_images"), get("chunk_positions"),
            int(line.split("tensor<")[-1].split("xui8>")[0]))

  align = lambda n: -(-n // 256) * 256
  blas = align(32 << 20)

  def expected(images, c, o, k, positions, in_positions, item=2):
    return (blas + align(3 * images * 8) + align(images * positions * c * k * item)
            + align(images * positions * o * item) + align(images * c * in_positions * item)
            + align(o * c * k * 4))  # dw as float32 in the channels-last order

  # 3x3 over 14 x 14, 256 -> 160 channels (past the implicit filter
  # gradient's 128): columns 9 times x; all 6 images under the default cap.
  assert call((6, 256, 14, 14), (160, 256, 3, 3)) == (4, 6, 196, expected(6, 256, 160, 9, 196, 196))
  assert call((6, 256, 14, 14), (160, 256, 3, 3), dtype=jnp.float16)[0] == 4
  assert call((6, 256, 14, 14), (160, 256, 3, 3), dtype=jnp.float32)[0] == 0
  # A cap of two images' copies and columns: chunks of 2.
  two = 2 * (196 * (256 * 9 + 160) + 256 * 196) * 2
  assert call((6, 256, 14, 14), (160, 256, 3, 3), limit=two)[:3] == (4, 2, 196)
  # Below one image: the channels-first path in chunks of positions.
  assert call((6, 256, 14, 14), (160, 256, 3, 3), limit=two // 4)[:2] == (0, 1)
  assert call((6, 256, 14, 14), (160, 256, 1, 1))[0] == 0          # 1x1: columns are x
  assert call((6, 20, 14, 14), (160, 20, 3, 3))[0] == 0            # 20 channels: 2.5 vectors
  assert call((6, 256, 40), (160, 256, 3), strides=(2,))[0] == 0   # 1.5 times x
  cl = ("NHWC", "HWIO", "NHWC")
  assert call((6, 14, 14, 256), (3, 3, 256, 160), specs=cl)[0] == 0  # already channels-last


def test_implicit_gemm_algorithm_choice():
  """Which calls the CUDA lowering sends to the implicit GEMM (algorithm 2),
  and its chunks of channels-first images under the workspace cap."""
  x = jax.ShapeDtypeStruct((4, 64, 20, 20), jnp.float32)
  w = jax.ShapeDtypeStruct((32, 64, 3, 3), jnp.float32)

  def algorithms(precision=None, strides=(1, 1), dtype=jnp.float32, xc=64):
    xs = jax.ShapeDtypeStruct((4, xc, 20, 20), dtype)
    ws = jax.ShapeDtypeStruct((32, xc, 3, 3), dtype)
    loss = lambda x, w: jnp.sum(conv(x, w, window_strides=strides, padding="SAME",
                                     precision=precision) ** 2)
    return _gradient_algorithms(loss, xs, ws)

  assert algorithms() == (2, 2, 2)                          # TF32
  assert algorithms(dtype=jnp.bfloat16) == (2, 2, 2)
  assert algorithms(precision=HIGHEST) == (0, 0, 0)         # full float32: cuBLAS
  assert algorithms(strides=(2, 2)) == (2, 2, 2)            # the input gradient's 4 phases
  assert algorithms(strides=(2, 2), xc=16) == (2, 0, 2)     # 16 channels of dx: tiles idle
  # A transposed conv is the strided window's input gradient (4 phases of 32
  # channels); its gradients that window's forward and filter gradient.
  transposed = lambda x, w: jnp.sum(conv(x, w, (1, 1), ((1, 1), (1, 1)), lhs_dilation=(2, 2)) ** 2)
  assert _gradient_algorithms(transposed, x, w) == (2, 2, 2)
  strided_transposed = lambda x, w: jnp.sum(conv(x, w, (2, 1), ((1, 1), (1, 1)), lhs_dilation=(2, 2)) ** 2)
  assert _gradient_algorithms(strided_transposed, x, w) == (0, 0, 0)  # lhs dilation and stride: im2col
  assert algorithms(xc=6) == (0, 2, 0)                      # 6 channels: no whole vectors of x
  assert algorithms(dtype=jnp.float16, xc=12) == (0, 2, 0)  # 12 half channels: 1.5 vectors
  # The filter gradient: im2col + cuBLAS past 128 output channels per group
  # (on channels-last copies: algorithm 4).
  for o, expected in ((128, 2), (136, 4)):
    xs, ws = jax.ShapeDtypeStruct((2, 64, 9, 9), jnp.bfloat16), jax.ShapeDtypeStruct((o, 64, 3, 3), jnp.bfloat16)
    loss = lambda x, w: jnp.sum(conv(x, w, window_strides=(1, 1), padding="SAME"))
    assert _gradient_algorithms(loss, xs, ws)[2] == expected
  # One image made channels-last at a time once the cap is below a batch.
  loss = lambda x, w: conv(x, w, window_strides=(1, 1), padding="SAME")
  assert _chunk_attrs(_cuda_text(loss, x, w), "jax_im2col_conv_forward")[0] == 4
  with jax_im2col.workspace_limit(64 * 400 * 4):
    assert _chunk_attrs(_cuda_text(loss, x, w), "jax_im2col_conv_forward")[0] == 1
  # The filter gradient: its 32 x 576 outputs are 5 tiles, so the 1600
  # positions of the 4 images split into 6 parts of at least 8 k-tiles of 32
  # positions; under a cap below one image's x and dy, one image at a time
  # (400 positions: one part).
  grad = jax.value_and_grad(lambda x, w: jnp.sum(loss(x, w) ** 2), (0, 1))
  assert _chunk_attrs(_cuda_text(grad, x, w), "jax_im2col_conv_backward_filter") == (4, 6)
  with jax_im2col.workspace_limit(64 * 400 * 4):
    assert _chunk_attrs(_cuda_text(grad, x, w), "jax_im2col_conv_backward_filter") == (1, 1)
  assert workspace.implicit_filter_splits(m=100352, og=64, kg=576, o=64, groups=1, limit=1 << 30,
                                          multiprocessors=132) == 80  # 3 x 132 blocks
  assert workspace.implicit_filter_splits(m=100352, og=64, kg=576, o=64, groups=1,
                                          limit=10 * 64 * 576 * 4,
                                          multiprocessors=132) == 10  # the cap
  # A split reduction (chunk_positions) where the outputs are few.
  xs = jax.ShapeDtypeStruct((2, 128, 7, 7), jnp.float32)
  ws = jax.ShapeDtypeStruct((72, 128, 3, 3), jnp.float32)
  text = _cuda_text(jax.value_and_grad(lambda x, w: jnp.sum(loss(x, w) ** 2), (0, 1)), xs, ws)
  assert _chunk_attrs(text, "jax_im2col_conv_forward") == (2, 4)
  assert _chunk_attrs(text, "jax_im2col_conv_backward_data") == (2, 2)
  # A strided input gradient splits by its largest phase: 4 x 4 positions, 3 x 3
  # of the 5 x 5 taps (36 k-tiles: 4 parts).
  xs = jax.ShapeDtypeStruct((1, 64, 8, 8), jnp.float32)
  ws = jax.ShapeDtypeStruct((128, 64, 5, 5), jnp.float32)
  strided = lambda x, w: conv(x, w, window_strides=(2, 2), padding=((2, 2), (2, 2)))
  text = _cuda_text(jax.value_and_grad(lambda x, w: jnp.sum(strided(x, w) ** 2), (0, 1)), xs, ws)
  assert _chunk_attrs(text, "jax_im2col_conv_backward_data") == (1, 4)
  # Where im2col + cuBLAS is faster: 256 channels per group, but for
  # channels-first half types with few positions per image.
  x256 = jax.ShapeDtypeStruct((2, 256, 14, 14), jnp.float32)
  w256 = jax.ShapeDtypeStruct((256, 256, 3, 3), jnp.float32)
  assert "algorithm = 0" in _cuda_text(loss, x256, w256)
  half = lambda v: jax.ShapeDtypeStruct(v.shape, jnp.bfloat16)
  assert "algorithm = 2" in _cuda_text(loss, half(x256), half(w256))
  big = jax.ShapeDtypeStruct((2, 256, 64, 64), jnp.bfloat16)
  assert "algorithm = 0" in _cuda_text(loss, big, half(w256))
  assert workspace.implicit_splits(m=98, og=72, o=72, groups=1, reduction_bytes=9216,
                                   limit=8 * 98 * 72 * 4 - 1,
                                   multiprocessors=132) == 7  # under the cap


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
def test_implicit_gemm_image_chunks(platform, dtype):
  """Channels-first images made channels-last one or two at a time (the
  last chunk partial) give the result of the whole batch at once: the
  forward, and the filter gradient, whose chunks add to its partial sums."""
  cfg = implicit_config("2d-3x3", "cf")
  cfg["lhs_shape"] = (5, *cfg["lhs_shape"][1:])
  x, w = operands(cfg, 8, dtype)
  kw = cfg["kwargs"]
  item = np.dtype(dtype).itemsize
  per_image = int(np.prod(x.shape[1:])) * item
  dy_image = 24 * int(np.prod(x.shape[2:])) * item  # "SAME": as many positions
  ct = jnp.asarray(np.random.default_rng(9).standard_normal((5, 24, *x.shape[2:])), dtype)

  def forward_and_filter_gradient(x, w):
    y, vjp = jax.vjp(lambda w: conv(x, w, **kw), w)
    return y, vjp(ct)[0]

  with on_platform(platform):
    whole = jax.jit(forward_and_filter_gradient)(x, w)
    for images in (1, 2):
      with jax_im2col.workspace_limit(images * (per_image + dy_image)):
        text = _cuda_text(forward_and_filter_gradient, x, w)
        assert _chunk_attrs(text, "jax_im2col_conv_backward_filter")[0] == images
        y, dw = jax.jit(forward_and_filter_gradient)(x, w)
        assert_close(y, whole[0], 1e-6)
        assert_close(dw, whole[1], 1e-6 if dtype == np.float32 else 2.0 ** -8)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("padding", ["SAME", "SAME_LOWER", "VALID"])
def test_string_paddings(platform, padding):
  """String paddings where the total padding is odd (SAME and SAME_LOWER then
  differ) and where the stride leaves a remainder, per dimension."""
  # (H, W) spatial, (kH, kW) kernel, strides, rhs dilation
  cases = [((7, 8), (2, 4), (1, 1), (1, 1)), ((8, 7), (3, 2), (2, 3), (2, 1)),
           ((5, 9), (4, 3), (3, 2), (1, 3))]
  with on_platform(platform):
    for spatial, kernel, strides, rhs_dil in cases:
      cfg = dict(lhs_shape=(2, 3, *spatial), rhs_shape=(4, 3, *kernel),
                 kwargs=dict(window_strides=strides, padding=padding, rhs_dilation=rhs_dil))
      check_against_lax(cfg, 5, np.float64)


# --- 2. precision and preferred_element_type ----------------------------------------

BASIC = dict(window_strides=(1, 2), padding="SAME", rhs_dilation=(2, 1), feature_group_count=2)


def basic_operands(dtype, seed=0):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.standard_normal((2, 4, 7, 9)).astype(np.float32), dtype)
  w = jnp.asarray(rng.standard_normal((6, 2, 3, 2)).astype(np.float32), dtype)
  return x, w


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("precision", [
    HIGHEST, "highest", ("highest", "default"), ("highest", "highest"), "float32",
    (HIGHEST, HIGHEST), lax.Precision.HIGH,
], ids=str)
def test_precision_forms_float32(platform, precision):
  with on_platform(platform):
    x, w = basic_operands(np.float32)
    ours = conv(x, w, precision=precision, **BASIC)
    ref = lax.conv_general_dilated(x, w, precision=HIGHEST, **BASIC)
    assert_close(ours, ref, 1e-5)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("precision", [None, lax.Precision.DEFAULT, "default", "fastest",
                                       "bfloat16", "tensorfloat32"], ids=str)
def test_precision_default_forms(platform, precision):
  # DEFAULT may use TF32 on a GPU (10-bit mantissa): ~1e-3 relative there.
  tol = 1e-5 if platform == "cpu" else 5e-3
  with on_platform(platform):
    x, w = basic_operands(np.float32)
    ours = conv(x, w, precision=precision, **BASIC)
    ref = lax.conv_general_dilated(x, w, precision=HIGHEST, **BASIC)
    assert_close(ours, ref, tol)


@pytest.mark.parametrize("precision", ["bogus", "HIGHEST_PLUS", 3, ("highest",),
                                       ("highest", "default", "default"), ("highest", "nope")],
                         ids=str)
def test_invalid_precision_raises(precision):
  x, w = basic_operands(np.float32)
  with pytest.raises(ValueError, match="precision"):
    conv(x, w, precision=precision, **BASIC)


def _cuda_text(fn, *args):
  return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


@pytest.mark.parametrize("precision,level", [
    (None, 0), (lax.Precision.DEFAULT, 0), ("tensorfloat32", 0), ("bfloat16", 0),
    (HIGHEST, 1), ("highest", 1), ("float32", 1), (lax.Precision.HIGH, 1),
    (("highest", "default"), 1), (("default", "highest"), 1), (("default", "default"), 0),
], ids=str)
def test_precision_reaches_the_cuda_kernels(precision, level):
  """The requested precision is what the CUDA calls of the forward and both
  gradients get (DEFAULT would let cuBLAS use TF32)."""
  x, w = basic_operands(np.float32)
  loss = lambda x, w: jnp.sum(conv(x, w, precision=precision, **BASIC) ** 2)
  text = _cuda_text(jax.value_and_grad(loss, (0, 1)), x, w)
  calls = [l for l in text.splitlines() if "stablehlo.custom_call @jax_im2col_conv" in l]
  assert len(calls) == 3
  assert all(f"precision = {level} : i64" in l for l in calls), calls


def test_default_matmul_precision_config_is_honoured():
  x, w = basic_operands(np.float32)
  f = lambda x, w: conv(x, w, **BASIC)
  with jax.default_matmul_precision("float32"):
    assert "precision = 1 : i64" in _cuda_text(f, x, w)
  assert "precision = 0 : i64" in _cuda_text(f, x, w)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16], ids=["bfloat16", "float16"])
def test_preferred_element_type_half_to_float32(platform, dtype):
  with on_platform(platform):
    x, w = basic_operands(dtype)
    ours = conv(x, w, preferred_element_type=np.float32, **BASIC)
    lax_out = lax.conv_general_dilated(x, w, preferred_element_type=np.float32, **BASIC)
    assert ours.dtype == lax_out.dtype == np.float32
    # Products of half values are exact in float32: only the float32 sum rounds.
    ref = lax.conv_general_dilated(x.astype(np.float32), w.astype(np.float32), precision=HIGHEST,
                                   **BASIC)
    assert_close(ours, ref, 1e-5)
    # Without preferred_element_type the result is rounded to the half type.
    plain = conv(x, w, **BASIC)
    assert plain.dtype == np.dtype(dtype)
    assert_close(plain, ref, 2e-2, dtype=np.dtype(dtype))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype,preferred", [
    (np.float32, np.float32), (np.float32, np.float64), (np.float64, np.float64),
    (jnp.bfloat16, jnp.bfloat16), (np.float16, np.float16), (jnp.bfloat16, np.float64),
], ids=str)
def test_preferred_element_type_same_or_wider(platform, dtype, preferred):
  """Semantics as in jax's testConvPreferredElement: the conv of the inputs
  upcast to the preferred type."""
  with on_platform(platform):
    x, w = basic_operands(dtype)
    ours = conv(x, w, preferred_element_type=preferred, precision=HIGHEST, **BASIC)
    lax_out = lax.conv_general_dilated(x, w, preferred_element_type=preferred, precision=HIGHEST,
                                       **BASIC)
    assert ours.dtype == lax_out.dtype == np.dtype(preferred)
    if np.dtype(preferred).itemsize == 2:  # rounded to the half type: lax in float32
      ref = lax.conv_general_dilated(x.astype(np.float32), w.astype(np.float32),
                                     precision=HIGHEST, **BASIC)
      tol = 2e-2
    else:
      ref = lax.conv_general_dilated(x.astype(preferred), w.astype(preferred), precision=HIGHEST,
                                     **BASIC)
      tol = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-5}[np.dtype(preferred)]
    assert_close(ours, ref, tol, dtype=np.dtype(preferred))


# --- 6. jit, empty batches and empty outputs ---------------------------------------

@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("specs", [None, ("NHWC", "HWIO", "NHWC"), ("CHWN", "IOWH", "HNCW")],
                         ids=str)
def test_jit_equals_eager(platform, specs):
  dn = lax.conv_dimension_numbers((1,) * 4, (1,) * 4, specs)
  cfg_kwargs = dict(window_strides=(2, 1), padding=((1, 0), (2, -1)), lhs_dilation=(1, 2),
                    rhs_dilation=(1, 2), dimension_numbers=specs, feature_group_count=3)
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.standard_normal(place(dn.lhs_spec, (3, 6, 8, 5))))
  w = jnp.asarray(rng.standard_normal(place(dn.rhs_spec, (6, 2, 3, 3))))
  with on_platform(platform):
    eager = conv(x, w, **cfg_kwargs)
    jitted = jax.jit(lambda x, w: conv(x, w, **cfg_kwargs))(x, w)
    assert jitted.shape == eager.shape and jitted.dtype == eager.dtype
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=1e-13, atol=1e-13)
    assert_close(eager, lax.conv_general_dilated(x, w, **cfg_kwargs), 1e-10)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("specs", [None, ("NHWC", "HWIO", "NHWC"), ("NHWC", "OIHW", "NCHW")],
                         ids=str)
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_zero_batch(platform, specs, jit):
  dn = lax.conv_dimension_numbers((1,) * 4, (1,) * 4, specs)
  x = jnp.zeros(place(dn.lhs_spec, (0, 4, 6, 5)))
  w = jnp.ones(place(dn.rhs_spec, (6, 2, 3, 2)))
  kw = dict(window_strides=(1, 2), padding="SAME", dimension_numbers=specs,
            feature_group_count=2)
  f = lambda x, w: conv(x, w, **kw)
  with on_platform(platform):
    out = (jax.jit(f) if jit else f)(x, w)
    ref = lax.conv_general_dilated(x, w, **kw)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert 0 in out.shape


@pytest.mark.parametrize("platform", PLATFORMS)
def test_zero_input_channels_give_zeros(platform):
  """C = 0: every output is an empty sum, zero (as lax)."""
  x = jnp.ones((2, 0, 5, 4))
  w = jnp.ones((3, 0, 2, 2))
  with on_platform(platform):
    out = conv(x, w, (1, 1), "VALID")
    ref = lax.conv_general_dilated(x, w, (1, 1), "VALID")
    assert out.shape == ref.shape == (2, 3, 4, 3)
    np.testing.assert_array_equal(np.asarray(out), 0.0)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("case", [
    dict(x=(2, 3, 2, 5), w=(4, 3, 4, 2), pad="VALID", rhs_dil=(1, 1)),
    dict(x=(2, 3, 3, 5), w=(4, 3, 2, 2), pad="VALID", rhs_dil=(3, 1)),
    dict(x=(2, 3, 4, 5), w=(4, 3, 2, 2), pad=((-2, -1), (0, 0)), rhs_dil=(1, 1)),
    dict(x=(2, 3, 0, 5), w=(4, 3, 1, 2), pad="VALID", rhs_dil=(1, 1)),
], ids=["kernel", "dilated-kernel", "negative-padding", "empty-input"])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_empty_output_spatial(platform, case, jit):
  x = jnp.ones(case["x"])
  w = jnp.ones(case["w"])
  f = lambda x, w: conv(x, w, (1, 1), case["pad"], rhs_dilation=case["rhs_dil"])
  with on_platform(platform):
    out = (jax.jit(f) if jit else f)(x, w)
    ref = lax.conv_general_dilated(x, w, (1, 1), case["pad"], rhs_dilation=case["rhs_dil"])
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert out.shape[2] == 0


@pytest.mark.parametrize("platform", PLATFORMS)
def test_empty_input_with_padding_gives_zeros(platform):
  """A 0-size spatial input padded to a non-empty one: the output is all zeros."""
  x = jnp.ones((2, 3, 0, 5))
  w = jnp.ones((4, 3, 2, 2))
  kw = dict(window_strides=(1, 1), padding=((2, 1), (0, 0)))
  with on_platform(platform):
    out = conv(x, w, **kw)
    ref = lax.conv_general_dilated(x, w, **kw)
    assert out.shape == ref.shape == (2, 4, 2, 4)
    np.testing.assert_array_equal(np.asarray(out), 0.0)


# --- 7. workspace cap ---------------------------------------------------------------

def test_default_workspace_limit(monkeypatch):
  monkeypatch.delenv("JAX_IM2COL_WORKSPACE_LIMIT", raising=False)
  assert jax_im2col.get_workspace_limit() == jax_im2col.DEFAULT_WORKSPACE_LIMIT
  with jax_im2col.workspace_limit(4096):
    assert jax_im2col.get_workspace_limit() == 4096
    with jax_im2col.workspace_limit(1 << 20):
      assert jax_im2col.get_workspace_limit() == 1 << 20
    assert jax_im2col.get_workspace_limit() == 4096
  assert jax_im2col.get_workspace_limit() == jax_im2col.DEFAULT_WORKSPACE_LIMIT
  with pytest.raises(RuntimeError):
    with jax_im2col.workspace_limit(123):
      raise RuntimeError
  assert jax_im2col.get_workspace_limit() == jax_im2col.DEFAULT_WORKSPACE_LIMIT
  try:
    jax_im2col.set_workspace_limit(8192)
    assert jax_im2col.get_workspace_limit() == 8192
  finally:
    jax_im2col.set_workspace_limit(None)
  assert jax_im2col.get_workspace_limit() == jax_im2col.DEFAULT_WORKSPACE_LIMIT
  monkeypatch.setenv("JAX_IM2COL_WORKSPACE_LIMIT", "65536")
  assert jax_im2col.get_workspace_limit() == 65536
  with jax_im2col.workspace_limit(1024):
    assert jax_im2col.get_workspace_limit() == 1024


@pytest.mark.parametrize("bad", [0, -1, "x", 1.5, True, None])
def test_invalid_workspace_limit(bad):
  if bad is not None:
    with pytest.raises(ValueError, match="workspace limit"):
      jax_im2col.set_workspace_limit(bad)
  with pytest.raises(ValueError, match="workspace limit"):
    with jax_im2col.workspace_limit(bad):
      pass
  assert jax_im2col.get_workspace_limit() == jax_im2col.DEFAULT_WORKSPACE_LIMIT


def _chunk_attrs(text, target):
  lines = [l for l in text.splitlines() if f"stablehlo.custom_call @{target}(" in l]
  assert len(lines) == 1, lines
  get = lambda key: int(lines[0].split(f"{key} = ")[1].split(" ")[0])
  return get("chunk_images"), get("chunk_positions")


WS_CASES = {
    # N images of which a few fit under the cap: chunks over images, the last
    # one partial.
    "images": dict(x=(5, 3, 6, 7), w=(4, 3, 3, 2), pad="SAME", strides=(1, 1), specs=None,
                   groups=1),
    # One big image whose columns exceed the cap: chunks over output positions
    # on CUDA (one image at a time elsewhere).
    "positions": dict(x=(2, 40, 37, 3), w=(3, 3, 3, 6), pad=((1, 2), (0, 1)), strides=(1, 2),
                      specs=("NHWC", "HWIO", "NHWC"), groups=1),
    "grouped": dict(x=(3, 6, 20, 21), w=(9, 2, 3, 3), pad="SAME", strides=(2, 1), specs=None,
                    groups=3),
    # Chunks of whole rows of positions, channels-first (at the larger cap):
    # the vector fold, adding each chunk to the sums of the ones before.
    "position-rows": dict(x=(2, 4, 24, 8), w=(5, 4, 3, 3), pad="SAME", strides=(1, 1), specs=None,
                          groups=1),
}


def _ws_args(case, seed=0):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.standard_normal(case["x"]))
  w = jnp.asarray(rng.standard_normal(case["w"]))
  kw = dict(window_strides=case["strides"], padding=case["pad"],
            dimension_numbers=case["specs"], feature_group_count=case["groups"])
  return x, w, kw


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", list(WS_CASES))
@pytest.mark.parametrize("limit", [2048, 20000])
def test_workspace_limit_matches_lax(platform, name, limit):
  x, w, kw = _ws_args(WS_CASES[name])
  y_ref, vjp_ref = jax.vjp(lambda x, w: lax.conv_general_dilated(x, w, **kw), x, w)
  ct = jnp.asarray(np.random.default_rng(7).standard_normal(y_ref.shape))
  dx_ref, dw_ref = vjp_ref(ct)
  with on_platform(platform), jax_im2col.workspace_limit(limit):
    y, vjp = jax.vjp(lambda x, w: conv(x, w, **kw), x, w)
    dx, dw = vjp(ct)
    assert_close(y, y_ref, 1e-10)
    assert_close(dx, dx_ref, 1e-10)
    assert_close(dw, dw_ref, 1e-10)
    def fwd_bwd(x, w):
      y, vjp = jax.vjp(lambda x, w: conv(x, w, **kw), x, w)
      return y, vjp(ct)

    jy, (jdx, jdw) = jax.jit(fwd_bwd)(x, w)
    assert_close(jy, y_ref, 1e-10)
    assert_close(jdx, dx_ref, 1e-10)
    assert_close(jdw, dw_ref, 1e-10)


def test_workspace_limit_forces_chunking_in_the_lowering():
  """The cap reaches the lowering: CPU code loops over image chunks, the CUDA
  calls get chunk sizes whose columns fit under the cap. (Each block traces
  fresh functions: see test_changing_the_cap_retraces_jitted_functions.)"""
  case = WS_CASES["images"]
  x, w, kw = _ws_args(case)

  def value_and_grad():
    loss = lambda x, w: jnp.sum(conv(x, w, **kw) ** 2)
    return jax.value_and_grad(loss, (0, 1))

  assert "while" not in jax.jit(value_and_grad()).lower(x, w).as_text()
  text = _cuda_text(value_and_grad(), x, w)
  for target in ("jax_im2col_conv_forward", "jax_im2col_conv_backward_data",
                 "jax_im2col_conv_backward_filter"):
    assert _chunk_attrs(text, target) == (5, 42)  # all images, all positions
  # Columns of one image: C * K * positions * 8 bytes = 3 * 6 * 42 * 8 = 6048.
  with jax_im2col.workspace_limit(2 * 6048 + 100):
    assert "while" in jax.jit(value_and_grad()).lower(x, w).as_text()
    text = _cuda_text(value_and_grad(), x, w)
    assert _chunk_attrs(text, "jax_im2col_conv_forward") == (2, 42)

  x, w, kw = _ws_args(WS_CASES["positions"])
  out_shape = conv(x, w, **kw).shape
  assert out_shape == lax.conv_general_dilated(x, w, **kw).shape == (2, 41, 18, 6)
  positions = 41 * 18
  with jax_im2col.workspace_limit(2048):
    images, chunk = _chunk_attrs(_cuda_text(lambda x, w: conv(x, w, **kw), x, w),
                                 "jax_im2col_conv_forward")
    assert images == 1
    # Each position's columns: C * K * 8 = 3 * 9 * 8 = 216 bytes.
    assert 1 <= chunk < positions and chunk * 216 <= 2048
  images, chunk = _chunk_attrs(_cuda_text(lambda x, w: conv(x, w, **kw), x, w),
                               "jax_im2col_conv_forward")
  assert (images, chunk) == (2, positions)

  # Chunks of 64 positions (C * K * 8 = 288 bytes each), 8 whole rows of 8.
  x, w, kw = _ws_args(WS_CASES["position-rows"])
  with jax_im2col.workspace_limit(20000):
    text = _cuda_text(jax.value_and_grad(lambda x, w: jnp.sum(conv(x, w, **kw) ** 2), (0, 1)), x, w)
    for target in ("jax_im2col_conv_forward", "jax_im2col_conv_backward_data"):
      assert _chunk_attrs(text, target) == (1, 64)


def test_cpu_splits_one_image_into_row_chunks_under_the_cap():
  """On the CPU, an image whose columns exceed the cap is unfolded in chunks of
  output rows (each under the cap), in the forward pass and both gradients."""
  x, w, kw = _ws_args(WS_CASES["positions"])
  row_bytes = 3 * 9 * 18 * 8  # C * K * positions per output row * 8 bytes
  loss = lambda f: (lambda x, w: jnp.sum(jnp.sin(f(x, w, **kw))))
  with jax_im2col.workspace_limit(3 * row_bytes):
    fn = jax.value_and_grad(loss(conv), (0, 1))
    text = jax.jit(fn).lower(x, w).as_text()
    got = jax.jit(fn)(x, w)
  want = jax.value_and_grad(loss(lax.conv_general_dilated), (0, 1))(x, w)
  # 41 output rows in chunks of 3: 14 unfolds for the forward pass, 14 for the
  # filter gradient, 14 folds for the input gradient
  assert text.count("jax_im2col_unfold") >= 2 * 14
  assert text.count("jax_im2col_fold") >= 14
  np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
  for g, r in zip(got[1], want[1]):
    np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)


def test_changing_the_cap_retraces_jitted_functions():
  """_workspace.py: 'The cap is read at trace time and becomes part of the
  traced computation, so changing it retraces.'"""
  x, w, kw = _ws_args(WS_CASES["images"])

  def f(x, w):
    return conv(x, w, **kw)

  assert "while" not in jax.jit(f).lower(x, w).as_text()
  with jax_im2col.workspace_limit(2048):
    assert "while" in jax.jit(lambda x, w: f(x, w)).lower(x, w).as_text()  # fresh: capped
    assert "while" in jax.jit(f).lower(x, w).as_text()  # same function: the old cap


# --- 8. errors ----------------------------------------------------------------------

def _err_args(dtype=np.float32):
  return jnp.ones((2, 4, 6, 6), dtype), jnp.ones((6, 2, 3, 3), dtype)


@pytest.mark.parametrize("args,kwargs,exc,match", [
    # feature groups: C must equal groups * I
    (((2, 4, 6, 6), (6, 3, 3, 3)), dict(feature_group_count=2), ValueError, "feature_group_count"),
    (((2, 4, 6, 6), (6, 3, 3, 3)), dict(feature_group_count=1), ValueError, "feature_group_count"),
    (((2, 5, 6, 6), (6, 2, 3, 3)), dict(feature_group_count=2), ValueError, "feature_group_count"),
    # O not divisible by feature_group_count
    (((2, 4, 6, 6), (5, 2, 3, 3)), dict(feature_group_count=2), ValueError, "feature_group_count"),
    (((2, 4, 6, 6), (6, 2, 3, 3)), dict(feature_group_count=0), ValueError, "feature_group_count"),
    (((2, 4, 6, 6), (6, 2, 3, 3)), dict(feature_group_count=-2), ValueError,
     "feature_group_count"),
    # both group counts
    (((4, 4, 6, 6), (4, 2, 3, 3)), dict(feature_group_count=2, batch_group_count=2), ValueError,
     "batch_group_count"),
    # batch groups must divide N and O
    (((3, 4, 6, 6), (6, 4, 3, 3)), dict(batch_group_count=2), ValueError, "batch_group_count"),
    (((4, 4, 6, 6), (5, 4, 3, 3)), dict(batch_group_count=2), ValueError, "batch_group_count"),
    (((4, 4, 6, 6), (6, 4, 3, 3)), dict(batch_group_count=0), ValueError, "batch_group_count"),
    # non-positive strides and dilations
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(window_strides=(0, 1)), ValueError, "window_strides"),
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(window_strides=(1, -1)), ValueError, "window_strides"),
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(lhs_dilation=(1, 0)), ValueError, "lhs_dilation"),
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(rhs_dilation=(0, 1)), ValueError, "rhs_dilation"),
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(rhs_dilation=-1), ValueError, "rhs_dilation"),
    # wrong number of window entries
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(window_strides=(1, 1, 1)), ValueError, "window_strides"),
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(rhs_dilation=(1,)), ValueError, "rhs_dilation"),
    # padding
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(padding="FULL"), ValueError, "padding"),
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(padding=((1, 1),)), ValueError, "padding"),
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(padding=((1, 1), (1, 1), (1, 1))), ValueError, "padding"),
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(padding="SAME", lhs_dilation=(1, 2)), ValueError,
     "padding"),
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(padding="VALID", lhs_dilation=2), ValueError, "padding"),
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(padding=((-4, -3), (0, 0))), ValueError, "padding"),
    # a preferred_element_type narrower than the inputs, as lax
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(preferred_element_type=jnp.bfloat16), TypeError,
     "preferred_element_type"),
    # ranks
    (((2, 4, 6, 6), (6, 4, 3)), {}, ValueError, "rank"),
    (((2, 4, 6), (6, 4, 3, 3)), {}, ValueError, "rank"),
    (((2, 4), (6, 4)), dict(window_strides=(), padding=()), ValueError, "rank"),
    (((2, 4, 3, 3, 3, 3), (6, 4, 1, 1, 1, 1)), dict(window_strides=(1,) * 4, padding="VALID"),
     ValueError, "rank"),
    # dimension_numbers
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(dimension_numbers=("NCHW", "OIHW")), ValueError,
     "dimension_numbers"),
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(dimension_numbers=("NCH", "OIHW", "NCHW")), ValueError,
     "dimension_numbers"),
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(dimension_numbers=("NCHX", "OIHW", "NCHW")), ValueError,
     "dimension_numbers"),
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(dimension_numbers=("NCHH", "OIHW", "NCHW")), ValueError,
     "dimension_numbers"),
    (((2, 4, 6, 6), (6, 4, 3, 3)), dict(dimension_numbers="NCHW"), ValueError,
     "dimension_numbers"),
], ids=lambda v: str(v) if isinstance(v, str) else None)
def test_argument_errors(args, kwargs, exc, match):
  lhs_shape, rhs_shape = args
  kw = dict(window_strides=(1,) * (len(lhs_shape) - 2), padding="SAME")
  kw.update(kwargs)
  x, w = jnp.ones(lhs_shape, np.float32), jnp.ones(rhs_shape, np.float32)
  with pytest.raises(exc, match=match):
    conv(x, w, **kw)
  with pytest.raises(exc, match=match):  # the same under jit (shapes are static)
    jax.jit(lambda x, w: conv(x, w, **kw))(x, w)


@pytest.mark.parametrize("ldt,rdt,match", [
    (np.int32, np.int32, "lhs"), (np.float32, np.int32, "rhs"), (np.int8, np.float32, "lhs"),
    (np.bool_, np.bool_, "lhs"), (np.complex64, np.complex64, "lhs"),
    (np.float32, np.float64, "same dtype"), (jnp.bfloat16, np.float16, "same dtype"),
    (np.float16, np.float32, "same dtype"),
], ids=str)
def test_dtype_errors(ldt, rdt, match):
  x, w = jnp.ones((2, 4, 6, 6), ldt), jnp.ones((6, 4, 3, 3), rdt)
  with pytest.raises(TypeError, match=match):
    conv(x, w, (1, 1), "SAME")


def test_non_float_preferred_element_type_raises():
  x, w = _err_args()
  with pytest.raises(TypeError, match="preferred_element_type"):
    conv(x, w, (1, 1), "SAME", feature_group_count=2, preferred_element_type=np.int32)


def test_signature_matches_lax():
  import inspect
  ours = inspect.signature(conv)
  theirs = inspect.signature(lax.conv_general_dilated)
  assert list(ours.parameters) == list(theirs.parameters)
  for name, p in theirs.parameters.items():
    assert ours.parameters[name].default == p.default, name


# --- 9. parameter sets from jax's own convolution tests ----------------------------
#
# tests/lax_test.py testConvGeneralDilated: lhs (b*bgc, i*fgc, 9, w), rhs
# (j*fgc*bgc, i, 4, 5), permuted to the layout; testConvWithGeneralPadding and
# testConv: lhs (b, i, 9, 10), rhs (j, i, 4, 5); and layouts of
# testConvGeneralDilatedPatchesNonOverlapping.

JAX_LAYOUTS = [
    (("NCHW", "OIHW", "NCHW"), ([0, 1, 2, 3], [0, 1, 2, 3])),
    (("NHWC", "HWIO", "NHWC"), ([0, 2, 3, 1], [2, 3, 1, 0])),
    (("NCHW", "HWIO", "NHWC"), ([0, 1, 2, 3], [2, 3, 1, 0])),
]

# (batch_group_count, feature_group_count, b, i, j, w, layout, strides, padding,
#  lhs_dilation, rhs_dilation)
JAX_CONV_GENERAL_DILATED = [
    (1, 1, 2, 2, 2, 10, 0, (1, 1), ((1, 2), (2, 0)), (1, 1), (1, 1)),
    (1, 1, 3, 2, 3, 10, 1, (2, 1), ((10, 8), (7, 13)), (1, 2), (1, 4)),
    (2, 1, 2, 3, 2, 10, 0, (1, 1), ((1, 2), (2, 0)), (1, 4), (1, 2)),
    (2, 1, 3, 2, 2, 10, 2, (2, 1), ((10, 8), (7, 13)), (1, 1), (1, 2)),
    (1, 2, 2, 3, 3, 10, 1, (1, 1), ((1, 2), (2, 0)), (1, 2), (1, 1)),
    (1, 2, 3, 3, 2, 10, 2, (2, 1), ((10, 8), (7, 13)), (1, 4), (1, 4)),
    (1, 1, 2, 3, 2, 0, 0, (1, 1), ((1, 2), (2, 0)), (1, 1), (1, 1)),
    (2, 1, 2, 2, 3, 0, 1, (2, 1), ((10, 8), (7, 13)), (1, 2), (1, 2)),
    (1, 2, 3, 2, 2, 0, 2, (1, 1), ((10, 8), (7, 13)), (1, 4), (1, 1)),
    (2, 1, 3, 3, 3, 10, 2, (1, 1), ((1, 2), (2, 0)), (1, 1), (1, 4)),
]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("row", JAX_CONV_GENERAL_DILATED, ids=str)
def test_jax_conv_general_dilated_cases(platform, row):
  bgc, fgc, b, i, j, width, layout, strides, padding, lhs_dil, rhs_dil = row
  specs, (lhs_perm, rhs_perm) = JAX_LAYOUTS[layout]
  lhs_shape = tuple(np.take((b * bgc, i * fgc, 9, width), lhs_perm))
  rhs_shape = tuple(np.take((j * fgc * bgc, i, 4, 5), rhs_perm))
  cfg = dict(lhs_shape=lhs_shape, rhs_shape=rhs_shape,
             kwargs=dict(window_strides=strides, padding=padding, lhs_dilation=lhs_dil,
                         rhs_dilation=rhs_dil, dimension_numbers=specs,
                         feature_group_count=fgc, batch_group_count=bgc))
  with on_platform(platform):
    check_against_lax(cfg, sum(row[:6]), np.float64)
    check_against_lax(cfg, 1, np.float32, precision=HIGHEST)


# (b, i, j, strides, padding, lhs_dilation, rhs_dilation)
JAX_CONV_WITH_GENERAL_PADDING = [
    (1, 3, 2, (1, 2), ((0, 0), (0, 0)), (2, 2), (1, 2)),
    (3, 1, 3, (2, 1), ((1, 2), (2, 0)), (1, 2), (2, 2)),
    (2, 2, 1, (1, 1), ((1, 2), (2, 0)), (2, 2), (2, 2)),
    (2, 3, 3, (1, 2), "SAME_LOWER", (1, 1), (1, 1)),
    (3, 2, 3, (2, 1), "SAME", (1, 1), (1, 1)),
    (2, 2, 2, (1, 1), "VALID", (1, 1), (1, 1)),
]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("row", JAX_CONV_WITH_GENERAL_PADDING, ids=str)
def test_jax_conv_with_general_padding_cases(platform, row):
  b, i, j, strides, padding, lhs_dil, rhs_dil = row
  cfg = dict(lhs_shape=(b, i, 9, 10), rhs_shape=(j, i, 4, 5),
             kwargs=dict(window_strides=strides, padding=padding, lhs_dilation=lhs_dil,
                         rhs_dilation=rhs_dil))
  with on_platform(platform):
    check_against_lax(cfg, b * 7 + i, np.float64)


# (lhs_shape, kernel (in rhs axis order), strides, padding, dimension_numbers)
JAX_PATCHES_LAYOUTS = [
    ((2, 3, 4), (2,), (2,), [(0, 2)], ("CNH", "OHI", "HNC")),
    ((3, 1, 4, 5), (1, 3), (1, 3), [(3, 1), (2, 2)], ("NCHW", "OIHW", "NCHW")),
    ((3, 2, 5, 6), (4, 3), (4, 3), [(5, 2), (2, 4)], None),
    ((1, 2, 3, 4), (1, 1), (1, 1), [(0, 0), (0, 0)], ("NCWH", "OHWI", "CNHW")),
    ((1, 2, 3, 4), (3, 2), (1, 1), [(0, 0), (0, 0)], ("CWHN", "HOWI", "NCHW")),
    ((2, 3, 4, 5, 6), (2, 1, 3), (2, 1, 3), [(1, 2), (5, 3), (3, 5)], ("NHWDC", "HDIWO", "DCWNH")),
]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("row", JAX_PATCHES_LAYOUTS, ids=str)
def test_jax_patches_layout_cases(platform, row):
  lhs_shape, kernel, strides, padding, specs = row
  nd = len(lhs_shape) - 2
  dn = lax.conv_dimension_numbers(lhs_shape, (1,) * (nd + 2), specs)
  c = lhs_shape[dn.lhs_spec[1]]
  # kernel lists the rhs's spatial axes in axis order (as filter_shape does).
  rhs_spatial_axes = sorted(dn.rhs_spec[2:])
  rhs_shape = [0] * (nd + 2)
  rhs_shape[dn.rhs_spec[0]], rhs_shape[dn.rhs_spec[1]] = 3, c
  for axis, k in zip(rhs_spatial_axes, kernel):
    rhs_shape[axis] = k
  cfg = dict(lhs_shape=lhs_shape, rhs_shape=tuple(rhs_shape),
             kwargs=dict(window_strides=strides, padding=padding, dimension_numbers=specs))
  with on_platform(platform):
    check_against_lax(cfg, 3, np.float64)
