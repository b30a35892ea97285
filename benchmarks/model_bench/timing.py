"""Wall-clock timing of loops of calls, implementations interleaved."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import jax

Runner = Callable[[int], None]  # runs n calls and blocks until they are done


def calls(fn: Callable, *args) -> Runner:
  """A runner of `fn(*args)`, n times back to back, blocking on every output
  at the end (as a loop of independent calls)."""
  def run(n: int) -> None:
    jax.block_until_ready([fn(*args) for _ in range(n)])
  return run


def train_loop(step: Callable, train_state, x, labels) -> Runner:
  """A runner of the train step, each call on the previous call's train state
  (donated), as a training loop runs; blocks on the last state and every loss."""
  holder = [train_state]

  def run(n: int) -> None:
    state, losses = holder[0], []
    for _ in range(n):
      state, loss = step(state, x, labels)
      losses.append(loss)
    holder[0] = state
    jax.block_until_ready((state, losses))
  return run


def interleaved(runners: dict[str, Runner], steps: int, repeats: int) -> dict[str, list[float]]:
  """Milliseconds per call for each runner: one warm-up loop of `steps` calls
  each, then `repeats` rounds that time one loop of each runner in turn
  (A B A B ...), so that drift (clocks, temperature, other load) hits all
  alike."""
  for run in runners.values():
    run(steps)
  times = {name: [] for name in runners}
  for _ in range(repeats):
    for name, run in runners.items():
      start = time.perf_counter()
      run(steps)
      times[name].append((time.perf_counter() - start) * 1e3 / steps)
  return times


def interleaved_spans(runners: dict[str, Runner], steps: int, repeats: int) -> dict[str, list[float]]:
  """As interleaved, but each repeat's time is the median device span of
  `steps` single calls (first kernel's start to last kernel's end, from the
  GPU's timestamps): for ops of tens of microseconds the host clock of a loop
  also counts dispatch, and can misread a ratio by a third."""
  import device_span
  for run in runners.values():
    run(steps)
  times = {name: [] for name in runners}
  for _ in range(repeats):
    for name, run in runners.items():
      spans = device_span.run_spans(lambda: run(1), steps)
      if spans is None:
        raise RuntimeError(f"{name}: the calls put different numbers of kernels on the GPU")
      times[name].append(statistics.median(spans) * 1e3)
  return times


def summarize(times: dict[str, list[float]]) -> dict:
  """Median ms per implementation, every repeat, and the ratio ours / XLA."""
  out = {f"{impl}_ms": statistics.median(t) for impl, t in times.items()}
  out.update({f"{impl}_ms_repeats": t for impl, t in times.items()})
  out["ratio"] = out["ours_ms"] / out["xla_ms"]
  return out
