"""Runs filter gradients that take the implicit GEMM
(implicit_filter_gradient.cu) once each, channels-last: for profiling under
ncu (benchmarks/ncu_profile.sh filter). r50_3x3_c64 in bfloat16 (5 tiles of
64 x 128, the positions split into many parts) and r50_3x3_c256 in float32
(72 tiles, few parts)."""

import jax
import jax.numpy as jnp

import jax_im2col as j


def run(n, c, o, size, dtype):
  key = jax.random.PRNGKey(0)
  x = jax.random.normal(key, (n, size, size, c), dtype)
  w = jax.random.normal(key, (3, 3, c, o), dtype)
  g = jax.random.normal(key, (n, size, size, o), dtype)

  def conv(x, w):
    return j.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                  dimension_numbers=("NHWC", "HWIO", "NHWC"))

  jax.block_until_ready(jax.jit(lambda x, w, g: jax.vjp(lambda w: conv(x, w), w)[1](g))(x, w, g))


run(32, 64, 64, 56, jnp.bfloat16)
run(32, 256, 256, 14, jnp.float32)
