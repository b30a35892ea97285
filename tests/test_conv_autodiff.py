"""Derivatives of jax_im2col.conv_general_dilated against lax's: VJP, JVP,
second order, and that no derivative ever reaches XLA's convolution."""

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from jax import lax
from jax.test_util import check_grads

from conftest import PLATFORMS, on_platform
from test_conv import HIGHEST, assert_close, conv, conv_configs, on_cpu, operands

CONV_TARGETS = ("jax_im2col_conv_forward", "jax_im2col_conv_backward_data",
                "jax_im2col_conv_backward_filter")


def _lax(kwargs):
  return lambda x, w: lax.conv_general_dilated(x, w, **kwargs)


def _ours(kwargs):
  return lambda x, w: conv(x, w, **kwargs)


def _randn(shape, seed, dtype=np.float64):
  return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


# The references run on the CPU (on_cpu): see test_conv.on_cpu.
def check_vjp(cfg, seed, tol=1e-10):
  x, w = operands(cfg, seed)
  y, vjp = jax.vjp(_ours(cfg["kwargs"]), x, w)
  ct = _randn(y.shape, seed + 1)

  def reference(x, w, ct):
    y_ref, vjp_ref = jax.vjp(_lax(cfg["kwargs"]), x, w)
    return (y_ref, *vjp_ref(ct))

  for ours, ref in zip((y, *vjp(ct)), on_cpu(reference, x, w, ct)):
    assert_close(ours, ref, tol)


def check_jvp(cfg, seed, tol=1e-10):
  x, w = operands(cfg, seed)
  tx, tw = _randn(x.shape, seed + 1), _randn(w.shape, seed + 2)
  y, ty = jax.jvp(_ours(cfg["kwargs"]), (x, w), (tx, tw))
  y_ref, ty_ref = on_cpu(lambda x, w, tx, tw: jax.jvp(_lax(cfg["kwargs"]), (x, w), (tx, tw)), x, w, tx, tw)
  assert_close(y, y_ref, tol)
  assert_close(ty, ty_ref, tol)


# --- 3. first order on random configurations -----------------------------------------

@pytest.mark.parametrize("platform", PLATFORMS)
@settings(max_examples=40, deadline=None)
@given(cfg=conv_configs(), seed=st.integers(0, 2**30))
def test_random_vjp_float64(platform, cfg, seed):
  with on_platform(platform):
    check_vjp(cfg, seed)


@pytest.mark.parametrize("platform", PLATFORMS)
@settings(max_examples=20, deadline=None)
@given(cfg=conv_configs(), seed=st.integers(0, 2**30))
def test_random_jvp_float64(platform, cfg, seed):
  with on_platform(platform):
    check_jvp(cfg, seed)


@pytest.mark.parametrize("platform", PLATFORMS)
@settings(max_examples=25, deadline=None)
@given(cfg=conv_configs(transposed=True), seed=st.integers(0, 2**30))
def test_random_transposed_vjp_jvp_float64(platform, cfg, seed):
  """Transposed convolutions, whose forward is a strided window's input
  gradient: their gradients are that window's forward and filter gradient."""
  with on_platform(platform):
    check_vjp(cfg, seed)
    check_jvp(cfg, seed)


