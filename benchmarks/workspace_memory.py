#!/usr/bin/env python3
"""Peak memory of jax_im2col's train step of a model-benchmark model at
several workspace caps (XLA's memory analysis of the compiled step, as
benchmarks/models.py reports it): whether the project's workspace buffers
are what a step holds beyond XLA's own.

    python benchmarks/workspace_memory.py [--model wavenet] [--preset full]
        [--dtypes bf16,f32] [--caps-mib 256,64,16]

Prints one JSON line per dtype and cap (MiB: argument, output, alias, temp,
peak). Compiles only (no step runs, no XLA baseline).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import jax_im2col  # noqa: E402
from model_bench.memory import memory  # noqa: E402
from model_bench.problem import init_variables, make_problem  # noqa: E402
from model_bench.steps import init_train_state, train_step  # noqa: E402
from model_zoo import MODELS  # noqa: E402


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--model", default="wavenet", choices=sorted(MODELS))
  ap.add_argument("--preset", default="full", choices=("full", "small", "tiny"))
  ap.add_argument("--dtypes", default="bf16,f32")
  ap.add_argument("--caps-mib", default="256,64,16")
  args = ap.parse_args(argv)
  spec = MODELS[args.model]
  variables = init_variables(spec, args.preset)
  for dtype in args.dtypes.split(","):
    problem = make_problem(spec, args.preset, dtype, variables)
    for cap in (int(c) for c in args.caps_mib.split(",")):
      jax_im2col.set_workspace_limit(cap << 20)
      state = init_train_state(problem.params, problem.state)
      compiled = train_step(problem.modules["ours"]).lower(state, problem.x, problem.labels).compile()
      m = memory(compiled) or {}
      print(json.dumps(dict(model=args.model, dtype=dtype, cap_mib=cap,
                            **{k: round(v / 2**20, 1) for k, v in m.items()})), flush=True)
  jax_im2col.set_workspace_limit(None)
  return 0


if __name__ == "__main__":
  sys.exit(main())
