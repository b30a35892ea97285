"""Where an op's device time goes, kernel by kernel: runs ours (and, with
--xla, XLA's) forward, input gradient and filter gradient of named shapes once
each, warm, after cudaProfilerStart, so that `ncu --profile-from-start off`
(benchmarks/ncu_profile.sh kernels) times only those launches. Before each op
it prints a marker line and launches torch's fill kernel, which no op of ours
or XLA's launches: the n-th fill in ncu's list starts the n-th marker's
kernels.

  python benchmarks/kernel_times.py --cases resnext_g32 --dtypes bf16 --layouts cf
      [--ops fwd,dgrad,wgrad] [--xla]
"""

import argparse
import faulthandler
import os
import sys

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--cases", required=True)
  parser.add_argument("--ops", default="fwd,dgrad,wgrad")
  parser.add_argument("--dtypes", default="f32,bf16")
  parser.add_argument("--layouts", default="cf,cl")
  parser.add_argument("--xla", action="store_true", help="XLA's kernels too")
  args = parser.parse_args()
  faulthandler.enable()
  import torch  # the markers' fill kernel, and cudaProfilerStart / Stop
  marker = torch.empty(1, device="cuda")
  by_name = {c.name: c for c in bench.SUITE + bench.EXTRAS}
  data = bench.Data()
  for name in args.cases.split(","):
    case = by_name[name]
    for dt in args.dtypes.split(","):
      for layout in args.layouts.split(","):
        if dt not in case.dtypes or layout not in case.layouts:
          continue
        impls = bench.conv_impls(case, layout, dt)[:2 if args.xla else 1]
        xs, ws, ys = bench.x_shape(case, layout), bench.w_shape(case, layout), bench.y_shape(case, layout)
        for op in args.ops.split(","):
          operands = data.sets([xs, ws] if op == "fwd" else [xs, ws, ys], bench.DTYPES[dt])[0]
          for impl, fn in impls:
            f = jax.jit(bench.conv_op(fn, op))
            jax.block_until_ready(f(*operands))  # compiled and autotuned outside the profile
            print(f"=== {name} {dt} {layout} {op} {impl}", flush=True)
            torch.cuda.profiler.start()
            marker.fill_(1.0)
            torch.cuda.synchronize()
            jax.block_until_ready(f(*operands))
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()


if __name__ == "__main__":
  main()
