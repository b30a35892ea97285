#!/usr/bin/env python3
"""A routing rule tried on a whole model before it is written: the train step
compiled with XLA's convolution, with the rules as they stand ("ours"), and
with each candidate rule that also sends one class of ops to XLA's
convolution, all in one process and timed interleaved (A B C ... A B C ...),
so that XLA's own compilation, the clocks and the load are the same for all.

    python benchmarks/routing_ab.py [--model mobilenetv2] [--dtype bf16]
        [--candidates depthwise_56,depthwise_56_fwd_dx] [--steps 10] [--repeats 7]
    python benchmarks/routing_ab.py --model convnext_t --candidates large_filter_all

A candidate wraps jax_im2col.conv.routing.xla_is_faster while its step is
traced, so it costs no rebuild; the "own_" candidates instead keep a class
that the rules send to XLA's convolution on the project's kernels. Prints each step's median ms, its ratio to
XLA's, XLA's peak-memory estimate and every repeat, then one JSON line. The
first calls of a step whose convolutions run on XLA's can take 5-15 s (cuDNN
picks its algorithms then); they are made before the timed loops.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from jax_im2col.conv import routing
from model_bench.memory import memory
from model_bench.problem import init_variables, make_problem
from model_bench.steps import init_train_state, train_step
from model_bench.timing import interleaved, train_loop
from model_zoo import MODELS

ALL_OPS = ("forward", "input_gradient", "filter_gradient")


def depthwise_half(max_side: int, ops=ALL_OPS, taps=lambda k: k == 9, min_side: int = 1):
  """Half-precision 2-D depthwise ops `ops` at unit stride on maps of
  min_side to max_side a side, whose window's taps pass `taps` (3x3 by
  default), to XLA's convolution."""
  def applies(p) -> bool:
    w = p.spec.window
    return (p.spec.groups == p.c == p.o and w.nd == 2 and taps(w.kernel_size)
            and np.dtype(p.dtype).itemsize == 2 and all(s == 1 for s in w.stride)
            and min_side <= max(p.in_spatial) <= max_side and p.op in ops)
  return applies


def depthwise_f32_unit(ops=ALL_OPS):
  """Float32 2-D 3x3 depthwise ops `ops` at unit stride."""
  def applies(p) -> bool:
    w = p.spec.window
    return (p.spec.groups == p.c == p.o and w.nd == 2 and w.kernel_size == 9 and np.dtype(p.dtype) == np.float32
            and all(s == 1 for s in w.stride) and p.op in ops)
  return applies


def stem_forward_half(p) -> bool:
  """Half-precision 2-D forwards of images of at most 4 channels (the stems)."""
  return (p.op == "forward" and p.spec.window.nd == 2 and p.c <= 4 and p.spec.groups == 1
          and np.dtype(p.dtype).itemsize == 2)


def dense_3d(ops, half=None, one_by_one=False, narrow=False, decoder=False):
  """Channels-last 3-D dense ops `ops` (the U-Net's), past its stem: 1x1
  windows only with `one_by_one` (else 3x3x3 and the like), of one precision
  with `half`, with `narrow` those whose contraction runs (input channels;
  output channels for the input gradient) are under 128 bytes on maps of more
  than 32 a side at unit stride, with `decoder` those of at least twice as many input as
  output channels, 64 output channels or more."""
  def applies(p) -> bool:
    w, item = p.spec.window, np.dtype(p.dtype).itemsize
    if not (w.nd == 3 and p.spec.groups == 1 and p.c > 4 and p.op in ops
            and (w.kernel_size == 1) == one_by_one and p.spec.channels_last):
      return False
    if half is not None and (item == 2) != half:
      return False
    runs = (p.o if p.op == "input_gradient" else p.c) * item
    if narrow and not (runs < 128 and max(p.in_spatial) > 32 and all(s == 1 for s in w.stride)):
      return False
    return not decoder or (p.o >= 64 and p.c >= 2 * p.o)
  return applies


