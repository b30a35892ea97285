#!/usr/bin/env python3
"""Whole models, end to end: jax_im2col.conv_general_dilated against XLA's
convolution inside flax models, trained and evaluated as users run them.

    python benchmarks/models.py --out DIR
        [--models resnet50,mobilenetv2,convnext_t,unet3d,wavenet] [--dtypes f32,bf16]
        [--modes train,infer] [--per-layer] [--preset full|small|tiny]
        [--steps N] [--repeats R] [--f64-check auto|on|off]
    python benchmarks/models.py --out DIR --join A/models.json B/models.json[:model,model] ...

Each model (benchmarks/model_zoo) is built twice, with `nn.Conv(...,
conv_general_dilated=CONV)` for CONV = jax.lax.conv_general_dilated and
jax_im2col.conv_general_dilated, from the same parameters. Per precision
(f32: float32 at DEFAULT precision; bf16: float32 parameters, bfloat16
compute):
- train: the jitted step (value_and_grad of softmax cross-entropy, optax SGD
  with momentum 0.9, BatchNorm in training mode, train state donated); its
  compile time and XLA memory analysis; the losses of the first two steps of
  both from the same start; gradients of ours vs XLA set against XLA's own
  sensitivity (model_bench/agreement.py); ms per step; where torch sees the
  GPU (CUPTI), each step's device time by class of kernel and the share of
  ours' convolution time in the project's own kernels (model_bench/kernels.py).
- infer: the jitted evaluation-mode forward; logits' difference; ms per call.
- --per-layer: every distinct convolution of the model timed alone, forward
  and VJP (model_bench/per_layer.py).
- f64 check (default: on the CPU only): loss and gradients of ours vs XLA in
  float64.
Times are the wall clock of a loop of N calls (blocking at the end) per call,
median of R repeats after a warm-up loop, ours and XLA interleaved.

Writes DIR/models.json (every number and the environment; rewritten after
each model, so an interrupted run keeps what it measured), DIR/models.md
(markdown tables for BENCHMARKS.md) and DIR/models.png (ours / XLA bars;
skipped without matplotlib). A model's failure is recorded and the run goes on.
--join writes the same three files from earlier runs' models.json (per model
and dtype the latest run; model_bench/join.py) and measures nothing.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

from model_bench.environment import environment
from model_bench.join import join, load
from model_bench.plot import plot
from model_bench.report import markdown
from model_bench.run import MODES, run_model
from model_zoo import MODELS, PRESETS

# Default (steps, repeats) per preset.
LOOPS = {"full": (20, 5), "small": (3, 3), "tiny": (1, 1)}
DTYPES = ("f32", "bf16")


def _list(choices):
  def parse(text: str) -> list[str]:
    items = [s for s in text.split(",") if s]
    unknown = [s for s in items if s not in choices]
    if unknown or not items:
      raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}; got {text!r}")
    return items
  return parse


def parse_args(argv=None) -> argparse.Namespace:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--models", type=_list(tuple(MODELS)), default=list(MODELS))
  ap.add_argument("--dtypes", type=_list(DTYPES), default=list(DTYPES))
  ap.add_argument("--modes", type=_list(tuple(MODES)), default=list(MODES))
  ap.add_argument("--per-layer", action="store_true", help="also time every distinct convolution")
  ap.add_argument("--preset", choices=PRESETS, default="full")
  ap.add_argument("--steps", type=int, help="calls per timed loop (default by preset)")
  ap.add_argument("--repeats", type=int, help="timed loops per implementation (default by preset)")
  ap.add_argument("--f64-check", choices=("auto", "on", "off"), default="auto",
                  help="float64 loss and gradient check (auto: on the CPU)")
  ap.add_argument("--out", type=pathlib.Path, required=True)
  ap.add_argument("--join", nargs="+", metavar="MODELS_JSON[:model,...]",
                  help="join earlier runs into one report instead of measuring")
  args = ap.parse_args(argv)
  steps, repeats = LOOPS[args.preset]
  args.steps = args.steps or steps
  args.repeats = args.repeats or repeats
  return args


def write(results: dict, out: pathlib.Path) -> None:
  """models.json and models.md."""
  (out / "models.json").write_text(json.dumps(results, indent=1))
  (out / "models.md").write_text(markdown(results))


def main(argv=None) -> dict:
  args = parse_args(argv)
  start = time.perf_counter()

  def log(message: str) -> None:
    print(f"[{time.perf_counter() - start:7.1f} s] {message}", flush=True)

  args.out.mkdir(parents=True, exist_ok=True)
  if args.join:
    results = join([load(a) for a in args.join], order=list(MODELS))
    write(results, args.out)
    plot(results, args.out / "models.png")
    return results
  env = environment()
  f64_check = args.f64_check == "on" or (args.f64_check == "auto" and env["platform"] == "cpu")
  config = {k: v for k, v in vars(args).items() if k != "out"}
  results = {"environment": env, "config": {**config, "f64_check": f64_check}, "models": []}
  log(f"{env['device_kind']} ({env['platform']}), jax {env['versions']['jax']}; preset "
      f"{args.preset}, {args.steps} steps x {args.repeats} repeats")
  for name in args.models:
    log(f"{name}: start")
    results["models"].append(run_model(MODELS[name], args.preset, args.dtypes, args.modes,
                                       args.steps, args.repeats, args.per_layer, f64_check, log))
    write(results, args.out)
  plotted = plot(results, args.out / "models.png")
  log(f"wrote {args.out}: models.json, models.md, " +
      ("models.png" if plotted else "no models.png (no matplotlib, or nothing timed)"))
  print(markdown(results), flush=True)
  return results


if __name__ == "__main__":
  main(sys.argv[1:])
