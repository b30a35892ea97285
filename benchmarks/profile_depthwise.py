"""Runs the depthwise 3x3 convolution of the suite (mbv2_dw3x3) once per
layout and dtype: forward, input gradient and weight gradient, for profiling
under ncu (benchmarks/ncu_profile.sh depthwise). PROFILE_LAYOUTS (cf,cl) and
PROFILE_DTYPES (f32, or f32,bf16) choose the runs."""

import os

import jax
import jax.numpy as jnp

import jax_im2col as j


def run(channels_last, dtype):
  n, c, hw = 32, 144, (56, 56)
  dn = ("NHWC", "HWIO", "NHWC") if channels_last else ("NCHW", "OIHW", "NCHW")
  x_shape = (n, *hw, c) if channels_last else (n, c, *hw)
  w_shape = (3, 3, 1, c) if channels_last else (c, 1, 3, 3)
  key = jax.random.PRNGKey(0)
  x, w = jax.random.normal(key, x_shape, dtype), jax.random.normal(key, w_shape, dtype)

  def conv(x, w):
    return j.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=dn,
                                  feature_group_count=c)

  y = jax.block_until_ready(jax.jit(conv)(x, w))
  jax.block_until_ready(jax.jit(lambda x, g: jax.vjp(lambda x: conv(x, w), x)[1](g))(x, y))
  jax.block_until_ready(jax.jit(lambda w, g: jax.vjp(lambda w: conv(x, w), w)[1](g))(w, y))


for layout in os.environ.get("PROFILE_LAYOUTS", "cf,cl").split(","):
  for dt in os.environ.get("PROFILE_DTYPES", "f32").split(","):
    run(layout == "cl", {"f32": jnp.float32, "bf16": jnp.bfloat16}[dt])
