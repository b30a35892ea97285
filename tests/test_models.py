"""jax_im2col.conv_general_dilated inside flax (linen and nnx) and equinox
convolution modules, against the same modules with lax's convolution."""

import types
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_im2col
from conftest import PLATFORMS, on_platform
from test_conv import HIGHEST, assert_close

ours_conv = jax_im2col.conv_general_dilated
F32_TOL = 1e-5


def _randn(shape, seed, dtype=np.float32):
  return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), dtype)


def _assert_uses_ours(fn, *args):
  """Ours, not XLA's convolution: the forward primitive, or for transposed
  convolutions the strided window's input gradient."""
  jaxpr = str(jax.make_jaxpr(fn)(*args))
  assert "im2col_conv_forward" in jaxpr or "im2col_conv_backward_data" in jaxpr
  assert "conv_general_dilated" not in jaxpr


def _assert_trees_close(a, b, tol):
  la, ta = jax.tree_util.tree_flatten(a)
  lb, tb = jax.tree_util.tree_flatten(b)
  assert ta == tb
  for x, y in zip(la, lb):
    assert_close(x, y, tol)


# --- flax linen ------------------------------------------------------------------------

LINEN_CASES = {
    "strided-same": (dict(features=6, kernel_size=(3, 3), strides=(2, 1), padding="SAME"),
                     (2, 9, 8, 4)),
    "groups-dilated": (dict(features=6, kernel_size=(3, 2), padding="VALID",
                            feature_group_count=2, kernel_dilation=(2, 1)), (2, 9, 8, 4)),
    "depthwise": (dict(features=8, kernel_size=(3, 3), padding="SAME", feature_group_count=4),
                  (2, 7, 7, 4)),
    "input-dilation": (dict(features=5, kernel_size=(2, 3), padding=((1, 2), (0, 1)),
                            input_dilation=(2, 1)), (2, 6, 7, 3)),
    "circular-no-bias": (dict(features=4, kernel_size=(3, 3), padding="CIRCULAR",
                              use_bias=False), (1, 6, 5, 3)),
    "causal-1d": (dict(features=4, kernel_size=(3,), padding="CAUSAL", kernel_dilation=2),
                  (3, 10, 2)),
    "3d-two-batch-dims": (dict(features=4, kernel_size=(2, 3, 2), strides=2, padding=1),
                          (2, 2, 5, 6, 4, 3)),
}


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", list(LINEN_CASES))
def test_flax_linen_conv(platform, name):
  nn = pytest.importorskip("flax.linen")
  kwargs, in_shape = LINEN_CASES[name]
  stock = nn.Conv(**kwargs, precision=HIGHEST)
  ours = nn.Conv(**kwargs, precision=HIGHEST, conv_general_dilated=ours_conv)
  x = _randn(in_shape, 0)
  with on_platform(platform):
    params = stock.init(jax.random.key(0), x)
    if kwargs.get("use_bias", True):  # a non-zero bias, so that it is checked too
      params = jax.tree_util.tree_map(lambda p: p + 0.1 * _randn(p.shape, 1), params)
    y_ref = stock.apply(params, x)
    y = ours.apply(params, x)
    assert_close(y, y_ref, F32_TOL)
    _assert_uses_ours(ours.apply, params, x)

    def loss(module):
      return lambda params, x: jnp.sum(jnp.sin(module.apply(params, x)))

    g = jax.jit(jax.grad(loss(ours), (0, 1)))(params, x)
    g_ref = jax.jit(jax.grad(loss(stock), (0, 1)))(params, x)
    _assert_trees_close(g, g_ref, F32_TOL)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_flax_linen_small_cnn_training_step(platform):
  """A small CNN (conv, relu, strided grouped conv, pooling, dense): loss and
  a jitted SGD step agree with the stock model's."""
  nn = pytest.importorskip("flax.linen")

  class CNN(nn.Module):
    conv_fn: object = None

    @nn.compact
    def __call__(self, x):
      extra = {} if self.conv_fn is None else dict(conv_general_dilated=self.conv_fn)
      x = nn.Conv(8, (3, 3), padding="SAME", precision=HIGHEST, **extra)(x)
      x = nn.relu(x)
      x = nn.Conv(8, (3, 3), strides=2, feature_group_count=4, kernel_dilation=(1, 2),
                  padding="SAME", precision=HIGHEST, **extra)(x)
      x = jnp.mean(nn.relu(x), axis=(1, 2))
      return nn.Dense(3, precision=HIGHEST)(x)

  x = _randn((4, 10, 9, 3), 2)
  labels = jnp.array([0, 2, 1, 2])
  with on_platform(platform):
    params = CNN().init(jax.random.key(1), x)

    def step(model):
      def loss(params):
        logits = model.apply(params, x)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1))

      @jax.jit
      def update(params):
        value, grads = jax.value_and_grad(loss)(params)
        return value, jax.tree_util.tree_map(lambda p, g: p - 0.5 * g, params, grads)
      return update

    p_ours = p_ref = params
    for _ in range(3):
      l_ours, p_ours = step(CNN(ours_conv))(p_ours)
      l_ref, p_ref = step(CNN())(p_ref)
      assert_close(l_ours, l_ref, F32_TOL)
    _assert_trees_close(p_ours, p_ref, F32_TOL)
    _assert_uses_ours(CNN(ours_conv).apply, params, x)


