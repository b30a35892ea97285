"""Runs the fold of a few suite shapes once each, for profiling under ncu
(benchmarks/ncu_profile.sh folds): resnext's 28 x 28 maps and c512's 7 x 7
ones, channels-first (the staged fold), c64 channels-first (the vector fold),
in bfloat16 and float32; the stem and the strided 3x3 channels-last (the
unrolled-taps fold)."""

import jax
import jax.numpy as jnp

import jax_im2col as j


def run(shape, kernel, stride, padding, channels_last, dtype=jnp.float32):
  spatial = shape[1:-1] if channels_last else shape[2:]
  unfold = j.unfold_channels_last if channels_last else j.unfold
  fold = j.fold_channels_last if channels_last else j.fold
  window = dict(kernel_size=kernel, stride=stride, padding=padding)
  x = jnp.zeros(shape, dtype)
  cols = jax.block_until_ready(jax.jit(lambda v: unfold(v, **window))(x))
  jax.block_until_ready(jax.jit(lambda c: fold(c, spatial, **window))(cols))


for dtype in (jnp.bfloat16, jnp.float32):
  run((32, 256, 28, 28), 3, 1, 1, False, dtype)
  run((32, 512, 7, 7), 3, 1, 1, False, dtype)
  run((32, 64, 56, 56), 3, 1, 1, False, dtype)
run((32, 224, 224, 3), 7, 2, 3, True)
run((32, 56, 56, 128), 3, 2, 1, True, jnp.bfloat16)
