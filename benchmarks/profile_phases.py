"""Runs strided input gradients that take the implicit GEMM's phases
(gradient_phase in lib/geometry.h) once each, channels-last: for profiling
under ncu (benchmarks/ncu_profile.sh phases). r50_3x3s2_c128 in bfloat16 and
float32 (4 phases), w2v_1d_k3s2 in bfloat16 (2 phases)."""

import jax
import jax.numpy as jnp

import jax_im2col as j


def run(n, c, o, spatial, kernel, stride, pad, dtype):
  key = jax.random.PRNGKey(0)
  nd = len(spatial)
  x = jax.random.normal(key, (n, *spatial, c), dtype)
  w = jax.random.normal(key, (*kernel, c, o), dtype)
  dn = {1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC")}[nd]

  def conv(x, w):
    return j.conv_general_dilated(x, w, stride, ((pad, pad),) * nd, dimension_numbers=dn)

  y = jax.block_until_ready(jax.jit(conv)(x, w))
  jax.block_until_ready(jax.jit(lambda x, g: jax.vjp(lambda x: conv(x, w), x)[1](g))(x, y))


run(32, 128, 128, (56, 56), (3, 3), (2, 2), 1, jnp.bfloat16)
run(32, 128, 128, (56, 56), (3, 3), (2, 2), 1, jnp.float32)
run(8, 512, 512, (3199,), (3,), (2,), 0, jnp.bfloat16)
