#!/usr/bin/env python3
"""A small-batch train step with and without CUDA graphs: each model of the
benchmark at batch 8, jax_im2col's convolution (the project's kernels only,
so every convolution is a custom call) and XLA's, each compiled with XLA's
command buffers on for fusions, cuBLAS and custom calls
(xla_gpu_graph_min_graph_size=1) and with them off; wall clock per step.

    python benchmarks/cuda_graphs.py --out DIR [--models resnet50,mobilenetv2,convnext_t]
        [--dtype f32|bf16] [--batch 8] [--steps 20] [--repeats 5]

Writes DIR/cuda_graphs.json and prints a table: ms per step, graphs / no
graphs for each implementation, and ours / XLA with graphs.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys

import jax
import jax.numpy as jnp
import numpy as np

import jax_im2col
from model_bench.environment import environment
from model_bench.problem import IMPLS
from model_bench.steps import init_train_state, step_function
from model_bench.timing import interleaved, train_loop
from model_zoo import MODELS

GRAPHS = {"xla_gpu_enable_command_buffer": "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL",
          "xla_gpu_graph_min_graph_size": 1}
NO_GRAPHS = {"xla_gpu_enable_command_buffer": ""}


def ms_per_step(compiled, train_state, x, labels, steps, repeats):
  times = interleaved({"step": train_loop(compiled, train_state, x, labels)}, steps, repeats)
  return statistics.median(times["step"])


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", required=True, type=pathlib.Path)
  parser.add_argument("--models", default="resnet50,mobilenetv2,convnext_t")
  parser.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--preset", default="full")
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args(argv)
  args.out.mkdir(parents=True, exist_ok=True)
  dtype = jnp.bfloat16 if args.dtype == "bf16" else None
  rows = []
  env = environment()
  for name in args.models.split(","):
    spec = MODELS[name]
    p = spec.presets[args.preset]
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((args.batch, *p.input_shape), np.float32))
    label_shape = (args.batch, *p.input_shape[:-1]) if spec.dense_labels else (args.batch,)
    labels = jnp.asarray(rng.integers(0, p.num_classes, label_shape, np.int32))
    init = spec.build(args.preset, IMPLS["xla"], dtype)
    variables = jax.jit(lambda k, x: init.init(k, x, train=False))(jax.random.key(0), x[:1])
    row = {"model": name, "batch": args.batch, "dtype": args.dtype}
    with jax_im2col.force_algorithm("own"):
      for impl in ("xla", "ours"):
        step = jax.jit(step_function(spec.build(args.preset, IMPLS[impl], dtype)), donate_argnums=0)
        for label, options in (("graphs", GRAPHS), ("no_graphs", NO_GRAPHS)):
          state = init_train_state(variables["params"],
                                   {k: v for k, v in variables.items() if k != "params"})
          compiled = step.lower(state, x, labels).compile(compiler_options=options)
          row[f"{impl}_{label}_ms"] = ms_per_step(compiled, state, x, labels, args.steps,
                                                  args.repeats)
    row["ours_graphs_gain"] = row["ours_graphs_ms"] / row["ours_no_graphs_ms"]
    row["xla_graphs_gain"] = row["xla_graphs_ms"] / row["xla_no_graphs_ms"]
    row["ours_over_xla_graphs"] = row["ours_graphs_ms"] / row["xla_graphs_ms"]
    rows.append(row)
    print(json.dumps(row), flush=True)
    (args.out / "cuda_graphs.json").write_text(  # after each model: a cut-off run keeps its rows
        json.dumps({"environment": env, "rows": rows}, indent=1))
  print("| model | ours ms graphs / none | XLA ms graphs / none | ours / XLA (graphs) |")
  print("|---|---|---|---|")
  for r in rows:
    print(f"| {r['model']} | {r['ours_graphs_ms']:.2f} / {r['ours_no_graphs_ms']:.2f} | "
          f"{r['xla_graphs_ms']:.2f} / {r['xla_no_graphs_ms']:.2f} | "
          f"{r['ours_over_xla_graphs']:.2f} |")
  return 0


if __name__ == "__main__":
  sys.exit(main())
