#!/usr/bin/env python3
"""The partitioning checks of tests/sharding_checks.py on GPUs: each case's
compiled program against lax's on the same shardings (collectives of each
kind, output shardings, float64 values against the unsharded result), on a
mesh of the visible GPUs, with the project's kernels ("own").

    python benchmarks/gpu_sharding_check.py      (2 or more GPUs; prints one line a case)

Splits the GPUs over the "data" axis for the batch and spatial cases and
over the "model" axis for the feature cases; on 4 or more GPUs (an even
number), also runs the two-axis cases on a 2 x n/2 (data x model) mesh.
Exits non-zero if any fails.
"""

from __future__ import annotations

import pathlib
import sys
import traceback

import jax

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
import sharding_checks as S  # noqa: E402

import jax_im2col  # noqa: E402


def main() -> int:
  devices = jax.devices()
  n = len(devices)
  if n < 2:
    print(f"needs 2 or more devices, got {devices}")
    return 1
  auto = (jax.sharding.AxisType.Auto,) * 2
  by_data = jax.make_mesh((n, 1), ("data", "model"), axis_types=auto, devices=devices)
  by_model = jax.make_mesh((1, n), ("data", "model"), axis_types=auto, devices=devices)
  cases = {c.name: c for c, _ in S.CASES}
  plan = [("batch", by_data), ("output_features", by_model), ("input_features", by_model),
          ("batch_and_output_features", by_model), ("groups", by_model),
          ("depthwise_batch", by_data), ("spatial", by_model), ("spatial_stride_2", by_model),
          ("transposed_spatial", by_data), ("transposed_k2_spatial", by_model),
          ("conv3d_batch", by_data), ("batch_groups", by_data),
          ("batch_groups_spatial", by_model), ("batch_groups_input_features", by_model)]
  if n >= 4:  # 2 batch groups over more devices than groups
    plan += [("batch_groups_split", by_model)]
  if n >= 4 and n % 2 == 0:  # data x model: each case's axes split two ways at once
    grid = jax.make_mesh((2, n // 2), ("data", "model"), axis_types=auto, devices=devices)
    plan += [(name, grid) for name in ("batch_2d_mesh", "batch_and_output_features",
                                       "batch_and_input_features", "batch_and_spatial",
                                       "depthwise_batch", "groups", "batch_groups_2d_mesh")]
  failed = 0
  for algorithm in ("own", "auto"):
    with jax_im2col.force_algorithm(algorithm):
      for name, mesh in plan if algorithm == "own" else plan[:2]:
        shape = "x".join(str(v) for v in mesh.shape.values())
        for layout in ("cl", "cf"):
          try:
            counts = S.compare(cases[name], layout, ops=("forward", "input_gradient",
                                                         "filter_gradient"), mesh=mesh)
            short = {op: {k: v for k, v in c.items() if v} for op, c in counts.items()}
            print(f"ok   {algorithm:4s} {name:28s} {shape:4s} {layout} {short}", flush=True)
          except Exception:  # noqa: BLE001 - report every case
            failed += 1
            print(f"FAIL {algorithm:4s} {name:28s} {shape:4s} {layout}\n{traceback.format_exc()[-3000:]}",
                  flush=True)
  print(f"{failed} failed")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