# A few fixed configurations touching every feature at once.
FIXED = {
    "groups-nchw": dict(lhs_shape=(2, 6, 7, 8), rhs_shape=(9, 2, 3, 2),
                        kwargs=dict(window_strides=(2, 1), padding=((1, 2), (-1, 1)),
                                    lhs_dilation=(1, 2), rhs_dilation=(2, 1),
                                    dimension_numbers=None, feature_group_count=3)),
    "depthwise-nhwc": dict(lhs_shape=(2, 7, 6, 4), rhs_shape=(3, 3, 1, 8),
                           kwargs=dict(window_strides=(1, 2), padding="SAME",
                                       rhs_dilation=(1, 2),
                                       dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                       feature_group_count=4)),
    "batch-groups-mixed": dict(lhs_shape=(4, 5, 6, 3), rhs_shape=(4, 3, 2, 3),
                               kwargs=dict(window_strides=(1, 1), padding="SAME_LOWER",
                                           dimension_numbers=("NHWC", "OIHW", "NCHW"),
                                           batch_group_count=2)),
    "weird-1d": dict(lhs_shape=(2, 9, 3), rhs_shape=(2, 4, 3),
                     kwargs=dict(window_strides=(2,), padding=((2, 1),), lhs_dilation=(2,),
                                 rhs_dilation=(1,), dimension_numbers=("CWN", "IOW", "WNC"))),
    "transposed-3d-groups": dict(lhs_shape=(2, 4, 3, 4, 2), rhs_shape=(6, 2, 3, 2, 3),
                                 kwargs=dict(window_strides=(1, 1, 1), padding=((1, 2), (0, 1), (3, -1)),
                                             lhs_dilation=(2, 2, 3), rhs_dilation=(1, 2, 1),
                                             dimension_numbers=None, feature_group_count=2)),
    "3d-channels-last": dict(lhs_shape=(1, 4, 5, 3, 2), rhs_shape=(2, 2, 2, 2, 3),
                             kwargs=dict(window_strides=(1, 2, 1), padding=((0, 1), (1, 1), (1, 0)),
                                         rhs_dilation=(1, 1, 2),
                                         dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))),
}


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", list(FIXED))
def test_check_grads_second_order(platform, name):
  cfg = FIXED[name]
  x, w = operands(cfg, 3)
  with on_platform(platform):
    check_grads(_ours(cfg["kwargs"]), (x, w), order=2, modes=("fwd", "rev"))
    check_vjp(cfg, 3)
    check_jvp(cfg, 4)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", list(FIXED))
def test_hessian_vector_products(platform, name):
  cfg = FIXED[name]
  x, w = operands(cfg, 5)
  vx, vw = _randn(x.shape, 6), _randn(w.shape, 7)

  def hvp(f):
    loss = lambda x, w: jnp.sum(jnp.sin(f(x, w)))
    return jax.jit(lambda x, w, vx, vw: jax.jvp(jax.grad(loss, (0, 1)), (x, w), (vx, vw)))

  with on_platform(platform):
    (gx, gw), (hx, hw) = hvp(_ours(cfg["kwargs"]))(x, w, vx, vw)
    (gx_ref, gw_ref), (hx_ref, hw_ref) = hvp(_lax(cfg["kwargs"]))(x, w, vx, vw)
    for a, b in ((gx, gx_ref), (gw, gw_ref), (hx, hx_ref), (hw, hw_ref)):
      assert_close(a, b, 1e-10)
    # Reverse-over-reverse gives the same Hessian-vector product.
    loss = lambda x, w: jnp.sum(jnp.sin(conv(x, w, **cfg["kwargs"])))
    inner = lambda x, w: sum(jnp.vdot(g, v) for g, v in zip(jax.grad(loss, (0, 1))(x, w),
                                                             (vx, vw)))
    rx, rw = jax.jit(jax.grad(inner, (0, 1)))(x, w)
    assert_close(rx, hx_ref, 1e-10)
    assert_close(rw, hw_ref, 1e-10)


