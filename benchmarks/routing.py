#!/usr/bin/env python3
"""The measurements behind src/jax_im2col/conv/routing.py: every distinct
convolution of the benchmark's models, each op (forward, input gradient,
filter gradient) timed alone with the project's kernels only ("own", the
algorithm select() prefers among them) and with XLA's convolution, side by
side, in float32 (DEFAULT precision) and bfloat16.

    python benchmarks/routing.py --out DIR [--models resnet50,...] [--dtypes f32,bf16]
        [--preset full] [--steps 10] [--repeats 3] [--deadline-s 400]
        [--clock span|host] [--routed-own] [--classes "2x2 strided"] [--ops dgrad]
        [--algorithms gemm,implicit]
    python benchmarks/routing.py --out DIR --suite   (bench.py's suite, both layouts)

Writes DIR/routing.json (one row per layer, dtype and op: shapes, the
layer's uses in the model, the own algorithm, ms of each, ratio own / XLA)
and DIR/routing.md (the rows, and per op and class of convolution the
geometric mean of the ratios). Rows stop at the deadline; what was measured
is written.

The clock (--clock) is by default each call's device span, from the GPU's
own timestamps (torch's profiler; benchmarks/device_span.py), where torch
sees the GPU, else the host's over a loop of calls. On ops of 20-200 us the
host clock can misread a ratio by a third (docs/optimization-log.md, step
134): rules rest on device spans. --routed-own times only the ops that the
rules leave on the project's kernels (the others run XLA's convolution,
the same program as lax's), to check those against #45's per-layer target.
--algorithms also times each op with each named algorithm forced (where it
applies): the choice among the project's kernels; --classes and --ops keep
the layers whose class holds one of the given texts, and those ops.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
from jax import lax

import jax_im2col
from model_bench.environment import environment
from model_bench.per_layer import ConvCall, _ops, record_convs
from model_bench.problem import IMPLS
from model_bench.timing import calls, interleaved, interleaved_spans, summarize
from model_zoo import MODELS

CLOCKS = {"host": "wall clock of a loop", "span": "device span of each call"}
OPS = {"fwd": "forward", "dgrad": "input_gradient", "wgrad": "filter_gradient"}
DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16}


def conv_class(call) -> str:
  """The class of convolution the routing rules speak of."""
  nd = len(call.lhs_shape) - 2
  groups = call.feature_group_count
  dn = lax.conv_dimension_numbers(call.lhs_shape, call.rhs_shape, call.dimension_numbers)
  channels = call.lhs_shape[dn.lhs_spec[1]]
  parts = [f"{nd}d"]
  if groups > 1:
    parts.append("depthwise" if call.rhs_shape[dn.rhs_spec[1]] == 1 and groups == channels
                 else "grouped")
  if call.lhs_dilation and any(d != 1 for d in call.lhs_dilation):
    parts.append("transposed")
  if call.rhs_dilation and any(d != 1 for d in call.rhs_dilation):
    parts.append("dilated")
  kernel = [call.rhs_shape[d] for d in dn.rhs_spec[2:]]
  parts.append("1x1" if all(k == 1 for k in kernel) else "x".join(map(str, kernel)))
  if any(s != 1 for s in call.window_strides):
    parts.append("strided")
  if dn.lhs_spec[1] != len(call.lhs_shape) - 1:
    parts.append("channels-first")
  return " ".join(parts)


def suite_calls(dtype: str) -> dict[tuple[str, str], ConvCall]:
  """The benchmark suite's convolutions (bench.py's SUITE) in both layouts,
  keyed by (case, layout)."""
  import bench  # the suite's shapes and layouts: one source with the benchmark
  calls = {}
  for case in bench.SUITE:
    for layout in ("cf", "cl"):
      kw = bench.conv_kwargs(case, layout)
      calls[(case.name, layout)] = ConvCall(
          bench.x_shape(case, layout), bench.w_shape(case, layout), jnp.dtype(DTYPES[dtype]).name,
          tuple(kw["window_strides"]), tuple(tuple(p) for p in kw["padding"]),
          kw["lhs_dilation"] and tuple(kw["lhs_dilation"]), tuple(kw["rhs_dilation"]), kw["dimension_numbers"],
          kw["feature_group_count"], 1, None, None)
  return calls


def _forced(call, name, args, algorithm):
  """Op `name` of call compiled with `algorithm` forced, or None where it
  does not apply (the setting is read at trace time)."""
  fn = _ops(IMPLS["ours"], call)[name]
  try:
    with jax_im2col.force_algorithm(algorithm):
      return fn.lower(*args).compile()
  except ValueError:
    return None


def measure(call, steps, repeats, clock="host", routed_own=False, ops=tuple(OPS),
            algorithms=()) -> dict:
  """ms of each op, own kernels and XLA, and the own algorithm per op; with
  routed_own only the ops the rules leave on the project's kernels; with
  `algorithms` each of those forced too (forced_ms)."""
  keys = jax.random.split(jax.random.key(0, impl="rbg"), 3)
  lhs = jax.random.normal(keys[0], call.lhs_shape, call.dtype)
  rhs = jax.random.normal(keys[1], call.rhs_shape, call.dtype)
  kwargs = call.kwargs()
  strides, padding = kwargs.pop("window_strides"), kwargs.pop("padding")
  routed = jax_im2col.explain(lhs, rhs, strides, padding, **kwargs)
  with jax_im2col.force_algorithm("own"):
    own = jax_im2col.explain(lhs, rhs, strides, padding, **kwargs)
    fns = {impl: _ops(conv, call) for impl, conv in IMPLS.items()}
    y = jax.eval_shape(fns["xla"]["fwd"], lhs, rhs)
    g = jax.random.normal(keys[2], y.shape, y.dtype)
    timer = interleaved_spans if clock == "span" else interleaved
    out = {}
    for name in ops:
      if routed_own and routed[OPS[name]].algorithm == "xla":
        continue
      args = (lhs, rhs) if name == "fwd" else (lhs, rhs, g)
      runners = {impl: calls(fns[impl][name], *args) for impl in fns}
      for algorithm in algorithms:
        if (compiled := _forced(call, name, args, algorithm)) is not None:
          runners[f"forced {algorithm}"] = calls(compiled, *args)
      t = summarize(timer(runners, steps, repeats))
      out[name] = {"own_ms": t["ours_ms"], "xla_ms": t["xla_ms"], "ratio": t["ratio"],
                   "own_algorithm": own[OPS[name]].algorithm,
                   "routed_algorithm": routed[OPS[name]].algorithm}
      if algorithms:
        out[name]["forced_ms"] = {a: t.get(f"forced {a}_ms") for a in algorithms}
  return out


def geomean(values):
  values = [v for v in values if v and v > 0]
  return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def markdown(rows, env) -> str:
  lines = ["## Routing measurements: each op of each model layer, own kernels vs XLA", "",
           f"{env.get('device_kind')}; jax {env.get('jax')}; commit {env.get('commit')}; "
           f"{env.get('date')}. ms per call ({CLOCKS[env.get('clock', 'host')]}, median of "
           "repeats, interleaved); ratio own / XLA.", "",
           "| model | dtype | class | x | w | uses | op | own algorithm | routed | own ms | XLA ms | ratio |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['model']} | {r['dtype']} | {r['class']} | {tuple(r['lhs_shape'])} | "
                 f"{tuple(r['rhs_shape'])} | {r['uses']} | {r['op']} | {r['own_algorithm']} | "
                 f"{r.get('routed_algorithm', '')} | "
                 f"{r['own_ms']:.4f} | {r['xla_ms']:.4f} | {r['ratio']:.2f} |")
  lines += ["", "Geometric mean of own / XLA per class, dtype and op:", "",
            "| class | dtype | op | layers | own / XLA |", "|---|---|---|---|---|"]
  groups = {}
  for r in rows:
    groups.setdefault((r["class"], r["dtype"], r["op"]), []).append(r["ratio"])
  for (cls, dt, op), ratios in sorted(groups.items()):
    lines.append(f"| {cls} | {dt} | {op} | {len(ratios)} | {geomean(ratios):.2f} |")
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", required=True, type=pathlib.Path)
  parser.add_argument("--models", default=",".join(MODELS))
  parser.add_argument("--dtypes", default="f32,bf16")
  parser.add_argument("--preset", default="full")
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--deadline-s", type=float, default=400.0)
  parser.add_argument("--suite", action="store_true",
                      help="the benchmark suite's convolutions in both layouts instead of the models'")
  parser.add_argument("--clock", choices=tuple(CLOCKS), default=None,
                      help="device span (default where torch's profiler sees the GPU) or host clock")
  parser.add_argument("--routed-own", action="store_true",
                      help="only the ops the rules leave on the project's kernels")
  parser.add_argument("--classes", default="",
                      help="comma list: only layers whose class holds one of these texts")
  parser.add_argument("--ops", default=",".join(OPS))
  parser.add_argument("--algorithms", default="",
                      help="comma list of algorithms to time forced as well (jax_im2col.ALGORITHMS)")
  args = parser.parse_args(argv)
  classes = [c for c in args.classes.split(",") if c]
  ops = [o for o in args.ops.split(",") if o]
  algorithms = [a for a in args.algorithms.split(",") if a]
  if unknown := sorted(set(ops) - set(OPS)):
    parser.error(f"unknown ops {unknown}; known: {sorted(OPS)}")
  if args.clock is None:
    import device_span
    args.clock = "span" if jax.default_backend() == "gpu" and device_span.available() else "host"
  start = time.perf_counter()
  args.out.mkdir(parents=True, exist_ok=True)
  env = dict(environment(), clock=args.clock, routed_own=args.routed_own)
  rows, seen = [], set()
  if args.suite:
    work = [(f"suite {name} {layout}", dtype, call, 1) for dtype in args.dtypes.split(",")
            for (name, layout), call in suite_calls(dtype).items()]
  else:
    work = [(model, dtype, call, uses) for model in args.models.split(",")
            for dtype in args.dtypes.split(",")
            for call, uses in record_convs(MODELS[model], args.preset, dtype).items()]
  for model, dtype, call, uses in work:
    if time.perf_counter() - start > args.deadline_s:
      print("deadline reached", flush=True)
      break
    if call in seen or (classes and not any(c in conv_class(call) for c in classes)):
      continue
    seen.add(call)
    try:
      times = measure(call, args.steps, args.repeats, args.clock, args.routed_own, ops, algorithms)
    except Exception as e:  # one layer's failure must not lose the rest
      print(f"{model} {dtype} {call.lhs_shape} {call.rhs_shape}: {type(e).__name__}: {e}",
            flush=True)
      continue
    for op, t in times.items():
      rows.append({"model": model, "dtype": dtype, "class": conv_class(call), "uses": uses,
                   "op": op, "lhs_shape": list(call.lhs_shape),
                   "rhs_shape": list(call.rhs_shape), "call": call.describe(), **t})
    print(f"{model} {dtype} {conv_class(call):24} x{call.lhs_shape} w{call.rhs_shape}: " +
          ", ".join(f"{op} {t['own_algorithm']}/{t['routed_algorithm']} {t['ratio']:.2f}"
                    + "".join(f" {a} {v / t['xla_ms']:.2f}" for a, v in t.get("forced_ms", {}).items()
                              if v is not None)
                    for op, t in times.items()), flush=True)
  (args.out / "routing.json").write_text(json.dumps(dict(environment=env, rows=rows), indent=1))
  (args.out / "routing.md").write_text(markdown(rows, env))
  print(f"wrote {len(rows)} rows in {time.perf_counter() - start:.0f} s", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