# --- flax nnx --------------------------------------------------------------------------

NNX_CASES = {
    "strided-same": (dict(in_features=4, out_features=6, kernel_size=(3, 3), strides=(2, 1),
                          padding="SAME"), (2, 9, 8, 4)),
    "groups-dilated": (dict(in_features=4, out_features=6, kernel_size=(3, 2), padding="VALID",
                            feature_group_count=2, kernel_dilation=(2, 1)), (2, 9, 8, 4)),
    "input-dilation-1d": (dict(in_features=3, out_features=4, kernel_size=(3,),
                               padding=((2, 1),), input_dilation=2), (2, 7, 3)),
    "3d": (dict(in_features=2, out_features=3, kernel_size=(2, 2, 3), strides=(1, 2, 1),
                padding="SAME"), (1, 4, 5, 6, 2)),
}


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", list(NNX_CASES))
def test_flax_nnx_conv(platform, name):
  nnx = pytest.importorskip("flax.nnx")
  kwargs, in_shape = NNX_CASES[name]
  x = _randn(in_shape, 3)
  with on_platform(platform):
    stock = nnx.Conv(**kwargs, precision=HIGHEST, rngs=nnx.Rngs(0))
    ours = nnx.Conv(**kwargs, precision=HIGHEST, conv_general_dilated=ours_conv,
                    rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(np.asarray(ours.kernel[...]), np.asarray(stock.kernel[...]))
    ours.bias[...] = stock.bias[...] = _randn(stock.bias[...].shape, 4)
    assert_close(ours(x), stock(x), F32_TOL)
    _assert_uses_ours(lambda x: ours(x), x)

    def loss(model, x):
      return jnp.sum(jnp.sin(model(x)))

    g, gx = nnx.grad(loss, argnums=(0, 1))(ours, x)
    g_ref, gx_ref = nnx.grad(loss, argnums=(0, 1))(stock, x)
    assert_close(gx, gx_ref, F32_TOL)
    assert_close(g["kernel"][...], g_ref["kernel"][...], F32_TOL)
    assert_close(g["bias"][...], g_ref["bias"][...], F32_TOL)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_flax_nnx_conv_preferred_element_type(platform):
  """bfloat16 compute with a float32 result, passed through by nnx."""
  nnx = pytest.importorskip("flax.nnx")
  kwargs = dict(in_features=4, out_features=6, kernel_size=(3, 3), padding="SAME",
                feature_group_count=2, dtype=jnp.bfloat16, preferred_element_type=jnp.float32,
                use_bias=False)
  x = _randn((2, 6, 5, 4), 5)
  with on_platform(platform):
    stock = nnx.Conv(**kwargs, rngs=nnx.Rngs(1))
    ours = nnx.Conv(**kwargs, conv_general_dilated=ours_conv, rngs=nnx.Rngs(1))
    y, y_ref = ours(x), stock(x)
    assert y.dtype == y_ref.dtype == np.float32
    # products of bfloat16 values are exact in float32: both are the float32
    # conv of the rounded operands
    exact = lax.conv_general_dilated(
        x.astype(jnp.bfloat16).astype(np.float32),
        stock.kernel[...].astype(jnp.bfloat16).astype(np.float32), (1, 1), "SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=2, precision=HIGHEST)
    assert_close(y, exact, F32_TOL)


# --- equinox ---------------------------------------------------------------------------

def _lax_with(conv_fn, calls):
  """A stand-in for the `jax.lax` module inside equinox.nn._conv whose
  conv_general_dilated is `conv_fn` (counting its calls)."""
  def counted(*args, **kwargs):
    calls.append(1)
    return conv_fn(*args, **kwargs)
  ns = types.SimpleNamespace(**{k: getattr(lax, k) for k in dir(lax) if not k.startswith("__")})
  ns.conv_general_dilated = counted
  return ns


def _im2col_equinox():
  eqx_conv = pytest.importorskip("equinox.nn._conv")
  calls = []
  return mock.patch.object(eqx_conv, "lax", _lax_with(ours_conv, calls)), calls


EQX_CASES = {
    "conv2d": ("Conv2d", dict(in_channels=4, out_channels=6, kernel_size=(3, 2), stride=(2, 1),
                              padding="SAME", dilation=(1, 2), groups=2), (4, 9, 8)),
    "conv2d-pairs": ("Conv2d", dict(in_channels=3, out_channels=4, kernel_size=3,
                                    padding=((2, 0), (1, 1))), (3, 6, 7)),
    "conv1d-depthwise": ("Conv1d", dict(in_channels=3, out_channels=6, kernel_size=3,
                                        padding=1, groups=3), (3, 10)),
    "conv3d": ("Conv3d", dict(in_channels=2, out_channels=3, kernel_size=2, stride=(1, 2, 1)),
               (2, 4, 5, 3)),
    "conv-transpose2d": ("ConvTranspose2d", dict(in_channels=4, out_channels=3, kernel_size=3,
                                                 stride=2, padding=1, output_padding=1),
                         (4, 5, 6)),
    "conv2d-reflect": ("Conv2d", dict(in_channels=2, out_channels=2, kernel_size=3, padding=1,
                                      padding_mode="REFLECT"), (2, 5, 5)),
}


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("name", list(EQX_CASES))
def test_equinox_conv(platform, name):
  eqx = pytest.importorskip("equinox")
  cls, kwargs, in_shape = EQX_CASES[name]
  xs = _randn((3, *in_shape), 6, np.float64)  # a batch of three, through vmap
  with on_platform(platform):
    model = getattr(eqx.nn, cls)(**kwargs, dtype=jnp.float64, key=jax.random.key(2))
    model = eqx.tree_at(lambda m: m.bias, model, _randn(model.bias.shape, 7, np.float64))
    assert model.weight.dtype == np.float64

    def loss(model, xs):
      return jnp.sum(jnp.sin(jax.vmap(model)(xs)))

    y_ref = jax.vmap(model)(xs)
    g_ref, gx_ref = eqx.filter_grad(loss)(model, xs), jax.grad(loss, 1)(model, xs)
    patch, calls = _im2col_equinox()
    with patch:
      y = jax.vmap(model)(xs)
      assert calls, "equinox did not call the patched convolution"
      _assert_uses_ours(jax.vmap(model), xs)
      g = eqx.filter_grad(loss)(model, xs)
      gx = jax.grad(loss, 1)(model, xs)
      y_jit = eqx.filter_jit(lambda m, xs: jax.vmap(m)(xs))(model, xs)
    assert_close(y, y_ref, 1e-10)
    assert_close(y_jit, y_ref, 1e-10)
    assert_close(gx, gx_ref, 1e-10)
    assert_close(g.weight, g_ref.weight, 1e-10)
    assert_close(g.bias, g_ref.bias, 1e-10)
