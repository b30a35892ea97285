"""The depthwise kernels (algorithm 7, lib/conv/depthwise/) against XLA on the
layers they are for, channels-last (NHWC / HWIO, what flax users run):
ConvNeXt-T's 7x7 layers (batch 32), MobileNetV2's 3x3 layers (batch 64,
stride 1 and 2) and RepLKNet-31B's large windows (batch 16: 31x31 at 56x56,
29x29 at 28x28, 27x27 at 14x14, 13x13 at 7x7), float32 and bfloat16.

Each op timed alone, ours (traced under jax_im2col.force_algorithm
("depthwise"), so every op takes the depthwise kernels) beside
lax.conv_general_dilated (DEFAULT precision): the forward, the input gradient
(jax.vjp with respect to x only) and the filter gradient (with respect to w
only). Device milliseconds per call: the median over repeats of chains of
calls compiled in one program (bench.time_jax), so host dispatch does not
count; each repeat timed by its device span (CUPTI timestamps, first kernel's
start to last kernel's end) where torch's profiler can see the GPU, else by
the host clock (--jax-clock). The host clock once read 3.55 ms for an input
gradient whose kernels took 0.09 ms (ConvNeXt 56x56x96 bfloat16, H100,
2026-11-28, BENCHMARKS.md). Also the sum of the three ops per layer (a training step's share),
and ours in effective GB/s (x, w and y read or written once) and in TFLOP/s
(2 x multiply-adds of the forward, padding taps included).

  python benchmarks/depthwise_bench.py --out DIR [--cases convnext,mbv2,effnet,replk]
      [--dtypes f32,bf16] [--ops fwd,dgrad,wgrad] [--layers 14x576,28x192-s2]
      [--deadline-s 170]

Writes depthwise_bench.json under --out (with the JAX_IM2COL_NO_DW_* switches
of the run, for A/B runs: JAX_IM2COL_NO_DW_RING=1, JAX_IM2COL_NO_DW_NARROW_RUNS=1,
JAX_IM2COL_NO_DW_SECTOR_COST=1, JAX_IM2COL_NO_DW_TILES=1, JAX_IM2COL_NO_DW_STREAM=1,
JAX_IM2COL_NO_DW_STAGED=1, JAX_IM2COL_NO_DW_CELLS=1, JAX_IM2COL_NO_DW_MMA=1,
JAX_IM2COL_NO_DW_MMA_FILTER=1). Runs in
about 2-3 minutes on an H100.
"""

import argparse
import dataclasses
import json
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (time_jax, TimingConfig)
import device_span  # noqa: E402

import jax_im2col  # noqa: E402

CFG = bench.TimingConfig(warmup=2, min_reps=5, max_reps=12, budget_s=0.06, max_inner=32)
DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16}
SWITCHES = ("JAX_IM2COL_NO_DW_RING", "JAX_IM2COL_NO_DW_NARROW_RUNS", "JAX_IM2COL_NO_DW_SECTOR_COST", "JAX_IM2COL_NO_DW_TILES",
            "JAX_IM2COL_NO_DW_STREAM", "JAX_IM2COL_NO_DW_STAGED", "JAX_IM2COL_NO_DW_STAGED_FILTER",
            "JAX_IM2COL_NO_DW_STREAM_FILTER_S1", "JAX_IM2COL_NO_DW_CELLS",
            "JAX_IM2COL_NO_DW_MMA", "JAX_IM2COL_NO_DW_MMA_FILTER")


@dataclasses.dataclass(frozen=True)
class Layer:
  group: str
  n: int
  size: int  # input height = width
  c: int
  k: int  # window k x k
  stride: int

  @property
  def name(self):
    s = f"-s{self.stride}" if self.stride > 1 else ""
    return f"{self.group} {self.size}x{self.c} k{self.k}{s}"

  @property
  def key(self):
    return f"{self.size}x{self.c}" + (f"-s{self.stride}" if self.stride > 1 else "")

  @property
  def pad(self):
    return (self.k - 1) // 2

  @property
  def out(self):
    return (self.size + 2 * self.pad - self.k) // self.stride + 1