# (batch_group_count, feature_group_count, b, i, j, lhs spatial, strides, padding,
#  lhs_dilation, rhs_dilation, layout) from jax's testConvGeneralDilatedGrad:
# lhs (b*bgc, i*fgc, *spatial), rhs (j*bgc*fgc, i, 1, 2).
JAX_GRAD_LAYOUTS = [
    (("NCHW", "OIHW", "NCHW"), ([0, 1, 2, 3], [0, 1, 2, 3])),
    (("NHWC", "HWIO", "NHWC"), ([0, 2, 3, 1], [2, 3, 1, 0])),
    (("NHWC", "OIHW", "NCHW"), ([0, 2, 3, 1], [0, 1, 2, 3])),
]
JAX_GRAD_CASES = [
    (1, 1, 2, 2, 2, (6, 7), (1, 2), ((0, 0), (0, 0)), (1, 1), (2, 2), 0),
    (2, 1, 1, 2, 2, (6, 7), (2, 1), ((1, 0), (0, 1)), (2, 1), (1, 1), 1),
    (1, 2, 2, 1, 2, (6, 7), (1, 1), ((0, -1), (0, 0)), (2, 1), (2, 2), 2),
    (1, 2, 1, 2, 1, (0, 4), (1, 2), ((1, 0), (0, 1)), (1, 1), (2, 2), 0),
    (2, 1, 2, 1, 1, (0, 4), (1, 1), ((0, 0), (0, 0)), (2, 1), (1, 1), 1),
    (1, 1, 1, 1, 2, (6, 7), (2, 1), ((0, -1), (0, 0)), (1, 1), (1, 1), 1),
]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("row", JAX_GRAD_CASES, ids=str)
def test_jax_conv_general_dilated_grad_cases(platform, row):
  bgc, fgc, b, i, j, spatial, strides, padding, lhs_dil, rhs_dil, layout = row
  specs, (lhs_perm, rhs_perm) = JAX_GRAD_LAYOUTS[layout]
  cfg = dict(lhs_shape=tuple(np.take((b * bgc, i * fgc, *spatial), lhs_perm)),
             rhs_shape=tuple(np.take((j * bgc * fgc, i, 1, 2), rhs_perm)),
             kwargs=dict(window_strides=strides, padding=padding, lhs_dilation=lhs_dil,
                         rhs_dilation=rhs_dil, dimension_numbers=specs,
                         feature_group_count=fgc, batch_group_count=bgc))
  with on_platform(platform):
    check_vjp(cfg, 11)
    check_jvp(cfg, 12)
    if spatial[0]:
      x, w = operands(cfg, 13)
      check_grads(_ours(cfg["kwargs"]), (x, w), order=2, modes=("fwd", "rev"))


# --- gradients through half types with a float32 result -----------------------------

@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16], ids=["bfloat16", "float16"])
def test_grads_with_preferred_element_type(platform, dtype):
  cfg = FIXED["groups-nchw"]
  kw = dict(cfg["kwargs"], preferred_element_type=np.float32)
  x, w = operands(cfg, 21, dtype)
  ct = _randn(lax.conv_general_dilated(x, w, **kw).shape, 22, np.float32)
  with on_platform(platform):
    y, vjp = jax.vjp(_ours(kw), x, w)
    y_ref, vjp_ref = jax.vjp(_lax(kw), x, w)
    assert y.dtype == y_ref.dtype == np.float32
    dx, dw = vjp(ct)
    dx_ref, dw_ref = vjp_ref(ct)
    assert (dx.dtype, dw.dtype) == (dx_ref.dtype, dw_ref.dtype) == (np.dtype(dtype),) * 2
    # Values: the float32 gradients of the same (rounded) inputs, rounded.
    up = dict(cfg["kwargs"], precision=HIGHEST)
    _, vjp32 = jax.vjp(_lax(up), x.astype(np.float32), w.astype(np.float32))
    dx32, dw32 = vjp32(ct)
    assert_close(dx, dx32, 2e-2, dtype=np.dtype(dtype))
    assert_close(dw, dw32, 2e-2, dtype=np.dtype(dtype))
    # and a scalar loss through jax.grad
    loss = lambda f: (lambda x, w: jnp.sum(f(x, w) ** 2))
    g = jax.grad(loss(_ours(kw)), (0, 1))(x, w)
    g_ref = jax.grad(loss(_lax(kw)), (0, 1))(x, w)
    g32 = jax.grad(loss(_lax(up)), (0, 1))(x.astype(np.float32), w.astype(np.float32))
    for a, b, c in zip(g, g_ref, g32):
      assert a.dtype == b.dtype == np.dtype(dtype)
      assert_close(a, c, 2e-2, dtype=np.dtype(dtype))


@pytest.mark.parametrize("platform", PLATFORMS)
def test_grads_float32_highest(platform):
  cfg = FIXED["depthwise-nhwc"]
  kw = dict(cfg["kwargs"], precision=HIGHEST)
  x, w = operands(cfg, 31, np.float32)
  with on_platform(platform):
    y, vjp = jax.vjp(_ours(kw), x, w)
    y_ref, vjp_ref = jax.vjp(_lax(kw), x, w)
    ct = _randn(y_ref.shape, 32, np.float32)
    for a, b in zip((y, *vjp(ct)), (y_ref, *vjp_ref(ct))):
      assert_close(a, b, 1e-5)


