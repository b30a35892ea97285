"""A train step's device time by kernel and by class of kernel, from CUPTI
(device_span.kernel_spans): the project's kernels ("own"), XLA's
convolutions (cuDNN's), GEMMs, collectives, copies and XLA's fusions (the
rest). Used by step_kernels.py and by the model benchmark's train runs."""

from __future__ import annotations

import collections
import re

import device_span

# First match wins; names are matched lower-cased. "conv" is not XLA's
# "convert" fusions.
CLASSES = (
    ("own", re.compile(r"im2col::")),
    ("collective", re.compile(r"nccl")),
    ("copy", re.compile(r"^memcpy|^memset|^cudamemcpy|^cudamemset")),
    ("xla conv", re.compile(r"conv(?!ert)|fprop|dgrad|wgrad|cudnn|depthwise")),
    ("gemm", re.compile(r"gemm|nvjet|cutlass|cublas")),
)


def kernel_class(name: str) -> str:
  lower = name.lower()
  return next((label for label, pattern in CLASSES if pattern.search(lower)), "xla fusion")


def by_class(by_name: dict) -> dict:
  """Microseconds by class from microseconds by kernel name."""
  out = collections.defaultdict(float)
  for name, us in by_name.items():
    out[kernel_class(name)] += us
  return dict(out)


def own_share(classes: dict) -> float | None:
  """The project's kernels' share of a step's convolution device time
  (own over own plus XLA's convolutions); None without either."""
  conv = classes.get("own", 0.0) + classes.get("xla conv", 0.0)
  return classes.get("own", 0.0) / conv if conv else None


def profile(run, steps: int) -> dict:
  """Device microseconds per step of run(steps) by kernel name and class;
  the busy time (their sum) and the span (first kernel's start to last
  one's end, the gaps between kernels included)."""
  spans = device_span.kernel_spans(lambda: run(steps))
  by_name = collections.defaultdict(float)
  for name, start, end in spans:
    by_name[name] += (end - start) / steps
  span = (spans[-1][2] - spans[0][1]) / steps if spans else 0.0
  return {"busy_us": sum(by_name.values()), "span_us": span, "kernels_per_step": len(spans) / steps,
          "by_name": dict(by_name), "by_class": by_class(by_name)}
