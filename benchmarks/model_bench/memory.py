"""Device memory of a compiled program, from XLA's memory analysis."""

from __future__ import annotations

FIELDS = ("argument", "output", "alias", "temp", "generated_code")


def memory(compiled) -> dict | None:
  """XLA's buffer sizes for `compiled` (a jax Compiled): arguments, outputs,
  aliased (outputs written into donated arguments), temporaries (every
  intermediate, including the workspace buffers our kernels get from XLA), and
  the peak estimate argument + output + temp - alias bytes. Memory allocated
  outside XLA's buffers (library handles, the runtime) is not counted. None
  where the backend gives no analysis."""
  analysis = compiled.memory_analysis()
  if analysis is None:
    return None
  out = {name: int(getattr(analysis, f"{name}_size_in_bytes")) for name in FIELDS}
  out["peak"] = out["argument"] + out["output"] + out["temp"] - out["alias"]
  return out
