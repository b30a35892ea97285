"""Runs the channels-first and channels-last unfold / fold of one suite shape
once each, for profiling under ncu (benchmarks/profile_columns.sh)."""

import jax
import jax.numpy as jnp

import jax_im2col as j

x = jax.random.normal(jax.random.PRNGKey(0), (32, 64, 56, 56), jnp.float32)
xl = jnp.transpose(x, (0, 2, 3, 1))
for fn, arg in ((lambda v: j.unfold(v, 3, padding=1), x),
                (lambda v: j.unfold_channels_last(v, 3, padding=1), xl)):
  cols = jax.block_until_ready(jax.jit(fn)(arg))
jax.block_until_ready(jax.jit(lambda c: j.fold(c, (56, 56), 3, padding=1))(
    jax.jit(lambda v: j.unfold(v, 3, padding=1))(x)))
