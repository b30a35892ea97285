"""Runs the grouped convolutions of the benchmark (grouped1d_g16 of jax#13800
and resnext_g32, float32, channels-first) once each: forward, input gradient
and weight gradient, for profiling under ncu (benchmarks/ncu_profile.sh
grouped)."""

import jax

import jax_im2col as j


def run(n, c, spatial, kernel, groups):
  nd = len(spatial)
  dn = {1: ("NCH", "OIH", "NCH"), 2: ("NCHW", "OIHW", "NCHW")}[nd]
  key = jax.random.PRNGKey(0)
  x = jax.random.normal(key, (n, c, *spatial))
  w = jax.random.normal(key, (c, c // groups, *kernel))
  pad = tuple((k // 2, k // 2) for k in kernel)

  def conv(x, w):
    return j.conv_general_dilated(x, w, (1,) * nd, pad, dimension_numbers=dn, feature_group_count=groups)

  y = jax.block_until_ready(jax.jit(conv)(x, w))
  jax.block_until_ready(jax.jit(lambda x, g: jax.vjp(lambda x: conv(x, w), x)[1](g))(x, y))
  jax.block_until_ready(jax.jit(lambda w, g: jax.vjp(lambda w: conv(x, w), w)[1](g))(w, y))


run(8, 512, (4000,), (3,), 16)
run(32, 256, (28, 28), (3, 3), 32)
