#!/usr/bin/env python3
"""The per-op measurements of benchmarks/routing.py read under the routing
rules as they stand: for each measured op, whether the rules now give it to
XLA's convolution or to the project's kernels, and so its expected time
against XLA's (own / XLA where the project's kernel runs, 1 where XLA's does).
No device needed: the rules are a pure function of the op (jax_im2col.explain
for a CUDA GPU), the times come from the file.

    python benchmarks/routing_replay.py ROUTING_JSON [--worst 15] [--limit 1.15]

Prints the ops above --limit that the rules leave on the project's kernels,
the worst ops overall, and per model and dtype the uses-weighted sum of
expected op times against XLA's (convolutions alone; a whole model adds the
layout and fusion effects that only benchmarks/models.py sees).
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib

import jax
import jax.numpy as jnp
from jax import lax

import jax_im2col

OPS = {"fwd": "forward", "dgrad": "input_gradient", "wgrad": "filter_gradient"}
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def route(call: dict) -> dict:
  """{op: algorithm} the rules choose for a recorded call on a CUDA GPU."""
  dt = DTYPES[call["dtype"]]
  dn = lax.ConvDimensionNumbers(*(tuple(s) for s in call["dimension_numbers"]))
  with jax_im2col.force_algorithm("auto"):
    got = jax_im2col.explain(
        jax.ShapeDtypeStruct(tuple(call["lhs_shape"]), dt),
        jax.ShapeDtypeStruct(tuple(call["rhs_shape"]), dt),
        tuple(call["window_strides"]),
        call["padding"] if isinstance(call["padding"], str) else [tuple(p) for p in call["padding"]],
        tuple(call["lhs_dilation"]), tuple(call["rhs_dilation"]), dn,
        call["feature_group_count"], call["batch_group_count"], platform="cuda")
  return {op: choice.algorithm for op, choice in got.items()}


def replay(rows: list[dict]) -> list[dict]:
  cache, out = {}, []
  for row in rows:
    key = json.dumps(row["call"], sort_keys=True)
    if key not in cache:
      cache[key] = route(row["call"])
    chosen = cache[key][OPS[row["op"]]]
    expected = 1.0 if chosen == "xla" else row["ratio"]
    out.append({**row, "chosen": chosen, "expected": expected})
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("routing_json", type=pathlib.Path)
  parser.add_argument("--worst", type=int, default=15)
  parser.add_argument("--limit", type=float, default=1.15)
  args = parser.parse_args(argv)
  data = json.loads(args.routing_json.read_text())
  rows = replay(data["rows"])

  def line(r):
    return (f"  {r['model']:<12} {r['dtype']:<5} {r['class']:<28} x{tuple(r['lhs_shape'])} "
            f"w{tuple(r['rhs_shape'])} {r['op']:<5} {r['chosen']:<16} own/XLA {r['ratio']:.2f}")

  over = [r for r in rows if r["chosen"] != "xla" and r["ratio"] > args.limit]
  print(f"{len(rows)} measured ops; {sum(r['chosen'] == 'xla' for r in rows)} go to XLA's convolution "
        f"under the rules; {len(over)} stay on the project's kernels at over {args.limit}x XLA:")
  for r in sorted(over, key=lambda r: -r["ratio"]):
    print(line(r))
  print(f"worst {args.worst} expected ops:")
  for r in sorted(rows, key=lambda r: -r["expected"])[:args.worst]:
    print(line(r))
  sums = collections.defaultdict(lambda: [0.0, 0.0])
  for r in rows:
    s = sums[(r["model"], r["dtype"])]
    s[0] += r["uses"] * (r["xla_ms"] if r["chosen"] == "xla" else r["own_ms"])
    s[1] += r["uses"] * r["xla_ms"]
  print("per model, uses-weighted convolution time under the rules / XLA's" +
        (" (over the measured ops only: routing.py --routed-own left out those the rules of its "
         "run sent to XLA's convolution):" if data.get("environment", {}).get("routed_own") else ":"))
  for (model, dtype), (ours, xla) in sorted(sums.items()):
    print(f"  {model:<12} {dtype:<5} {ours / xla:.2f}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
