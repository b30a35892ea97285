"""Where the implicit GEMM beats im2col + cuBLAS: times the forward, the
input gradient and the filter gradient of every suite shape the implicit GEMM
applies to, with the
CUDA lowering forced onto each path in turn, beside XLA, in float32 (TF32)
and bfloat16, channels-first and channels-last. Prints one line per case and
writes implicit_routing.json under --out (BENCHMARKS.md: routing steps).

  python benchmarks/implicit_routing.py --out DIR [--deadline-s 200] [--ops fwd,dgrad,wgrad]
      [--cases r50_3x3s2_c128,w2v_1d_k3s2]
"""

import argparse
import contextlib
import json
import os
import sys
import time

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

from jax_im2col import _conv_primitives  # noqa: E402

CFG = bench.TimingConfig(warmup=2, min_reps=5, max_reps=15, budget_s=0.08)


@contextlib.contextmanager
def routed(path):
  """The CUDA lowering's choice forced: "implicit" wherever the implicit GEMM
  applies, "gemm" never."""
  cp = _conv_primitives
  original = cp.use_implicit, cp.use_implicit_filter
  if path == "implicit":
    cp.use_implicit = lambda spec, dtype, c, o, positions, input_gradient=False, \
        images=1: cp._implicit(spec, dtype, c, o, input_gradient=input_gradient)
    cp.use_implicit_filter = cp._implicit_filter
  elif path == "gemm":
    cp.use_implicit = cp.use_implicit_filter = lambda *a, **kw: False
  try:
    yield
  finally:
    cp.use_implicit, cp.use_implicit_filter = original


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--out", default=".")
  parser.add_argument("--deadline-s", type=float, default=1e9)
  parser.add_argument("--ops", default="fwd,dgrad,wgrad", help="comma-separated subset")
  parser.add_argument("--cases", default="", help="comma-separated suite shapes (default: all)")
  args = parser.parse_args()
  data = bench.Data()
  rows = []
  print(f"{'shape':16} {'dtype':5} {'lay':3} {'op':6} {'implicit':>9} {'gemm':>9} {'xla':>9} "
        f"{'imp/gemm':>8} {'imp/xla':>8} {'gemm/xla':>8}", flush=True)
  for case in bench.SUITE:
    if case.groups != 1 or all(k == 1 for k in case.kernel):
      continue  # direct kernels, or a plain GEMM
    if args.cases and case.name not in args.cases.split(","):
      continue
    for dt in ("f32", "bf16"):
      dtype = bench.DTYPES[dt]
      for layout in ("cf", "cl"):
        xs, ws, ys = (bench.x_shape(case, layout), bench.w_shape(case, layout),
                      bench.y_shape(case, layout))
        (_, ours), (_, xla) = bench.conv_impls(case, layout, dt)[:2]  # DEFAULT precision
        for op in ("fwd", "dgrad", "wgrad"):
          if op not in args.ops.split(","):
            continue
          if time.perf_counter() - bench.T_START > args.deadline_s:
            break
          shapes = [xs, ws] if op == "fwd" else [xs, ws, ys]
          sets = data.sets(shapes, dtype)
          row = dict(shape=case.name, dtype=dt, layout=layout, op=op)
          for path in ("implicit", "gemm"):
            with routed(path):
              row[path] = bench.time_jax(jax.jit(bench.conv_op(ours, op)), sets, CFG)["ms"]
          row["xla"] = bench.time_jax(jax.jit(bench.conv_op(xla, op)), sets, CFG)["ms"]
          del sets
          rows.append(row)
          print(f"{case.name:16} {dt:5} {layout:3} {op:6} {row['implicit']:9.4f} {row['gemm']:9.4f} "
                f"{row['xla']:9.4f} {row['implicit'] / row['gemm']:8.2f} "
                f"{row['implicit'] / row['xla']:8.2f} {row['gemm'] / row['xla']:8.2f}", flush=True)
  with open(os.path.join(args.out, "implicit_routing.json"), "w") as f:
    json.dump(dict(device=str(jax.devices()[0]), rows=rows), f, indent=1)


if __name__ == "__main__":
  main()
