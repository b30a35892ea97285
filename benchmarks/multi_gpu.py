#!/usr/bin/env python3
"""Data-parallel training on several GPUs: jax_im2col.conv_general_dilated
against XLA's convolution in the jitted train step of the model benchmark's
models (benchmarks/model_zoo; by default ResNet-50 and the 3-D U-Net), on 1,
2, 4, ... devices.

    python benchmarks/multi_gpu.py --out DIR [--devices 1,2,4] [--models resnet50,unet3d]
        [--dtype f32|bf16] [--per-device-batch resnet50=32,unet3d=1] [--preset full|small|tiny]
        [--steps N] [--repeats R]

Each model is built twice (flax, channels-last, BatchNorm), with nn.Conv's
convolution = jax.lax.conv_general_dilated ("xla") and
jax_im2col.conv_general_dilated ("ours"), from the same parameters. On n
devices (the first n of jax.devices(); default 1, 2, 4, ... up to all of
them) the global batch is per-device batch x n, sharded over a 1-D mesh
("data") with NamedSharding; parameters, BatchNorm statistics and optimizer
state are replicated; the step (value_and_grad of softmax cross-entropy,
SGD with momentum) is one jit that XLA partitions: the gradients' all-reduce
and BatchNorm's batch statistics are its only communication.

Per model, device count and implementation: ms per step (the wall clock of a
loop of N steps, blocking at the end, per step; median of R repeats after a
warm-up; the implementations' loops interleaved at each device count, so
that their ratio sees the same drift), the spread of the repeats ((max -
min) / median), images (or volumes) per second, weak-scaling efficiency
t(1) / t(n) (1.0: n devices take one device's time for n times the work),
the milliseconds added to one device's step t(n) - t(1) (communication and
synchronisation: equal collectives should add equal time), the compile
time, and the collectives in the compiled step by kind (counted in
``jax.jit(step).lower(...).compile().as_text()``, async "-start" forms
included), and the first step's loss of ours against XLA's.

Prints a table; writes DIR/multi_gpu.json (every number and the environment,
rewritten after each measurement) and DIR/multi_gpu.md. Runs on CPUs too (a
smoke test: XLA_FLAGS=--xla_force_host_platform_device_count=4
JAX_PLATFORMS=cpu python benchmarks/multi_gpu.py --preset tiny --out /tmp/mg).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jax_im2col
from model_bench.problem import IMPLS
from model_bench.steps import OPTIMIZER, step_function
from model_bench.timing import interleaved, train_loop
from model_zoo import MODELS

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")


# --- measuring ---------------------------------------------------------------------------

def collectives(text: str) -> dict:
  return {k: len(re.findall(rf"= [^=]*? {k}(-start)?\(", text)) for k in KINDS}


def _batch(spec, preset: str, n: int, seed: int = 0):
  """n random examples of the model at `preset`, and their labels."""
  p = spec.presets[preset]
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((n, *p.input_shape), np.float32)
  shape = (n, *p.input_shape[:-1]) if spec.dense_labels else (n,)
  return x, rng.integers(0, p.num_classes, shape, np.int32)


def prepare(spec, preset: str, per_device_batch: int, devices, impl: str, dtype, variables):
  """One model's compiled data-parallel step on `devices`: its runner (a
  training loop), and the row's compile seconds, collectives and first
  step's loss."""
  n = len(devices)
  mesh = Mesh(np.array(devices), ("data",))
  replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
  module = spec.build(preset, IMPLS[impl], dtype)
  x, labels = _batch(spec, preset, per_device_batch * n)
  x, labels = jax.device_put(x, split), jax.device_put(labels, split)
  params = variables["params"]
  state = {k: v for k, v in variables.items() if k != "params"}
  train_state = jax.device_put((params, state, OPTIMIZER.init(params)), replicated)
  step = jax.jit(step_function(module), donate_argnums=0,
                 out_shardings=(replicated, replicated))
  t0 = time.perf_counter()
  compiled = step.lower(train_state, x, labels).compile()
  compile_s = time.perf_counter() - t0
  counts = collectives(compiled.as_text())
  train_state, loss = compiled(train_state, x, labels)
  row = dict(model=spec.name, impl=impl, devices=n, global_batch=per_device_batch * n,
             compile_s=compile_s, collectives=counts, first_loss=float(loss))
  return row, train_loop(compiled, train_state, x, labels)


def measure(spec, preset: str, per_device_batch: int, devices, impls, dtype, variables,
            steps: int, repeats: int) -> list[dict]:
  """Every implementation on `devices`, timed interleaved (A B A B ...) so
  that the ratio at each device count sees the same drift: ms per step
  (median of the repeats) and examples per second."""
  rows, runners = [], {}
  for impl in impls:
    try:
      row, runners[impl] = prepare(spec, preset, per_device_batch, devices, impl, dtype,
                                   variables)
    except Exception as e:  # noqa: BLE001 - record it, measure the rest
      row = dict(model=spec.name, impl=impl, devices=len(devices),
                 error=f"{type(e).__name__}: {e}")
    rows.append(row)
  try:
    times = interleaved(runners, steps, repeats) if runners else {}
  except Exception as e:  # noqa: BLE001 - e.g. out of memory at run time: record it, go on
    times = {}
    for row in rows:
      if row["impl"] in runners:
        row["error"] = f"timing: {type(e).__name__}: {e}"
  for row in rows:
    if row["impl"] in times:
      t = times[row["impl"]]
      ms = statistics.median(t)
      row.update(ms_per_step=ms, ms_repeats=t, examples_per_s=row["global_batch"] / (ms / 1e3))
  del runners
  return rows


