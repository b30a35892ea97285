"""Depthwise convolutions (groups == C == O) of jax_im2col.conv_general_dilated
against lax: the forward and both gradients (jax.vjp: dx, dw), 1-D to 3-D,
windows 3 to 31 (63 in 1-D), strides, dilations, SAME / VALID / explicit
(asymmetric, negative) paddings, both layouts, float16 / bfloat16 / float32 /
float64, and the layers of ConvNeXt-T (7x7) and MobileNetV2 (3x3, stride 1
and 2) at batch 2.

The GPU variants run inside jax_im2col.force_algorithm("depthwise"), so that
every op takes the depthwise kernels (lib/conv/depthwise/, algorithm 7;
tracing raises where they do not apply); the CPU variants run the same checks
through the CPU implementation. The oracle is lax on the CPU in float64 on
the same (rounded) inputs.

Tolerances (relative error over the whole array, test_conv.rel_err): float64
1e-10; float32 2e-5 (float32 products summed in float32 over at most
N * positions ~ 10^4 terms a filter tap: random-walk rounding ~ sqrt(n) *
2^-24 ~ 1e-5 at worst per element, far less over the norm; no TF32: these
kernels use no tensor cores, and the CPU's GEMM rounds likewise); float16 and
bfloat16 2e-2 (one rounding of the float32 sum to the type: 2^-11 / 2^-8
relative per element), float32 outputs of half inputs 2e-5.
"""

import contextlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_im2col
from conftest import GPU_DEVICES, on_platform

conv = jax_im2col.conv_general_dilated

GPU = [pytest.mark.gpu, pytest.mark.skipif(not GPU_DEVICES, reason="no CUDA device visible to JAX")]
PLATFORMS = [pytest.param("cpu", id="cpu"), pytest.param("gpu", id="gpu", marks=GPU)]

F16, BF16, F32, F64 = (np.dtype(np.float16), np.dtype(jnp.bfloat16), np.dtype(np.float32),
                       np.dtype(np.float64))
DTYPES = [pytest.param(d, id=d.name) for d in (F32, BF16, F16, F64)]
TOL = {F64: 1e-10, F32: 2e-5, BF16: 2e-2, F16: 2e-2}

SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


# As test_conv's (kept here so that this file needs only conftest).
def rel_err(actual, expected):
  a, b = np.asarray(actual).astype(np.float64), np.asarray(expected).astype(np.float64)
  num, den = np.linalg.norm(a - b), np.linalg.norm(b)
  return (0.0 if num == 0 else np.inf) if den == 0 else num / den


def assert_close(actual, expected, tol, dtype):
  assert actual.shape == expected.shape, (actual.shape, expected.shape)
  assert actual.dtype == dtype, (actual.dtype, dtype)
  assert np.all(np.isfinite(np.asarray(actual).astype(np.float64)))
  err = rel_err(actual, expected)
  assert err <= tol, f"relative error {err:.3g} > {tol:.3g}"


def on_cpu(fn, *args):
  """fn(*args) computed by XLA on the CPU: the oracle on every platform."""
  args = [np.asarray(a) for a in args]
  with jax.default_device(jax.devices("cpu")[0]):
    return jax.tree.map(np.asarray, fn(*args))


@contextlib.contextmanager
def depthwise_on(platform):
  """On the GPU, every op of the convolutions traced inside takes the
  depthwise kernels; on the CPU, the CPU implementation runs."""
  with on_platform(platform):
    if platform == "gpu":
      with jax_im2col.force_algorithm("depthwise"):
        yield
    else:
      yield


def dimension_numbers(nd, channels_last):
  sp = SPATIAL[nd]
  if channels_last:
    return ("N" + sp + "C", sp + "IO", "N" + sp + "C")
  return ("NC" + sp, "OI" + sp, "NC" + sp)


