"""The host's time per call inside a compiled program: chains (bench._chain)
of R calls on operands so small that the device's time is negligible, run
several times back to back, on the host clock. What is left is what the
runtime spends on the host per call (a custom call's handler, a kernel
launch, a command buffer's update). Where it exceeds an op's device time,
a chain of that op is host-bound and bench.py's host-clock numbers read
high; docs/optimization-log.md, step 51.

  python benchmarks/host_cost.py [--calls 64]
"""

import argparse
import statistics
import sys
import os
import time

import jax
import jax.numpy as jnp
from jax import lax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import jax_im2col as J  # noqa: E402


def per_call_us(fn, args, r, runs=4, reps=7):
  run = bench._chain(fn, r).lower([args]).compile(bench._chain_compile_options())
  jax.block_until_ready(run([args]))

  def timed():
    t0 = time.perf_counter()
    jax.block_until_ready([run([args]) for _ in range(runs)])
    return (time.perf_counter() - t0) / (runs * r) * 1e6

  return statistics.median(timed() for _ in range(reps))


def probes():
  """(name, fn, args): tiny instances of each kind of call."""
  key = jax.random.key(0)
  x1 = jax.random.normal(key, (1, 64, 128), jnp.float32)  # grouped 1-D: the channels-first kernels
  w1 = jax.random.normal(key, (64, 32, 3), jnp.float32)
  x2 = jax.random.normal(key, (1, 8, 8, 8), jnp.float32)
  w2 = jax.random.normal(key, (8, 8, 3, 3), jnp.float32)
  g1 = dict(window_strides=(1,), padding=((1, 1),), feature_group_count=2)
  g2 = dict(window_strides=(1, 1), padding=((1, 1), (1, 1)))
  yield "jnp: x * 2 + 1 (one fusion)", lambda x: x * 2 + 1, (x1,)
  yield "xla conv 1-D grouped", lambda x, w: lax.conv_general_dilated(x, w, **g1), (x1, w1)
  yield "ours conv 1-D grouped (channels-first kernel)", lambda x, w: J.conv_general_dilated(x, w, **g1), (x1, w1)
  yield "xla conv 2-D", lambda x, w: lax.conv_general_dilated(x, w, **g2), (x2, w2)
  yield "ours conv 2-D", lambda x, w: J.conv_general_dilated(x, w, **g2), (x2, w2)
  yield "ours unfold 2-D", lambda x: J.unfold(x, (3, 3), padding=1), (x2,)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--calls", type=int, default=64)
  args = parser.parse_args()
  print(f"{jax.devices()[0].device_kind}: host microseconds per call, chains of {args.calls}")
  for name, fn, operands in probes():
    print(f"  {per_call_us(fn, operands, args.calls):8.1f} us  {name}", flush=True)


if __name__ == "__main__":
  main()