def environment() -> dict:
  devices = jax.devices()
  env = dict(jax=jax.__version__, jaxlib=jax.lib.__version__ if hasattr(jax.lib, "__version__")
             else None, python=platform.python_version(), backend=jax.default_backend(),
             devices=[str(d) for d in devices], device_kind=devices[0].device_kind,
             jax_im2col=jax_im2col.__version__, algorithm=jax_im2col.get_algorithm())
  try:
    env["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                   text=True, cwd=pathlib.Path(__file__).parent).stdout.strip()
  except OSError:
    pass
  return env


def efficiency(rows):
  """Weak-scaling efficiency t(1) / t(n) per (model, impl), where one
  device was measured."""
  base = {(r["model"], r["impl"]): r["ms_per_step"] for r in rows if r.get("devices") == 1
          and "ms_per_step" in r}
  for r in rows:
    b = base.get((r["model"], r["impl"]))
    if b and "ms_per_step" in r:
      r["scaling_efficiency"] = b / r["ms_per_step"]
      r["added_ms"] = r["ms_per_step"] - b


def table(rows) -> str:
  lines = ["| model | devices | global batch | impl | ms / step | examples / s | scaling eff. "
           "| ms over 1 device | spread | ours / xla | collectives (all-reduce, all-gather, reduce-scatter, permute, "
           "all-to-all) | compile s | first loss |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  by = {(r["model"], r["devices"], r["impl"]): r for r in rows if "ms_per_step" in r}
  for r in rows:
    if "error" in r:
      lines.append(f"| {r['model']} | {r['devices']} | | {r['impl']} | failed: "
                   f"{r['error'][:80]} | | | | | | | | |")
      continue
    xla = by.get((r["model"], r["devices"], "xla"))
    ratio = f"{r['ms_per_step'] / xla['ms_per_step']:.2f}" if xla and r["impl"] == "ours" else ""
    counts = ", ".join(str(r["collectives"][k]) for k in KINDS)
    eff = f"{r['scaling_efficiency']:.2f}" if "scaling_efficiency" in r else ""
    added = f"{r['added_ms']:+.2f}" if r["devices"] > 1 and "added_ms" in r else ""
    t = r["ms_repeats"]
    spread = f"{(max(t) - min(t)) / r['ms_per_step']:.0%}"
    lines.append(f"| {r['model']} | {r['devices']} | {r['global_batch']} | {r['impl']} | "
                 f"{r['ms_per_step']:.2f} | {r['examples_per_s']:.1f} | {eff} | {added} | {spread} | {ratio} | "
                 f"{counts} | {r['compile_s']:.1f} | {r['first_loss']:.5f} |")
  return "\n".join(lines)


def _ints(text: str) -> list[int]:
  return [int(v) for v in text.split(",") if v]


def _batches(text: str) -> dict:
  out = {}
  for item in filter(None, text.split(",")):
    name, _, value = item.partition("=")
    out[name] = int(value)
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", required=True, type=pathlib.Path)
  parser.add_argument("--devices", type=_ints, default=None,
                      help="device counts (default: 1, 2, 4, ... up to all visible devices)")
  parser.add_argument("--models", default="resnet50,unet3d")
  parser.add_argument("--impls", default="xla,ours")
  parser.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
  parser.add_argument("--preset", choices=("full", "small", "tiny"), default="full")
  parser.add_argument("--per-device-batch", type=_batches, default={},
                      help="e.g. resnet50=64,unet3d=2 (default: half the preset's batch, at "
                           "least 1)")
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args(argv)

  visible = jax.devices()
  counts = args.devices or [n for n in (1, 2, 4, 8, 16) if n <= len(visible)]
  if max(counts) > len(visible):
    parser.error(f"{max(counts)} devices asked for, {len(visible)} visible")
  dtype = jnp.bfloat16 if args.dtype == "bf16" else None
  args.out.mkdir(parents=True, exist_ok=True)
  result = dict(environment=environment(), args=dict(vars(args), out=str(args.out)), rows=[])
  rows = result["rows"]

  def save():
    efficiency(rows)
    (args.out / "multi_gpu.json").write_text(json.dumps(result, indent=1, default=str))
    (args.out / "multi_gpu.md").write_text(
        f"Data-parallel train step, {args.dtype}, preset {args.preset}, "
        f"{result['environment']['device_kind']}, jax {jax.__version__}\n\n{table(rows)}\n")

  for name in args.models.split(","):
    spec = MODELS[name]
    per_device = args.per_device_batch.get(name, max(1, spec.presets[args.preset].batch // 2))
    init_module = spec.build(args.preset, IMPLS["xla"], dtype)
    x, _ = _batch(spec, args.preset, 1)
    variables = jax.jit(lambda k, x: init_module.init(k, x, train=False))(jax.random.key(0), x)
    variables = jax.tree.map(np.asarray, variables)  # on the host: each run donates its own copy
    for n in counts:
      for row in measure(spec, args.preset, per_device, visible[:n], args.impls.split(","),
                         dtype, variables, args.steps, args.repeats):
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "ms_repeats"}), flush=True)
      save()
  save()
  print(table(rows))
  return 0


if __name__ == "__main__":
  sys.exit(main())