LAYERS = (
    [Layer("convnext", 32, s, c, 7, 1) for s, c in ((56, 96), (28, 192), (14, 384), (7, 768))]
    + [Layer("mbv2", 64, s, c, 3, st) for s, c, st in ((112, 32, 1), (112, 96, 2), (56, 144, 1), (56, 144, 2),
                                                       (28, 192, 1), (28, 192, 2), (14, 384, 1), (14, 576, 1),
                                                       (14, 576, 2), (7, 960, 1))]
    # EfficientNet-B0's 5x5 layers.
    + [Layer("effnet", 64, s, c, 5, st) for s, c, st in ((56, 144, 2), (28, 240, 1), (14, 480, 1), (14, 672, 1),
                                                         (14, 672, 2), (7, 1152, 1))]
    + [Layer("replk", 16, s, c, k, 1) for s, c, k in ((56, 128, 31), (28, 256, 29), (14, 512, 27), (7, 1024, 13))])


def conv_fn(layer, ours):
  kwargs = dict(window_strides=(layer.stride,) * 2, padding=((layer.pad, layer.pad),) * 2,
                dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=layer.c)
  if ours:
    return lambda x, w: jax_im2col.conv_general_dilated(x, w, **kwargs)
  return lambda x, w: lax.conv_general_dilated(x, w, **kwargs)


def op_fn(conv, op):
  """The op as a function of its inputs: fwd (x, w); dgrad (w, ct); wgrad (x, ct)."""
  if op == "fwd":
    return conv
  if op == "dgrad":
    return lambda x, w, ct: jax.vjp(lambda x: conv(x, w), x)[1](ct)[0]
  return lambda x, w, ct: jax.vjp(lambda w: conv(x, w), w)[1](ct)[0]


def traced(fn, ours):
  """jit of fn; for ours, traced under force_algorithm("depthwise") (read at
  trace time), whoever traces it (bench.time_jax's chains too)."""
  if not ours:
    return jax.jit(fn)

  def forced(*args):
    with jax_im2col.force_algorithm("depthwise"):
      return fn(*args)

  return jax.jit(forced)


def arg_sets(layer, op, dtype, sets=2):
  rng = np.random.default_rng(0)
  x = (layer.n, layer.size, layer.size, layer.c)
  w = (layer.k, layer.k, 1, layer.c)
  y = (layer.n, layer.out, layer.out, layer.c)
  shapes = [x, w] if op == "fwd" else [x, w, y]
  return [[jnp.asarray(rng.standard_normal(s).astype(np.float32) / (layer.k if s == w else 1), dtype)
           for s in shapes] for _ in range(sets)]


