"""One model's benchmark: for each precision, the train step and the
inference step of ours and XLA (compile, memory, agreement, interleaved
timing), optionally every layer alone, and on the CPU the float64 check.

Every failure is caught and recorded where it happened (one precision's,
mode's or check's), so that the rest of the model, and the other models, are
still measured.
"""

from __future__ import annotations

import time
from typing import Callable

import jax

import device_span
from model_zoo import ModelSpec

from . import kernels
from .agreement import float64_agreement, gradient_sensitivity, relative, tree_difference
from .memory import memory
from .per_layer import per_layer
from .problem import Problem, init_variables, make_problem
from .steps import infer_step, init_train_state, train_step
from .timing import calls, interleaved, summarize, train_loop

Log = Callable[[str], None]

# Train steps profiled (CUPTI) for the device time by class of kernel, after the timing.
KERNEL_STEPS = 3


def _compile(jitted, *args):
  start = time.perf_counter()
  compiled = jitted.lower(*args).compile()
  return compiled, time.perf_counter() - start


def _memory(compiled: dict) -> dict:
  out = {impl: memory(c) for impl, c in compiled.items()}
  if out["xla"] and out["ours"]:
    out["ratio"] = out["ours"]["peak"] / out["xla"]["peak"]
  return out


def run_train(problem: Problem, steps: int, repeats: int, log: Log) -> dict:
  """The train step of both: compile times, memory, the losses of the first
  two steps from the same start, gradient agreement, then ms per step."""
  name = f"{problem.spec.name} {problem.dtype} train"
  x, labels = problem.x, problem.labels
  compiled, compile_s, states = {}, {}, {}
  for impl, module in problem.modules.items():
    states[impl] = init_train_state(problem.params, problem.state)
    compiled[impl], compile_s[impl] = _compile(train_step(module), states[impl], x, labels)
  mem = _memory(compiled)
  peak = (f"; peak {mem['xla']['peak'] / 2**20:.0f} MB (XLA) {mem['ours']['peak'] / 2**20:.0f} MB (ours)"
          if "ratio" in mem else "")
  log(f"{name}: compiled in {compile_s['xla']:.1f} s (XLA), {compile_s['ours']:.1f} s (ours){peak}")
  losses = {}
  for impl, step in compiled.items():
    states[impl], first = step(states[impl], x, labels)
    states[impl], second = step(states[impl], x, labels)
    losses[impl] = [float(first), float(second)]
  gradients = gradient_sensitivity(problem)
  log(f"{name}: loss {losses['xla'][0]:.6g} (XLA) {losses['ours'][0]:.6g} (ours); gradients "
      f"ours vs XLA {gradients['ours_vs_xla']:.2e}, XLA perturbed {gradients['xla_perturbed']:.2e}, "
      f"XLA again {gradients['xla_repeat']:.2e}")
  runners = {impl: train_loop(compiled[impl], states[impl], x, labels) for impl in compiled}
  timing = summarize(interleaved(runners, steps, repeats))
  log(f"{name}: {timing['xla_ms']:.3f} ms (XLA) {timing['ours_ms']:.3f} ms (ours), "
      f"ratio {timing['ratio']:.2f}")
  out = {"timing": timing, "compile_s": compile_s, "memory": mem,
         "loss": {**losses, "rel": [relative(o, r) for o, r in zip(losses["ours"], losses["xla"])]},
         "gradients": gradients}
  if device_span.available():
    # The runners hold the train state the timing loops left (each step donates its own).
    out["kernels"] = {impl: kernels.profile(run, KERNEL_STEPS) for impl, run in runners.items()}
    share = kernels.own_share(out["kernels"]["ours"]["by_class"])
    log(f"{name}: device busy {out['kernels']['xla']['busy_us']:.0f} us (XLA) "
        f"{out['kernels']['ours']['busy_us']:.0f} us (ours)" +
        (f", {100 * share:.0f}% of ours' convolution time in own kernels" if share is not None else ""))
  return out


def run_infer(problem: Problem, steps: int, repeats: int, log: Log) -> dict:
  """The evaluation-mode forward of both: compile times, memory, logits'
  relative difference, ms per call."""
  name = f"{problem.spec.name} {problem.dtype} infer"
  args = (problem.variables, problem.x)
  compiled, compile_s = {}, {}
  for impl, module in problem.modules.items():
    compiled[impl], compile_s[impl] = _compile(infer_step(module), *args)
  logits = {impl: jax.device_get(c(*args)) for impl, c in compiled.items()}
  logits_rel = tree_difference(logits["ours"], logits["xla"])["rel"]
  timing = summarize(interleaved({impl: calls(c, *args) for impl, c in compiled.items()},
                                 steps, repeats))
  log(f"{name}: {timing['xla_ms']:.3f} ms (XLA) {timing['ours_ms']:.3f} ms (ours), "
      f"ratio {timing['ratio']:.2f}; logits differ by {logits_rel:.2e}")
  return {"timing": timing, "compile_s": compile_s, "memory": _memory(compiled),
          "logits_rel": logits_rel}


MODES = {"train": run_train, "infer": run_infer}


def _error(e: Exception) -> str:
  return f"{type(e).__name__}: {e}"


def run_model(spec: ModelSpec, preset: str, dtypes: list[str], modes: list[str], steps: int,
              repeats: int, per_layer_too: bool, f64_check: bool, log: Log) -> dict:
  """Everything measured for one model, as a JSON-ready dict; failures under
  "errors", keyed by where they happened."""
  p = spec.presets[preset]
  record = {"model": spec.name, "title": spec.title, "preset": preset, "batch": p.batch,
            "input_shape": list(p.input_shape), "num_classes": p.num_classes, "runs": {},
            "errors": {}}

  def attempt(where: str, fn, *args):
    try:
      return fn(*args)
    except Exception as e:  # recorded; the rest goes on
      record["errors"][where] = _error(e)
      log(f"{spec.name} {where}: FAILED {_error(e)}")
      return None

  variables = attempt("setup", init_variables, spec, preset)
  if variables is None:
    return record
  for dtype in dtypes:
    problem = attempt(f"{dtype} setup", make_problem, spec, preset, dtype, variables)
    if problem is None:
      continue
    run = record["runs"][dtype] = {
        "params": sum(leaf.size for leaf in jax.tree.leaves(problem.params))}
    for mode in modes:
      result = attempt(f"{dtype} {mode}", MODES[mode], problem, steps, repeats, log)
      if result is not None:
        run[mode] = result
    if per_layer_too:
      result = attempt(f"{dtype} per-layer", per_layer, spec, preset, dtype, steps, repeats, log)
      if result is not None:
        run["per_layer"] = result
    del problem
  if f64_check:
    record["f64"] = attempt("f64 check", float64_agreement, spec, preset, variables)
    if record["f64"] is not None:
      f64 = record["f64"]
      log(f"{spec.name} f64: loss differs by {f64['loss_rel']:.2e}, gradients by {f64['grad_rel']:.2e} "
          f"(worst leaf {f64['grad_worst_leaf_rel']:.2e})")
  return record
