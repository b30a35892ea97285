"""Runs the depthwise 3x3 convolution of the suite (mbv2_dw3x3, float32) once
per layout: forward, input gradient and weight gradient, for profiling under
ncu (benchmarks/ncu_profile.sh depthwise)."""

import jax
import jax.numpy as jnp

import jax_im2col as j


def run(channels_last):
  n, c, hw = 32, 144, (56, 56)
  dn = ("NHWC", "HWIO", "NHWC") if channels_last else ("NCHW", "OIHW", "NCHW")
  x_shape = (n, *hw, c) if channels_last else (n, c, *hw)
  w_shape = (3, 3, 1, c) if channels_last else (c, 1, 3, 3)
  key = jax.random.PRNGKey(0)
  x, w = jax.random.normal(key, x_shape), jax.random.normal(key, w_shape)

  def conv(x, w):
    return j.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=dn,
                                  feature_group_count=c)

  y = jax.block_until_ready(jax.jit(conv)(x, w))
  jax.block_until_ready(jax.jit(lambda x, g: jax.vjp(lambda x: conv(x, w), x)[1](g))(x, y))
  jax.block_until_ready(jax.jit(lambda w, g: jax.vjp(lambda w: conv(x, w), w)[1](g))(w, y))


run(False)
run(True)