# The rules on 3x3 maps of 28 or less (routing.py's _SMALL_MAP until 2026-11-29) and on large-window
# filter gradients of 14-28 maps (_LARGE_FILTER_SIDES) were the candidates
# "depthwise_small" and "large_filter_14_28" here until they became rules, as were,
# on 2026-11-28, "strided_input_gradient" (dense strided input gradients of
# overlapping windows), "small_map_forward_half" (_SMALLEST_MAP), "stem_3d" (the 3-D
# stems) and "strided_depthwise_filter_112" (_LARGE_STRIDED_FILTER_SIDE), and on
# 2026-11-29 "filter_28" (_HALF_FILTER_3X3_SIDES: the bf16 3x3 filter gradients at
# unit stride on 28² maps); under the rules as they stand they would move nothing.
CANDIDATES = {
    "depthwise_56": depthwise_half(56),
    # The rule _SMALL_MAP was until 2026-11-29: those of maps of 28 or less.
    "depthwise_28": depthwise_half(28),
    "depthwise_56_fwd_dx": depthwise_half(56, ("forward", "input_gradient")),
    # Every unit-stride bf16 3x3 depthwise op, the 112² maps too: inside MobileNetV2's step the
    # project's depthwise kernels took 1623 us against cuDNN's 1402 (step_kernels, 2026-11-28).
    "depthwise_112": depthwise_half(112),
    # The unit-stride bf16 3x3 filter gradients of maps of 14 to 28 (MobileNetV2's 28x192,
    # 14x384 and 14x576 layers: 1.19, 1.01 and 1.21x XLA's alone with the staged filter
    # gradient, 2026-11-29).
    "filter_14_28": depthwise_half(28, ("filter_gradient",), min_side=14),
    # ConvNeXt-T's bfloat16 7x7 filter gradients on every map, 7x7 included (0.33x XLA's
    # alone; the class measured on 2026-11-28, optimization log, step 115).
    "large_filter_all": depthwise_half(56, ("filter_gradient",), taps=lambda k: k >= 25),
    # Those of the 56² map only (ConvNeXt-T's first stage: 1.32x XLA's alone on the H100).
    "large_filter_56": depthwise_half(56, ("filter_gradient",), taps=lambda k: k >= 25, min_side=56),
    # MobileNetV2's bf16 stem forward (3x3 stride 2 on 224² x 3; own GEMM 0.98x XLA's alone): its
    # step holds two transposes (211 us) that XLA's does not (step_kernels, 2026-11-28).
    "stem_forward": stem_forward_half,
    # The U-Net's 1x1 head's forward (32 -> 2 channels on 64³: 1.22x and 1.45x XLA's alone by
    # device span, 2026-11-29): its bfloat16 step took 5.81 ms with it on XLA's convolution,
    # 5.73 on the project's kernels; float32 level.
    "3d_head": dense_3d(("forward",), one_by_one=True),
    # MobileNetV2's bf16 3x3 filter gradient on 7² (1.68x XLA's alone by device span,
    # 2026-11-29): its step took 8.62 ms with it on XLA's convolution, 8.40 on the project's
    # kernel.
    "filter_3x3_7": depthwise_half(7, ("filter_gradient",)),
}

# Candidates the other way: ops that the rules send to XLA's convolution kept on
# the project's kernels.
OWN_CANDIDATES = {
    # The half-precision 3x3 depthwise ops at unit stride on maps of 28 or less,
    # which a rule (_SMALL_MAP) sent to XLA's convolution until the staged depthwise
    # forward made the step faster without it (2026-11-29); under the rules as they
    # stand it moves nothing.
    "own_depthwise_small": depthwise_half(28),
    # The float32 3x3 depthwise ops at unit stride, which the rules send to XLA's
    # convolution (measured there before the staged kernels, 0.99-1.13x XLA's alone):
    # every op, or the forward and input gradient only.
    "own_depthwise_f32": depthwise_f32_unit(),
    "own_depthwise_f32_fwd_dx": depthwise_f32_unit(("forward", "input_gradient")),
    # The half-precision large-window filter gradients of maps of 14 to 28 a side, which a
    # rule (_LARGE_FILTER_SIDES) sends to XLA's convolution (ConvNeXt-T's 28² and 14² 7x7
    # layers: 1.49-1.52x XLA's alone on the tiles, H100, 2026-11-28), kept on the project's
    # kernels: the tensor-core filter gradient (depthwise_mma_filter.cuh).
    "own_large_filter_14_28": depthwise_half(28, ("filter_gradient",), taps=lambda k: k >= 25, min_side=14),
    # The rules of 2026-11-29 drawn from the models' layers by device span (routing.py
    # --routed-own): the U-Net's half-precision 64³ forwards and input gradients of 32-channel
    # runs (1.31-1.49x XLA's alone) and its float32 decoder filter gradients (1.00-1.20x).
    "own_3d_narrow_half": dense_3d(("forward", "input_gradient"), half=True, narrow=True),
    "own_3d_decoder_filter": dense_3d(("filter_gradient",), half=False, decoder=True),
}


