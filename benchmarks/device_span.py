"""Device time from the GPU's own timestamps: every kernel, memset and copy
the process runs, as CUPTI records them (through torch's profiler, which
sees JAX's kernels as well as torch's).

bench.py times a JAX chain by its device span, first kernel's start to the
last one's end: the host clock around a dispatch also counts the runtime's
fixed start-up of a run on the host (about half a millisecond on the H200,
BENCHMARKS.md step 51), which torch's CUDA events do not.
"""

from typing import Callable


def available() -> bool:
  """Whether CUPTI timestamps can be had: torch with CUDA on a GPU."""
  try:
    import torch
  except ImportError:
    return False
  return torch.cuda.is_available()


def kernel_spans(run: Callable) -> list:
  """(name, start, end) in device microseconds of each kernel, memset and
  copy that run() puts on the GPU, in the order they started."""
  import torch
  from torch.autograd import DeviceType
  from torch.profiler import ProfilerActivity, profile

  torch.cuda.synchronize()
  with profile(activities=[ProfilerActivity.CUDA]) as prof:
    run()
    torch.cuda.synchronize()
  try:  # the raw records: building torch's event tree takes seconds for long chains
    spans = [(e.name(), e.start_ns() / 1e3, e.end_ns() / 1e3) for e in prof.profiler.kineto_results.events()
             if e.device_type() == DeviceType.CUDA]
  except AttributeError:
    spans = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
             if e.device_type == DeviceType.CUDA]
  return sorted(spans, key=lambda s: s[1])


def run_spans(run: Callable, n: int) -> list | None:
  """Device seconds of each of n calls of run() (each waits for its work),
  from its first kernel's start to its last one's end; None where the calls
  did not put the same number of kernels on the GPU (then they cannot be told
  apart)."""
  spans = kernel_spans(lambda: [run() for _ in range(n)])
  if not spans or len(spans) % n:
    return None
  k = len(spans) // n
  return [(max(end for _, _, end in spans[i * k:(i + 1) * k]) - spans[i * k][1]) * 1e-6
          for i in range(n)]
