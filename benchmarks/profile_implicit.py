"""Runs convolutions that take the implicit GEMM (implicit_gemm.cu) once each,
channels-last, forward and input gradient: for profiling under ncu
(benchmarks/ncu_profile.sh implicit). r50_3x3_c64 in bfloat16 (64 x 128
tiles), r50_3x3_c256 in float32 (64 x 64 tiles, one wave) and deeplab_dil2 in
float32 (128 x 128 tiles)."""

import jax
import jax.numpy as jnp

import jax_im2col as j


def run(n, c, o, size, dilation, dtype):
  key = jax.random.PRNGKey(0)
  x = jax.random.normal(key, (n, size, size, c), dtype)
  w = jax.random.normal(key, (3, 3, c, o), dtype)
  pad = ((dilation, dilation),) * 2

  def conv(x, w):
    return j.conv_general_dilated(x, w, (1, 1), pad, rhs_dilation=(dilation, dilation),
                                  dimension_numbers=("NHWC", "HWIO", "NHWC"))

  y = jax.block_until_ready(jax.jit(conv)(x, w))
  jax.block_until_ready(jax.jit(lambda x, g: jax.vjp(lambda x: conv(x, w), x)[1](g))(x, y))


run(32, 64, 64, 56, 1, jnp.bfloat16)
run(32, 256, 256, 14, 1, jnp.float32)
run(8, 256, 256, 64, 2, jnp.float32)
