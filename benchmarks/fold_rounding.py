#!/usr/bin/env python3
"""How each fold of the benchmark rounds, in bfloat16 and float16: our fold
(the project's kernel and the lax route, both summing in float32 and rounding
once) and plain JAX's fused VJP of pad + strided slices + stack (bench.py's
jax_vjp, which sums in the columns' own type), against the float64 sum
rounded once to the type.

    python benchmarks/fold_rounding.py [--dtypes bf16,f16] [--layouts cf,cl] [--rows NAME,...]

Prints, per suite row: the share of elements that differ from the correctly
rounded sum, and the largest difference in units of eps times the sum of the
magnitudes of the element's taps (errors(): 0.5 bounds one rounding). Columns
are standard normal.
"""

from __future__ import annotations

import argparse

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jax_im2col as J  # noqa: E402
from bench import SUITE, column_shapes, jax_vjp_fold_fn, ours_fold_fn  # noqa: E402
from jax_im2col.columns.fold_by_pads import fold_by_pads  # noqa: E402
from jax_im2col.common.geometry import Window  # noqa: E402

TYPES = {"bf16": jnp.bfloat16, "f16": jnp.float16}


def exact(case, layout: str, cols):
  """The float64 sum of each element's taps."""
  w = Window(tuple(case.kernel), tuple(case.stride), tuple(case.dilation), (1,) * case.nd,
             tuple(tuple(p) for p in case.pads))
  f = jax.jit(lambda c: fold_by_pads(c.astype(jnp.float64), window=w, channels_last=layout == "cl",
                                     spatial=tuple(case.spatial)))
  return f(cols)


def errors(got, want, scale, dtype) -> tuple[float, float]:
  """(share of elements that differ from the correctly rounded sum, largest
  difference in units of eps x the sum of the magnitudes of the element's
  taps: at most 0.5 for one rounding, up to about K - 1 for a sum rounded
  after each of its K - 1 additions)."""
  eps = float(jnp.finfo(dtype).eps)
  got, want, scale = (np.asarray(a, np.float64) for a in (got, want, scale))
  diff = np.abs(got - want)
  return float(np.mean(diff > 0)), float(np.max(diff / np.maximum(eps * scale, np.finfo(np.float64).tiny)))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--dtypes", default="bf16,f16")
  parser.add_argument("--layouts", default="cf,cl")
  parser.add_argument("--rows", default="", help="comma list of suite rows (default: all)")
  args = parser.parse_args()
  rng = np.random.default_rng(0)
  print(f"{jax.devices()[0].device_kind}; jax {jax.__version__}")
  print("| row | dtype | layout | K | ours (kernel): differ, max error | ours (lax route) | plain JAX's VJP |")
  print("|---|---|---|---|---|---|---|")
  for dt in args.dtypes.split(","):
    dtype = TYPES[dt]
    for layout in args.layouts.split(","):
      for case in SUITE:
        if layout not in case.layouts or (args.rows and case.name not in args.rows.split(",")):
          continue
        _, cols_shape, _, _ = column_shapes(case, layout, dtype)
        cols = jnp.asarray(rng.standard_normal(cols_shape, np.float32), dtype)
        total = exact(case, layout, cols)
        want, scale = total.astype(dtype), exact(case, layout, jnp.abs(cols))
        got = {}
        for name, fn in (("own", ours_fold_fn(case, layout, "own")), ("xla", ours_fold_fn(case, layout, "xla")),
                         ("vjp", jax_vjp_fold_fn(case, layout, dtype))):
          got[name] = errors(jax.jit(fn)(cols), want, scale, dtype)
        cells = [f"{100 * s:.1f}%, {m:.2f}" for s, m in got.values()]
        k = int(np.prod(case.kernel))
        print(f"| {case.name} | {dt} | {layout} | {k} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
  main()