def operands(n, spatial, c, kernel, channels_last, dtype, seed):
  """x and w of a depthwise convolution (w: (*K, 1, C) or (C, 1, *K)), drawn
  in float32 and rounded to dtype."""
  rng = np.random.default_rng(seed)
  x_shape = (n, *spatial, c) if channels_last else (n, c, *spatial)
  w_shape = (*kernel, 1, c) if channels_last else (c, 1, *kernel)
  x = rng.standard_normal(x_shape).astype(np.float32)
  w = rng.standard_normal(w_shape).astype(np.float32) / np.sqrt(np.prod(kernel))
  return jnp.asarray(x, dtype), jnp.asarray(w, dtype)


def check_depthwise(platform, *, n=2, spatial, c, kernel, strides, padding, rhs_dilation=None, channels_last=True,
                    dtype=F32, seed=0, preferred=None):
  """The forward, dx and dw of ours against lax's (float64, on the CPU)."""
  nd = len(spatial)
  kwargs = dict(window_strides=strides, padding=padding, rhs_dilation=rhs_dilation,
                dimension_numbers=dimension_numbers(nd, channels_last), feature_group_count=c)
  x, w = operands(n, spatial, c, kernel, channels_last, dtype, seed)
  with depthwise_on(platform):
    y = jax.jit(lambda x, w: conv(x, w, preferred_element_type=preferred, **kwargs))(x, w)
    ct = jnp.asarray(np.random.default_rng(seed + 1).standard_normal(y.shape).astype(np.float32), dtype)

    @jax.jit
    def grads(x, w, ct):
      _, vjp = jax.vjp(lambda x, w: conv(x, w, **kwargs), x, w)
      return vjp(ct)

    dx, dw = grads(x, w, ct)

  def reference(x, w, ct):
    y_ref, vjp = jax.vjp(lambda x, w: lax.conv_general_dilated(x, w, precision=lax.Precision.HIGHEST, **kwargs),
                         x, w)
    return (y_ref, *vjp(ct))

  wide = lambda a: np.asarray(a).astype(np.float64)
  y_ref, dx_ref, dw_ref = on_cpu(reference, wide(x), wide(w), wide(ct))
  out_dtype = np.dtype(preferred) if preferred is not None else dtype
  assert_close(y, y_ref.astype(out_dtype), TOL[out_dtype], dtype=out_dtype)
  assert_close(dx, dx_ref.astype(dtype), TOL[dtype], dtype=dtype)
  assert_close(dw, dw_ref.astype(dtype), TOL[dtype], dtype=dtype)


# --- windows, strides, dilations, paddings: 2-D --------------------------------------

# (kernel, spatial, channels, strides, rhs_dilation, padding)
WINDOWS_2D = [
    (3, (9, 11), 16, (1, 1), (1, 1), "SAME"),
    (3, (12, 13), 24, (2, 2), (1, 1), "SAME"),
    (3, (10, 9), 6, (2, 1), (2, 2), ((1, 2), (0, 1))),
    (3, (8, 8), 3, (1, 2), (1, 1), ((-1, 2), (2, -1))),  # negative padding, channels not a vector
    # The streaming 3x3 kernel (depthwise_stream.cuh): row tiles with a short
    # last one, strides along W past 2, asymmetric and negative padding.
    (3, (40, 7), 12, (1, 2), (1, 1), ((0, 2), (2, -1))),
    (3, (23, 9), 8, (2, 3), (1, 1), ((3, -1), (1, 1))),
    (3, (37, 5), 4, (1, 1), (1, 1), ((2, 0), (0, 2))),
    # Stride 2 along both: the input gradient by cells (depthwise_cells.cuh),
    # odd input sides, low paddings of either parity, one negative.
    (3, (11, 9), 8, (2, 2), (1, 1), ((2, 0), (-1, 1))),
    # Pixels under 16 bytes, stride 2 along H: the streamed filter gradient
    # (depthwise_stream_filter.cuh) in bfloat16; 16 bytes and more stage their
    # rows (depthwise_stream_staged_filter.cuh).
    (3, (30, 12), 4, (2, 1), (1, 1), "SAME"),
    (7, (14, 14), 32, (1, 1), (1, 1), "SAME"),
    (7, (17, 16), 8, (2, 2), (1, 1), "VALID"),
    (7, (15, 13), 12, (1, 1), (2, 2), ((3, 3), (6, 0))),
    (7, (16, 18), 20, (2, 1), (1, 2), ((2, 4), (5, 1))),
    (13, (20, 22), 8, (1, 1), (1, 1), "SAME"),
    (13, (27, 25), 4, (2, 2), (2, 1), ((6, 5), (0, 7))),
    (31, (33, 35), 8, (1, 1), (1, 1), "SAME"),
    (31, (36, 31), 5, (2, 2), (1, 1), ((15, 15), (-1, 2))),
    # 16-bit filter gradients on the tensor cores (depthwise_mma_filter.cuh) where
    # the channels fill 16-byte vectors, the stride along W is 1 and the window
    # 7 taps wide or more: stride and dilation along H, dilation along W (the
    # 1-D 9-tap case below spans several W tiles). A 5x5 window past 64 outputs
    # a row stays on the tiles (dw_mma_filter_pays).
    (7, (19, 21), 16, (2, 1), (2, 2), ((3, 5), (6, 4))),
    (5, (9, 70), 8, (1, 1), (1, 1), ((2, 2), (0, 4))),
]


