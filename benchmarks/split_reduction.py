"""Times the implicit GEMM with and without a split reduction where the
outputs are few: r50_3x3_c512 (7 x 7, 512 -> 512 channels) at batch 1 and 4,
channels-last, float32 (TF32) and bfloat16. Prints one line per case with
the median device time of each (docs/optimization-log.md, step 17).

  python benchmarks/split_reduction.py
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

import jax_im2col as j
from jax_im2col.conv import selection


def median_ms(fn, *args, reps=200, rounds=7):
  fn(*args).block_until_ready()
  times = []
  for _ in range(rounds):
    t = time.perf_counter()
    for _ in range(reps):
      out = fn(*args)
    out.block_until_ready()
    times.append((time.perf_counter() - t) / reps * 1e3)
  return float(np.median(times))


def conv_fn():
  return jax.jit(lambda x, w: j.conv_general_dilated(
      x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))


def main():
  split = selection.implicit_splits
  for n in (1, 4):
    for dtype in (jnp.float32, jnp.bfloat16):
      key = jax.random.PRNGKey(0)
      x = jax.random.normal(key, (n, 7, 7, 512), dtype)
      w = jax.random.normal(key, (3, 3, 512, 512), dtype)
      parts = split(m=n * 49, og=512, o=512, groups=1,
                    reduction_bytes=512 * 9 * jnp.dtype(dtype).itemsize, limit=256 << 20,
                    multiprocessors=jax.devices()[0].core_count)
      with_split = median_ms(conv_fn(), x, w)
      selection.implicit_splits = lambda **kw: 1
      try:
        without = median_ms(conv_fn(), x, w)
      finally:
        selection.implicit_splits = split
      lax_ms = median_ms(jax.jit(lambda x, w: jax.lax.conv_general_dilated(
          x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))), x, w)
      print(f"batch {n} {jnp.dtype(dtype).name}: {parts} parts {with_split:.4f} ms, "
            f"unsplit {without:.4f} ms, lax {lax_ms:.4f} ms")


if __name__ == "__main__":
  main()
