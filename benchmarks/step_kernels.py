#!/usr/bin/env python3
"""Where a whole train step's device time goes, kernel by kernel: the model
benchmark's train step compiled with XLA's convolution, with the routing
rules as they stand ("ours") and with routing_ab.py's candidate rules, each run
for a few steps under torch's profiler (CUPTI sees every kernel of the
process). Per variant it prints the device time per step by class of kernel
(the project's kernels, XLA's convolutions, GEMMs, XLA's fusions,
collectives, copies) and the kernels that take the most, then one JSON line.

    python benchmarks/step_kernels.py [--model convnext_t] [--dtype bf16]
        [--candidates large_filter_56] [--steps 5] [--top 15] [--out DIR]
    python benchmarks/step_kernels.py --report DIR/step_kernels_MODEL_DTYPE.json [--top 15]

The sum of a step's kernels is its device busy time; the train step's wall
clock (models.py, routing_ab.py) adds the gaps between kernels. A class of
kernels, not one layer, is what this reads: which kernel belongs to which
layer is not known here (per-layer times: models.py --per-layer). --report
prints a saved run again (its kernels classed by the rules as they stand),
measuring nothing.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import device_span
from model_bench.kernels import by_class, kernel_class, profile
from model_bench.problem import init_variables, make_problem
from model_bench.timing import train_loop
from model_zoo import MODELS
from routing_ab import add_step_arguments, candidate_names, compiled_steps


def report(model: str, dtype: str, results: dict, top: int) -> None:
  """The class table and each variant's top kernels; classes from the names."""
  for r in results.values():
    r["by_class"] = by_class(r["by_name"])
  classes = sorted({c for r in results.values() for c in r["by_class"]})
  print(f"{model} {dtype}: device us per train step by class of kernel")
  width = max(14, 2 + max(len(n) for n in results))
  print(f"{'class':12s}" + "".join(f"{n:>{width}s}" for n in results))
  for c in classes + ["busy", "span"]:
    row = [r["by_class"].get(c, 0.0) if c not in ("busy", "span") else r[f"{c}_us"]
           for r in results.values()]
    print(f"{c:12s}" + "".join(f"{v:{width}.1f}" for v in row))
  for name, r in results.items():
    print(f"\n{name}: the {top} kernels taking the most (us per step, class)")
    for kernel, us in sorted(r["by_name"].items(), key=lambda kv: -kv[1])[:top]:
      print(f"  {us:8.1f}  {kernel_class(kernel):10s}  {kernel[:110]}")


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  add_step_arguments(parser, "convnext_t", "")
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--top", type=int, default=15)
  parser.add_argument("--out", type=pathlib.Path)
  parser.add_argument("--report", type=pathlib.Path, help="print a saved run's JSON, measure nothing")
  args = parser.parse_args(argv)
  if args.report:
    saved = json.loads(args.report.read_text())
    report(saved["model"], saved["dtype"], saved["results"], args.top)
    return saved
  names = candidate_names(parser, args.candidates)
  if not device_span.available():
    parser.error("needs torch with CUDA on a GPU (CUPTI timestamps)")

  spec = MODELS[args.model]
  problem = make_problem(spec, args.preset, args.dtype, init_variables(spec, args.preset))
  results = {}
  start = time.time()
  for name, compiled, state in compiled_steps(problem, names):
    run = train_loop(compiled, state, problem.x, problem.labels)
    run(3)
    results[name] = profile(run, args.steps)
    print(f"[{time.time() - start:.0f} s] {name} compiled and profiled", flush=True)

  report(args.model, args.dtype, results, args.top)
  out = {"model": args.model, "dtype": args.dtype, "steps": args.steps, "results": results}
  if args.out:
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"step_kernels_{args.model}_{args.dtype}.json").write_text(json.dumps(out, indent=1))
  print(json.dumps({n: {k: r[k] for k in ("busy_us", "span_us", "by_class")}
                    for n, r in results.items()}))
  return out


if __name__ == "__main__":
  main()
