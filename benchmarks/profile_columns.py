"""Runs unfold / fold of a few suite shapes once each, for profiling under ncu
(benchmarks/ncu_profile.sh columns): the typical 3x3 conv (both layouts, and
bfloat16 channels-first), the strided 3x3, the 7x7-pixel 3x3 with 512
channels (one wave of blocks; the last two in both float types), and the 3-channel 7x7/s2 stem."""

import jax
import jax.numpy as jnp

import jax_im2col as j


def run(shape, kernel, stride, padding, channels_last, dtype=jnp.float32):
  x = jax.random.normal(jax.random.PRNGKey(0), shape, dtype)
  spatial = shape[1:-1] if channels_last else shape[2:]
  unfold = j.unfold_channels_last if channels_last else j.unfold
  fold = j.fold_channels_last if channels_last else j.fold
  window = dict(kernel_size=kernel, stride=stride, padding=padding)
  cols = jax.block_until_ready(jax.jit(lambda v: unfold(v, **window))(x))
  jax.block_until_ready(jax.jit(lambda c: fold(c, spatial, **window))(cols))


run((32, 64, 56, 56), 3, 1, 1, False)
run((32, 56, 56, 64), 3, 1, 1, True)
run((32, 64, 56, 56), 3, 1, 1, False, jnp.bfloat16)
run((32, 128, 56, 56), 3, 2, 1, False)
run((32, 128, 56, 56), 3, 2, 1, False, jnp.bfloat16)
run((32, 512, 7, 7), 3, 1, 1, False)
run((32, 512, 7, 7), 3, 1, 1, False, jnp.bfloat16)
run((32, 224, 224, 3), 7, 2, 3, True)
run((32, 3, 224, 224), 7, 2, 3, False)
