"""What a benchmark chain spends its time on: compiles the chain of R calls
that bench.py times (bench._chain), runs it warm under torch's profiler
(CUPTI) and prints, per call, the device span (first kernel's start to last
kernel's end), the kernels' busy time and each kernel's mean time, beside two
host clocks: one run alone (bench.py's --jax-clock host) and runs dispatched
back to back. BENCHMARKS.md step 51 has what it showed: the host clock of a
run counts the runtime's start-up of the run (about half a millisecond on the
H200), not kernels running slower in the chain. Writes chain_trace.json
under --out.

  python benchmarks/chain_trace.py --out DIR --cases grouped1d_g16 --dtypes f32 --layouts cf
      [--ops fwd,bwd] [--calls 8,32,64] [--xla]
"""

import argparse
import collections
import json
import os
import statistics
import sys
import time

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import device_span  # noqa: E402


def host_walls(run, sets, reps=10, runs=4):
  """Host-clock microseconds of the chain (median of `reps`): "one run"
  dispatched and waited for alone (bench.py's repeat), and "of N back to
  back", the runs dispatched together and waited for once, per run."""
  def timed(n):
    t0 = time.perf_counter()
    outs = [run(sets) for _ in range(n)]
    jax.block_until_ready(outs)
    return (time.perf_counter() - t0) / n * 1e6

  return {"one run": statistics.median(timed(1) for _ in range(reps)),
          f"of {runs} back to back": statistics.median(timed(runs) for _ in range(reps))}


def trace_chain(fn, r: int, sets) -> dict:
  """The chain of r calls of fn: host clocks, device span and kernels, per call."""
  run = bench._chain(fn, r).lower(sets).compile(bench._chain_compile_options())
  jax.block_until_ready(run(sets))
  walls = host_walls(run, sets)
  spans = device_span.kernel_spans(lambda: jax.block_until_ready(run(sets)))
  busy = sum(end - start for _, start, end in spans)
  span = spans[-1][2] - spans[0][1] if spans else 0.0
  per_name = collections.defaultdict(list)
  for name, start, end in spans:
    per_name[name].append(end - start)
  kernels = [dict(name=name, per_call=len(times) / r, mean_us=sum(times) / len(times))
             for name, times in sorted(per_name.items(), key=lambda kv: -sum(kv[1]))]
  return dict(calls=r, span_us=span / r, busy_us=busy / r, kernels=kernels,
              host_us={k: v / r for k, v in walls.items()})


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--out", default=".")
  bench.add_case_arguments(parser)
  parser.add_argument("--calls", default="32", help="R, the calls in the chain (comma list: one chain each)")
  parser.add_argument("--xla", action="store_true", help="XLA's chain too")
  args = parser.parse_args()
  data = bench.Data()
  rows = []
  for case, dt, layout in bench.chosen_configs(parser, args):
    impls = bench.conv_impls(case, layout, dt)[:2 if args.xla else 1]
    xs, ws, ys = bench.x_shape(case, layout), bench.w_shape(case, layout), bench.y_shape(case, layout)
    for op in args.ops.split(","):
      sets = data.sets([xs, ws] if op == "fwd" else [xs, ws, ys], bench.DTYPES[dt])
      for impl, fn in impls:
        for r in map(int, args.calls.split(",")):
          row = dict(shape=case.name, dtype=dt, layout=layout, op=op, impl=impl,
                     **trace_chain(bench.conv_op(fn, op), r, sets))
          rows.append(row)
          print(f"=== {case.name} {dt} {layout} {op} {impl}: R={r}, per call: device span "
                f"{row['span_us']:.1f} us, kernels {row['busy_us']:.1f} us; host clock: "
                + ", ".join(f"{k} {v:.1f} us" for k, v in row["host_us"].items()), flush=True)
          for k in row["kernels"]:
            print(f"  {k['per_call']:5.2f} x {k['mean_us']:8.1f} us  {k['name'][:110]}")
  with open(os.path.join(args.out, "chain_trace.json"), "w") as f:
    json.dump(dict(device=str(jax.devices()[0]), rows=rows), f, indent=1)


if __name__ == "__main__":
  main()