def with_candidate(applies, rules, own=False):
  def xla_is_faster(p, own_algorithm, device):
    if applies(p):
      return None if own else "candidate rule"
    return rules(p, own_algorithm, device)
  return xla_is_faster


def add_step_arguments(parser: argparse.ArgumentParser, model: str, candidates: str) -> None:
  """The model, dtype, preset and candidate rules of a train-step comparison."""
  parser.add_argument("--model", default=model, choices=sorted(MODELS))
  parser.add_argument("--dtype", default="bf16")
  parser.add_argument("--preset", default="full")
  parser.add_argument("--candidates", default=candidates)


def candidate_names(parser: argparse.ArgumentParser, text: str) -> list[str]:
  names = [c for c in text.split(",") if c]
  unknown = sorted(set(names) - set(CANDIDATES) - set(OWN_CANDIDATES))
  if unknown:
    parser.error(f"unknown candidates {unknown}; known: {sorted(CANDIDATES) + sorted(OWN_CANDIDATES)}")
  return names


def compiled_steps(problem, names):
  """(name, compiled train step, its train state) with XLA's convolution
  ("xla"), the rules as they stand ("ours") and each candidate rule, in turn."""
  rules = routing.xla_is_faster
  for name, impl, applies in [("xla", "xla", None), ("ours", "ours", None)] + [
      (n, "ours", CANDIDATES.get(n) or OWN_CANDIDATES[n]) for n in names]:
    routing.xla_is_faster = rules if applies is None else with_candidate(applies, rules, name in OWN_CANDIDATES)
    try:
      state = init_train_state(problem.params, problem.state)
      compiled = train_step(problem.modules[impl]).lower(state, problem.x, problem.labels).compile()
    finally:
      routing.xla_is_faster = rules
    yield name, compiled, state


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  add_step_arguments(parser, "mobilenetv2", "depthwise_56,depthwise_56_fwd_dx")
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--repeats", type=int, default=7)
  args = parser.parse_args(argv)
  names = candidate_names(parser, args.candidates)

  spec = MODELS[args.model]
  problem = make_problem(spec, args.preset, args.dtype, init_variables(spec, args.preset))
  start = time.time()
  runners, peak_mb = {}, {}
  for name, compiled, state in compiled_steps(problem, names):
    runners[name] = train_loop(compiled, state, problem.x, problem.labels)
    peak_mb[name] = memory(compiled)["peak"] / 2**20
    print(f"[{time.time() - start:.0f} s] {name} compiled", flush=True)
  for name, run in runners.items():
    run(2)
  times = interleaved(runners, args.steps, args.repeats)
  median = {name: statistics.median(t) for name, t in times.items()}
  for name, t in times.items():
    print(f"{name:24s} {median[name]:7.3f} ms  / XLA {median[name] / median['xla']:.3f}  "
          f"peak {peak_mb[name]:.0f} MB  repeats {[round(v, 3) for v in t]}")
  result = {"model": args.model, "dtype": args.dtype, "median_ms": median, "repeats": times,
            "peak_mb": peak_mb}
  print(json.dumps(result))
  return result


if __name__ == "__main__":
  main()
