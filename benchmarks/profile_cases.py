"""Runs ours on named suite cases, each op once after its compilation, for
profiling under ncu (benchmarks/ncu_profile.sh cases): the same choice of
cases, ops, dtypes and layouts as kernel_times.py, without its profiler
(CUPTI and ncu do not share a process).

  python benchmarks/profile_cases.py --cases resnext_g32 --ops unfold,fold --dtypes bf16 --layouts cf
"""

import argparse
import os
import sys

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import kernel_times  # noqa: E402


def main():
  parser = argparse.ArgumentParser()
  bench.add_case_arguments(parser)
  args = parser.parse_args()
  data = bench.Data()
  for case, dt, layout in bench.chosen_configs(parser, args):
    impls = bench.conv_impls(case, layout, dt)[:1]
    xs, ws, ys = bench.x_shape(case, layout), bench.w_shape(case, layout), bench.y_shape(case, layout)
    for op in args.ops.split(","):
      if op in ("unfold", "fold"):
        _, fn, shapes, _ = kernel_times.column_impls(case, layout, dt, op)[0]
        f, operands = jax.jit(fn), data.sets(shapes, bench.DTYPES[dt])[0]
      else:
        operands = data.sets([xs, ws] if op == "fwd" else [xs, ws, ys], bench.DTYPES[dt])[0]
        f = jax.jit(bench.conv_op(impls[0][1], op))
      f = f.lower(*operands).compile()  # compiled before the profiled launch
      print(f"=== {case.name} {dt} {layout} {op}", flush=True)
      jax.block_until_ready(f(*operands))


if __name__ == "__main__":
  main()