def _window_id(case):
  k, spatial, c, s, d, p = case
  pad = p if isinstance(p, str) else "pad" + "_".join(f"{lo}.{hi}" for lo, hi in p)
  return f"k{k}-in{'x'.join(map(str, spatial))}-c{c}-s{''.join(map(str, s))}-d{''.join(map(str, d))}-{pad}"


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("channels_last", [True, False], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", WINDOWS_2D, ids=[_window_id(c) for c in WINDOWS_2D])
def test_windows_2d(platform, channels_last, dtype, case):
  k, spatial, c, strides, dilation, padding = case
  check_depthwise(platform, spatial=spatial, c=c, kernel=(k, k), strides=strides, padding=padding,
                  rhs_dilation=dilation, channels_last=channels_last, dtype=dtype, seed=k)


# --- 1-D (up to 63 taps) and 3-D -------------------------------------------------------

WINDOWS_1D = [
    (63, (150,), 16, (1,), (1,), "SAME"),
    (63, (200,), 8, (2,), (2,), "VALID"),
    (63, (90,), 6, (1,), (1,), ((40, -3),)),
    (5, (77,), 12, (3,), (1,), ((2, 2),)),
    (9, (130,), 16, (1,), (1,), "SAME"),  # several W tiles of the tensor-core filter gradient
]

WINDOWS_3D = [
    ((3, 3, 3), (6, 7, 8), 16, (1, 1, 1), (1, 1, 1), "SAME"),
    ((3, 3, 3), (7, 8, 9), 8, (2, 2, 2), (1, 1, 1), "SAME"),
    ((3, 3, 3), (6, 9, 7), 6, (1, 2, 1), (2, 1, 2), ((2, 1), (0, 1), (1, 2))),
    ((5, 5, 5), (7, 8, 9), 8, (1, 1, 1), (1, 1, 1), "SAME"),
    ((5, 5, 5), (9, 9, 10), 4, (2, 1, 2), (1, 1, 1), "VALID"),
]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("channels_last", [True, False], ids=["nwc", "ncw"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", WINDOWS_1D, ids=[f"k{c[0]}-in{c[1][0]}-s{c[3][0]}-d{c[4][0]}-{i}"
                                                  for i, c in enumerate(WINDOWS_1D)])
def test_windows_1d(platform, channels_last, dtype, case):
  k, spatial, c, strides, dilation, padding = case
  check_depthwise(platform, spatial=spatial, c=c, kernel=(k,), strides=strides, padding=padding,
                  rhs_dilation=dilation, channels_last=channels_last, dtype=dtype, seed=k)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("channels_last", [True, False], ids=["ndhwc", "ncdhw"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", WINDOWS_3D, ids=[f"k{c[0][0]}-s{''.join(map(str, c[3]))}-{i}"
                                                  for i, c in enumerate(WINDOWS_3D)])
def test_windows_3d(platform, channels_last, dtype, case):
  kernel, spatial, c, strides, dilation, padding = case
  check_depthwise(platform, spatial=spatial, c=c, kernel=kernel, strides=strides, padding=padding,
                  rhs_dilation=dilation, channels_last=channels_last, dtype=dtype, seed=kernel[0])


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", [pytest.param(BF16, id="bfloat16"), pytest.param(F16, id="float16")])
def test_half_inputs_float32_output(platform, dtype):
  check_depthwise(platform, spatial=(14, 14), c=32, kernel=(7, 7), strides=(1, 1), padding="SAME", dtype=dtype,
                  preferred=F32)


# --- model layers at batch 2 ------------------------------------------------------------

# ConvNeXt-T's 7x7 depthwise layers (SAME, stride 1): (spatial, channels).
CONVNEXT = [(56, 96), (28, 192), (14, 384), (7, 768)]
# MobileNetV2's 3x3 depthwise layers (padding 1): (spatial, channels, stride).
MOBILENET = [(112, 32, 1), (112, 96, 2), (56, 144, 1), (56, 144, 2), (28, 192, 1), (28, 192, 2), (14, 384, 1),
             (14, 576, 1), (14, 576, 2), (7, 960, 1)]


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", [pytest.param(F32, id="float32"), pytest.param(BF16, id="bfloat16")])
@pytest.mark.parametrize("layer", CONVNEXT, ids=[f"{s}x{s}x{c}" for s, c in CONVNEXT])
def test_convnext_layers(platform, dtype, layer):
  s, c = layer
  check_depthwise(platform, spatial=(s, s), c=c, kernel=(7, 7), strides=(1, 1), padding=((3, 3), (3, 3)),
                  dtype=dtype, seed=s)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", [pytest.param(F32, id="float32"), pytest.param(BF16, id="bfloat16")])
@pytest.mark.parametrize("layer", MOBILENET, ids=[f"{s}x{s}x{c}-s{st}" for s, c, st in MOBILENET])
def test_mobilenet_layers(platform, dtype, layer):
  s, c, stride = layer
  check_depthwise(platform, spatial=(s, s), c=c, kernel=(3, 3), strides=(stride, stride),
                  padding=((1, 1), (1, 1)), dtype=dtype, seed=s + stride)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_convnext_layer_channels_first(platform):
  check_depthwise(platform, spatial=(28, 28), c=192, kernel=(7, 7), strides=(1, 1), padding="SAME",
                  channels_last=False)


def assert_same_non_finite(actual, expected, tol):
  """NaN and infinities where lax has them (with their signs), the finite
  values close."""
  a, b = np.asarray(actual).astype(np.float64), np.asarray(expected).astype(np.float64)
  assert a.shape == b.shape
  np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
  inf = np.isinf(b)
  np.testing.assert_array_equal(a[inf], b[inf])
  finite = np.isfinite(b)
  assert np.all(np.isfinite(a[finite]))
  assert rel_err(a[finite], b[finite]) <= tol


def depthwise_same_f64(x, w, ct):
  """The channels-last, unit-stride, SAME depthwise forward, input gradient
  and filter gradient in float64 numpy, each output the sum of its own
  window's products, each tap's gradient the sum over the outputs of its
  products with the padded input (lax on the CPU runs a grouped convolution
  as a dense one whose zero taps meet every channel, so its NaN spread across
  channels: no oracle for non-finite inputs)."""
  x, w, ct = (np.asarray(a).astype(np.float64) for a in (x, w, ct))
  n, h, wd, c = x.shape
  kh, kw = w.shape[:2]
  lo_h, lo_w = (kh - 1) // 2, (kw - 1) // 2
  xp = np.zeros((n, h + kh - 1, wd + kw - 1, c))
  xp[:, lo_h:lo_h + h, lo_w:lo_w + wd] = x
  y = np.zeros((n, h, wd, c))
  dxp = np.zeros_like(xp)
  dw = np.zeros(w.shape)
  with np.errstate(invalid="ignore"):  # inf - inf and 0 x inf: NaN, as intended
    for i in range(kh):
      for j in range(kw):
        y += xp[:, i:i + h, j:j + wd] * w[i, j, 0]
        dxp[:, i:i + h, j:j + wd] += ct * w[i, j, 0]
        dw[i, j, 0] = np.sum(xp[:, i:i + h, j:j + wd] * ct, axis=(0, 1, 2))
  return y, dxp[:, lo_h:lo_h + h, lo_w:lo_w + wd], dw


def test_non_finite_oracle_agrees_with_lax():
  """depthwise_same_f64 is lax's convolution on finite inputs."""
  x, w = operands(2, (9, 11), 4, (3, 5), True, F64, 5)
  ct = np.random.default_rng(6).standard_normal((2, 9, 11, 4))
  kwargs = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                feature_group_count=4)

  def reference(x, w, ct):
    y, vjp = jax.vjp(lambda x, w: lax.conv_general_dilated(x, w, precision=lax.Precision.HIGHEST, **kwargs), x, w)
    return (y, *vjp(ct))

  for got, want in zip(depthwise_same_f64(x, w, ct), on_cpu(reference, x, w, ct)):
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("dtype", [pytest.param(BF16, id="bfloat16"), pytest.param(F16, id="float16"),
                                   pytest.param(F32, id="float32")])
