"""Runs a depthwise convolution once per layout and dtype, on the project's
depthwise kernels (force_algorithm("depthwise")): forward, input gradient and
weight gradient, for profiling under ncu (benchmarks/ncu_profile.sh
depthwise). PROFILE_CASE chooses the layer: mbv2 (the suite's mbv2_dw3x3,
3x3 over 56x56x144, the default), mbv2_112 and mbv2_56 (MobileNetV2's
112x112x32 and 56x56x144 layers at its batch of 64), convnext (7x7 over
56x56x96, ConvNeXt-T's first stage), convnext28 (7x7 over 28x28x192, its second) or convnext14
(7x7 over 14x14x384, its third); PROFILE_LAYOUTS (cf,cl) and PROFILE_DTYPES (f32, or f32,bf16)
choose the runs."""

import os

import jax
import jax.numpy as jnp

import jax_im2col as j


CASES = {"mbv2": (32, 144, (56, 56), 3), "convnext": (32, 96, (56, 56), 7),
         "convnext28": (32, 192, (28, 28), 7),
         "convnext14": (32, 384, (14, 14), 7), "mbv2_112": (64, 32, (112, 112), 3),
         "mbv2_56": (64, 144, (56, 56), 3)}


def run(channels_last, dtype):
  n, c, hw, k = CASES[os.environ.get("PROFILE_CASE", "mbv2")]
  dn = ("NHWC", "HWIO", "NHWC") if channels_last else ("NCHW", "OIHW", "NCHW")
  x_shape = (n, *hw, c) if channels_last else (n, c, *hw)
  w_shape = (k, k, 1, c) if channels_last else (c, 1, k, k)
  key = jax.random.PRNGKey(0)
  x, w = jax.random.normal(key, x_shape, dtype), jax.random.normal(key, w_shape, dtype)

  def conv(x, w):
    return j.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn, feature_group_count=c)

  y = jax.block_until_ready(jax.jit(conv)(x, w))
  jax.block_until_ready(jax.jit(lambda x, g: jax.vjp(lambda x: conv(x, w), x)[1](g))(x, y))
  jax.block_until_ready(jax.jit(lambda w, g: jax.vjp(lambda w: conv(x, w), w)[1](g))(w, y))


with j.force_algorithm("depthwise"):
  for layout in os.environ.get("PROFILE_LAYOUTS", "cf,cl").split(","):
    for dt in os.environ.get("PROFILE_DTYPES", "f32").split(","):
      run(layout == "cl", {"f32": jnp.float32, "bf16": jnp.bfloat16}[dt])
