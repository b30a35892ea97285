#!/usr/bin/env python3
"""Benchmark jax_im2col against XLA (jax.lax) and PyTorch on one device.

    python benchmarks/bench.py --out DIR [--quick] [--only unfold,fold,fwd,bwd,conv,extra,ceil]
                               [--cases NAME,...] [--dtypes f32,bf16] [--layouts cf,cl]

Measures the device's copy bandwidth and GEMM rates once, then for every shape
of the suite (SUITE below: the anchor suite of shared/anchors-h200.md), dtype
(float32, bfloat16) and layout (channels-first, channels-last):
unfold, fold, convolution forward and convolution backward (input + weight
gradient), ours next to XLA and torch; then a few cases reported slow in XLA
(EXTRAS). unfold's and fold's peers are what a JAX user writes without the
package (PLAIN JAX below): unfold by pad + one strided slice per kernel tap +
stack ("jax"), fold by that unfold's VJP, which XLA fuses into one kernel
("jax_vjp"), and by a scatter-add ("jax_scatter"); each row also gets its own
measured bound ("ceiling": a kernel moving the row's bytes, read-dominated for
fold, write-dominated for unfold) and, with --patches, lax's
conv_general_dilated_patches and its VJP ("xla", a one-hot convolution).
Writes DIR/bench.json (every raw number), DIR/bench.md (markdown
tables with geometric means) and DIR/bench.png (ours / peer per shape), and
prints a compact summary table last.

Timing measures device time, the same way for every implementation and for
the ceilings: everything jitted (compiled ahead of time, which also gives XLA's
temporary-memory figure), random normal inputs, warm-up, then the median of
repeats of time / R. A repeat runs the op R times, about a millisecond of
device work (at most max_inner calls): JAX runs the R calls chained in one
compiled program (each call's arguments pass through an optimization_barrier
together with the previous call's outputs, so XLA cannot merge, hoist or
reorder calls), timed on a GPU by the device span of the repeat (its first
kernel's start to its last kernel's end, CUPTI timestamps through torch's
profiler; --jax-clock host: the host clock around dispatch and
block_until_ready, which also counts the runtime's start-up of each repeat,
about half a millisecond on the H200); torch on a GPU replays a CUDA
graph of the R calls timed with CUDA events (CUDA events around R eager calls
where an op cannot be captured; `method` in each record says which), on the
CPU a host clock. The chain and the graph keep every output of a repeat (XLA
would otherwise drop all calls but the last as dead code). Inputs rotate among
3 sets when they are under 100 MB, so that consecutive calls do not read their
inputs from L2.
A failure is recorded as an error string and the run goes on; past
--deadline-s the rest is recorded as skipped; on SIGTERM the files are written
with what was measured.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import gc
import itertools
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from typing import Callable

T_START = time.perf_counter()  # the deadline counts from here, imports included
os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")  # leave room for torch

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
try:
  from jax.experimental.layout import Layout, with_layout_constraint  # noqa: E402
except ImportError:  # layouts are then left to XLA (see _row_major)
  Layout = with_layout_constraint = None

import jax_im2col as J  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import device_span  # noqa: E402

try:
  import torch
  import torch.nn.functional as F
except ImportError:  # torch columns become skips
  torch = None

# How JAX chains are timed: "span", the device's timestamps of a repeat's first
# and last kernel (CUPTI, through torch's profiler; on a GPU with torch), or
# "host", the host clock around dispatch and block_until_ready, which also
# counts the runtime's start-up of each repeat (docs/optimization-log.md, step 51).
# main() sets it (--jax-clock).
JAX_CLOCK = "host"
OURS_CONV = getattr(J, "conv_general_dilated", None)
NO_OURS_CONV = "jax_im2col.conv_general_dilated not available"
HIGHEST = lax.Precision.HIGHEST
DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16}
ROTATE_BELOW_BYTES = 100 << 20
N_ROTATE = 3

# ----------------------------------------------------------------------------- cases


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  n: int
  c: int
  spatial: tuple
  k: int
  kernel: tuple
  stride: tuple
  pad: tuple  # per spatial dim: int (symmetric) or (low, high)
  dilation: tuple
  groups: int = 1
  lhs_dilation: tuple | None = None  # transposed convolution
  group: str = "suite"
  ops: tuple = ("unfold", "fold", "fwd", "bwd", "dgrad", "wgrad", "cap")
  layouts: tuple = ("cf", "cl")
  dtypes: tuple = ("f32", "bf16")
  note: str = ""

  @property
  def nd(self) -> int:
    return len(self.spatial)

  @property
  def pads(self) -> tuple:
    return tuple((p, p) if isinstance(p, int) else tuple(p) for p in self.pad)

  @property
  def symmetric_pad(self) -> tuple | None:
    return None if any(lo != hi for lo, hi in self.pads) else tuple(lo for lo, _ in self.pads)


# The anchor suite (shared/anchors-h200.md):
# name, N, C, spatial, K, kernel, stride, pad, dilation, groups
SUITE_TABLE = [
    ("r50_stem7x7s2", 32, 3, (224, 224), 64, (7, 7), (2, 2), (3, 3), (1, 1), 1),
    ("r50_3x3_c64", 32, 64, (56, 56), 64, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    ("r50_1x1_c256", 32, 256, (56, 56), 64, (1, 1), (1, 1), (0, 0), (1, 1), 1),
    ("r50_3x3s2_c128", 32, 128, (56, 56), 128, (3, 3), (2, 2), (1, 1), (1, 1), 1),
    ("r50_3x3_c256", 32, 256, (14, 14), 256, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    ("r50_3x3_c512", 32, 512, (7, 7), 512, (3, 3), (1, 1), (1, 1), (1, 1), 1),
    ("resnext_g32", 32, 256, (28, 28), 256, (3, 3), (1, 1), (1, 1), (1, 1), 32),
    ("mbv2_dw3x3", 32, 144, (56, 56), 144, (3, 3), (1, 1), (1, 1), (1, 1), 144),
    ("deeplab_dil2", 8, 256, (64, 64), 256, (3, 3), (1, 1), (2, 2), (2, 2), 1),
    ("w2v_1d_k3s2", 8, 512, (3199,), 512, (3,), (2,), (0,), (1,), 1),
    ("c3d_3x3x3", 4, 64, (16, 56, 56), 64, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1),
]
SUITE = [Case(*row) for row in SUITE_TABLE]

_EXTRA = dict(group="extra", dtypes=("f32",), ops=("fwd", "bwd", "dgrad", "wgrad"))
EXTRAS = [
    Case("jax13800_dw1d", 32, 512, (1024,), 512, (5,), (1,), (2,), (1,), groups=512, layouts=("cf",),
         note="jax#13800: depthwise 1-D, slow backward", **_EXTRA),
    Case("grouped1d_g16", 8, 512, (4000,), 512, (3,), (1,), (1,), (1,), groups=16, layouts=("cf",),
         note="jax#13800: grouped 1-D, slow backward", **_EXTRA),
    Case("jax26266_dw_dil2", 16, 256, (64, 64), 256, (3, 3), (1, 1), (2, 2), (2, 2), groups=256,
         layouts=("cl",), note="jax#26266: dilated depthwise", **_EXTRA),
    Case("jax26266_dw_dil4", 16, 256, (64, 64), 256, (3, 3), (1, 1), (4, 4), (4, 4), groups=256,
         layouts=("cl",), note="jax#26266: dilated depthwise", **_EXTRA),
    Case("jax31662_convT3d", 2, 64, (16, 16, 16), 64, (3, 3, 3), (1, 1, 1), ((1, 2),) * 3, (1, 1, 1),
         lhs_dilation=(2, 2, 2), layouts=("cf",), note="jax#31662: 3-D transposed conv (lhs_dilation 2)",
         **_EXTRA),
    Case("per_example_wgrad", 32, 64, (32, 32), 64, (3, 3), (1, 1), (1, 1), (1, 1), group="extra",
         dtypes=("f32",), ops=("pex",), layouts=("cf",),
         note="vmap(grad wrt weights) over 32 examples; torch: torch.func.vmap(grad), forward included"),
]

# Variants the per-op scripts (kernel_times.py, op_times.py) can name besides
# the benchmark's cases, for routing decisions: jax#13800's grouped 1-D conv
# in both precisions' types, with 64 channels per group, and strided
# (docs/optimization-log.md, step 47).
_PROBE = dict(group="probe", dtypes=("f32", "bf16"), ops=("fwd", "dgrad", "wgrad"), layouts=("cf",))
PROBES = [
    Case("grouped1d_g16_types", 8, 512, (4000,), 512, (3,), (1,), (1,), (1,), groups=16, **_PROBE),
    Case("grouped1d_g8_c64", 8, 512, (4000,), 512, (3,), (1,), (1,), (1,), groups=8, **_PROBE),
    Case("grouped1d_g16_s2", 8, 512, (8000,), 512, (3,), (2,), (1,), (1,), groups=16, **_PROBE),
]


def shrink(case: Case) -> Case:
  """A small version of a case for --quick (CPU development runs)."""

  def scale(ch):
    if ch < 16:
      return ch
    g = case.groups
    return max(ch // 4 // g * g, g)

  if case.groups == case.c:  # depthwise (maybe with a channel multiplier)
    c = max(case.c // 4, 1)
    groups, k = c, c * (case.k // case.c)
  else:
    c, k, groups = scale(case.c), scale(case.k), case.groups
  eff = [(kk - 1) * d + 1 for kk, d in zip(case.kernel, case.dilation)]
  spatial = tuple(max(s // 4, e) for s, e in zip(case.spatial, eff))
  return dataclasses.replace(case, n=min(case.n, 2), c=c, k=k, groups=groups, spatial=spatial)


# ----------------------------------------------------------------------------- geometry


def conv_dims(nd: int, layout: str) -> tuple:
  sp = "DHW"[-nd:] if nd <= 3 else "".join(chr(ord("a") + i) for i in range(nd))
  if layout == "cf":
    return ("NC" + sp, "OI" + sp, "NC" + sp)
  return ("N" + sp + "C", sp + "IO", "N" + sp + "C")


def x_shape(case: Case, layout: str) -> tuple:
  return (case.n, case.c, *case.spatial) if layout == "cf" else (case.n, *case.spatial, case.c)


def w_shape(case: Case, layout: str) -> tuple:
  i = case.c // case.groups
  return (case.k, i, *case.kernel) if layout == "cf" else (*case.kernel, i, case.k)


def conv_kwargs(case: Case, layout: str, precision=None) -> dict:
  return dict(window_strides=case.stride, padding=case.pads, lhs_dilation=case.lhs_dilation,
              rhs_dilation=case.dilation, dimension_numbers=conv_dims(case.nd, layout),
              feature_group_count=case.groups, precision=precision)


def out_spatial(case: Case) -> tuple:
  y = jax.eval_shape(lambda x, w: lax.conv_general_dilated(x, w, **conv_kwargs(case, "cf")),
                     jax.ShapeDtypeStruct(x_shape(case, "cf"), jnp.float32),
                     jax.ShapeDtypeStruct(w_shape(case, "cf"), jnp.float32))
  return tuple(y.shape[2:])


def y_shape(case: Case, layout: str) -> tuple:
  so = out_spatial(case)
  return (case.n, case.k, *so) if layout == "cf" else (case.n, *so, case.k)


def conv_flops(case: Case) -> float:
  """Multiply-adds x 2 of the forward conv (taps that land in padding included)."""
  return 2.0 * case.n * case.k * math.prod(out_spatial(case)) * (case.c // case.groups) * math.prod(case.kernel)


def nbytes(shape, dtype) -> int:
  return math.prod(shape) * np.dtype(dtype).itemsize


# ----------------------------------------------------------------------------- timing


@dataclasses.dataclass
class TimingConfig:
  warmup: int = 3
  min_reps: int = 10
  max_reps: int = 40
  budget_s: float = 0.2  # per measurement, after warm-up
  rep_target_s: float = 5e-3  # a repeat runs R calls, about this long on the device
  max_inner: int = 128  # R at most
  max_chain_bytes: int = 8 << 30  # R at most this over the output bytes of one call (every output is kept)


def _summary(samples: list, inner: int) -> dict:
  ms = sorted(s * 1e3 for s in samples)
  return dict(ms=statistics.median(ms), min_ms=ms[0], max_ms=ms[-1], reps=len(ms), inner=inner)


def _inner_count(est_s: float, cfg: TimingConfig, cap: int) -> int:
  return max(1, min(cfg.max_inner, cap, int(cfg.rep_target_s / max(est_s, 1e-7))))


def _calibrate(build: Callable, est_s: float, out_bytes: int, cfg: TimingConfig) -> tuple:
  """(R, rep): `build(R)` returns `rep()`, which runs R calls and returns their device seconds.

  The first estimate (one call on the host clock) includes the dispatch cost, so
  for small ops it asks for too few calls; the warm-up repeats of the built
  runner measure device time, and R is raised once if they show room.
  """
  cap = max(1, cfg.max_chain_bytes // max(out_bytes, 1))
  r = _inner_count(est_s, cfg, cap)
  rep = build(r)
  per_call = min(rep() for _ in range(max(cfg.warmup, 1))) / r
  better = _inner_count(per_call, cfg, cap)
  if better >= 2 * r:
    r, rep = better, build(better)
    rep()
  return r, rep


def _sample(rep: Callable, r: int, cfg: TimingConfig) -> list:
  """Seconds per call of repeats of `rep`, within min/max reps and the budget."""
  samples, start = [], time.perf_counter()
  while len(samples) < cfg.max_reps and (len(samples) < cfg.min_reps or time.perf_counter() - start < cfg.budget_s):
    samples.append(rep() / r)
  return samples


@functools.lru_cache(maxsize=8)
def _chain(fn: Callable, r: int) -> Callable:
  """jit of `r` calls of the traceable `fn` in one program; call i takes argument set i % len(arg_sets).

  The arguments of call i pass through an optimization_barrier together with the
  outputs of call i-1, and call i takes the barrier's copy of its arguments: XLA
  can then neither merge calls on the same set (CSE), hoist them, nor reorder
  them. The barrier's copies of the earlier outputs are returned as well: XLA's
  algebraic simplifier prunes unused barrier outputs, and the call that made
  them would then be dead code. So all r outputs stay live (r x the output
  memory of one call, bounded by TimingConfig.max_chain_bytes).
  """

  def chained(arg_sets):
    out, earlier = None, []
    for i in range(r):
      args = arg_sets[i % len(arg_sets)]
      if i:
        args, prev = lax.optimization_barrier((args, out))
        args = _row_major(args)
        earlier.append(prev)
      out = _row_major(fn(*args))
    return out, earlier

  return jax.jit(chained)


def _row_major(tree):
  """Pins the default layout, that of a single call's arguments and results.

  Values crossing a barrier have no layout constraint otherwise: XLA can then
  give a call's result another layout and add a copy per call (seen on XLA:CPU
  for bf16 convolutions), or move a call's input transposes before the barrier,
  where calls on the same argument set would share them.
  """
  if with_layout_constraint is None:
    return tree
  return jax.tree.map(lambda x: with_layout_constraint(x, Layout(tuple(range(x.ndim)))), tree)


def _chain_compile_options() -> dict:
  # XLA:CPU expands the barriers before its last CSE pass, which would merge calls
  # on the same argument set; XLA:GPU expands them only after scheduling. (XLA:CPU
  # also runs calls that share no buffer concurrently on several cores, so on the
  # CPU per-call times of long chains can read low; XLA:GPU keeps stream order.)
  return {"xla_disable_hlo_passes": "cse_barrier_expander"} if jax.default_backend() == "cpu" else {}


_HEAVY_OPS = (" custom-call(", " convolution(", " dot(", " scatter(")


def _op_count(compiled) -> int | None:
  """Library calls, contractions and scatters in the optimized HLO (else fusions), to check that a chain holds R calls.

  Elementwise fusions are counted only where there is nothing else: layout
  copies around a call can differ between a single call and a chain.
  """
  try:
    text = compiled.as_text()
  except Exception:  # noqa: BLE001
    return None
  return sum(text.count(op) for op in _HEAVY_OPS) or text.count(" fusion(") or None


def time_jax(fn: Callable, arg_sets: list, cfg: TimingConfig, compiled=None) -> dict:
  """Median device seconds per call of a jitted (traceable) function, rotating argument sets.

  A repeat runs R calls chained in one compiled program (_chain), so per-call
  host dispatch does not count; `compiled` (one call, compiled ahead of time)
  serves warm-up and the first estimate.
  """
  compiled = compiled or fn.lower(*arg_sets[0]).compile()

  def call(i):
    return compiled(*arg_sets[i % len(arg_sets)])

  for i in range(cfg.warmup):
    out = jax.block_until_ready(call(i))
  out_bytes = sum(x.nbytes for x in jax.tree.leaves(out))
  del out
  t0 = time.perf_counter()
  jax.block_until_ready(call(0))
  est = time.perf_counter() - t0
  info = dict(method="chain", chain_compile_s=0.0)

  def build(r):
    if r == 1:
      run = lambda sets: compiled(*sets[0])
    else:
      t0 = time.perf_counter()
      run = _chain(fn, r).lower(arg_sets).compile(_chain_compile_options())
      info["chain_compile_s"] += time.perf_counter() - t0
      ops, ops1 = _op_count(run), _op_count(compiled)
      if ops and ops1:
        info["chain_calls"] = ops / ops1  # R when every call survived compilation

    def launch():
      jax.block_until_ready(run(arg_sets))

    def rep():
      t0 = time.perf_counter()
      launch()
      return time.perf_counter() - t0

    rep.launch = launch
    return rep

  r, rep = _calibrate(build, est, out_bytes, cfg)
  if info.get("chain_calls", r) < 0.9 * r:
    info["warning"] = f"the chain of {r} calls compiled to about {info['chain_calls']:.1f}"
    print(f"WARNING: {info['warning']}", file=sys.stderr)
  if JAX_CLOCK == "span":
    n = max(cfg.min_reps, min(cfg.max_reps, int(cfg.budget_s / max(rep(), 1e-6))))
    try:
      spans = device_span.run_spans(rep.launch, n)
      why = "repeats put different numbers of kernels on the GPU"
    except Exception as e:  # noqa: BLE001  (the profiler: CUPTI taken by another one)
      spans, why = None, f"{type(e).__name__}: {e}"[:200]
    if spans is not None:
      info["method"] = "chain, device span"
      return dict(_summary([t / r for t in spans], r), **info)
    info["span_error"] = f"{why}: host clock instead"
  return dict(_summary(_sample(rep, r, cfg), r), **info)


def _torch_nbytes(out) -> int:
  leaves = out if isinstance(out, (tuple, list)) else [out]
  return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))


def _eager(call: Callable, r: int) -> Callable:
  def launch():
    for j in range(r):
      call(j)

  return launch


def _host_clock(launch: Callable) -> Callable:
  def rep():
    t0 = time.perf_counter()
    launch()
    return time.perf_counter() - t0

  return rep


def _events(launch: Callable) -> Callable:
  """rep() timing `launch()` with CUDA events on the current stream."""

  def rep():
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ev0.record()
    launch()
    ev1.record()
    ev1.synchronize()
    return ev0.elapsed_time(ev1) * 1e-3

  return rep


def _graph_runner(call: Callable, r: int) -> Callable:
  """Replays of a CUDA graph of `r` calls, captured on the current stream."""
  graph = torch.cuda.CUDAGraph()
  # thread_local: JAX's runtime threads keep calling CUDA during the capture; the
  # default (global) mode makes their calls fail and leaves JAX's streams in error.
  with torch.cuda.graph(graph, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
    outs = [call(j) for j in range(r)]  # kept during capture, as the JAX chain keeps every output
  del outs  # the graph's memory pool keeps their memory
  return _events(graph.replay)


def time_torch(fn: Callable, arg_sets: list, cfg: TimingConfig) -> dict:
  """Median device seconds per call of a torch function.

  On a GPU: replays of a CUDA graph of R calls timed with CUDA events, or, when
  the op cannot be captured, CUDA events around R eager calls; else a host
  clock. Runs on the current stream, a side stream on a GPU (see run_torch),
  where the warm-up before capture has to run.
  """
  cuda = TORCH_DEVICE is not None and TORCH_DEVICE.type == "cuda"
  sync = torch.cuda.synchronize if cuda else (lambda: None)

  def call(i):
    return fn(*arg_sets[i % len(arg_sets)])

  for i in range(cfg.warmup):
    out = call(i)
  sync()
  out_bytes = _torch_nbytes(out)
  del out
  t0 = time.perf_counter()
  call(0)
  sync()
  est = time.perf_counter() - t0
  info = dict(method="host" if not cuda else "graph")
  if not cuda:
    r, rep = _calibrate(lambda r: _host_clock(_eager(call, r)), est, out_bytes, cfg)
  else:
    try:
      r, rep = _calibrate(lambda r: _graph_runner(call, r), est, out_bytes, cfg)
    except Exception as e:  # noqa: BLE001  (capture is not supported by every op)
      torch.cuda.synchronize()
      info = dict(method="events", graph_error=f"{type(e).__name__}: {e}"[:300])
      r, rep = _calibrate(lambda r: _events(_eager(call, r)), est, out_bytes, cfg)
  return dict(_summary(_sample(rep, r, cfg), r), **info)


def timing_methods() -> dict:
  """How each implementation is timed, for the metadata and the report."""
  torch_method = ("not installed" if torch is None else
                  "CUDA graph of R calls, replays timed with CUDA events (events around R eager calls "
                  "where capture fails: `method` of the record)" if TORCH_DEVICE.type == "cuda" else
                  "host clock around R calls")
  clock = ("the device span of a repeat: first kernel's start to last kernel's end, CUPTI timestamps"
           if JAX_CLOCK == "span" else "host clock around dispatch and block_until_ready")
  return dict(jax="R calls chained in one compiled program (each call's arguments pass through an "
                  f"optimization_barrier with the previous call's outputs); {clock}",
              torch=torch_method, per_repeat=f"R calls for about {TimingConfig.rep_target_s * 1e3:g} ms "
                                            "of device time, R <= max_inner; median over repeats of time / R")


# ----------------------------------------------------------------------------- data


class Stop(BaseException):
  """Raised by the SIGTERM handler: write what was measured and stop."""


def _on_sigterm(signum, frame):
  raise Stop(f"signal {signum}")


TORCH_DEVICE = None
TORCH_STREAM = None  # on a GPU: the side stream that torch ops run on (CUDA graphs are captured on one)


def setup_torch():
  global TORCH_DEVICE, TORCH_STREAM
  if torch is None:
    return
  TORCH_DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
  torch.manual_seed(0)
  if TORCH_DEVICE.type == "cpu":
    torch.set_num_threads(1)  # torch's and XLA's thread pools on shared cores stall each other
  else:
    TORCH_STREAM = torch.cuda.Stream()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


class Data:
  """Random normal inputs (never zeros), in rotating sets when they are small.

  JAX inputs are cut from a host pool of normal samples at random offsets and
  copied to the device: jax.random would compile a generator for every new
  shape (0.1-1 s each), more than the whole measurement of most ops.
  """

  POOL = (1 << 23) + 9973  # elements; not a power of two, so tiles do not align

  def __init__(self, seed: int = 0):
    self.rng = np.random.default_rng(seed)
    pool = self.rng.standard_normal(self.POOL, dtype=np.float32)
    self.pools = {np.dtype(jnp.float32): pool, np.dtype(jnp.bfloat16): pool.astype(jnp.bfloat16)}

  def host(self, shape, dtype) -> np.ndarray:
    pool = self.pools[np.dtype(dtype)]
    n = math.prod(shape)
    out = np.empty(n, pool.dtype)
    pos, off = 0, int(self.rng.integers(self.POOL))
    while pos < n:
      take = min(self.POOL - off, n - pos)
      out[pos:pos + take] = pool[off:off + take]
      pos, off = pos + take, 0
    return out.reshape(shape)

  def normal(self, shape, dtype):
    return jax.device_put(self.host(shape, dtype))

  @staticmethod
  def n_sets(shapes, dtype) -> int:
    return N_ROTATE if sum(nbytes(s, dtype) for s in shapes) < ROTATE_BELOW_BYTES else 1

  def sets(self, shapes, dtype) -> list:
    out = [tuple(self.normal(s, dtype) for s in shapes) for _ in range(self.n_sets(shapes, dtype))]
    return jax.block_until_ready(out)

  def torch_sets(self, shapes, dtype_name: str, memory_format=None) -> list:
    dt = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]

    def one(shape):
      t = torch.randn(shape, dtype=dt, device=TORCH_DEVICE)
      if memory_format is not None and len(shape) in (4, 5):
        t = t.contiguous(memory_format=memory_format)
      return t

    return [tuple(one(s) for s in shapes) for _ in range(self.n_sets(shapes, DTYPES[dtype_name]))]


# ----------------------------------------------------------------------------- recording


class Bench:

  def __init__(self, args, cfg: TimingConfig):
    self.args, self.cfg = args, cfg
    self.t0 = T_START
    self.records: list = []
    self.ceilings: dict = {}
    self.data = Data()
    self.interrupted = None
    self.same_size: dict = {}  # bytes -> the copy's record (same_size_copy)
    self.ceilings_by_size: dict = {}  # (kind, elements, arrays) -> the ceiling's record (ceiling)

  def elapsed(self) -> float:
    return time.perf_counter() - self.t0

  def log(self, msg: str):
    print(f"[{self.elapsed():6.1f}s] {msg}", file=sys.stderr, flush=True)

  def past_deadline(self) -> bool:
    return self.args.deadline_s is not None and self.elapsed() > self.args.deadline_s

  def add(self, base: dict, impl: str, **fields) -> dict:
    rec = dict(base, impl=impl, **fields)
    if rec.get("ms") and rec.get("bytes"):
      rec["gbps"] = rec["bytes"] / (rec["ms"] * 1e-3) / 1e9
    if rec.get("ms") and rec.get("flops"):
      rec["tflops"] = rec["flops"] / (rec["ms"] * 1e-3) / 1e12
    self.records.append(rec)
    what = f"{base['section']:6s} {base['case']} {base.get('dtype', '')} {base.get('layout', '')} {impl}"
    if "ms" in rec:
      extra = f" (compile {rec['compile_s']:.1f}s)" if "compile_s" in rec else ""
      self.log(f"{what}: {rec['ms']:.4f} ms{extra}")
    else:
      self.log(f"{what}: {rec.get('error') or rec.get('skip')}")
    return rec

  def skip(self, base, impl, reason):
    return self.add(base, impl, skip=reason)

  def _guard(self, base, impl, thunk):
    if self.past_deadline():
      return self.skip(base, impl, "deadline")
    if impl in self.args.skip_impls.split(","):
      return self.skip(base, impl, "--skip-impls")
    try:
      return self.add(base, impl, **thunk())
    except Exception as e:  # noqa: BLE001  (record and go on)
      msg = f"{type(e).__name__}: {e}".strip()
      if torch is not None and TORCH_DEVICE is not None and TORCH_DEVICE.type == "cuda":
        torch.cuda.empty_cache()
      del e
      gc.collect()  # the traceback held the inputs
      return self.add(base, impl, error=msg[:600])

  def run_jax(self, base: dict, impl: str, fn: Callable, arg_sets: list) -> dict:
    """Compile `fn` ahead of time (recording XLA's temp memory) and time it."""

    def thunk():
      t0 = time.perf_counter()
      jitted = jax.jit(fn)
      compiled = jitted.lower(*arg_sets[0]).compile()
      fields = dict(compile_s=time.perf_counter() - t0)
      try:
        temp = compiled.memory_analysis().temp_size_in_bytes
        fields["temp_mb"] = temp / 2**20
      except Exception:  # noqa: BLE001  (not every backend reports it)
        pass
      fields.update(time_jax(jitted, arg_sets, self.cfg, compiled))
      return fields

    return self._guard(base, impl, thunk)

  def run_torch(self, base: dict, impl: str, make: Callable, grad: bool = False) -> dict:
    """`make()` returns (fn, arg_sets); it runs inside the guard, so setup errors are recorded too."""
    if torch is None:
      return self.skip(base, impl, "torch not installed")

    def thunk():
      # On the side stream from the inputs on: a backward runs on its forward's stream.
      stream = torch.cuda.stream(TORCH_STREAM) if TORCH_STREAM is not None else contextlib.nullcontext()
      with torch.set_grad_enabled(grad), stream:
        fn, arg_sets = make()
        return time_torch(fn, arg_sets, self.cfg)

    return self._guard(base, impl, thunk)


# ----------------------------------------------------------------------------- torch ops


def torch_memory_format(case: Case, layout: str):
  if layout == "cf":
    return None
  return {2: torch.channels_last, 3: torch.channels_last_3d}.get(case.nd)


def torch_conv(case: Case, layout: str):
  """(fn(x, w), torch weight shape) for the case, or a reason why torch has no equivalent."""
  if torch is None:
    return "torch not installed"
  if layout == "cl" and case.nd not in (2, 3):
    return f"torch has no channels-last memory format for {case.nd}-D"
  dil = case.dilation
  if case.lhs_dilation is not None:  # transposed convolution
    if any(s != 1 for s in case.stride):
      return "no torch equivalent for a strided transposed conv"
    pad_t = tuple(d * (k - 1) - lo for d, k, (lo, _) in zip(dil, case.kernel, case.pads))
    out_pad = tuple(hi - lo for lo, hi in case.pads)
    if any(p < 0 for p in pad_t + out_pad):
      return "no torch equivalent for this padding"
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[case.nd]
    conv = lambda x, w: fn(x, w, None, case.lhs_dilation, pad_t, out_pad, case.groups, dil)
    return conv, (case.c, case.k // case.groups, *case.kernel)
  pad = case.symmetric_pad
  if pad is None:
    return "torch conv takes symmetric padding only"
  fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[case.nd]
  conv = lambda x, w: fn(x, w, None, case.stride, pad, dil, case.groups)
  return conv, (case.k, case.c // case.groups, *case.kernel)


def torch_conv_or_skip(b: Bench, base: dict, case: Case, layout: str):
  """torch_conv's (fn, weight shape), or None once the reason torch is skipped is recorded."""
  tc = torch_conv(case, layout)
  if isinstance(tc, str):
    b.skip(base, "torch", tc)
    return None
  return tc


def torch_y_shape(case: Case) -> tuple:
  return (case.n, case.k, *out_spatial(case))


# ----------------------------------------------------------------------------- ops


def base_fields(section: str, case: Case, dtype: str, layout: str, **kw) -> dict:
  return dict(section=section, case=case.name, group=case.group, dtype=dtype, layout=layout, **kw)


def torch_window_kwargs(case: Case) -> dict:
  return dict(kernel_size=case.kernel, dilation=case.dilation, padding=case.symmetric_pad, stride=case.stride)


def ours_unfold_fn(case: Case, layout: str, algorithm: str | None = None):
  """Our unfold; with `algorithm` ("own" or "xla"), that route forced where
  the rules (columns/unfold_selection.py) would choose."""
  f = J.unfold if layout == "cf" else J.unfold_channels_last
  if algorithm is None:
    return lambda x: f(x, case.kernel, case.dilation, case.pads, case.stride)

  def forced(x):
    with J.force_algorithm(algorithm):
      return f(x, case.kernel, case.dilation, case.pads, case.stride)
  return forced


def xla_patches_fn(case: Case, layout: str):
  nd = case.nd
  lhs, _, out = conv_dims(nd, layout)
  dn = (lhs, conv_dims(nd, "cf")[1], out)
  return lambda x: lax.conv_general_dilated_patches(x, case.kernel, case.stride, case.pads,
                                                     rhs_dilation=case.dilation, dimension_numbers=dn)


def ours_fold_fn(case: Case, layout: str, algorithm: str | None = None):
  """Our fold; with `algorithm` ("own" or "xla"), that route forced where the
  rules (columns/fold_selection.py) would choose."""
  f = J.fold if layout == "cf" else J.fold_channels_last
  if algorithm is None:
    return lambda c: f(c, case.spatial, case.kernel, case.dilation, case.pads, case.stride)

  def forced(c):
    with J.force_algorithm(algorithm):
      return f(c, case.spatial, case.kernel, case.dilation, case.pads, case.stride)
  return forced


def xla_fold_fn(case: Case, layout: str):
  """The VJP of conv_general_dilated_patches, (x, g) -> its input's
  cotangent (JAX has no fold); x is the primal, which a linear map's VJP
  never reads."""
  patches = xla_patches_fn(case, layout)
  return lambda x, g: jax.vjp(patches, x)[1](g)[0]


# ---- PLAIN JAX: the peers a JAX user writes in a few lines, in both layouts.


def _spatial_axes(case: Case, layout: str) -> list:
  return list(range(2, 2 + case.nd)) if layout == "cf" else list(range(1, 1 + case.nd))


def jax_unfold_fn(case: Case, layout: str):
  """unfold in plain JAX: pad, one strided slice per kernel tap (row-major),
  stack, reshaped to our columns' order ((N, C*K, L) channels-first as torch's,
  (N, L, K*C) channels-last). XLA fuses it into one loop kernel. Torch's
  windows (no lhs dilation); negative padding crops (lax.pad)."""
  out = out_spatial(case)
  axes = _spatial_axes(case, layout)

  def unfold(x):
    pads = [(0, 0, 0)] * x.ndim
    for a, (lo, hi) in zip(axes, case.pads):
      pads[a] = (lo, hi, 0)
    xp = lax.pad(x, jnp.zeros((), x.dtype), pads)
    taps = []
    for k in itertools.product(*(range(kk) for kk in case.kernel)):
      start, limit, strides = [0] * x.ndim, list(xp.shape), [1] * x.ndim
      for d, a in enumerate(axes):
        start[a] = k[d] * case.dilation[d]
        limit[a] = start[a] + (out[d] - 1) * case.stride[d] + 1
        strides[a] = case.stride[d]
      taps.append(lax.slice(xp, start, limit, strides))
    n, kk, l = x.shape[0], len(taps), math.prod(out)
    if layout == "cf":
      return jnp.stack(taps, axis=2).reshape(n, x.shape[1] * kk, l)  # (N, C, K, *out)
    return jnp.stack(taps, axis=-2).reshape(n, l, kk * x.shape[-1])  # (N, *out, K, C)

  return unfold


def jax_vjp_fold_fn(case: Case, layout: str, dtype):
  """fold in plain JAX: the VJP of jax_unfold_fn (the transposes of pad and
  strided slices, summed: XLA fuses them into one kernel). The primal is a
  zeros array inside the function, which the linear map's VJP never reads (XLA
  drops it), so the function takes the columns alone, as ours does."""
  unfold = jax_unfold_fn(case, layout)
  xs = x_shape(case, layout)
  return lambda cols: jax.vjp(unfold, jnp.zeros(xs, dtype))[1](cols)[0]


def jax_scatter_fold_fn(case: Case, layout: str):
  """fold in plain JAX by scatter-add: every column entry added into a zero
  padded image at the position its tap reads (one `.at[].add` with an index
  array of shape (K, L), fixed at trace time), then the padding cropped."""
  out = out_spatial(case)
  padded = tuple(s + lo + hi for s, (lo, hi) in zip(case.spatial, case.pads))
  taps = np.array(list(itertools.product(*(range(kk) for kk in case.kernel))))  # (K, nd)
  grid = np.stack(np.meshgrid(*(np.arange(o) for o in out), indexing="ij"), -1).reshape(-1, case.nd)  # (L, nd)
  coords = (taps[:, None, :] * np.asarray(case.dilation) + grid[None, :, :] * np.asarray(case.stride))  # (K, L, nd)
  index = np.ravel_multi_index(tuple(np.moveaxis(coords, -1, 0)), padded).astype(np.int32)  # (K, L)
  k, l = index.shape

  def fold(cols):
    n = cols.shape[0]
    if layout == "cf":
      c = cols.shape[1] // k
      z = jnp.zeros((n, c, math.prod(padded)), cols.dtype).at[:, :, index].add(cols.reshape(n, c, k, l))
      img, axes = z.reshape(n, c, *padded), range(2, 2 + case.nd)
    else:
      c = cols.shape[2] // k
      z = jnp.zeros((n, math.prod(padded), c), cols.dtype).at[:, index.T, :].add(cols.reshape(n, l, k, c))
      img, axes = z.reshape(n, *padded, c), range(1, 1 + case.nd)
    crop = [(0, 0, 0)] * img.ndim
    for a, (lo, hi) in zip(axes, case.pads):
      crop[a] = (-lo, -hi, 0)
    return lax.pad(img, jnp.zeros((), img.dtype), crop)

  return fold


def column_shapes(case: Case, layout: str, dtype) -> tuple:
  """(image shape, our columns' shape, XLA's patches' shape, bytes of the
  image and the columns: what unfold and fold move)."""
  xs = x_shape(case, layout)
  x_struct = jax.ShapeDtypeStruct(xs, dtype)
  cols = jax.eval_shape(ours_unfold_fn(case, layout), x_struct).shape
  patches = jax.eval_shape(xla_patches_fn(case, layout), x_struct).shape
  return xs, cols, patches, nbytes(xs, dtype) + nbytes(cols, dtype)


def same_size_copy(b: Bench, base: dict, dt: str):
  """A row's own copy ceiling: x + 1 over half the bytes it moves (XLA's
  elementwise kernel reads them and writes them once), timed as ours is, once
  per size. Unlike the large copy of the ceilings, it pays what a kernel of
  a few microseconds pays (launch, ramp, tail): the 7 x 7 rows' bound. It
  runs in float32 whatever the row's type: XLA's bfloat16 x + 1 reaches only
  73-79% of the copy bandwidth (H100, 2026-11-24), which made the bound
  loose for 2-byte rows."""
  key = base["bytes"]
  if key not in b.same_size:
    n = base["bytes"] // (2 * jnp.dtype(jnp.float32).itemsize)
    b.same_size[key] = b.run_jax(base, "copy", lambda x: x + 1, b.data.sets([(n,)], jnp.float32))
    return
  rec = b.same_size[key]
  if "ms" in rec:
    b.add(base, "copy", ms=rec["ms"], same_as=f"{rec['section']} {rec['case']} {rec['layout']} {rec['dtype']}")
  else:
    b.skip(base, "copy", rec.get("error") or rec.get("skip"))


def ceiling(b: Bench, base: dict, kind: str, image_bytes: int, cols_bytes: int):
  """The row's own bound, measured once per size (b.ceilings_by_size), in
  float32 over the row's bytes whatever its type (as same_size_copy):
  m = round(columns / image bytes) arrays of the image's bytes.
  - "read" (fold's): a jitted sum of m distinct arrays of the image's size,
    one loop kernel that reads them all and writes one array: fold's traffic
    (it reads the columns, writes the image) as a plain elementwise stream;
  - "write" (unfold's): the image broadcast to m copies (x[None] * 1.0), one
    loop kernel that reads it and writes m of its size: unfold's traffic."""
  n = max(1, image_bytes // 4)
  m = max(1, round(cols_bytes / image_bytes))
  key = (kind, n, m)
  if key not in b.ceilings_by_size:
    if kind == "read":
      fn, shapes = (lambda *arrays: functools.reduce(jnp.add, arrays)), [(n,)] * m
    else:
      fn, shapes = (lambda x: jnp.broadcast_to(x[None], (m, n)) * 1.0), [(n,)]
    sets = b.data.sets(shapes, jnp.float32)
    b.ceilings_by_size[key] = b.run_jax(dict(base, ceiling=kind, ceiling_arrays=m), "ceiling", fn, sets)
    return
  rec = b.ceilings_by_size[key]
  if "ms" in rec:
    b.add(dict(base, ceiling=kind, ceiling_arrays=m), "ceiling", ms=rec["ms"],
          same_as=f"{rec['section']} {rec['case']} {rec['layout']} {rec['dtype']}")
  else:
    b.skip(base, "ceiling", rec.get("error") or rec.get("skip"))


def op_unfold(b: Bench, case: Case, dt: str, layout: str):
  dtype = DTYPES[dt]
  xs, cols, _, moved = column_shapes(case, layout, dtype)
  base = base_fields("unfold", case, dt, layout, bytes=moved,
                     ideal_ms=moved / b.ceilings["copy_gbps"] / 1e6 if b.ceilings.get("copy_gbps") else None)
  sets = b.data.sets([xs], dtype)
  b.run_jax(base, "ours", ours_unfold_fn(case, layout), sets)
  if b.args.unfold_routes:
    for route in ("own", "xla"):
      b.run_jax(base, f"ours_{route}", ours_unfold_fn(case, layout, route), sets)
  b.run_jax(base, "jax", jax_unfold_fn(case, layout), sets)
  if b.args.patches:
    b.run_jax(base, "xla", xla_patches_fn(case, layout), sets)
  del sets
  same_size_copy(b, base, dt)
  ceiling(b, base, "write", nbytes(xs, dtype), nbytes(cols, dtype))
  if case.nd == 2 and layout == "cf":
    b.run_torch(base, "torch", lambda: (lambda x: F.unfold(x, **torch_window_kwargs(case)),
                                    b.data.torch_sets([xs], dt)))
  else:
    b.skip(base, "torch", "F.unfold: 2-D channels-first only")


def op_fold(b: Bench, case: Case, dt: str, layout: str):
  dtype = DTYPES[dt]
  xs, cols, g_shape, moved = column_shapes(case, layout, dtype)
  base = base_fields("fold", case, dt, layout, bytes=moved,
                     ideal_ms=moved / b.ceilings["copy_gbps"] / 1e6 if b.ceilings.get("copy_gbps") else None)
  sets = b.data.sets([cols], dtype)
  b.run_jax(base, "ours", ours_fold_fn(case, layout), sets)
  if b.args.fold_routes:
    for route in ("own", "xla"):
      b.run_jax(base, f"ours_{route}", ours_fold_fn(case, layout, route), sets)
  b.run_jax(base, "jax_vjp", jax_vjp_fold_fn(case, layout, dtype), sets)
  b.run_jax(base, "jax_scatter", jax_scatter_fold_fn(case, layout), sets)
  del sets
  same_size_copy(b, base, dt)
  ceiling(b, base, "read", nbytes(xs, dtype), nbytes(cols, dtype))
  if b.args.patches:
    x = b.data.normal(xs, dtype)  # the primal; the VJP of a linear map never reads it
    sets = [(x, g) for (g,) in b.data.sets([g_shape], dtype)]
    b.run_jax(base, "xla", xla_fold_fn(case, layout), sets)
    del sets, x
  if case.nd == 2 and layout == "cf":
    b.run_torch(base, "torch", lambda: (lambda c: F.fold(c, case.spatial, **torch_window_kwargs(case)),
                                    b.data.torch_sets([cols], dt)))
  else:
    b.skip(base, "torch", "F.fold: 2-D channels-first only")


def add_case_arguments(parser) -> None:
  """The per-op scripts' (op_times.py, kernel_times.py) choice of cases."""
  parser.add_argument("--cases", required=True, help="comma-separated case names")
  parser.add_argument("--ops", default="fwd,dgrad,wgrad")
  parser.add_argument("--dtypes", default="f32,bf16")
  parser.add_argument("--layouts", default="cf,cl")


def chosen_configs(parser, args):
  """(case, dtype, layout) for each of add_case_arguments' choices that the
  case has."""
  by_name = {c.name: c for c in SUITE + EXTRAS + PROBES}
  unknown = [n for n in args.cases.split(",") if n not in by_name]
  if unknown:
    parser.error(f"unknown cases {unknown}; known: {sorted(by_name)}")
  for name in args.cases.split(","):
    case = by_name[name]
    for dt in args.dtypes.split(","):
      for layout in args.layouts.split(","):
        if dt in case.dtypes and layout in case.layouts:
          yield case, dt, layout


def conv_impls(case: Case, layout: str, dt: str) -> list:
  """(impl name, conv function or None) for ours and XLA, at DEFAULT and (f32) HIGHEST."""
  impls = [("ours", OURS_CONV, None), ("xla", lax.conv_general_dilated, None)]
  if dt == "f32":
    impls += [("ours_hi", OURS_CONV, HIGHEST), ("xla_hi", lax.conv_general_dilated, HIGHEST)]
  out = []
  for name, conv, prec in impls:
    if conv is None:
      out.append((name, None))
    else:
      kw = conv_kwargs(case, layout, prec)
      out.append((name, lambda x, w, conv=conv, kw=kw: conv(x, w, **kw)))
  return out


def op_fwd(b: Bench, case: Case, dt: str, layout: str):
  dtype = DTYPES[dt]
  shapes = [x_shape(case, layout), w_shape(case, layout)]
  base = base_fields("fwd", case, dt, layout, flops=conv_flops(case))
  sets = b.data.sets(shapes, dtype)
  for name, fn in conv_impls(case, layout, dt):
    if fn is None:
      b.skip(base, name, NO_OURS_CONV)
    else:
      b.run_jax(base, name, fn, sets)
  del sets
  tc = torch_conv_or_skip(b, base, case, layout)
  if tc is None:
    return
  conv, tw = tc
  mf = torch_memory_format(case, layout)
  b.run_torch(base, "torch", lambda: (conv, b.data.torch_sets([x_shape(case, "cf"), tw], dt, mf)))


def conv_op(fn: Callable, op: str) -> Callable:
  """The conv `fn(x, w)` as op "fwd" (itself), or its VJP `(x, w, g) ->
  gradients`: "bwd" both gradients, "dgrad" the input's alone, "wgrad" the
  weights' alone."""
  if op == "fwd":
    return fn
  if op == "bwd":
    return lambda x, w, g: jax.vjp(fn, x, w)[1](g)
  if op == "dgrad":
    return lambda x, w, g: jax.vjp(lambda x: fn(x, w), x)[1](g)
  if op == "wgrad":
    return lambda x, w, g: jax.vjp(lambda w: fn(x, w), w)[1](g)
  raise ValueError(f"conv_op: unknown op {op!r}")


def op_bwd(b: Bench, case: Case, dt: str, layout: str, wrt: str = "bwd"):
  """The VJP of the conv: wrt "bwd" both gradients, "dgrad" the input's alone,
  "wgrad" the weights' alone (XLA and torch then compute only that one)."""
  dtype = DTYPES[dt]
  shapes = [x_shape(case, layout), w_shape(case, layout), y_shape(case, layout)]
  base = base_fields(wrt, case, dt, layout, flops=(2 if wrt == "bwd" else 1) * conv_flops(case))
  want_x, want_w = wrt in ("bwd", "dgrad"), wrt in ("bwd", "wgrad")
  sets = b.data.sets(shapes, dtype)
  for name, fn in conv_impls(case, layout, dt)[:2]:  # DEFAULT precision only
    if fn is None:
      b.skip(base, name, NO_OURS_CONV)
    else:
      b.run_jax(base, name, conv_op(fn, wrt), sets)
  del sets
  tc = torch_conv_or_skip(b, base, case, layout)
  if tc is None:
    return
  conv, tw = tc
  mf = torch_memory_format(case, layout)

  def make():
    sets = []
    for x, w, g in b.data.torch_sets([x_shape(case, "cf"), tw, torch_y_shape(case)], dt, mf):
      x.requires_grad_(want_x)
      w.requires_grad_(want_w)
      wrt_args = (x, w) if want_x and want_w else (x,) if want_x else (w,)
      sets.append((conv(x, w), wrt_args, g))  # the forward runs once, outside the timing
    return (lambda y, wrt_args, g: torch.autograd.grad(y, wrt_args, g, retain_graph=True)), sets

  b.run_torch(base, "torch", make, grad=True)


def op_per_example(b: Bench, case: Case, dt: str, layout: str):
  """Per-example weight gradients: vmap over examples of grad wrt the weights."""
  dtype = DTYPES[dt]
  base = base_fields("pex", case, dt, layout, flops=conv_flops(case))
  xs, ws, ys = x_shape(case, layout), w_shape(case, layout), y_shape(case, layout)

  def per_example(conv):
    kw = conv_kwargs(case, layout)

    def loss(w, x, ct):
      return jnp.sum(conv(x[None], w, **kw)[0].astype(jnp.float32) * ct.astype(jnp.float32))

    return lambda w, x, ct: jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(w, x, ct)

  sets = b.data.sets([ws, xs, ys], dtype)
  if OURS_CONV is None:
    b.skip(base, "ours", NO_OURS_CONV)
  else:
    b.run_jax(base, "ours", per_example(OURS_CONV), sets)
  b.run_jax(base, "xla", per_example(lax.conv_general_dilated), sets)
  del sets
  tc = torch_conv_or_skip(b, base, case, layout)
  if tc is None:
    return
  conv, tw = tc

  def make():
    from torch.func import grad, vmap

    def loss(w, x, ct):
      return (conv(x[None], w)[0].float() * ct.float()).sum()

    return vmap(grad(loss), in_dims=(None, 0, 0)), b.data.torch_sets([tw, x_shape(case, "cf"),
                                                                       torch_y_shape(case)], dt)

  b.run_torch(base, "torch", make)


NO_CAP = 1 << 50  # a workspace cap no suite shape reaches


def op_cap(b: Bench, case: Case, dt: str, layout: str):
  """What the workspace cap costs: our forward and backward (one training
  step's convolution) traced at the default cap ("ours") and with none
  ("ours_nocap"), each with XLA's temp memory (the columns' workspace)."""
  if OURS_CONV is None:
    return b.skip(base_fields("cap", case, dt, layout), "ours", NO_OURS_CONV)
  dtype = DTYPES[dt]
  shapes = [x_shape(case, layout), w_shape(case, layout), y_shape(case, layout)]
  base = base_fields("cap", case, dt, layout, flops=3 * conv_flops(case))
  kw = conv_kwargs(case, layout)

  def step(x, w, g):
    y, vjp = jax.vjp(lambda x, w: OURS_CONV(x, w, **kw), x, w)
    return (y, *vjp(g))

  def uncapped(x, w, g):
    with J.workspace_limit(NO_CAP):  # the cap is read at trace time
      return step(x, w, g)

  sets = b.data.sets(shapes, dtype)
  b.run_jax(base, "ours", step, sets)
  b.run_jax(base, "ours_nocap", uncapped, sets)


OPS = {"unfold": op_unfold, "fold": op_fold, "fwd": op_fwd, "bwd": op_bwd, "pex": op_per_example,
       "dgrad": functools.partial(op_bwd, wrt="dgrad"), "wgrad": functools.partial(op_bwd, wrt="wgrad"),
       "cap": op_cap}
# Asked for by name only (not by "extra"): the backward split into its two
# gradients, and the workspace cap's cost.
SPLIT_GRADS = ("dgrad", "wgrad")
NAMED_ONLY = SPLIT_GRADS + ("cap",)


def measure_ceilings(b: Bench, quick: bool):
  gpu = jax.default_backend() != "cpu"
  n_copy = (64 << 20) if gpu else 8 << 20  # float32 elements (256 MB: a chain of several fits)
  moved = 2 * n_copy * 4
  base = dict(section="ceiling", case="copy", dtype="f32", layout="", bytes=moved)
  sets = b.data.sets([(n_copy,)], jnp.float32)
  copies = [b.run_jax(base, "copy", lambda x: jnp.copy(x), sets), b.run_jax(base, "x+1", lambda x: x + 1, sets)]
  del sets
  if torch is not None:  # torch's device-to-device copy, into a preallocated buffer
    copies.append(b.run_torch(base, "torch copy", lambda: (
        lambda src, dst: dst.copy_(src), b.data.torch_sets([(n_copy,), (n_copy,)], "f32"))))
  gbps = [r["gbps"] for r in copies if r.get("gbps")]
  if gbps:
    b.ceilings["copy_gbps"] = max(gbps)
  # Writes alone (torch's fill of a preallocated buffer): the bound of a stream
  # that mostly writes, as unfold does.
  if torch is not None:
    base = dict(section="ceiling", case="write", dtype="f32", layout="", bytes=n_copy * 4)
    r = b.run_torch(base, "torch fill", lambda: (lambda dst: dst.fill_(1.0), b.data.torch_sets([(n_copy,)], "f32")))
    if r.get("gbps"):
      b.ceilings["write_gbps"] = r["gbps"]
  # A stream that writes 9 bytes for each byte read, as a 3x3 unfold does, by
  # the peers (XLA's broadcast fusion, torch's expand copy).
  n9 = n_copy // 9
  base = dict(section="ceiling", case="write9", dtype="f32", layout="", bytes=10 * n9 * 4)
  sets = b.data.sets([(n9,)], jnp.float32)
  writes = [b.run_jax(base, "broadcast", lambda x: jnp.broadcast_to(x[None], (9, n9)) * 1.0, sets)]
  del sets
  if torch is not None:
    writes.append(b.run_torch(base, "torch expand copy", lambda: (
        lambda src, dst: dst.copy_(src.expand(9, n9)), b.data.torch_sets([(n9,), (9, n9)], "f32"))))
  gbps = [r["gbps"] for r in writes if r.get("gbps")]
  if gbps:
    b.ceilings["write9_gbps"] = max(gbps)
  m = (4096 if quick else 8192) if gpu else (512 if quick else 1024)
  for name, dtype, prec in [("f32_highest", jnp.float32, HIGHEST), ("f32_default", jnp.float32, None),
                            ("bf16", jnp.bfloat16, None)]:
    base = dict(section="ceiling", case=f"gemm{m}", dtype=name, layout="", flops=2.0 * m**3)
    sets = b.data.sets([(m, m), (m, m)], dtype)
    r = b.run_jax(base, "gemm", lambda a, c, prec=prec: jnp.matmul(a, c, precision=prec), sets)
    del sets
    if r.get("tflops"):
      b.ceilings[f"gemm_{name}_tflops"] = r["tflops"]


# ----------------------------------------------------------------------------- plan


def plan(args) -> list:
  """(case, dtype, layout, op) in priority order: the suite channels-first,
  then the extra cases, then the suite channels-last."""
  ops = set()
  for o in args.only.split(","):
    ops |= {"conv": {"fwd", "bwd"}, "extra": {"extra"}, "grads": set(SPLIT_GRADS)}.get(o, {o})
  cases = [shrink(c) if args.quick else c for c in SUITE + EXTRAS]
  if args.cases:
    names = args.cases.split(",")
    cases = [c for c in cases if any(n in c.name for n in names)]
  dtypes, layouts = args.dtypes.split(","), args.layouts.split(",")
  out = []
  for group, layout_pass in [("suite", "cf"), ("extra", None), ("suite", "cl")]:
    for case in cases:
      if case.group != group:
        continue
      case_ops = [o for o in case.ops
                  if o in ops or (group == "extra" and "extra" in ops and o not in NAMED_ONLY)]
      for layout in case.layouts:
        if layout in layouts and layout_pass in (None, layout):
          out += [(case, dt, layout, op) for dt in case.dtypes if dt in dtypes for op in case_ops]
  return out


# ----------------------------------------------------------------------------- reports


def geomean(values) -> float | None:
  vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
  return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def fmt(v, digits=3) -> str:
  if v is None:
    return "-"
  if isinstance(v, str):
    return v
  if v == 0:
    return "0"
  if abs(v) >= 100:
    return f"{v:.0f}"
  return f"{v:.{digits}f}" if abs(v) >= 10 ** -digits else f"{v:.2g}"


def pivot(records) -> dict:
  """(section, case, dtype, layout) -> {impl: record}, ordered by case (table order), layout, dtype."""
  rows: dict = {}
  for r in records:
    if r["section"] == "ceiling":
      continue
    rows.setdefault((r["section"], r["case"], r["dtype"], r["layout"]), {})[r["impl"]] = r
  rows = {k: row for k, row in rows.items() if any("ms" in r or "error" in r for r in row.values())}
  order = {c.name: i for i, c in enumerate(SUITE + EXTRAS)}
  rank = lambda k: (order.get(k[1], len(order)), k[1], k[3], list(DTYPES).index(k[2]) if k[2] in DTYPES else 9)
  return dict(sorted(rows.items(), key=lambda kv: rank(kv[0])))


def ms_of(row: dict, impl: str):
  r = row.get(impl)
  return r.get("ms") if r else None


def cell_ms(row: dict, impl: str) -> str:
  r = row.get(impl)
  if r is None or "skip" in r:
    return "-"
  return "ERR" if "error" in r else fmt(r["ms"])


def ratio(row: dict, a: str, b: str):
  x, y = ms_of(row, a), ms_of(row, b)
  return x / y if x and y else None


def first(row: dict, key: str):
  return next((r[key] for r in row.values() if r.get(key) is not None), None)


# Per section: implementations shown (ms), ratio columns, and derived columns (name, value, digits).
SECTIONS = {
    "fwd": dict(title="Convolution forward (ms)", impls=["ours", "xla", "torch", "ours_hi", "xla_hi"],
                ratios=[("ours/xla", "ours", "xla"), ("ours/torch", "ours", "torch"),
                        ("ours_hi/xla_hi", "ours_hi", "xla_hi")],
                derived=[("ours TFLOP/s", lambda row, c: row.get("ours", {}).get("tflops"), 1),
                         ("ours temp MB", lambda row, c: row.get("ours", {}).get("temp_mb"), 1),
                         ("xla temp MB", lambda row, c: row.get("xla", {}).get("temp_mb"), 1)]),
    "bwd": dict(title="Convolution backward: input + weight gradient (ms)", impls=["ours", "xla", "torch"],
                ratios=[("ours/xla", "ours", "xla"), ("ours/torch", "ours", "torch")],
                derived=[("ours TFLOP/s", lambda row, c: row.get("ours", {}).get("tflops"), 1),
                         ("ours temp MB", lambda row, c: row.get("ours", {}).get("temp_mb"), 1),
                         ("xla temp MB", lambda row, c: row.get("xla", {}).get("temp_mb"), 1)]),
    "dgrad": dict(title="Convolution input gradient alone (ms)", impls=["ours", "xla", "torch"],
                  ratios=[("ours/xla", "ours", "xla"), ("ours/torch", "ours", "torch")], derived=[]),
    "wgrad": dict(title="Convolution weight gradient alone (ms)", impls=["ours", "xla", "torch"],
                  ratios=[("ours/xla", "ours", "xla"), ("ours/torch", "ours", "torch")], derived=[]),
    "cap": dict(title="Workspace cap: forward + backward at the default cap and with none (ms)",
                impls=["ours", "ours_nocap"], ratios=[("cap/nocap", "ours", "ours_nocap")],
                derived=[("temp MB", lambda row, c: row.get("ours", {}).get("temp_mb"), 1),
                         ("nocap temp MB", lambda row, c: row.get("ours_nocap", {}).get("temp_mb"), 1)]),
    "unfold": dict(title="Unfold / im2col (ms); jax = pad + a strided slice per tap + stack; ceiling = the image "
                         "broadcast to columns / image copies (float32, the same bytes: write-dominated); "
                         "copy = float32 x + 1 over the same bytes; xla (--patches) = conv_general_dilated_patches; "
                         "ours_own / ours_xla (--unfold-routes) = our unfold with each route forced",
                   impls=["ours", "ours_own", "ours_xla", "jax", "torch", "ceiling", "copy", "xla"],
                   ratios=[("ours/jax", "ours", "jax"), ("own/jax", "ours_own", "jax"), ("xla/jax", "ours_xla", "jax"),
                           ("ours/torch", "ours", "torch"), ("ours/xla", "ours", "xla")],
                   derived=[("ideal", lambda row, c: first(row, "ideal_ms"), 3),
                            ("ours % copy BW", lambda row, c: pct_bw(row, c), 1),
                            ("ours % ceiling", lambda row, c: pct_of(row, "ceiling"), 1),
                            ("ours % same-size copy", lambda row, c: pct_copy(row), 1)]),
    "fold": dict(title="Fold / col2im (ms); jax_vjp = the VJP of jax's unfold (one fused kernel); jax_scatter = "
                       "`.at[].add` of the columns into the padded image; ceiling = a sum of columns / image "
                       "arrays of the image's bytes (float32, the same bytes: read-dominated); copy = float32 "
                       "x + 1 over the same bytes; xla (--patches) = VJP of conv_general_dilated_patches; "
                       "ours_own / ours_xla (--fold-routes) = our fold with each route forced",
                 impls=["ours", "ours_own", "ours_xla", "jax_vjp", "jax_scatter", "torch", "ceiling", "copy", "xla"],
                 ratios=[("ours/jax_vjp", "ours", "jax_vjp"), ("own/jax_vjp", "ours_own", "jax_vjp"),
                         ("xla/jax_vjp", "ours_xla", "jax_vjp"), ("ours/jax_scatter", "ours", "jax_scatter"),
                         ("ours/torch", "ours", "torch"), ("ours/xla", "ours", "xla")],
                 derived=[("ideal", lambda row, c: first(row, "ideal_ms"), 3),
                          ("ours % copy BW", lambda row, c: pct_bw(row, c), 1),
                          ("ours % ceiling", lambda row, c: pct_of(row, "ceiling"), 1),
                          ("ours % same-size copy", lambda row, c: pct_copy(row), 1)]),
}


def pct_bw(row: dict, ceilings: dict):
  r = row.get("ours", {})
  return 100 * r["gbps"] / ceilings["copy_gbps"] if r.get("gbps") and ceilings.get("copy_gbps") else None


def pct_copy(row: dict):
  """Ours as a percentage of the same-size copy's speed (same_size_copy)."""
  return pct_of(row, "copy")


def pct_of(row: dict, bound: str):
  """Ours as a percentage of a bound's speed: 100 * its time / ours."""
  r = ratio(row, bound, "ours")
  return 100 * r if r is not None else None


def md_table(header: list, rows: list) -> list:
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(r) + " |" for r in rows]
  return lines


def geomean_rows(keyed_rows: list, ratio_cols: list, n_lead: int, n_mid: int, trailing: list = ()) -> list:
  """Rows 'geomean (cf)', '(cl)', '(all)' over (key, row) pairs for the ratio
  columns, then for each of `trailing` ((value of a row, digits), or None for
  a blank cell)."""
  out = []
  for label, keep in [("cf", lambda k: k[3] == "cf"), ("cl", lambda k: k[3] == "cl"), ("all", lambda k: True)]:
    sel = [row for key, row in keyed_rows if keep(key)]
    if not sel or (label == "all" and len({k[3] for k, _ in keyed_rows}) < 2):
      continue
    g = [fmt(geomean(ratio(row, a, b) for row in sel), 2) for _, a, b in ratio_cols]
    g += [fmt(geomean(col[0](row) for row in sel), col[1]) if col else "" for col in trailing]
    out.append([f"**geomean ({label})**"] + [""] * (n_lead - 1) + [""] * n_mid + g)
  return out


def section_table(section: str, rows: dict, ceilings: dict, group: str = "suite") -> list:
  spec = SECTIONS[section]
  keyed = [(k, row) for k, row in rows.items() if k[0] == section and first(row, "group") == group]
  if not keyed:
    return []
  # Implementations that ran in no row (xla without --patches) leave no column.
  impls = [i for i in spec["impls"] if any(i in row for _, row in keyed)]
  ratios = [r for r in spec["ratios"] if r[1] in impls and r[2] in impls]
  header = ["shape", "dtype", "layout"] + impls + [r[0] for r in ratios] + [d[0] for d in spec["derived"]]
  body = []
  for (sec, case, dt, layout), row in keyed:
    body.append([case, dt, layout] + [cell_ms(row, i) for i in impls] +
                [fmt(ratio(row, a, b), 2) for _, a, b in ratios] +
                [fmt(f(row, ceilings), digits) for _, f, digits in spec["derived"]])
  # Percentages averaged as the ratios are; other derived columns left blank.
  trailing = [((lambda row, f=f: f(row, ceilings)), digits) if "%" in name else None
              for name, f, digits in spec["derived"]]
  geo = geomean_rows(keyed, ratios, 3, len(impls), trailing)
  return [f"### {spec['title']}", ""] + md_table(header, body + geo) + [""]


def extras_table(rows: dict) -> list:
  keyed = [(k, row) for k, row in rows.items() if first(row, "group") == "extra"]
  if not keyed:
    return []
  notes = {c.name: c.note for c in EXTRAS}
  header = ["case", "op", "dtype", "layout", "ours", "xla", "torch", "ours/xla", "ours/torch", "note"]
  body = [[case, sec, dt, layout, cell_ms(row, "ours"), cell_ms(row, "xla"), cell_ms(row, "torch"),
           fmt(ratio(row, "ours", "xla"), 2), fmt(ratio(row, "ours", "torch"), 2), notes.get(case, "")]
          for (sec, case, dt, layout), row in keyed]
  return ["### Cases reported slow in XLA (ms)", ""] + md_table(header, body) + [""]


SUMMARY_COLS = [("fwd/xla", "fwd"), ("fwd/torch", "fwd"), ("bwd/xla", "bwd"), ("bwd/torch", "bwd"),
                ("unf/jax", "unfold"), ("unf/torch", "unfold"), ("fold/jax_vjp", "fold"),
                ("fold/jax_scatter", "fold"), ("fold/torch", "fold")]


def summary_table(rows: dict) -> list:
  """One line per (shape, dtype, layout): ours over XLA and over torch for every op."""
  combos: dict = {}
  for (sec, case, dt, layout), row in rows.items():
    if first(row, "group") == "suite":
      combos.setdefault((None, case, dt, layout), {})[sec] = row
  if not combos:
    return []

  def r(c, col):
    name, sec = col
    row = c.get(sec)
    return ratio(row, "ours", name.split("/")[1]) if row else None

  header = ["shape", "dtype", "layout", "fwd ours ms"] + [c[0] for c in SUMMARY_COLS]
  body = [[case, dt, layout, cell_ms(c["fwd"], "ours") if "fwd" in c else "-"] +
          [fmt(r(c, col), 2) for col in SUMMARY_COLS] for (_, case, dt, layout), c in combos.items()]
  for label, keep in [("cf", "cf"), ("cl", "cl"), ("all", None)]:
    sel = [c for k, c in combos.items() if keep is None or k[3] == keep]
    if sel and not (keep is None and len({k[3] for k in combos}) < 2):
      body.append([f"**geomean ({label})**", "", "", ""] + [fmt(geomean(r(c, col) for c in sel), 2)
                                                             for col in SUMMARY_COLS])
  return ["### Summary: ours / peer time (< 1: ours faster)", ""] + md_table(header, body) + [""]


def ceilings_lines(b: Bench) -> list:
  c = b.ceilings
  parts = []
  rate = lambda gbps: f"{gbps / 1e3:.2f} TB/s" if gbps >= 1e3 else f"{gbps:.1f} GB/s"
  for key, label in [("copy_gbps", "copy"), ("write_gbps", "write only"),
                     ("write9_gbps", "write-heavy stream (1 byte read : 9 written)")]:
    if c.get(key):
      parts.append(f"{label} {rate(c[key])}")
  for k, label in [("gemm_f32_highest_tflops", "f32 HIGHEST"), ("gemm_f32_default_tflops", "f32 DEFAULT"),
                   ("gemm_bf16_tflops", "bf16")]:
    if c.get(k):
      parts.append(f"GEMM {label} {c[k]:.1f} TFLOP/s")
  return [f"Device ceilings: {', '.join(parts) or 'not measured'}.", ""]


def notes_lines(records: list) -> list:
  skips: dict = {}
  errors = []
  for r in records:
    if "skip" in r:
      skips[r["skip"]] = skips.get(r["skip"], 0) + 1
    if "error" in r:
      errors.append(f"- {r['section']} {r['case']} {r['dtype']} {r['layout']} {r['impl']}: `{r['error'][:300]}`")
  lines = []
  if skips:
    lines += ["Skipped measurements: " + "; ".join(f"{k} ({v})" for k, v in skips.items()) + ".", ""]
  if errors:
    lines += [f"Errors ({len(errors)}):", ""] + errors[:40] + ([f"- ... {len(errors) - 40} more"] if len(errors) > 40 else []) + [""]
  return lines


def markdown(b: Bench, meta: dict) -> str:
  rows = pivot(b.records)
  lines = [f"## Benchmark: {meta['device']} ({meta['date']})", "",
           f"jax {meta['versions'].get('jax')}, jaxlib {meta['versions'].get('jaxlib')}, "
           f"torch {meta['versions'].get('torch')}, CUDA {meta.get('cuda') or '-'}"
           f"{', --quick (shrunk shapes)' if b.args.quick else ''}. Device ms per call, median over repeats "
           f"after warm-up; a repeat runs R calls (about {b.cfg.rep_target_s * 1e3:g} ms): JAX chains them in "
           "one compiled program (optimization_barrier between calls), timed by "
           f"{'the device span of the repeat (CUPTI timestamps)' if JAX_CLOCK == 'span' else 'the host clock'}, torch "
           f"{'replays a CUDA graph of them (CUDA events)' if meta.get('torch_device') == 'cuda' else 'calls them on a host clock'}. "
           "ours/peer < 1 means jax_im2col is faster. `xla` is jit(lax...) at DEFAULT precision "
           f"{'(TF32 for f32 on this GPU)' if meta['backend'] == 'gpu' else ''}, `_hi` at HIGHEST; torch "
           f"{'runs cudnn.benchmark with TF32 allowed' if meta.get('torch_device') == 'cuda' else 'runs on the CPU, one thread'}. "
           "Layout cf = channels-first (NC...), cl = channels-last (N...C; torch in channels_last memory format). "
           "temp MB = XLA's temp_size_in_bytes (memory_analysis) of the compiled function.", ""]
  lines += ceilings_lines(b)
  if b.interrupted:
    lines += [f"**Run interrupted ({b.interrupted}); tables are partial.**", ""]
  lines += summary_table(rows)
  for section in SECTIONS:
    lines += section_table(section, rows, b.ceilings)
  lines += extras_table(rows)
  lines += notes_lines(b.records)
  return "\n".join(lines)


def plot(b: Bench, path: str):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  rows = pivot(b.records)
  sections = [("fwd", "forward"), ("bwd", "backward"), ("unfold", "unfold"), ("fold", "fold")]
  peers = {"fwd": ("xla", "XLA"), "bwd": ("xla", "XLA"), "unfold": ("jax", "plain JAX"),
           "fold": ("jax_vjp", "plain JAX's VJP")}
  fig, axes = plt.subplots(2, 2, figsize=(16, 10))
  for ax, (sec, title) in zip(axes.flat, sections):
    peer, peer_name = peers[sec]
    keyed = [(k, row) for k, row in rows.items() if k[0] == sec and k[1] and ratio(row, "ours", peer)]
    cases = list(dict.fromkeys(k[1] for k, _ in keyed))
    series = list(dict.fromkeys((k[2], k[3]) for k, _ in keyed))
    if not keyed:
      ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
      ax.set_title(f"{title}: ours / {peer_name}")
      continue
    width = 0.8 / len(series)
    for i, (dt, layout) in enumerate(series):
      vals = [next((ratio(row, "ours", peer) for k, row in keyed if k[1] == c and k[2:] == (dt, layout)), np.nan)
              for c in cases]
      ax.bar(np.arange(len(cases)) + (i - (len(series) - 1) / 2) * width, np.asarray(vals) - 1.0, width,
             bottom=1.0, label=f"{dt} {layout}")  # bars grow from parity, down when ours is faster
    ax.set_yscale("log")
    ax.axhline(1.0, color="k", linewidth=0.8)
    g = geomean(ratio(row, "ours", peer) for _, row in keyed if first(row, "group") == "suite")
    ax.set_title(f"{title}: ours / {peer_name} time (< 1: ours faster); suite geomean {fmt(g, 2)}")
    n_suite = sum(1 for c in cases if c in {s.name for s in SUITE})
    if 0 < n_suite < len(cases):
      ax.axvline(n_suite - 0.5, color="gray", linestyle="--", linewidth=0.8)  # suite | extra cases
    ax.set_xticks(np.arange(len(cases)))
    ax.set_xticklabels(cases, rotation=35, ha="right", fontsize=8)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, framealpha=0.6, ncols=len(series))
  fig.suptitle(f"jax_im2col vs XLA on {device_name()}")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


# ----------------------------------------------------------------------------- metadata


def device_name() -> str:
  d = jax.devices()[0]
  return f"{d.device_kind} ({d.platform})"


def metadata(args) -> dict:
  import importlib.metadata as im
  versions = {}
  for dist in im.distributions():
    name = (dist.metadata["Name"] or "").lower()
    if name.startswith(("jax", "torch", "nvidia-cudnn", "nvidia-cublas", "numpy")):
      versions[name] = dist.version
  meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              device=device_name(), backend=jax.default_backend(), host=platform.node(),
              python=platform.python_version(), versions=versions, argv=sys.argv[1:],
              jax_im2col_has_cuda=J.has_cuda(), ours_conv_available=OURS_CONV is not None, timing=timing_methods(),
              xla_mem_fraction=os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION"))
  try:
    meta["platform_version"] = jax.devices()[0].client.platform_version
  except Exception:  # noqa: BLE001
    pass
  if torch is not None:
    meta["torch_cuda"] = torch.version.cuda
    meta["cuda"] = torch.version.cuda
    try:
      meta["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
      pass
    meta["torch_device"] = str(TORCH_DEVICE)
  try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                          "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    if smi.returncode == 0:
      meta["nvidia_smi"] = smi.stdout.strip()
  except Exception:  # noqa: BLE001
    pass
  return meta


def write_outputs(b: Bench, meta: dict, final: bool):
  os.makedirs(b.args.out, exist_ok=True)
  blob = dict(meta=meta, config=dict(vars(b.args), timing=dataclasses.asdict(b.cfg)), ceilings=b.ceilings,
              interrupted=b.interrupted, elapsed_s=b.elapsed(), records=b.records)
  tmp = os.path.join(b.args.out, "bench.json.tmp")
  with open(tmp, "w") as f:
    json.dump(blob, f, indent=1, default=str)
  os.replace(tmp, os.path.join(b.args.out, "bench.json"))
  if not final:
    return
  md = markdown(b, meta)
  with open(os.path.join(b.args.out, "bench.md"), "w") as f:
    f.write(md + "\n")
  try:
    plot(b, os.path.join(b.args.out, "bench.png"))
  except Exception as e:  # noqa: BLE001
    b.log(f"plot failed: {type(e).__name__}: {e}")


# ----------------------------------------------------------------------------- main


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--out", required=True, help="output folder (bench.json, bench.md, bench.png)")
  p.add_argument("--quick", action="store_true", help="shrunk shapes, small ceilings, short timings")
  p.add_argument("--only", default="ceil,unfold,fold,fwd,bwd,extra",
                 help="comma list of: ceil (copy + GEMM ceilings), unfold, fold, fwd, bwd, conv (= fwd,bwd), "
                      "dgrad, wgrad, grads (= dgrad,wgrad: input / weight gradient alone), "
                      "pex (per-example grads), cap (forward + backward at the default workspace cap and "
                      "with none), extra (every extra case's fwd/bwd/pex); fwd/bwd/conv/dgrad/"
                      "wgrad also run the extra cases' fwd/bwd/dgrad/wgrad")
  p.add_argument("--cases", default="", help="comma list of (substrings of) case names")
  p.add_argument("--dtypes", default="f32,bf16")
  p.add_argument("--layouts", default="cf,cl", help="cf = channels-first, cl = channels-last")
  p.add_argument("--patches", action="store_true",
                 help="also time lax.conv_general_dilated_patches (unfold) and its VJP (fold) as peers "
                      "(\"xla\"; slow one-hot convolutions, off by default to keep within the deadline)")
  p.add_argument("--unfold-routes", action="store_true",
                 help="also time our unfold with each route forced (ours_own: the project's kernel; ours_xla: "
                      "the lax slices XLA compiles; columns/unfold_selection.py chooses between them)")
  p.add_argument("--fold-routes", action="store_true",
                 help="also time our fold with each route forced (ours_own: the project's kernel; ours_xla: "
                      "the lax formulation XLA fuses; columns/fold_selection.py chooses between them)")
  p.add_argument("--deadline-s", type=float, default=None,
                 help="stop measuring after this many seconds (default: 200 on a GPU, none otherwise)")
  p.add_argument("--budget-s", type=float, default=None, help="time budget of one measurement")
  p.add_argument("--skip-impls", default="",
                 help="comma list of implementations not to time (e.g. jax_scatter,torch)")
  p.add_argument("--jax-clock", choices=("span", "host"), default=None,
                 help="how JAX chains are timed: span (the device's timestamps; the default where "
                      "torch sees the GPU) or host (the host clock around each repeat)")
  args = p.parse_args(argv)
  if args.jax_clock is None:
    args.jax_clock = "span" if jax.default_backend() == "gpu" and device_span.available() else "host"
  if args.deadline_s is None and jax.default_backend() != "cpu" and not args.quick:
    args.deadline_s = 200.0
  return args


def main(argv=None) -> int:
  global JAX_CLOCK
  args = parse_args(argv)
  JAX_CLOCK = args.jax_clock
  signal.signal(signal.SIGTERM, _on_sigterm)
  cfg = TimingConfig(warmup=2, min_reps=5, max_reps=20, budget_s=0.05) if args.quick else TimingConfig()
  if args.budget_s is not None:
    cfg.budget_s = args.budget_s
  setup_torch()
  b = Bench(args, cfg)
  meta = metadata(args)
  b.log(f"device {meta['device']}; torch on {TORCH_DEVICE}; ours conv: {OURS_CONV is not None}")
  try:
    if "ceil" in args.only.split(","):
      measure_ceilings(b, args.quick)
    b.log(f"ceilings: {b.ceilings}")
    todo, last_write = plan(args), time.perf_counter()
    b.log(f"{len(todo)} (shape, dtype, layout, op) combinations planned")
    for i, (case, dt, layout, op) in enumerate(todo):
      if b.past_deadline():
        for impl in ("ours", "xla", "torch"):
          b.records.append(dict(base_fields(op, case, dt, layout), impl=impl, skip="deadline"))
        continue
      b.log(f"--- {i + 1}/{len(todo)} {op} {case.name} {dt} {layout}")
      try:
        OPS[op](b, case, dt, layout)
      except Exception as e:  # noqa: BLE001  (input creation or shape errors)
        b.add(base_fields(op, case, dt, layout), "setup", error=f"{type(e).__name__}: {e}"[:600])
      if time.perf_counter() - last_write > 5:
        write_outputs(b, meta, final=False)
        last_write = time.perf_counter()
  except (Stop, KeyboardInterrupt) as e:
    b.interrupted = str(e) or type(e).__name__
    b.log(f"interrupted: {b.interrupted}; writing partial results")
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  write_outputs(b, meta, final=True)
  rows = pivot(b.records)
  print("\n".join(ceilings_lines(b) + summary_table(rows) + extras_table(rows)))
  n_err = sum("error" in r for r in b.records)
  b.log(f"done: {len(b.records)} records, {n_err} errors; wrote {args.out}/bench.json, bench.md, bench.png")
  return 0


if __name__ == "__main__":
  sys.exit(main())
