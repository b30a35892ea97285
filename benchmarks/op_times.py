"""The forward, input gradient and filter gradient of named shapes (suite or
cases reported slow), each timed alone, ours beside XLA, in float32 and
bfloat16, channels-first and channels-last: where a backward's time goes.
Prints one line per op and writes op_times.json under --out.

  python benchmarks/op_times.py --out DIR --cases mbv2_dw3x3,resnext_g32
      [--ops fwd,dgrad,wgrad] [--dtypes f32,bf16] [--layouts cf,cl] [--deadline-s 200]
"""

import argparse
import json
import os
import sys
import time

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

CFG = bench.TimingConfig(warmup=2, min_reps=5, max_reps=15, budget_s=0.08)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--out", default=".")
  bench.add_case_arguments(parser)
  parser.add_argument("--deadline-s", type=float, default=1e9)
  args = parser.parse_args()
  data = bench.Data()
  rows = []
  print(f"{'shape':18} {'dtype':5} {'lay':3} {'op':6} {'ours':>9} {'xla':>9} {'ours/xla':>8}", flush=True)
  for case, dt, layout in bench.chosen_configs(parser, args):
    name = case.name
    xs, ws, ys = bench.x_shape(case, layout), bench.w_shape(case, layout), bench.y_shape(case, layout)
    (_, ours), (_, xla) = bench.conv_impls(case, layout, dt)[:2]  # DEFAULT precision
    for op in args.ops.split(","):
      if time.perf_counter() - bench.T_START > args.deadline_s:
        break
      sets = data.sets([xs, ws] if op == "fwd" else [xs, ws, ys], bench.DTYPES[dt])
      row = dict(shape=name, dtype=dt, layout=layout, op=op,
                 ours=bench.time_jax(jax.jit(bench.conv_op(ours, op)), sets, CFG)["ms"],
                 xla=bench.time_jax(jax.jit(bench.conv_op(xla, op)), sets, CFG)["ms"])
      del sets
      rows.append(row)
      print(f"{name:18} {dt:5} {layout:3} {op:6} {row['ours']:9.4f} {row['xla']:9.4f} "
            f"{row['ours'] / row['xla']:8.2f}", flush=True)
  with open(os.path.join(args.out, "op_times.json"), "w") as f:
    json.dump(dict(device=str(jax.devices()[0]), rows=rows), f, indent=1)


if __name__ == "__main__":
  main()
