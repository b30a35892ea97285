"""The algorithm selection as users get it ("auto": the project's kernels or
XLA's convolution by the measured rules), the settings that force one, and
explain(); and the XLA route's values against lax on every platform."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jax_im2col as j
from conftest import PLATFORMS, on_platform
from jax_im2col.common.device import DeviceCaps
from jax_im2col.conv import selection
from jax_im2col.conv.primitives import ConvSpec
from jax_im2col.common.geometry import Window

NHWC = ("NHWC", "HWIO", "NHWC")
S = jax.ShapeDtypeStruct


def plan(x, w, strides=(1, 1), padding="SAME", groups=1, dn=NHWC, setting="auto", **kw):
  with j.force_algorithm(setting):
    got = j.explain(x, w, strides, padding, dimension_numbers=dn, feature_group_count=groups,
                    platform="cuda", **kw)
  return tuple(got[op].algorithm for op in ("forward", "input_gradient", "filter_gradient"))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_auto_routes_by_class(dtype):
  """Each class of the rules, as explain() reports it for a CUDA GPU."""
  f = lambda *s: S(s, dtype)
  # ResNet's 1x1: XLA for every op; a 3x3 at stride 1: the project's forward
  # in bfloat16 only (float32 models keep XLA's convolutions in NCHW).
  assert plan(f(64, 56, 56, 256), f(1, 1, 256, 64)) == ("xla",) * 3
  fwd, dx, dw = plan(f(64, 28, 28, 128), f(3, 3, 128, 128))
  assert (fwd == "xla") == (dtype == jnp.float32) and (dx, dw) == ("xla", "xla")
  # ConvNeXt's 2x2 stride 2 downsampling (a reshape and a GEMM): the project's forward
  # and input gradient; ResNet's 3x3 stride 2: XLA's input gradient.
  assert "xla" not in plan(f(32, 56, 56, 96), f(2, 2, 96, 192), (2, 2), "VALID")[:2]
  assert plan(f(64, 56, 56, 128), f(3, 3, 128, 128), (2, 2))[1:] == ("xla", "xla")
  # ResNet's 3x3 on 7x7 maps: XLA's forward in both types; on 14x14 the project's in bfloat16.
  assert plan(f(64, 7, 7, 512), f(3, 3, 512, 512))[0] == "xla"
  assert (plan(f(64, 14, 14, 256), f(3, 3, 256, 256))[0] == "xla") == (dtype == jnp.float32)
  # The 3-D U-Net's first layer (one input channel): XLA's input gradient, and in float32 every
  # op; its other 3-D layers the project's kernels.
  stem3d = plan(f(2, 16, 16, 16, 1), f(3, 3, 3, 1, 32), (1, 1, 1), dn=("NDHWC", "DHWIO", "NDHWC"))
  assert stem3d == (("xla",) * 3 if dtype == jnp.float32 else ("gemm", "xla", "gemm"))
  assert "xla" not in plan(f(2, 16, 16, 16, 32), f(3, 3, 3, 32, 32), (1, 1, 1),
                           dn=("NDHWC", "DHWIO", "NDHWC"))
  # ... but on its 64³ maps the half-precision forward and input gradient whose
  # contraction runs are 32 channels (64 bytes) a tap; not on 32³, nor with 64 channels.
  u3d = lambda *a, **k: plan(*a, (1, 1, 1), dn=("NDHWC", "DHWIO", "NDHWC"), **k)
  half = dtype == jnp.bfloat16
  assert u3d(f(2, 64, 64, 64, 32), f(3, 3, 3, 32, 32)) == (
      ("xla", "xla", "implicit") if half else ("implicit",) * 3)
  assert u3d(f(2, 64, 64, 64, 64), f(3, 3, 3, 64, 32)) == (
      ("implicit", "xla", "implicit") if half else ("implicit",) * 3)
  assert "xla" not in u3d(f(2, 32, 32, 32, 32), f(3, 3, 3, 32, 64))
  assert "xla" not in u3d(f(2, 64, 64, 64, 32), f(3, 3, 3, 32, 32), rhs_dilation=(2, 2, 2))
  # The U-Net's 1x1 head: the project's kernels (its train step is faster so).
  assert "xla" not in u3d(f(2, 64, 64, 64, 32), f(1, 1, 1, 32, 2))
  # Its float32 decoder filter gradients (128 -> 64, 256 -> 128): XLA's; with 32 output
  # channels (64 -> 32 on 64³) and in bfloat16 the project's.
  for x, w in ((f(2, 32, 32, 32, 128), f(3, 3, 3, 128, 64)), (f(2, 16, 16, 16, 256), f(3, 3, 3, 256, 128))):
    assert (u3d(x, w)[2] == "xla") == (not half)
  assert u3d(f(2, 64, 64, 64, 64), f(3, 3, 3, 64, 32))[2] != "xla"
  # ConvNeXt's 7x7 depthwise: the project's depthwise kernels for every op, but for
  # the bfloat16 filter gradients on its 28x28 and 14x14 maps; its 7x7 map's and
  # RepLKNet's larger windows keep the project's kernels.
  assert plan(f(32, 56, 56, 96), f(7, 7, 1, 96), groups=96) == ("depthwise",) * 3
  assert plan(f(32, 7, 7, 768), f(7, 7, 1, 768), groups=768) == ("depthwise",) * 3
  for side, c in ((28, 192), (14, 384)):
    got = plan(f(32, side, side, c), f(7, 7, 1, c), groups=c)
    assert got == (("depthwise",) * 3 if dtype == jnp.float32 else ("depthwise", "depthwise", "xla"))
  assert "xla" not in plan(f(32, 28, 28, 192), f(7, 7, 1, 192), (2, 2), groups=192)
  assert "xla" not in plan(f(16, 28, 28, 256), f(27, 27, 1, 256), groups=256)
  # MobileNetV2's 3x3 depthwise: the forward on XLA in float32, the project's
  # kernels in bfloat16 (the whole model's train step said so).
  dw = plan(f(64, 56, 56, 144), f(3, 3, 1, 144), groups=144)
  assert dw == (("xla",) * 3 if dtype == jnp.float32 else ("depthwise",) * 3)
  # On maps of 28x28 the same, but the bfloat16 filter gradient on XLA's; on 14x14 maps
  # the project's kernels again.
  small = plan(f(64, 28, 28, 192), f(3, 3, 1, 192), groups=192)
  assert small == (("xla",) * 3 if dtype == jnp.float32 else ("depthwise", "depthwise", "xla"))
  smallest = plan(f(64, 14, 14, 576), f(3, 3, 1, 576), groups=576)
  assert smallest == (("xla",) * 3 if dtype == jnp.float32 else ("depthwise",) * 3)
  # On 7x7 maps too (MobileNetV2's train step is faster with its filter gradient there).
  last = plan(f(64, 7, 7, 960), f(3, 3, 1, 960), groups=960)
  assert last == (("xla",) * 3 if dtype == jnp.float32 else ("depthwise",) * 3)
  # The rule is the 3x3 window's: a bfloat16 1x3 depthwise filter gradient on the same map
  # stays on the project's kernels.
  assert (plan(f(64, 28, 28, 192), f(1, 3, 1, 192), groups=192)[2] == "xla") == (dtype == jnp.float32)
  small_strided = plan(f(64, 28, 28, 192), f(3, 3, 1, 192), (2, 2), groups=192)
  assert small_strided == (("xla", "depthwise", "depthwise") if dtype == jnp.float32
                           else ("depthwise",) * 3)
  # On the 112² map, the float32 strided filter gradient on XLA's.
  big = plan(f(64, 112, 112, 96), f(3, 3, 1, 96), (2, 2), groups=96)
  assert big == (("xla", "depthwise", "xla") if dtype == jnp.float32 else ("depthwise",) * 3)
  strided = plan(f(64, 56, 56, 144), f(3, 3, 1, 144), (2, 2), groups=144)
  assert strided == (("xla", "depthwise", "depthwise") if dtype == jnp.float32
                     else ("depthwise",) * 3)
  # Stems: a patchify stem (ConvNeXt's 4x4 stride 4) on the project's kernels;
  # ResNet-50's 7x7 stride 2 filter gradient on XLA's.
  assert "xla" not in plan(f(32, 224, 224, 3), f(4, 4, 3, 96), (4, 4), "VALID")
  assert plan(f(64, 224, 224, 3), f(7, 7, 3, 64), (2, 2))[2] == "xla"
  # MobileNetV2's 3x3 stride 2 stem: its float32 forward on XLA's, bfloat16 on the project's.
  stem = plan(f(64, 224, 224, 3), f(3, 3, 3, 32), (2, 2))
  assert (stem[0] == "xla") == (dtype == jnp.float32) and stem[1] != "xla"
  # Where XLA is weak: dilated (WaveNet), 3-D (U-Net).
  assert "xla" not in plan(f(8, 16000, 128), f(2, 128, 256), (1,), ((512, 0),),
                           dn=("NWC", "WIO", "NWC"), rhs_dilation=(512,))
  # WaveNet's 1-D 1x1 residual and skip layers: XLA's, which fuses the sums into them.
  assert plan(f(8, 16000, 128), f(1, 128, 128), (1,), "VALID", dn=("NWC", "WIO", "NWC")) == ("xla",) * 3
  assert "xla" not in plan(f(8, 16000, 128), f(1, 32, 128), (1,), "VALID", groups=4,
                           dn=("NWC", "WIO", "NWC"))
  assert "xla" not in plan(f(2, 32, 32, 32, 64), f(3, 3, 3, 64, 64), (1, 1, 1),
                           dn=("NDHWC", "DHWIO", "NDHWC"))
  # Grouped (ResNeXt's 32 groups of 8): the project's kernels, but XLA's float32 filter gradient.
  resnext = plan(f(32, 28, 28, 256), f(3, 3, 8, 256), groups=32)
  assert "xla" not in resnext[:2] and (resnext[2] == "xla") == (dtype == jnp.float32)


NCHW = ("NCHW", "OIHW", "NCHW")


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_auto_routes_suite_classes(dtype):
  """The rules drawn from the benchmark suite's ops: channels-first, and the
  strided 1-D and dilated classes of both layouts."""
  f = lambda *s: S(s, dtype)
  f32 = dtype == jnp.float32
  # Dense 3x3: the project's forward and unit-stride input gradient, XLA's filter gradient (in
  # float32 not on 7x7 maps); XLA's strided input gradient, but never a stem's.
  c64 = plan(f(32, 64, 56, 56), f(64, 64, 3, 3), dn=NCHW)
  assert "xla" not in c64[:2] and c64[2] == "xla"
  c512 = plan(f(32, 512, 7, 7), f(512, 512, 3, 3), dn=NCHW)
  assert "xla" not in c512[:2] and (c512[2] == "xla") == (not f32)
  strided = plan(f(32, 128, 56, 56), f(128, 128, 3, 3), (2, 2), dn=NCHW)
  assert strided[0] != "xla" and strided[1:] == ("xla", "xla")
  stem = plan(f(32, 3, 224, 224), f(64, 3, 7, 7), (2, 2), dn=NCHW)
  assert "xla" not in stem[:2] and stem[2] == "xla"
  # 3-D: XLA's filter gradient; 1x1, grouped and dilated: the project's kernels.
  c3d = plan(f(4, 64, 16, 56, 56), f(64, 64, 3, 3, 3), (1, 1, 1), dn=("NCDHW", "OIDHW", "NCDHW"))
  assert "xla" not in c3d[:2] and c3d[2] == "xla"
  assert "xla" not in plan(f(32, 256, 56, 56), f(64, 256, 1, 1), dn=NCHW)
  assert "xla" not in plan(f(32, 256, 28, 28), f(256, 8, 3, 3), groups=32, dn=NCHW)
  assert "xla" not in plan(f(8, 256, 64, 64), f(256, 256, 3, 3), padding=((2, 2), (2, 2)),
                           rhs_dilation=(2, 2), dn=NCHW)
  # A 2-D depthwise 3x3 on XLA's; 1-D depthwise (jax#13800), dilated and 7x7 on the project's.
  assert plan(f(32, 144, 56, 56), f(144, 1, 3, 3), groups=144, dn=NCHW) == ("xla",) * 3
  assert "xla" not in plan(f(32, 512, 1024), f(512, 1, 5), (1,), groups=512, dn=("NCH", "OIH", "NCH"))
  assert "xla" not in plan(f(16, 256, 64, 64), f(256, 1, 3, 3), padding=((2, 2), (2, 2)),
                           rhs_dilation=(2, 2), groups=256, dn=NCHW)
  assert "xla" not in plan(f(32, 96, 56, 56), f(96, 1, 7, 7), groups=96, dn=NCHW)
  # wav2vec's strided 1-D layer, both layouts: XLA's input gradient, and its filter gradient in
  # half precision; the project's forward.
  for dn, x, w in ((("NCH", "OIH", "NCH"), f(8, 512, 3199), f(512, 512, 3)),
                   (("NWC", "WIO", "NWC"), f(8, 3199, 512), f(3, 512, 512))):
    w2v = plan(x, w, (2,), "VALID", dn=dn)
    assert w2v[0] != "xla" and w2v[1] == "xla" and (w2v[2] == "xla") == (not f32)
  # A 2-D dilated input gradient in half precision, channels-last: XLA's; its filter gradient
  # (XLA's slow dilated path) never.
  deeplab = plan(f(8, 64, 64, 256), f(3, 3, 256, 256), padding=((2, 2), (2, 2)), rhs_dilation=(2, 2))
  assert deeplab[0] != "xla" and (deeplab[1] == "xla") == (not f32) and deeplab[2] != "xla"


def test_settings_force_algorithms():
  x, w = S((64, 56, 56, 256), jnp.float32), S((1, 1, 256, 64), jnp.float32)
  assert "xla" not in plan(x, w, setting="own")
  assert plan(x, w, setting="xla") == ("xla",) * 3
  assert plan(x, w, setting="gemm") == ("gemm",) * 3
  with pytest.raises(ValueError, match="'depthwise' does not apply"):
    plan(x, w, setting="depthwise")
  with pytest.raises(ValueError, match="algorithm must be one of"):
    j.set_algorithm("fastest")
  with pytest.raises(ValueError, match="CUDA GPUs only"), j.force_algorithm("implicit"):
    j.explain(x, w, (1, 1), "SAME", dimension_numbers=NHWC, platform="cpu")


def test_explain_on_the_cpu_and_its_reasons():
  x, w = S((2, 8, 8, 4), jnp.float32), S((3, 3, 4, 6), jnp.float32)
  with j.force_algorithm("auto"):
    got = j.explain(x, w, (1, 1), "SAME", dimension_numbers=NHWC, platform="cpu")
    assert {c.algorithm for c in got.values()} == {"columns_dot"}
    cuda = j.explain(x, w, (1, 1), "SAME", dimension_numbers=NHWC, platform="cuda")
  assert all(isinstance(c, j.Choice) and c.reason for c in cuda.values())
  with pytest.raises(ValueError, match="platform"):
    j.explain(x, w, (1, 1), "SAME", dimension_numbers=NHWC, platform="tpu")


@pytest.mark.parametrize("layout", ["cl", "cf"])
def test_explain_batch_groups_as_the_stacked_feature_groups(layout):
  """A batch-grouped convolution runs as the feature-grouped one on images
  stacked into channels (conv/stacking.py): explain() says so, chunk and
  workspace sizes included, which a plan of the unstacked shapes would get
  wrong (twice the images, half the channels)."""
  g, m, c, o = 2, 8, 16, 32
  dn, x_shape, xs_shape, w_shape = {
      "cl": (NHWC, (g * m, 28, 28, c), (m, 28, 28, g * c), (3, 3, c, o)),
      "cf": (("NCHW", "OIHW", "NCHW"), (g * m, c, 28, 28), (m, g * c, 28, 28), (o, c, 3, 3)),
  }[layout]
  w = S(w_shape, jnp.float32)
  with j.force_algorithm("auto"):
    batch = j.explain(S(x_shape, jnp.float32), w, (1, 1), "SAME", dimension_numbers=dn,
                      batch_group_count=g, platform="cuda")
    stacked = j.explain(S(xs_shape, jnp.float32), w, (1, 1), "SAME", dimension_numbers=dn,
                        feature_group_count=g, platform="cuda")
  assert batch == stacked


def test_select_is_a_pure_function_of_problem_and_device():
  """The same problem gives the same choice for the same device, and each
  device kind its own plan (the Hopper kernels pack small groups)."""
  window = Window((3, 3), (1, 1), (1, 1), (1, 1), ((1, 1), (1, 1)))
  spec = ConvSpec(window, True, 8, 0, 256 << 20, "own")
  p = selection.ConvProblem("forward", spec, np.dtype(np.float32), np.dtype(np.float32), 4, 64,
                            64, (12, 12), (12, 12))
  hopper = DeviceCaps("cuda", (9, 0), 132, True)
  ampere = DeviceCaps("cuda", (8, 0), 108, False)
  assert selection.select(p, hopper) == selection.select(p, hopper)
  assert selection.select(p, hopper).algorithm == "implicit_packed"
  assert selection.select(p, ampere).algorithm == "direct"
  assert selection.select(p, DeviceCaps("cpu")).algorithm == "columns_dot"


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("setting", ["xla", "auto"])
@pytest.mark.parametrize("case", ["resnet-1x1", "resnet-3x3s2", "resnet-3x3s2-cf", "mbv2-dw",
                                  "mbv2-dw-cf", "transposed", "wavenet-1x1"])
def test_routes_agree_with_lax(platform, setting, case):
  """Forward and both gradients by whichever route the setting takes, against
  lax in float64 (the XLA route lowers lax's own convolution and its
  transposes, on the canonical operands)."""
  x_shape, w_shape, kw = {
      "resnet-1x1": ((2, 9, 9, 16), (1, 1, 16, 8), dict(window_strides=(1, 1), padding="SAME")),
      "resnet-3x3s2": ((2, 9, 9, 16), (3, 3, 16, 8), dict(window_strides=(2, 2), padding="SAME")),
      "resnet-3x3s2-cf": ((2, 16, 9, 9), (8, 16, 3, 3),
                          dict(window_strides=(2, 2), padding="SAME",
                               dimension_numbers=("NCHW", "OIHW", "NCHW"))),
      "mbv2-dw": ((2, 9, 9, 16), (3, 3, 1, 16),
                  dict(window_strides=(1, 1), padding="SAME", feature_group_count=16)),
      "mbv2-dw-cf": ((2, 16, 9, 9), (16, 1, 3, 3),
                     dict(window_strides=(1, 1), padding="SAME", feature_group_count=16,
                          dimension_numbers=("NCHW", "OIHW", "NCHW"))),
      "transposed": ((2, 5, 6, 4), (3, 3, 4, 8), dict(window_strides=(1, 1),
                                                      padding=((2, 2), (1, 2)),
                                                      lhs_dilation=(2, 2))),
      "wavenet-1x1": ((2, 12, 16), (1, 16, 8), dict(window_strides=(1,), padding="VALID",
                                                    dimension_numbers=("NWC", "WIO", "NWC"))),
  }[case]
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
  kw = dict(dict(dimension_numbers=NHWC), **kw)

  def both(conv):
    y, vjp = jax.vjp(lambda a, b: conv(a, b, **kw), x, w)
    return (y, *vjp(jnp.cos(y)))

  with on_platform(platform), j.force_algorithm(setting):
    got = both(j.conv_general_dilated)
  want = both(lambda a, b, **k: lax.conv_general_dilated(a, b, precision=lax.Precision.HIGHEST,
                                                         **k))
  for a, b in zip(got, want):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-10)


def test_routing_replay_reads_measurements_under_the_rules():
  """benchmarks/routing_replay.py: an op the rules give to XLA is expected at
  XLA's time, one they leave on the project's kernels at its measured ratio."""
  import pathlib
  import sys
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
  from routing_replay import replay

  def row(w, op, ratio, stride=1):
    call = {"lhs_shape": [8, 14, 14, 64], "rhs_shape": w, "dtype": "float32",
            "window_strides": [stride, stride], "padding": "SAME", "lhs_dilation": [1, 1],
            "rhs_dilation": [1, 1], "dimension_numbers": [[0, 3, 1, 2], [3, 2, 0, 1], [0, 3, 1, 2]],
            "feature_group_count": 1, "batch_group_count": 1}
    return {"call": call, "op": op, "ratio": ratio}

  one_by_one, unit_stride_dgrad, strided_dgrad = replay([
      row([1, 1, 64, 64], "fwd", 1.4), row([3, 3, 64, 64], "dgrad", 1.2),
      row([2, 2, 64, 64], "dgrad", 0.9, stride=2)])
  assert (one_by_one["chosen"], one_by_one["expected"]) == ("xla", 1.0)
  assert (unit_stride_dgrad["chosen"], unit_stride_dgrad["expected"]) == ("xla", 1.0)
  assert strided_dgrad["chosen"] != "xla" and strided_dgrad["expected"] == 0.9