@pytest.mark.parametrize("k,spatial", [(7, (14, 14)), (7, (28, 28)), (5, (20, 20)), (7, (1, 40))],
                         ids=["7x7", "7x7-28", "5x5", "1x7-row"])
def test_non_finite_inputs(platform, dtype, k, spatial):
  """An inf or NaN input reaches exactly the outputs whose windows hold it:
  the forward, and the input gradient of a cotangent holding them; and the
  filter gradient's taps whose products hold one. The tensor-core forward
  (16-bit, channels-last) would spread NaN through its Toeplitz band's zeros
  (0 x inf) if it did not recompute those tiles window by window
  (depthwise_mma.cuh), and the tensor-core filter gradient through the zeros
  around its dy tiles if it did not sum those bands again output by output
  (depthwise_mma_filter.cuh)."""
  c = 16
  kernel = (min(k, spatial[0]), k)
  kwargs = dict(window_strides=(1, 1), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                feature_group_count=c)
  x, w = operands(2, spatial, c, kernel, True, dtype, 7)
  x = np.asarray(x).copy()
  h, wd = spatial
  x[0, h // 2, wd // 3, 3] = np.inf
  x[1, 0, wd - 1, 9] = -np.inf
  x[1, h - 1, 2, 12] = np.nan
  ct = np.asarray(np.random.default_rng(8).standard_normal((2, h, wd, c)), np.float32).astype(dtype)
  ct[0, h - 1, wd // 2, 5] = -np.inf
  ct[1, h // 3, 1, 0] = np.nan
  x, ct = jnp.asarray(x), jnp.asarray(ct)
  with depthwise_on(platform):
    y = jax.jit(lambda x, w: conv(x, w, **kwargs))(x, w)
    dx, dw = jax.jit(lambda x, w, ct: jax.vjp(lambda x, w: conv(x, w, **kwargs), x, w)[1](ct))(x, w, ct)
  y_ref, dx_ref, dw_ref = depthwise_same_f64(x, w, ct)
  for got, ref in zip((y, dx, dw), (y_ref, dx_ref, dw_ref)):
    assert got.dtype == dtype
    assert_same_non_finite(got, ref.astype(dtype), TOL[dtype])
  for got in (y, dx):
    # The poison stays local: most outputs are finite.
    assert np.mean(np.isfinite(np.asarray(got, np.float64))) > 0.8
  # The filter gradient's poison stays in the poisoned channels (x: 3, 9, 12; dy: 5, 0).
  clean = [ch for ch in range(c) if ch not in (0, 3, 5, 9, 12)]
  assert np.all(np.isfinite(np.asarray(dw, np.float64)[..., clean]))


# --- the GPU runs the depthwise kernels --------------------------------------------------

TARGETS = ("jax_im2col_conv_forward", "jax_im2col_conv_backward_data", "jax_im2col_conv_backward_filter")


@pytest.mark.gpu
@pytest.mark.skipif(not GPU_DEVICES, reason="no CUDA device visible to JAX")
@pytest.mark.parametrize("channels_last", [True, False], ids=["nhwc", "nchw"])
def test_forced_lowering_is_algorithm_7(channels_last):
  """Under force_algorithm("depthwise") each of the three custom calls of a
  forward and its gradients carries algorithm 7 (kAlgorithmDepthwise)."""
  kwargs = dict(window_strides=(2, 2), padding="SAME", dimension_numbers=dimension_numbers(2, channels_last),
                feature_group_count=16)
  x, w = operands(2, (14, 14), 16, (7, 7), channels_last, F32, 0)

  def loss(x, w):
    return jnp.sum(conv(x, w, **kwargs) ** 2)

  with jax_im2col.force_algorithm("depthwise"):
    text = jax.jit(jax.value_and_grad(loss, argnums=(0, 1))).trace(x, w).lower(
        lowering_platforms=("cuda",)).as_text()
  for target in TARGETS:
    calls = [line for line in text.splitlines() if f"custom_call @{target}(" in line]
    assert calls, target
    for line in calls:
      assert re.search(r"algorithm = 7 : i64", line), line[:300]


@pytest.mark.gpu
@pytest.mark.skipif(not GPU_DEVICES, reason="no CUDA device visible to JAX")
def test_forced_depthwise_refuses_grouped():
  """Where the depthwise kernels do not apply (2 channels a group), forcing
  them raises at trace time."""
  x = jnp.zeros((1, 8, 8, 8), jnp.float32)
  w = jnp.zeros((3, 3, 2, 8), jnp.float32)
  with on_platform("gpu"), jax_im2col.force_algorithm("depthwise"), pytest.raises(ValueError):
    jax.jit(lambda x, w: conv(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                              feature_group_count=4)).lower(x, w)


@pytest.mark.gpu
@pytest.mark.skipif(not GPU_DEVICES, reason="no CUDA device visible to JAX")
@pytest.mark.parametrize("k,stride,dtype", [(7, 1, F32), (3, 1, F32), (3, 2, F32), (7, 1, BF16)],
                         ids=["tiles-7x7", "staged-3x3", "staged-3x3-s2", "tensor-cores-7x7"])
def test_filter_gradient_is_deterministic(k, stride, dtype):
  """The filter gradient sums fixed slices in a fixed order: the same bits
  on every run (3x3: the kernel with staged rows, depthwise_stream_staged_filter.cuh;
  bfloat16 7x7: the tensor cores, depthwise_mma_filter.cuh)."""
  kwargs = dict(window_strides=(stride, stride), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                feature_group_count=96)
  x, w = operands(8, (56, 56), 96, (k, k), True, dtype, 3)
  ct = jnp.asarray(np.random.default_rng(4).standard_normal((8, 56 // stride, 56 // stride, 96)), dtype)
  with depthwise_on("gpu"):
    dw = jax.jit(lambda x, w, ct: jax.vjp(lambda w: conv(x, w, **kwargs), w)[1](ct)[0])
    first = np.asarray(dw(x, w, ct))
    for _ in range(3):
      np.testing.assert_array_equal(np.asarray(dw(x, w, ct)), first)