# --- 6. derivatives at empty shapes ----------------------------------------------------

@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("case", [
    dict(x=(0, 4, 6, 5), w=(6, 2, 3, 2), pad="SAME", groups=2),
    dict(x=(2, 4, 2, 5), w=(6, 2, 4, 2), pad="VALID", groups=2),
    dict(x=(2, 4, 0, 5), w=(6, 2, 1, 2), pad=((1, 1), (0, 0)), groups=2),
], ids=["zero-batch", "empty-output", "empty-input"])
def test_grads_at_empty_shapes(platform, case):
  x = _randn(case["x"], 1)
  w = _randn(case["w"], 2)
  kw = dict(window_strides=(1, 1), padding=case["pad"], feature_group_count=case["groups"])
  loss = lambda f: jax.jit(jax.grad(lambda x, w: jnp.sum(f(x, w) ** 2) + jnp.sum(w), (0, 1)))
  with on_platform(platform):
    dx, dw = loss(_ours(kw))(x, w)
    dx_ref, dw_ref = loss(_lax(kw))(x, w)
    assert dx.shape == dx_ref.shape == x.shape
    assert dw.shape == dw_ref.shape == w.shape
    np.testing.assert_array_equal(np.asarray(dx), np.asarray(dx_ref))
    np.testing.assert_array_equal(np.asarray(dw), np.asarray(dw_ref))
    np.testing.assert_array_equal(np.asarray(dw), 1.0)  # the conv contributes nothing


# --- 4. no derivative reaches XLA's convolution ------------------------------------------

G_KW = dict(window_strides=(2, 1), padding=((1, 0), (1, 2)), lhs_dilation=(1, 2),
            rhs_dilation=(2, 1), dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=2)


def _g_args():
  return _randn((2, 7, 6, 4), 1), _randn((2, 3, 2, 6), 2)


def _loss(x, w):
  return jnp.sum(jnp.tanh(conv(x, w, **G_KW)))


def _transforms():
  x, w = _g_args()
  tx, tw = _randn(x.shape, 3), _randn(w.shape, 4)
  return {
      "grad": jax.value_and_grad(_loss, (0, 1)),
      "jvp": lambda x, w: jax.jvp(lambda x, w: conv(x, w, **G_KW), (x, w), (tx, tw)),
      "hvp": lambda x, w: jax.jvp(jax.grad(_loss, (0, 1)), (x, w), (tx, tw)),
      "hessian-w": lambda x, w: jax.hessian(_loss, 1)(x, w),
  }


@pytest.mark.parametrize("name", ["grad", "jvp", "hvp", "hessian-w"])
def test_derivatives_never_use_xla_convolution_cpu(name):
  fn = _transforms()[name]
  x, w = _g_args()
  jaxpr = str(jax.make_jaxpr(fn)(x, w))
  assert "conv_general_dilated" not in jaxpr
  assert "im2col_conv_forward" in jaxpr
  text = jax.jit(fn).lower(x, w).as_text()
  assert "convolution" not in text
  assert "jax_im2col_unfold" in text


@pytest.mark.parametrize("name,targets", [
    ("grad", CONV_TARGETS), ("jvp", CONV_TARGETS[:1]), ("hvp", CONV_TARGETS),
    ("hessian-w", (CONV_TARGETS[0], CONV_TARGETS[2])),
])
def test_derivatives_lower_to_im2col_custom_calls_on_cuda(name, targets):
  """Lowered for CUDA on this (GPU-less) machine: every convolution of the
  derivative is one of the package's three custom calls."""
  fn = _transforms()[name]
  x, w = _g_args()
  text = jax.jit(fn).trace(x, w).lower(lowering_platforms=("cuda",)).as_text()
  assert "convolution" not in text
  for target in CONV_TARGETS:
    assert (f"stablehlo.custom_call @{target}(" in text) == (target in targets), target


def test_grad_lowers_to_one_call_per_operand_on_cuda():
  x, w = _g_args()
  text = jax.jit(jax.value_and_grad(_loss, (0, 1))).trace(x, w).lower(
      lowering_platforms=("cuda",)).as_text()
  for target in CONV_TARGETS:
    assert text.count(f"stablehlo.custom_call @{target}(") == 1, target
