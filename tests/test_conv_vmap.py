"""vmap of jax_im2col.conv_general_dilated and of its derivatives, against a
Python loop of lax results (or lax under the same vmap)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from conftest import PLATFORMS, on_platform
from test_conv import assert_close, conv

TOL = 1e-10

CASES = {
    "nchw": dict(x=(2, 4, 6, 5), w=(6, 2, 3, 2),
                 kw=dict(window_strides=(1, 2), padding="SAME", rhs_dilation=(2, 1),
                         feature_group_count=2)),
    "nhwc": dict(x=(2, 6, 5, 3), w=(2, 3, 3, 4),
                 kw=dict(window_strides=(2, 1), padding=((1, 0), (2, -1)), lhs_dilation=(1, 2),
                         dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    "weird": dict(x=(4, 6, 5, 2), w=(4, 4, 2, 3),
                  kw=dict(window_strides=(1, 1), padding="SAME_LOWER",
                          dimension_numbers=("CHWN", "IOWH", "HNCW"), feature_group_count=1)),
    "batch-groups": dict(x=(4, 3, 5, 5), w=(4, 3, 2, 2),
                         kw=dict(window_strides=(1, 1), padding="VALID", batch_group_count=2)),
    "transposed-nhwc": dict(x=(2, 3, 4, 4), w=(3, 2, 2, 6),
                            kw=dict(window_strides=(1, 1), padding=((2, 1), (1, 2)), lhs_dilation=(2, 3),
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=2)),
    "depthwise-1d": dict(x=(2, 5, 3), w=(3, 1, 6),
                         kw=dict(window_strides=(1,), padding=((1, 1),),
                                 dimension_numbers=("NWC", "WIO", "NWC"), feature_group_count=3)),
}


def _randn(shape, seed):
  return jnp.asarray(np.random.default_rng(seed).standard_normal(shape))


def _batched(shape, b, axis, seed):
  """b random arrays of `shape`, stacked on `axis` (may be negative)."""
  stacked = _randn((b, *shape), seed)
  return jnp.moveaxis(stacked, 0, axis)


def _loop(f, xs, ws, x_axis, w_axis):
  """A Python loop over the mapped axes, stacking results on axis 0."""
  b = xs.shape[x_axis] if x_axis is not None else ws.shape[w_axis]
  take = lambda a, axis, i: a if axis is None else jnp.take(a, i, axis=axis)
  return jnp.stack([f(take(xs, x_axis, i), take(ws, w_axis, i)) for i in range(b)])


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("x_axis,w_axis", [
    (0, None), (1, None), (-1, None),          # images only
    (None, 0), (None, 1), (None, -1),          # per-example weights only
    (0, 0), (1, -1), (-1, 2),                  # both
])
def test_vmap_against_loop(platform, name, x_axis, w_axis):
  case = CASES[name]
  b = 3
  xs = _randn(case["x"], 1) if x_axis is None else _batched(case["x"], b, x_axis, 1)
  ws = _randn(case["w"], 2) if w_axis is None else _batched(case["w"], b, w_axis, 2)
  ours = lambda x, w: conv(x, w, **case["kw"])
  theirs = lambda x, w: lax.conv_general_dilated(x, w, **case["kw"])
  with on_platform(platform):
    out = jax.vmap(ours, in_axes=(x_axis, w_axis))(xs, ws)
    assert_close(out, _loop(theirs, xs, ws, x_axis, w_axis), TOL)
    out_jit = jax.jit(jax.vmap(ours, in_axes=(x_axis, w_axis), out_axes=-1))(xs, ws)
    assert_close(out_jit, jax.vmap(theirs, in_axes=(x_axis, w_axis), out_axes=-1)(xs, ws), TOL)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", ["nchw", "nhwc", "batch-groups"])
def test_nested_vmap(platform, name):
  """Outer map over weights, inner over images (and the reverse nesting)."""
  case = CASES[name]
  xs = _batched(case["x"], 3, 0, 3)
  ws = _batched(case["w"], 2, 0, 4)
  ours = lambda x, w: conv(x, w, **case["kw"])
  theirs = lambda x, w: lax.conv_general_dilated(x, w, **case["kw"])
  ref = jnp.stack([jnp.stack([theirs(xs[i], ws[j]) for i in range(3)]) for j in range(2)])
  with on_platform(platform):
    out = jax.vmap(jax.vmap(ours, in_axes=(0, None)), in_axes=(None, 0))(xs, ws)
    assert_close(out, ref, TOL)
    out = jax.vmap(jax.vmap(ours, in_axes=(None, 0)), in_axes=(0, None))(xs, ws)
    assert_close(out, jnp.swapaxes(ref, 0, 1), TOL)
    # both mapped at both levels
    xs2 = _batched(case["x"], 2, 0, 5)[None].repeat(3, axis=0)  # (3, 2, ...)
    ws2 = _batched(case["w"], 3, 0, 6)[:, None].repeat(2, axis=1)  # (3, 2, ...)
    out = jax.vmap(jax.vmap(ours))(xs2, ws2)
    ref2 = jnp.stack([jnp.stack([theirs(xs2[i, j], ws2[i, j]) for j in range(2)])
                      for i in range(3)])
    assert_close(out, ref2, TOL)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", ["nchw", "nhwc", "depthwise-1d"])
def test_per_example_gradients(platform, name):
  """vmap of grad: per-example weight gradients and per-example input
  gradients with per-example weights."""
  case = CASES[name]
  specs = case["kw"].get("dimension_numbers")
  nd = len(case["x"]) - 2
  dn = lax.conv_dimension_numbers((1,) * (nd + 2), (1,) * (nd + 2), specs)
  n_axis = dn.lhs_spec[0]
  b = 4
  xs = _batched(case["x"], b, 0, 7)
  ws = _batched(case["w"], b, 0, 8)
  w = ws[0]

  def loss(f):
    return lambda x, w: jnp.sum(jnp.sin(f(x, w)))

  ours = loss(lambda x, w: conv(x, w, **case["kw"]))
  theirs = loss(lambda x, w: lax.conv_general_dilated(x, w, **case["kw"]))
  with on_platform(platform):
    # per-example weight gradients
    g = jax.vmap(jax.grad(ours, argnums=1), in_axes=(0, None))(xs, w)
    ref = jnp.stack([jax.grad(theirs, argnums=1)(xs[i], w) for i in range(b)])
    assert_close(g, ref, TOL)
    # their sum is the batch gradient (images concatenated along N)
    batch = jnp.concatenate(list(xs), axis=n_axis)
    assert_close(jnp.sum(g, 0), jax.grad(theirs, argnums=1)(batch, w), TOL)
    # per-example input and weight gradients with per-example weights, jitted
    gx, gw = jax.jit(jax.vmap(jax.grad(ours, argnums=(0, 1))))(xs, ws)
    refs = [jax.grad(theirs, argnums=(0, 1))(xs[i], ws[i]) for i in range(b)]
    assert_close(gx, jnp.stack([r[0] for r in refs]), TOL)
    assert_close(gw, jnp.stack([r[1] for r in refs]), TOL)
    # gradient of a vmapped (per-example weight) loss
    total = lambda f: (lambda xs, ws: jnp.sum(jax.vmap(f)(xs, ws)))
    gx, gw = jax.grad(total(ours), (0, 1))(xs, ws)
    gx_ref, gw_ref = jax.grad(total(theirs), (0, 1))(xs, ws)
    assert_close(gx, gx_ref, TOL)
    assert_close(gw, gw_ref, TOL)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", ["nchw", "weird", "batch-groups"])
def test_jacobians(platform, name):
  """jacfwd / jacrev batch the JVP and VJP: all three primitives under vmap
  with only the tangent or cotangent mapped."""
  case = CASES[name]
  x, w = _randn(case["x"], 9), _randn(case["w"], 10)
  ours = lambda x, w: conv(x, w, **case["kw"])
  theirs = lambda x, w: lax.conv_general_dilated(x, w, **case["kw"])
  with on_platform(platform):
    for jac in (jax.jacfwd, jax.jacrev):
      jx, jw = jac(ours, (0, 1))(x, w)
      jx_ref, jw_ref = jac(theirs, (0, 1))(x, w)
      assert_close(jx, jx_ref, TOL)
      assert_close(jw, jw_ref, TOL)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_vmap_over_empty_batches(platform):
  case = CASES["nchw"]
  ours = lambda x, w: conv(x, w, **case["kw"])
  theirs = lambda x, w: lax.conv_general_dilated(x, w, **case["kw"])
  with on_platform(platform):
    xs = jnp.zeros((3, 0, *case["x"][1:]))  # maps over empty batches
    ws = _batched(case["w"], 3, 0, 1)
    for in_axes in ((0, 0), (0, None)):
      w_arg = ws if in_axes[1] == 0 else ws[0]
      out = jax.vmap(ours, in_axes=in_axes)(xs, w_arg)
      ref = jax.vmap(theirs, in_axes=in_axes)(xs, w_arg)
      assert out.shape == ref.shape and out.dtype == ref.dtype and 0 in out.shape
    # an empty map over images only
    xs = jnp.zeros((0, *case["x"]))
    out = jax.vmap(ours, in_axes=(0, None))(xs, ws[0])
    assert out.shape == jax.vmap(theirs, in_axes=(0, None))(xs, ws[0]).shape


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("in_axes", [(0, 0), (None, 0)], ids=str)
def test_vmap_empty_map_with_mapped_weights(platform, in_axes):
  case = CASES["nchw"]
  ours = lambda x, w: conv(x, w, **case["kw"])
  theirs = lambda x, w: lax.conv_general_dilated(x, w, **case["kw"])
  xs = jnp.zeros((0, *case["x"])) if in_axes[0] == 0 else _randn(case["x"], 1)
  ws = jnp.zeros((0, *case["w"]))
  with on_platform(platform):
    ref = jax.vmap(theirs, in_axes=in_axes)(xs, ws)
    out = jax.vmap(ours, in_axes=in_axes)(xs, ws)
    assert out.shape == ref.shape == (0, 2, 6, 6, 3)


def _cuda_text(fn, *args):
  return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


@pytest.mark.parametrize("in_axes", [(None, 0), (0, None), (0, 0), (1, -1)], ids=str)
@pytest.mark.parametrize("name", ["nchw", "nhwc"])
def test_vmap_lowers_to_one_cuda_call(name, in_axes):
  """Per-example weights (and mapped images) are one grouped custom call,
  not a loop of calls."""
  case = CASES[name]
  x_axis, w_axis = in_axes
  xs = _randn(case["x"], 1) if x_axis is None else _batched(case["x"], 5, x_axis, 1)
  ws = _randn(case["w"], 2) if w_axis is None else _batched(case["w"], 5, w_axis, 2)
  text = _cuda_text(jax.vmap(lambda x, w: conv(x, w, **case["kw"]), in_axes=in_axes), xs, ws)
  assert text.count("stablehlo.custom_call @jax_im2col_conv_forward(") == 1
  assert "while" not in text and "convolution" not in text
  # and per-example gradients are one call of each kind
  loss = lambda x, w: jnp.sum(conv(x, w, **case["kw"]) ** 2)
  text = _cuda_text(jax.vmap(jax.value_and_grad(loss, (0, 1)), in_axes=in_axes), xs, ws)
  for target in ("forward", "backward_data", "backward_filter"):
    assert text.count(f"stablehlo.custom_call @jax_im2col_conv_{target}(") == 1, target
  assert "while" not in text and "convolution" not in text
