"""Where an op's device time goes, kernel by kernel: runs ours (and, with
--xla, XLA's) forward, input gradient and filter gradient of named shapes once
each, warm, under torch's profiler (CUPTI records every kernel of the
process, XLA's included), and prints each kernel's device time and the op's
total. Ops "unfold" and "fold" time ours (and XLA's patches, with --xla) and
print the op's bandwidth (input plus columns over its kernels' time). Writes
kernel_times.json under --out.

  python benchmarks/kernel_times.py --out DIR --cases resnext_g32 --dtypes bf16 --layouts cf
      [--ops fwd,dgrad,wgrad,unfold,fold] [--xla]
"""

import argparse
import json
import os
import sys

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import device_span  # noqa: E402


def kernels_of(run):
  """(name, device microseconds) of each kernel that run() launches."""
  return [(name, end - start) for name, start, end in device_span.kernel_spans(run)]


def column_impls(case, layout: str, dt: str, op: str):
  """(impl, function, operand shapes, bytes moved) of unfold or fold, ours then XLA's."""
  xs, cols, patches, moved = bench.column_shapes(case, layout, bench.DTYPES[dt])
  if op == "unfold":
    return [("ours", bench.ours_unfold_fn(case, layout), [xs], moved),
            ("xla", bench.xla_patches_fn(case, layout), [xs], moved)]
  return [("ours", bench.ours_fold_fn(case, layout), [cols], moved),
          ("xla", bench.xla_fold_fn(case, layout), [xs, patches], moved)]


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--out", default=".")
  bench.add_case_arguments(parser)
  parser.add_argument("--xla", action="store_true", help="XLA's kernels too")
  args = parser.parse_args()
  data = bench.Data()
  rows = []
  for case, dt, layout in bench.chosen_configs(parser, args):
    name = case.name
    count = 2 if args.xla else 1  # ours, then XLA's
    impls = bench.conv_impls(case, layout, dt)[:count]
    xs, ws, ys = bench.x_shape(case, layout), bench.w_shape(case, layout), bench.y_shape(case, layout)
    for op in args.ops.split(","):
      if op in ("unfold", "fold"):
        runs = [(impl, jax.jit(fn), data.sets(shapes, bench.DTYPES[dt])[0], moved)
                for impl, fn, shapes, moved in column_impls(case, layout, dt, op)[:count]]
      else:
        operands = data.sets([xs, ws] if op == "fwd" else [xs, ws, ys], bench.DTYPES[dt])[0]
        runs = [(impl, jax.jit(bench.conv_op(fn, op)), operands, None) for impl, fn in impls]
      for impl, f, operands, moved in runs:
        jax.block_until_ready(f(*operands))  # compiled and autotuned outside the profile
        kernels = kernels_of(lambda: jax.block_until_ready(f(*operands)))
        total = sum(us for _, us in kernels)
        rate = f", {moved / total / 1e3:.0f} GB/s" if moved and total else ""
        print(f"=== {name} {dt} {layout} {op} {impl}: {total:.1f} us{rate}", flush=True)
        for kname, us in kernels:
          print(f"  {us:8.1f} us  {kname[:120]}")
        rows.append(dict(shape=name, dtype=dt, layout=layout, op=op, impl=impl,
                         total_us=total, kernels=kernels))
  with open(os.path.join(args.out, "kernel_times.json"), "w") as f:
    json.dump(dict(device=str(jax.devices()[0]), rows=rows), f, indent=1)


if __name__ == "__main__":
  main()