def ideal(layer, dtype):
  """(bytes, flops) of the forward: x, w, y once; 2 x multiply-adds."""
  item = np.dtype(dtype).itemsize
  bytes_ = item * (layer.n * layer.size ** 2 * layer.c + layer.k ** 2 * layer.c + layer.n * layer.out ** 2 * layer.c)
  return bytes_, 2.0 * layer.n * layer.out ** 2 * layer.c * layer.k ** 2


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--out", default=".")
  parser.add_argument("--cases", default="convnext,mbv2,effnet,replk")
  parser.add_argument("--dtypes", default="f32,bf16")
  parser.add_argument("--ops", default="fwd,dgrad,wgrad")
  parser.add_argument("--layers", default="",
                      help="comma-separated layers as SIZExC[-sSTRIDE] (e.g. 14x576,28x192-s2); all if empty")
  parser.add_argument("--deadline-s", type=float, default=170)
  parser.add_argument("--jax-clock", choices=("span", "host"), default=None,
                      help="device span (default on a GPU that torch's profiler sees) or the host clock")
  args = parser.parse_args()
  if args.jax_clock is None:
    args.jax_clock = "span" if jax.default_backend() == "gpu" and device_span.available() else "host"
  bench.JAX_CLOCK = args.jax_clock
  start = time.perf_counter()
  groups, ops = args.cases.split(","), args.ops.split(",")
  only = {name.strip() for name in args.layers.split(",") if name.strip()}
  rows = []
  print(f"device: {jax.devices()[0]}; clock: {args.jax_clock}; switches: " +
        (", ".join(f"{s}={os.environ[s]}" for s in SWITCHES if s in os.environ) or "none"), flush=True)
  print(f"{'layer':22} {'dtype':5} {'op':6} {'ours ms':>9} {'xla ms':>9} {'ours/xla':>8} {'GB/s':>7} {'TFLOP/s':>8}",
        flush=True)
  for dt in args.dtypes.split(","):
    dtype = DTYPES[dt]
    for layer in LAYERS:
      if layer.group not in groups or (only and layer.key not in only):
        continue
      total = {"ours": 0.0, "xla": 0.0}
      for op in ops:
        if time.perf_counter() - start > args.deadline_s:
          print(f"deadline of {args.deadline_s} s reached", flush=True)
          break
        sets = arg_sets(layer, op, dtype)
        row = dict(layer=layer.name, group=layer.group, n=layer.n, size=layer.size, c=layer.c, k=layer.k,
                   stride=layer.stride, dtype=dt, op=op)
        for impl, ours in (("ours", True), ("xla", False)):
          try:
            row[impl] = bench.time_jax(traced(op_fn(conv_fn(layer, ours), op), ours), sets, CFG)["ms"]
          except Exception as e:  # noqa: BLE001  (a failing layer must not end the run)
            row[impl] = None
            row[impl + "_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        del sets
        nbytes, flops = ideal(layer, dtype)
        if row["ours"] is not None:
          row["ours_gbps"] = nbytes / (row["ours"] * 1e-3) / 1e9
          row["ours_tflops"] = flops / (row["ours"] * 1e-3) / 1e12
        row["ratio"] = row["ours"] / row["xla"] if row["ours"] and row["xla"] else None
        for impl in total:
          total[impl] = total[impl] + row[impl] if total[impl] is not None and row[impl] is not None else None
        rows.append(row)
        fmt = lambda v, f: format(v, f) if v is not None else "-"
        print(f"{layer.name:22} {dt:5} {op:6} {fmt(row['ours'], '9.4f')} {fmt(row['xla'], '9.4f')} "
              f"{fmt(row['ratio'], '8.2f')} {fmt(row.get('ours_gbps'), '7.0f')} {fmt(row.get('ours_tflops'), '8.2f')}"
              + (f"  ({row.get('ours_error') or row.get('xla_error')})" if row["ours"] is None or row["xla"] is None
                 else ""), flush=True)
      if len(ops) == 3 and all(v for v in total.values()):
        rows.append(dict(layer=layer.name, group=layer.group, dtype=dt, op="sum", ours=total["ours"],
                         xla=total["xla"], ratio=total["ours"] / total["xla"]))
        print(f"{layer.name:22} {dt:5} {'sum':6} {total['ours']:9.4f} {total['xla']:9.4f} "
              f"{total['ours'] / total['xla']:8.2f}", flush=True)
  # Per group and dtype: the geometric mean of ours / XLA per op, and the
  # ratio of summed times (a model's depthwise layers, one each).
  summary = {}
  for dt in args.dtypes.split(","):
    for group in groups:
      for op in ops + ["sum"]:
        sel = [r for r in rows if r["group"] == group and r["dtype"] == dt and r["op"] == op and r.get("ratio")]
        if sel:
          summary[f"{group} {dt} {op}"] = dict(
              geomean=math.exp(sum(math.log(r["ratio"]) for r in sel) / len(sel)),
              total=sum(r["ours"] for r in sel) / sum(r["xla"] for r in sel), layers=len(sel))
  print("\nours / XLA (geometric mean per layer; ratio of summed times):")
  for key, v in summary.items():
    print(f"  {key:24} {v['geomean']:6.2f}  {v['total']:6.2f}  ({v['layers']} layers)")
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, "depthwise_bench.json"), "w") as f:
    json.dump(dict(device=str(jax.devices()[0]), clock=args.jax_clock, switches={s: os.environ.get(s) for s in SWITCHES},
                   timing=dataclasses.asdict(CFG), rows=rows, summary=summary), f, indent=1)
  print(f"wrote {os.path.join(args.out, 'depthwise_bench.json')} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
  main()
